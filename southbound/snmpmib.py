"""What the SNMP driver reads and how it decodes it: the IF-MIB, IP-MIB and LLDP-MIB columns as
numeric OIDs, the LLDP subtypes and capability bits, and the decoding of a walk's rows (MACs,
text, interface addresses, torn rows) into counters and LLDP neighbours.

Why apart from :mod:`southbound.snmp`: the driver's job is the transport (one pysnmp event loop,
sessions, deadlines, credentials); this is the MIB knowledge, pure functions of walked rows that
need no agent to check, and the numbers a test agent (:mod:`c4p.testing.snmp_agent`) serves.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from southbound.observed import InterfaceCounters, LldpNeighbor, NeighborKind, Problem

SYS_NAME = "1.3.6.1.2.1.1.5"


IF_NAME = "1.3.6.1.2.1.31.1.1.1.1"


IF_OPER_STATUS = "1.3.6.1.2.1.2.2.1.8"


IF_HIGH_SPEED = "1.3.6.1.2.1.31.1.1.1.15"


COUNTER_COLUMNS = {
    "in_octets": "1.3.6.1.2.1.31.1.1.1.6",
    "out_octets": "1.3.6.1.2.1.31.1.1.1.10",
    "in_discards": "1.3.6.1.2.1.2.2.1.13",
    "in_errors": "1.3.6.1.2.1.2.2.1.14",
    "out_discards": "1.3.6.1.2.1.2.2.1.19",
    "out_errors": "1.3.6.1.2.1.2.2.1.20",
}


IF_PHYS_ADDRESS = "1.3.6.1.2.1.2.2.1.6"


IF_ALIAS = "1.3.6.1.2.1.31.1.1.1.18"


IP_AD_ENT_IF_INDEX = "1.3.6.1.2.1.4.20.1.2"
"""IP-MIB ipAddrTable (RFC 1213, deprecated but served everywhere): index = the IPv4 address."""


IP_ADDRESS_IF_INDEX = "1.3.6.1.2.1.4.34.1.3"
"""IP-MIB ipAddressTable (RFC 4293): index = addrType (1 v4, 2 v6), length, address octets."""


LLDP_LOC_CHASSIS_ID = "1.0.8802.1.1.2.1.3.2"


LLDP_LOC_PORT_ID = "1.0.8802.1.1.2.1.3.7.1.3"


LLDP_LOC_PORT_DESC = "1.0.8802.1.1.2.1.3.7.1.4"


LLDP_REM = {
    "chassis": "1.0.8802.1.1.2.1.4.1.1.5",
    "chassis_subtype": "1.0.8802.1.1.2.1.4.1.1.4",
    "port_subtype": "1.0.8802.1.1.2.1.4.1.1.6",
    "port_id": "1.0.8802.1.1.2.1.4.1.1.7",
    "port_desc": "1.0.8802.1.1.2.1.4.1.1.8",
    "sys_name": "1.0.8802.1.1.2.1.4.1.1.9",
    "cap_enabled": "1.0.8802.1.1.2.1.4.1.1.12",
}


LLDP_REM_MAN_ADDR_IF_SUBTYPE = "1.0.8802.1.1.2.1.4.2.1.3"


LLDP_REM_REQUIRED = ("chassis_subtype", "chassis", "port_subtype", "port_id")
"""The columns every lldpRemEntry has (the chassis and port IDs are mandatory TLVs)."""


LLDP_REM_NAMES = {
    "chassis": "lldpRemChassisId",
    "chassis_subtype": "lldpRemChassisIdSubtype",
    "port_subtype": "lldpRemPortIdSubtype",
    "port_id": "lldpRemPortId",
    "sys_name": "lldpRemSysName",
}


PORT_ID_SUBTYPES = {
    1: "INTERFACE_ALIAS",
    2: "PORT_COMPONENT",
    3: "MAC_ADDRESS",
    4: "NETWORK_ADDRESS",
    5: "INTERFACE_NAME",
    6: "AGENT_CIRCUIT_ID",
    7: "LOCAL",
}
"""LldpPortIdSubtype (IEEE 802.1AB LLDP-MIB) in OpenConfig's spelling."""


CHASSIS_MAC = 4  # LldpChassisIdSubtype macAddress


OPER_STATUS = {1: "UP", 2: "DOWN", 3: "TESTING", 4: "UNKNOWN", 5: "DORMANT", 6: "NOT_PRESENT"}
OPER_STATUS[7] = "LOWER_LAYER_DOWN"
CAP_BRIDGE, CAP_ROUTER, CAP_STATION = 0x20, 0x08, 0x01  # LldpSystemCapabilitiesMap bits 2, 4, 7


Rows = dict[tuple[int, ...], Any]


def _mac(value: Any) -> str:
    raw = bytes(value)
    return ":".join(f"{b:02x}" for b in raw) if len(raw) == 6 else _text(value)


