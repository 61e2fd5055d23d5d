"""Switch operating-system dialects of the emulated gNMI targets: ``sonic``, ``eos``, ``nxos``,
``junos``, ``cumulus`` (and ``openconfig``, the textbook answer c4p started with).

Why flavours: discovery had only ever met c4p's own targets, which answer exactly as c4p's
parser expects; real switches differ in the shape of their answers, in the request rules
they enforce and in what their LLDP sends. Each :class:`Flavour` is a set of such documented
differences, written here from the vendors' public material (``docs/discovery.md`` has the
table with the sources), so that the driver is tested against every dialect and against a
fabric that mixes them. The emulator applies a flavour in two places:

* *what a switch serves* (its own flavour): answer wrapping, how a Get answer is cut into
  notifications/updates, counters as strings or numbers, ``/system`` present or not, speed as
  ``port-speed`` or as ``SPEED_UNKNOWN`` + ``negotiated-port-speed`` (auto-negotiation), the
  loopback's name, ifIndex numbering, the prefix target / origin it requires and the
  encodings it offers;
* *what a switch sends in LLDP* (seen in its neighbours' tables): system-name as a short name
  or an FQDN, and its port-id as interface name, alias (subtype local) or ifIndex (subtype
  local). Hosts always send what ``lldpd`` sends by default in flavoured fabrics: their MAC
  as port-id (subtype mac) and the interface name as port description.

The client-side settings an operator puts in the targets file for each flavour are
:meth:`Flavour.client_options`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

PortIdStyle = Literal["name", "alias", "ifindex"]
Split = Literal["one", "notifications", "updates"]


@dataclass(frozen=True)
class Flavour:
    """One switch OS dialect (see the module docstring)."""

    name: str
    prefix_target: str | None = None
    """A prefix target the switch requires (it refuses requests without it)."""
    origin: str | None = None
    """A path origin the switch requires on every path."""
    encodings: tuple[str, ...] = ("JSON_IETF", "JSON")
    wrapped: bool = False
    """Get answers are the node itself, module-qualified (SONiC)."""
    split: Split = "one"
    """A Get answered as one update, one notification per list entry, or one update each."""
    counters_as_numbers: bool = False
    has_system: bool = True
    domain: str | None = None
    """LLDP system-name is ``<name>.<domain>`` (EOS with ``ip domain-name`` set)."""
    port_id: PortIdStyle = "name"
    autoneg: bool = False
    """Ports report ``SPEED_UNKNOWN`` with auto-negotiate and a negotiated-port-speed."""
    loopback: str = "Loopback0"
    ifindex_base: int = 0
    host_lldpd: bool = True
    """Host neighbours send lldpd's defaults (MAC port-id, interface name as description)."""

    def alias(self, if_index: int) -> str:
        """The interface alias a SONiC port carries (``etp<n>``, front-panel numbering)."""
        return f"etp{if_index}"

    def ifindex(self, if_index: int) -> int:
        return self.ifindex_base + if_index

    def client_options(self) -> dict[str, Any]:
        """``gnmi`` options of a targets-file entry for a switch of this flavour."""
        out: dict[str, Any] = {}
        if self.prefix_target:
            out["prefix_target"] = self.prefix_target
        if self.origin:
            out["origin"] = self.origin
        return out


OPENCONFIG = Flavour(name="openconfig", host_lldpd=False)
"""The textbook target: c4p's original emulator (hosts send their port name as port-id)."""

FLAVOURS: dict[str, Flavour] = {
    "openconfig": OPENCONFIG,
    # sonic-gnmi (github.com/sonic-net/sonic-gnmi) refuses a request whose prefix has no
    # target and serves OpenConfig (translib) under target "OC-YANG"; its answers wrap the
    # node in its module-qualified name (sonic-telemetry doc/gNMI_usage_examples.md). SONiC's
    # lldpmgrd configures lldpd with "portidsubtype local <alias>" (sonic-buildimage
    # dockers/docker-lldp/lldpmgrd), so port-id is the alias; /system is not served by every
    # release's translib; uint64 counters are RFC 7951 strings.
    "sonic": Flavour(
        name="sonic",
        prefix_target="OC-YANG",
        wrapped=True,
        has_system=False,
        port_id="alias",
        loopback="Loopback0",
    ),
    # EOS: LLDP system-name is the FQDN once "ip domain-name" is set (EOS User Manual, LLDP
    # chapter: the system name TLV carries the hostname, fully qualified); ports that
    # auto-negotiate report port-speed SPEED_UNKNOWN and negotiated-port-speed (openconfig-
    # if-ethernet); counters arrive as JSON numbers.
    "eos": Flavour(
        name="eos",
        domain="dc1.example.net",
        autoneg=True,
        counters_as_numbers=True,
        loopback="Loopback0",
    ),
    # NX-OS: the gNMI agent picks the model tree by path origin ("openconfig" for OpenConfig,
    # "device" for the native DME model: Cisco Nexus 9000 NX-OS Programmability Guide, gNMI
    # chapter) and offers JSON and PROTO encodings; a Get answer comes as one update per
    # list entry.
    "nxos": Flavour(
        name="nxos",
        origin="openconfig",
        encodings=("JSON", "PROTO"),
        split="updates",
        counters_as_numbers=True,
        loopback="loopback0",
    ),
    # Junos: LLDP port-id is the ifIndex, subtype locally assigned, unless "port-id-subtype
    # interface-name" is configured (Junos LLDP configuration guide); SNMP ifIndex values
    # start in the 500s; a Get answer comes as one notification per list entry.
    "junos": Flavour(
        name="junos",
        port_id="ifindex",
        split="notifications",
        loopback="lo0",
        ifindex_base=500,
    ),
    # Cumulus Linux: lldpd with "portidsubtype ifname" (port-id = swpN), gNMI served by the
    # NVUE-backed agent on port 9339 (NVIDIA Cumulus Linux docs: gNMI Streaming, LLDP);
    # hosts show their MAC as remote port (nv show interface lldp example in the docs);
    # auto-negotiating ports report the negotiated speed.
    "cumulus": Flavour(name="cumulus", autoneg=True, loopback="lo"),
}

SWITCH_OS_FLAVOURS = ("sonic", "eos", "nxos", "junos", "cumulus")


def flavour(name: str) -> Flavour:
    try:
        return FLAVOURS[name]
    except KeyError:
        raise ValueError(f"flavour {name!r} is not one of {', '.join(sorted(FLAVOURS))}") from None


def mixed(switches: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Flavours assigned round-robin over the switch OSes, in the order given."""
    return {s: SWITCH_OS_FLAVOURS[i % len(SWITCH_OS_FLAVOURS)] for i, s in enumerate(switches)}
