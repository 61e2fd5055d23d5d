"""What the SNMP driver reads and how it decodes it: the IF-MIB, IP-MIB and LLDP-MIB columns as
numeric OIDs, the LLDP subtypes and capability bits, and the decoding of a walk's rows (MACs,
text, interface addresses, torn rows).

Why apart from :mod:`southbound.snmp`: the driver's job is the transport (one pysnmp event loop,
sessions, deadlines, credentials); this is the MIB knowledge, pure functions of walked rows that
need no agent to check, and the numbers a test agent (:mod:`c4p.testing.snmp_agent`) serves.
"""

from __future__ import annotations

import ipaddress
from typing import Any

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