def _addresses(
    got: dict[str, Rows],
) -> dict[int, list[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    """ifIndex -> its addresses, from ipAddressTable where served, else ipAddrTable."""
    out: dict[int, list[ipaddress.IPv4Address | ipaddress.IPv6Address]] = {}

    def add(if_index: int, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
        if ip not in out.setdefault(if_index, []):
            out[if_index].append(ip)

    for idx, value in sorted(got["ip_address"].items()):
        if len(idx) >= 2 and idx[0] in (1, 2) and idx[1] == len(idx) - 2 and idx[1] in (4, 16):
            add(int(value), ipaddress.ip_address(bytes(idx[2:])))
    if not out:
        for idx, value in sorted(got["ip_ad_ent"].items()):
            if len(idx) == 4:
                add(int(value), ipaddress.IPv4Address(bytes(idx)))
    return out


def _text(value: Any) -> str:
    raw = bytes(value)
    if raw and all(32 <= b < 127 for b in raw):
        return raw.decode("ascii")
    return ":".join(f"{b:02x}" for b in raw)


def _torn_rows(got: dict[str, Rows]) -> dict[tuple[int, ...], tuple[str, ...]]:
    """lldpRemTable rows that some columns have and a required one lacks, with the names
    of the missing columns. A row only in ``lldpRemSysName`` counts too: that is the
    column the neighbours are listed from."""
    keys = ("sys_name", *LLDP_REM_REQUIRED)
    rows = {idx for k in keys for idx in got[f"rem_{k}"] if len(idx) == 3}
    out: dict[tuple[int, ...], tuple[str, ...]] = {}
    for idx in rows:
        missing = tuple(LLDP_REM_NAMES[k] for k in LLDP_REM_REQUIRED if idx not in got[f"rem_{k}"])
        if missing:
            out[idx] = missing
    return out


def _unread_oper(got: dict[str, Rows]) -> list[int]:
    """ifIndex values that ``ifName`` lists and ``ifOperStatus`` does not (a torn read)."""
    oper = got["oper"]
    return sorted(i[0] for i in got["if_name"] if len(i) == 1 and i not in oper)


TORN_REREADS = 2
"""How often one observation re-walks the LLDP remote table, or the interface columns, when a
row came back torn.

Columns are walked one after another (or concurrently), never in one snapshot: a neighbour
learned, aged out or re-indexed between two walks leaves its row in some columns only (seen
with lldpd: the port-id subtype walked before the neighbour arrived, its name after), and so
does an interface created or removed between them. A second walk almost always reads the
row whole; a row still torn is reported, not guessed. A poll does not re-walk: an interface
without its ifOperStatus is left out of that poll, never reported as UNKNOWN (the fleet
would take it for a link down, and re-plan)."""


def counters_of(got: dict[str, Rows], names: dict[int, str]) -> dict[str, InterfaceCounters]:
    """Each interface's counters from the walked counter columns (``c_<name>``)."""
    out: dict[str, InterfaceCounters] = {}
    for if_index, name in names.items():
        values = {k: got[f"c_{k}"].get((if_index,)) for k in COUNTER_COLUMNS}
        out[name] = InterfaceCounters(**{k: int(v) for k, v in values.items() if v is not None})
    return out


def neighbors_of(
    got: dict[str, Rows], names: dict[int, str], target: str, problems: list[Problem]
) -> list[LldpNeighbor]:
    """The LLDP neighbours of the walked local-port, remote and management-address tables
    (``names``: ifIndex -> interface); a torn or unmappable row is a problem of ``target``."""
    by_name = {n: n for n in names.values()}
    local: dict[int, str] = {}
    for (port_num, *_), value in got["loc_port_id"].items():
        desc = got["loc_port_desc"].get((port_num,))
        for candidate in (_text(value), _text(desc) if desc is not None else None):
            if candidate in by_name:
                local[port_num] = candidate
                break
        else:
            if port_num in names:
                local[port_num] = names[port_num]
    addresses: dict[tuple[int, ...], ipaddress.IPv4Address] = {}
    for idx in got["man_addr"]:
        if len(idx) == 9 and idx[3] == 1 and idx[4] == 4:
            addresses[idx[:3]] = ipaddress.IPv4Address(bytes(idx[5:9]))
    out = []
    torn = _torn_rows(got)
    for idx, missing in sorted(torn.items()):
        problems.append(
            Problem(
                target=target,
                path=f"lldpRemTable.{'.'.join(map(str, idx))}",
                reason=f"row read incomplete {TORN_REREADS + 1} times (no "
                f"{', '.join(missing)}): it changed while read, or the agent serves "
                "it in part; left out",
            )
        )
    for idx, sys_name in sorted(got["rem_sys_name"].items()):
        if len(idx) != 3 or idx in torn:
            continue
        where = f"lldpRemTable.{'.'.join(map(str, idx))}"
        port_num = idx[1]
        if port_num not in local:
            problems.append(
                Problem(
                    target=target,
                    path=where,
                    reason=f"local port {port_num} maps to no interface (lldpLocPortId)",
                )
            )
            continue
        port_id = got["rem_port_id"][idx]  # present: torn rows are left out above
        caps = bytes(got["rem_cap_enabled"].get(idx, b""))
        kind = NeighborKind.UNKNOWN
        if caps:
            kind = NeighborKind.SWITCH if caps[0] & (CAP_BRIDGE | CAP_ROUTER) else NeighborKind.HOST
        desc = got["rem_port_desc"].get(idx)
        chassis = got["rem_chassis"][idx]
        subtype = PORT_ID_SUBTYPES.get(int(got["rem_port_subtype"][idx]), "")
        chassis_kind = int(got["rem_chassis_subtype"][idx])
        chassis_text = _mac(chassis) if chassis_kind == CHASSIS_MAC else _text(chassis)
        out.append(
            LldpNeighbor(
                local_interface=local[port_num],
                system_name=_text(sys_name),
                port_id=_mac(port_id) if subtype == "MAC_ADDRESS" else _text(port_id),
                port_id_type=subtype,
                chassis_id=chassis_text,
                port_description=_text(desc) if desc is not None else "",
                mgmt_address=addresses.get(idx),
                kind=kind,
            )
        )
    return out
