"""What an emulated switch says in OpenConfig JSON_IETF (RFC 7951): the device side.

Why written apart from the driver's parser (:mod:`southbound.openconfig`): if both sides
shared one model, a misreading of OpenConfig would pass every test. This module writes the
JSON the way a device does: top-level members and augmentations carry their module
(``openconfig-if-ethernet:ethernet``), identities are module-qualified
(``openconfig-if-ethernet:SPEED_400GB``), 64-bit counters are strings unless the emulated
switch is told to send numbers (as many devices do).

A switch's whole tree is built as plain data, leaf overrides (faults) are applied to it, and
a Get answer or a streamed update is cut from it, so a fault shows the same way in both.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any

from c4p.testing.dataplane import FabricEmulator, mac_of
from c4p.testing.flavours import Flavour
from topology.model import Fabric, SwitchAddress, split_end

SUBTREES: dict[str, tuple[tuple[str, ...], str]] = {
    "/interfaces": (("interfaces",), "openconfig-interfaces"),
    "/lldp": (("lldp",), "openconfig-lldp"),
    "/lldp/interfaces": (("lldp", "interfaces"), "openconfig-lldp"),
    "/system/state": (("system", "state"), "openconfig-system"),
    "/qos/interfaces": (("qos", "interfaces"), "openconfig-qos"),
}
"""Get paths an emulated target answers: tree location and the module of its members."""

MODELS = (
    ("openconfig-interfaces", "3.7.1"),
    ("openconfig-if-ethernet", "2.14.0"),
    ("openconfig-lldp", "0.2.1"),
    ("openconfig-system", "2.1.0"),
    ("openconfig-qos", "0.11.1"),
)

ECN_QUEUE = "3"
"""The RoCE traffic class queue whose ECN marks the emulator counts."""

_ELEM_RE = re.compile(r"([^/\[\]]+)((?:\[[^=\]]+=[^\]]*\])*)")
_KEY_RE = re.compile(r"\[([^=\]]+)=([^\]]*)\]")


def parse_path(path: str) -> list[tuple[str, dict[str, str]]]:
    """``/interfaces/interface[name=Ethernet1/1]/state`` -> elements with their keys."""
    out: list[tuple[str, dict[str, str]]] = []
    position = 0
    text = path.strip("/")
    while position < len(text):
        match = _ELEM_RE.match(text, position)
        if match is None:
            raise ValueError(f"cannot parse path {path!r} at {position}")
        out.append((match.group(1), dict(_KEY_RE.findall(match.group(2)))))
        position = match.end() + 1
    return out


def speed_identity(gbps: float) -> str:
    """400.0 -> ``openconfig-if-ethernet:SPEED_400GB``; 2.5 -> ``...SPEED_2500MB``."""
    if gbps >= 1 and float(gbps).is_integer():
        return f"openconfig-if-ethernet:SPEED_{int(gbps)}GB"
    return f"openconfig-if-ethernet:SPEED_{round(gbps * 1000)}MB"


def _counter(value: int, as_number: bool) -> int | str:
    return value if as_number else str(value)


LOOPBACK_NETWORK = ipaddress.IPv4Network("172.16.0.0/14")
"""Loopbacks given by :func:`with_switch_addresses` (a /32 per switch, in switch order)."""
P2P_NETWORK = ipaddress.IPv4Network("172.20.0.0/14")
"""Switch-switch link addresses given by :func:`with_switch_addresses` (a /31 per link)."""


def with_switch_addresses(fabric: Fabric) -> Fabric:
    """``fabric`` with a loopback per switch and a /31 on each end of every switch-switch link
    (clear of the NIC and management address plans), as a routed fabric has; the emulator
    serves exactly the addresses a fabric's switches own, so discovery can be compared."""
    switches = {s.name for s in fabric.switches}
    owned: dict[str, list[SwitchAddress]] = {
        s.name: [SwitchAddress(address=LOOPBACK_NETWORK.network_address + 1 + i)]
        for i, s in enumerate(fabric.switches)
    }
    for li, link in enumerate(fabric.links):
        ends = [split_end(e) for e in link.ends]
        if all(device in switches for device, _ in ends):
            for side, (device, interface) in enumerate(ends):
                address = P2P_NETWORK.network_address + 2 * li + side
                owned[device].append(SwitchAddress(address=address, interface=interface))
    return fabric.model_copy(
        update={
            "switches": tuple(
                s.model_copy(update={"addresses": tuple(owned[s.name])}) for s in fabric.switches
            )
        }
    )


