"""Who an LLDP neighbour is, and which of its ports it named: matching what real switches send.

Why its own module: c4p's own emulator sent exactly the target's name as system-name and the
interface name as port-id, so discovery could match strings. Real switches do not:

* **System-name** is a short host name or an FQDN (EOS sends ``leaf1.dc1.example.net`` once a
  domain name is set), or does not match the targets file at all; so a neighbour is matched to
  a target by name, then by the short name of an FQDN, then by hostname the target reported,
  then by LLDP chassis-id (the target's own ``/lldp/state/chassis-id``), then by management
  address (only addresses that name one target). A match by chassis-id or address while the
  names differ is the same switch under two names: reported, because it breaks every name-based
  tool an operator has.
* **Port-id** comes in every IEEE 802.1AB subtype seen in practice: interface name (EOS, NX-OS,
  Cumulus' lldpd with ``portidsubtype ifname``), *local* holding the ifIndex (Junos' default),
  *local* holding the port alias (SONiC's lldpmgrd), MAC address (lldpd's default, so most
  Linux hosts) and interface alias. It is resolved through the neighbour's own interface table
  when the neighbour is a target (name, ifIndex, MAC, description/alias), else taken as an
  interface name if it can be one.
* **Hosts** running lldpd with default settings send their MAC as port-id and the interface
  name as port description; the description then names the NIC port.

Everything here is pure: observations and targets in, names and problems out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from southbound.observed import LldpNeighbor, SwitchObservation
from southbound.openconfig import normal_mac
from southbound.targets import SnmpV2c, SnmpV3, TargetConfig
from topology.model import INTERFACE_PATTERN, NAME_PATTERN

_NAME = re.compile(NAME_PATTERN)
_IFACE = re.compile(INTERFACE_PATTERN)
_NIC_OF_PORT = re.compile(r"^(?P<nic>.+?)p\d+$")


def short_name(name: str) -> str:
    """``leaf1.dc1.example.net`` -> ``leaf1`` (an FQDN's host part)."""
    return name.split(".", 1)[0]


@dataclass(frozen=True)
class SwitchMatch:
    """A neighbour matched to a switch, and how (``name``, ``fqdn``, ``hostname``,
    ``chassis-id`` or ``mgmt-address``)."""

    switch: str
    how: str

    @property
    def by_name(self) -> bool:
        return self.how in ("name", "fqdn", "hostname")


@dataclass
class _Ports:
    """One switch's interfaces by each identifier a neighbour may have been told."""

    names: set[str] = field(default_factory=set)
    by_ifindex: dict[str, str] = field(default_factory=dict)
    by_mac: dict[str, str] = field(default_factory=dict)
    by_alias: dict[str, str] = field(default_factory=dict)


class Identities:
    """Matches LLDP neighbours to targets and their ports (see the module docstring)."""

    def __init__(
        self,
        observations: Mapping[str, SwitchObservation],
        targets: Mapping[str, TargetConfig],
    ) -> None:
        self.names = set(targets) | set(observations)
        self._short: dict[str, list[str]] = {}
        for name in sorted(self.names):
            self._short.setdefault(short_name(name), []).append(name)
        self._hostname: dict[str, str] = {}
        self._chassis: dict[str, str] = {}
        self._ports: dict[str, _Ports] = {}
        for name, obs in observations.items():
            if obs.hostname:
                self._hostname.setdefault(obs.hostname, name)
            mac = normal_mac(obs.chassis_id) or obs.chassis_id
            if mac:
                self._chassis.setdefault(mac, name)
            ports = _Ports()
            for iface in obs.interfaces:
                ports.names.add(iface.name)
                if iface.if_index is not None:
                    ports.by_ifindex.setdefault(str(iface.if_index), iface.name)
                if iface.mac:
                    ports.by_mac.setdefault(iface.mac, iface.name)
                if iface.description:
                    ports.by_alias.setdefault(iface.description, iface.name)
            self._ports[name] = ports
        addresses: dict[str, list[str]] = {}
        for name, cfg in targets.items():
            for text in {cfg.address, str(cfg.mgmt_address) if cfg.mgmt_address else ""} - {""}:
                addresses.setdefault(text, []).append(name)
        self._address = {a: ns[0] for a, ns in addresses.items() if len(ns) == 1}

    def switch(self, n: LldpNeighbor) -> SwitchMatch | None:
        """The target this neighbour is, or ``None`` (a host, or a switch we do not manage)."""
        name = n.system_name
        if name in self.names:
            return SwitchMatch(name, "name")
        if "." in name and len(self._short.get(short_name(name), [])) == 1:
            return SwitchMatch(self._short[short_name(name)][0], "fqdn")
        for candidate in (name, short_name(name)):
            if candidate in self._hostname:
                return SwitchMatch(self._hostname[candidate], "hostname")
        mac = normal_mac(n.chassis_id) or n.chassis_id
        if mac and mac in self._chassis:
            return SwitchMatch(self._chassis[mac], "chassis-id")
        if n.mgmt_address is not None and str(n.mgmt_address) in self._address:
            return SwitchMatch(self._address[str(n.mgmt_address)], "mgmt-address")
        return None

    def port(self, switch: str, n: LldpNeighbor) -> tuple[str | None, str]:
        """The interface of ``switch`` that ``n``'s port-id names, or ``None`` and why not."""
        pid, kind = n.port_id.strip(), n.port_id_type.upper()
        ports = self._ports.get(switch)
        if ports is None:  # not observed (unreached): take the port-id if it can be a name
            if kind in ("", "INTERFACE_NAME") and _IFACE.match(pid):
                return pid, ""
            return None, (
                f"port-id {pid!r} ({kind or 'subtype not given'}) cannot be resolved: "
                f"{switch} has not answered"
            )
        mac = normal_mac(pid)
        tries: list[dict[str, str] | set[str]]
        if kind == "MAC_ADDRESS":
            tries = [ports.by_mac]
        elif kind == "LOCAL":
            tries = [ports.by_ifindex, ports.by_alias, ports.names]
        elif kind == "INTERFACE_ALIAS":
            tries = [ports.by_alias, ports.names]
        elif kind == "INTERFACE_NAME":
            tries = [ports.names, ports.by_alias]
        else:
            tries = [ports.names, ports.by_ifindex, ports.by_alias, ports.by_mac]
        for table in tries:
            key = mac if table is ports.by_mac else pid
            if isinstance(table, set):
                if key in table:
                    return key, ""
            elif key in table:
                return table[key], ""
        if n.port_description in ports.names:
            return n.port_description, ""
        if kind in ("", "INTERFACE_NAME") and _IFACE.match(pid):
            return pid, ""  # an interface its table does not list (yet): trust the name
        return None, (
            f"port-id {pid!r} ({kind or 'subtype not given'}) names no interface of {switch} "
            "(by name, ifIndex, MAC or alias)"
        )

    def duplicates(
        self, observations: Mapping[str, SwitchObservation], targets: Mapping[str, TargetConfig]
    ) -> list[tuple[str, str, str]]:
        """Pairs of target entries that are one switch: ``(first, second, evidence)``."""
        out: list[tuple[str, str, str]] = []
        seen: dict[tuple[str, str], str] = {}
        for name in sorted(observations):
            obs = observations[name]
            cfg = targets.get(name)
            keys = []
            if cfg is not None:
                keys.append(("address", _session_key(cfg)))
            mac = normal_mac(obs.chassis_id) or obs.chassis_id
            if mac:
                keys.append(("chassis-id", mac))
            for key in keys:
                if key in seen and seen[key] != name:
                    out.append((seen[key], name, f"same {key[0]} {key[1]}"))
                    break
                seen.setdefault(key, name)
        return out


def _session_key(cfg: TargetConfig) -> str:
    """Where a session lands: address and port, and what selects a virtual agent behind one
    port (gNMI prefix target; SNMP v3 context or v2c community, hashed, never shown)."""
    if cfg.driver.value == "gnmi":
        return f"{cfg.address}:{cfg.gnmi.port} {cfg.gnmi.prefix_target or ''}".strip()
    creds = cfg.snmp.credentials
    selector = ""
    if isinstance(creds, SnmpV3):
        selector = f"context {creds.context!r}"
    elif isinstance(creds, SnmpV2c):
        secret = creds.community.get_secret_value() if creds.community else creds.community_env
        selector = "community #" + hashlib.sha256((secret or "").encode()).hexdigest()[:8]
    return f"{cfg.address}:{cfg.snmp.port} {selector}"


def host_port(n: LldpNeighbor) -> tuple[str, str] | None:
    """A host neighbour's NIC port name and NIC name, or ``None`` if neither can be named.

    A MAC port-id (lldpd's default) names nothing: the port description (the interface name)
    does. Otherwise the port-id is the port, and the description the NIC when it is a name."""
    mac_id = n.port_id_type.upper() == "MAC_ADDRESS" or bool(normal_mac(n.port_id))
    if mac_id:
        if not n.port_description or not _NAME.match(n.port_description):
            return None
        port = n.port_description
        match = _NIC_OF_PORT.match(port)
        return port, match.group("nic") if match else port
    if not _NAME.match(n.port_id):
        return None
    if n.port_description and _NAME.match(n.port_description):
        return n.port_id, n.port_description
    match = _NIC_OF_PORT.match(n.port_id)
    return n.port_id, match.group("nic") if match else n.port_id
