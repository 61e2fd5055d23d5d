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

import re
from collections.abc import Iterable
from typing import Any

from c4p.testing.dataplane import FabricEmulator, mac_of

SUBTREES: dict[str, tuple[tuple[str, ...], str]] = {
    "/interfaces": (("interfaces",), "openconfig-interfaces"),
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


def interface_entries(
    emu: FabricEmulator, switch: str, *, as_numbers: bool = False
) -> list[dict[str, Any]]:
    entries = []
    for port in emu.ports(switch):
        c = emu.counters(switch, port.interface)
        status = "UP" if emu.link_up(port.link) else "DOWN"
        entries.append(
            {
                "name": port.interface,
                "config": {"name": port.interface, "enabled": True},
                "state": {
                    "name": port.interface,
                    "ifindex": port.if_index,
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
                },
                "openconfig-if-ethernet:ethernet": {
                    "state": {"port-speed": speed_identity(port.speed_gbps)}
                },
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


def lldp_entries(emu: FabricEmulator, switch: str) -> list[dict[str, Any]]:
    entries = []
    for n in emu.neighbors(switch):
        state: dict[str, Any] = {
            "id": "1",
            "system-name": n.system_name,
            "chassis-id": n.chassis_id,
            "chassis-id-type": "MAC_ADDRESS",
            "port-id": n.port_id,
            "port-id-type": "INTERFACE_NAME",
            "port-description": n.port_description,
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
        tree["lldp"] = {"interfaces": {"interface": lldp_entries(emu, switch)}}
    if "system" in wanted:
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