def _served_addresses(emu: FabricEmulator, switch: str) -> dict[str | None, list[Any]]:
    """The switch's own addresses by interface (``None``: the loopback)."""
    out: dict[str | None, list[Any]] = {}
    for entry in emu.switch(switch).addresses:
        iface = entry.interface
        if iface is not None and iface.lower().startswith(("lo", "loopback")):
            iface = None
        out.setdefault(iface, []).append(entry.address)
    return out


def port_mac(device: str, interface: str) -> str:
    """A stable MAC for one port (a switch interface or a host NIC port)."""
    return mac_of(f"{device}:{interface}")


def _addresses(ips: list[Any], loopback: bool) -> dict[str, Any]:
    """``subinterfaces`` holding ``ips`` (openconfig-if-ip: ipv4/ipv6 addresses/address[ip])."""
    sub: dict[str, Any] = {"index": 0, "state": {"index": 0}}
    for version, family in ((4, "openconfig-if-ip:ipv4"), (6, "openconfig-if-ip:ipv6")):
        full = 32 if version == 4 else 128
        length = full if loopback else full - 1
        entries = [
            {
                "ip": str(ip),
                "config": {"ip": str(ip), "prefix-length": length},
                "state": {"ip": str(ip), "prefix-length": length},
            }
            for ip in ips
            if ip.version == version
        ]
        if entries:
            sub[family] = {"addresses": {"address": entries}}
    return {"subinterface": [sub]}


def interface_entries(
    emu: FabricEmulator, switch: str, *, as_numbers: bool = False
) -> list[dict[str, Any]]:
    flavour = emu.flavour_of(switch)
    as_numbers = as_numbers or flavour.counters_as_numbers
    switches = set(emu.switches)
    served = _served_addresses(emu, switch)
    entries = []
    for port in emu.ports(switch):
        c = emu.counters(switch, port.interface)
        status = "UP" if emu.link_up(port.link) else "DOWN"
        if flavour.autoneg:
            ethernet: dict[str, Any] = {
                "auto-negotiate": True,
                "port-speed": "openconfig-if-ethernet:SPEED_UNKNOWN",
                "negotiated-port-speed": speed_identity(port.speed_gbps),
            }
        else:
            ethernet = {"port-speed": speed_identity(port.speed_gbps)}
        ethernet["mac-address"] = port_mac(switch, port.interface)
        state: dict[str, Any] = {
            "name": port.interface,
            "ifindex": flavour.ifindex(port.if_index),
            "admin-status": "UP",
            "oper-status": status,
            "counters": {
                "in-octets": _counter(c.in_octets, as_numbers),
                "out-octets": _counter(c.out_octets, as_numbers),
                "in-errors": _counter(c.in_errors, as_numbers),
                "out-errors": _counter(c.out_errors, as_numbers),
                "in-discards": _counter(c.in_discards, as_numbers),
                "out-discards": _counter(c.out_discards, as_numbers),
            },
        }
        if flavour.port_id == "alias":
            state["description"] = flavour.alias(port.if_index)
        entry: dict[str, Any] = {
            "name": port.interface,
            "config": {"name": port.interface, "enabled": True},
            "state": state,
            "openconfig-if-ethernet:ethernet": {"state": ethernet},
        }
        if port.interface in served:
            entry["subinterfaces"] = _addresses(served[port.interface], loopback=False)
        entries.append(entry)
    if switch in switches:
        entries.append(
            {
                "name": flavour.loopback,
                "config": {"name": flavour.loopback, "enabled": True},
                "state": {
                    "name": flavour.loopback,
                    "admin-status": "UP",
                    "oper-status": "UP",
                    "ifindex": flavour.ifindex(5000),
                },
                "subinterfaces": _addresses(served.get(None, []), loopback=True),
            }
        )
    return entries


def _capabilities(is_switch: bool) -> dict[str, Any]:
    names = ("MAC_BRIDGE", "ROUTER") if is_switch else ("STATION_ONLY",)
    return {
        "capability": [
            {
                "name": f"openconfig-lldp-types:{n}",
                "state": {"name": f"openconfig-lldp-types:{n}", "enabled": True},
            }
            for n in names
        ]
    }


def _port_id(emu: FabricEmulator, device: str, interface: str) -> tuple[str, str]:
    """What a switch sends as LLDP port-id for one of its interfaces, and the subtype."""
    sender: Flavour = emu.flavour_of(device)
    index = emu.port(device, interface).if_index
    if sender.port_id == "alias":
        return sender.alias(index), "openconfig-lldp-types:LOCAL"
    if sender.port_id == "ifindex":
        return str(sender.ifindex(index)), "openconfig-lldp-types:LOCAL"
    return interface, "openconfig-lldp-types:INTERFACE_NAME"


def lldp_entries(emu: FabricEmulator, switch: str) -> list[dict[str, Any]]:
    local = emu.flavour_of(switch)
    entries = []
    for n in emu.neighbors(switch):
        system_name, port_id = n.system_name, n.port_id
        port_type = "openconfig-lldp-types:INTERFACE_NAME"
        description = n.port_description
        if n.is_switch:
            sender = emu.flavour_of(n.system_name)
            port_id, port_type = _port_id(emu, n.system_name, n.port_id)
            if sender.domain:
                system_name = f"{n.system_name}.{sender.domain}"
        elif local.host_lldpd:
            # lldpd's defaults on a Linux host: port-id subtype MAC, ifname as description.
            port_id = port_mac(n.system_name, n.port_id)
            port_type = "openconfig-lldp-types:MAC_ADDRESS"
            description = n.port_id
        state: dict[str, Any] = {
            "id": "1",
            "system-name": system_name,
            "chassis-id": n.chassis_id,
            "chassis-id-type": "openconfig-lldp-types:MAC_ADDRESS",
            "port-id": port_id,
            "port-id-type": port_type,
            "port-description": description,
        }
        if n.mgmt_address is not None:
            state["management-address"] = str(n.mgmt_address)
            state["management-address-type"] = "ipv4"
        entries.append(
            {
                "name": n.local_interface,
                "state": {"name": n.local_interface, "enabled": True},
                "neighbors": {
                    "neighbor": [
                        {"id": "1", "state": state, "capabilities": _capabilities(n.is_switch)}
                    ]
                },
            }
        )
    return entries


def qos_entries(emu: FabricEmulator, switch: str, *, as_numbers: bool) -> list[dict[str, Any]]:
    entries = []
    for port in emu.ports(switch):
        marks = emu.counters(switch, port.interface).ecn_marked
        queue = {
            "name": ECN_QUEUE,
            "state": {"name": ECN_QUEUE, "ecn-marked-pkts": _counter(marks, as_numbers)},
        }
        entries.append({"interface-id": port.interface, "output": {"queues": {"queue": [queue]}}})
    return entries


def switch_tree(
    emu: FabricEmulator,
    switch: str,
    *,
    parts: Iterable[str] = ("interfaces", "lldp", "system", "qos"),
    as_numbers: bool = False,
) -> dict[str, Any]:
    """The switch's state as plain data (no module prefixes yet), faults applied."""
    wanted = set(parts)
    tree: dict[str, Any] = {}
    if "interfaces" in wanted:
        tree["interfaces"] = {"interface": interface_entries(emu, switch, as_numbers=as_numbers)}
    if "lldp" in wanted:
        flavour = emu.flavour_of(switch)
        name = f"{switch}.{flavour.domain}" if flavour.domain else switch
        tree["lldp"] = {
            "state": {"enabled": True, "chassis-id": mac_of(switch), "system-name": name},
            "interfaces": {"interface": lldp_entries(emu, switch)},
        }
    if "system" in wanted and emu.flavour_of(switch).has_system:
        tree["system"] = {"state": {"hostname": switch, "boot-time": "1700000000000000000"}}
    if "qos" in wanted:
        tree["qos"] = {"interfaces": {"interface": qos_entries(emu, switch, as_numbers=as_numbers)}}
    for path, value in emu.leaf_overrides(switch).items():
        apply_override(tree, parse_path(path), value)
    return tree


def apply_override(
    tree: dict[str, Any], elems: list[tuple[str, dict[str, str]]], value: Any
) -> None:
    """Set the leaf at ``elems`` to ``value``; a path that is not in the tree is ignored."""
    node: Any = tree
    for position, (name, keys) in enumerate(elems):
        last = position == len(elems) - 1
        if not isinstance(node, dict) or (name not in node and not last):
            return
        if last and not keys:
            node[name] = value
            return
        child = node[name]
        if keys:
            if not isinstance(child, list):
                return
            match = [e for e in child if all(str(e.get(k)) == v for k, v in keys.items())]
            if not match:
                return
            if last:
                child[child.index(match[0])] = value
                return
            child = match[0]
        node = child


def get_answer(tree: dict[str, Any], path: str) -> Any:
    """The JSON_IETF value for a Get of one of :data:`SUBTREES` (top members qualified)."""
    location, module = SUBTREES[path]
    node: Any = tree
    for name in location:
        node = node.get(name, {}) if isinstance(node, dict) else {}
    if not isinstance(node, dict):
        return node
    return {f"{module}:{k}": v for k, v in node.items()}


def chassis(switch: str) -> str:
    return mac_of(switch)
