"""OpenConfig JSON_IETF (RFC 7951) answers -> typed models -> :mod:`southbound.observed`.

Why a parser of our own: a gNMI target may answer a Get for ``/interfaces`` with one update
holding the whole container, one update per interface, or one per leaf; members may carry
module prefixes (``openconfig-interfaces:interface``), identities too
(``openconfig-if-ethernet:SPEED_400GB``), and 64-bit counters are strings (RFC 7951) or
numbers (many devices). So every (path, value) pair is first merged into one normalized tree
(:mod:`southbound.oc_tree`: prefixes stripped, keyed lists keyed, wrappers removed), then validated,
one list entry at a time, with pydantic models. A bad entry becomes a
:class:`~southbound.observed.Problem` naming the target and the exact path; its neighbors in
the answer are still used. Models ignore leaves they do not know: devices add many.
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from southbound.observed import (
    CounterSample,
    InterfaceCounters,
    InterfaceState,
    LldpNeighbor,
    NeighborKind,
    OperChange,
    Problem,
)
from southbound.oc_tree import (
    OcTree,
    PathElem,
    strip_module,
)

_SPEED_RE = re.compile(r"^SPEED_(\d+)(MB|GB)$")


def _counter64(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a counter, not a boolean")
    if isinstance(value, str):
        if not value.isdigit():
            raise ValueError(f"{value!r} is not a 64-bit counter")
        value = int(value)
    if isinstance(value, int) and not 0 <= value < 2**64:
        raise ValueError(f"{value} is out of the 64-bit counter range")
    if not isinstance(value, int):
        raise ValueError(f"{value!r} is not a 64-bit counter")
    return value


def normal_mac(text: str) -> str:
    """``00-1C-73-AA-BB-CC`` / ``001c.73aa.bbcc`` / ``001c73aabbcc`` -> ``00:1c:73:aa:bb:cc``;
    anything that is not a MAC address -> ``""``."""
    digits = re.sub(r"[-:.]", "", text.strip())
    if len(digits) != 12 or not re.fullmatch(r"[0-9a-fA-F]{12}", digits):
        return ""
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2)).lower()


def speed_gbps(identity: str) -> float | None:
    """``openconfig-if-ethernet:SPEED_400GB`` -> 400.0; ``SPEED_UNKNOWN`` -> None."""
    name = strip_module(identity)
    if name == "SPEED_UNKNOWN":
        return None
    match = _SPEED_RE.match(name)
    if not match:
        raise ValueError(f"{identity!r} is not an OpenConfig ETHERNET_SPEED")
    number = int(match.group(1))
    return number / 1000 if match.group(2) == "MB" else float(number)


def _speed(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an OpenConfig ETHERNET_SPEED")
    return speed_gbps(value)


Counter64 = Annotated[int, BeforeValidator(_counter64)]
Speed = Annotated[float | None, BeforeValidator(_speed)]


class OperStatus(StrEnum):
    """``openconfig-interfaces`` oper-status values."""

    UP = "UP"
    DOWN = "DOWN"
    TESTING = "TESTING"
    UNKNOWN = "UNKNOWN"
    DORMANT = "DORMANT"
    NOT_PRESENT = "NOT_PRESENT"
    LOWER_LAYER_DOWN = "LOWER_LAYER_DOWN"


class Oc(BaseModel):
    """Base of the OpenConfig models: hyphenated aliases, unknown leaves ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class OcCounters(Oc):
    in_octets: Counter64 | None = Field(default=None, alias="in-octets")
    out_octets: Counter64 | None = Field(default=None, alias="out-octets")
    in_errors: Counter64 | None = Field(default=None, alias="in-errors")
    out_errors: Counter64 | None = Field(default=None, alias="out-errors")
    in_discards: Counter64 | None = Field(default=None, alias="in-discards")
    out_discards: Counter64 | None = Field(default=None, alias="out-discards")

    def observed(self) -> InterfaceCounters:
        return InterfaceCounters(**self.model_dump())


class OcInterfaceState(Oc):
    oper_status: OperStatus | None = Field(default=None, alias="oper-status")
    counters: OcCounters | None = None
    ifindex: int | None = Field(default=None, ge=0)
    description: str = ""


class OcAddressState(Oc):
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address


class OcAddress(Oc):
    state: OcAddressState | None = None
    config: OcAddressState | None = None


class OcAddresses(Oc):
    address: dict[str, OcAddress] = Field(default_factory=dict)


class OcIp(Oc):
    addresses: OcAddresses | None = None


class OcSubinterface(Oc):
    ipv4: OcIp | None = None
    ipv6: OcIp | None = None


class OcSubinterfaces(Oc):
    subinterface: dict[str, OcSubinterface] = Field(default_factory=dict)


class OcEthernetState(Oc):
    """Speed: ``port-speed`` unless the port auto-negotiates or says ``SPEED_UNKNOWN``; then
    ``negotiated-port-speed`` (openconfig-if-ethernet: "the negotiated speed is reported in
    negotiated-port-speed when auto-negotiate is true"; EOS and Cumulus report it this way)."""

    port_speed: Speed = Field(default=None, alias="port-speed")
    negotiated_port_speed: Speed = Field(default=None, alias="negotiated-port-speed")
    auto_negotiate: bool | None = Field(default=None, alias="auto-negotiate")
    mac_address: str = Field(default="", alias="mac-address")
    hw_mac_address: str = Field(default="", alias="hw-mac-address")

    @property
    def speed(self) -> float | None:
        if self.auto_negotiate and self.negotiated_port_speed:
            return self.negotiated_port_speed
        return self.port_speed or self.negotiated_port_speed

    @property
    def mac(self) -> str:
        return normal_mac(self.mac_address or self.hw_mac_address)


class OcEthernet(Oc):
    state: OcEthernetState | None = None


class OcInterface(Oc):
    name: str = Field(min_length=1)
    state: OcInterfaceState | None = None
    ethernet: OcEthernet | None = None
    subinterfaces: OcSubinterfaces | None = None

    def addresses(self) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
        """Addresses of every subinterface (``.../ipv4/addresses/address[ip]``), v4 first."""
        found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
        subs = self.subinterfaces.subinterface.values() if self.subinterfaces else ()
        for family in ("ipv4", "ipv6"):
            for sub in subs:
                ip = getattr(sub, family)
                for entry in ip.addresses.address.values() if ip and ip.addresses else ():
                    leaf = entry.state or entry.config
                    if leaf is not None and leaf.ip not in found:
                        found.append(leaf.ip)
        return tuple(found)


class OcCapabilityState(Oc):
    enabled: bool = False


class OcCapability(Oc):
    state: OcCapabilityState | None = None


class OcCapabilities(Oc):
    capability: dict[str, OcCapability] = Field(default_factory=dict)


class OcNeighborState(Oc):
    system_name: str = Field(alias="system-name", min_length=1)
    port_id: str = Field(alias="port-id", min_length=1)
    chassis_id: str = Field(default="", alias="chassis-id")
    port_description: str = Field(default="", alias="port-description")
    port_id_type: str = Field(default="", alias="port-id-type")
    management_address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = Field(
        default=None, alias="management-address"
    )


class OcNeighbor(Oc):
    state: OcNeighborState
    capabilities: OcCapabilities | None = None

    def kind(self) -> NeighborKind:
        if self.capabilities is None or not self.capabilities.capability:
            return NeighborKind.UNKNOWN
        enabled = {
            strip_module(name)
            for name, cap in self.capabilities.capability.items()
            if cap.state is not None and cap.state.enabled
        }
        if enabled & {"MAC_BRIDGE", "ROUTER", "TWO_PORT_MAC_RELAY"}:
            return NeighborKind.SWITCH
        return NeighborKind.HOST


class OcLldpNeighbors(Oc):
    neighbor: dict[str, OcNeighbor] = Field(default_factory=dict)


def _problems(target: str, where: str, error: ValidationError) -> list[Problem]:
    out = []
    for err in error.errors():
        loc = "/".join(str(p) for p in err["loc"])
        shown = repr(err.get("input"))
        reason = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] != "missing" and len(shown) <= 60:
            reason += f" (got {shown})"
        out.append(Problem(target=target, path=f"{where}/{loc}" if loc else where, reason=reason))
    return out


def _entries(target: str, table: Any, where: str) -> tuple[dict[str, Any], list[Problem]]:
    if table is None:
        return {}, []
    if not isinstance(table, dict):
        return {}, [Problem(target=target, path=where, reason="expected a list of entries")]
    return table, []


def _clean_counters(
    target: str, where: str, entry: dict[str, Any], problems: list[Problem]
) -> dict[str, Any]:
    """The entry with each malformed counter dropped and named: one bad counter costs that
    counter, not the interface (a device that sends one garbage leaf still has good ones)."""
    state = entry.get("state")
    if not isinstance(state, dict) or not isinstance(state.get("counters"), dict):
        return entry
    counters: dict[str, Any] = state["counters"]
    clean: dict[str, Any] = {}
    for leaf, value in counters.items():
        if leaf in _COUNTER_FIELDS:
            try:
                _counter64(value)
            except ValueError as exc:
                problems.append(
                    Problem(target=target, path=f"{where}/state/counters/{leaf}", reason=str(exc))
                )
                continue
        clean[leaf] = value
    return {**entry, "state": {**state, "counters": clean}}


def interfaces_of(
    tree: OcTree, target: str
) -> tuple[list[InterfaceState], dict[str, InterfaceCounters], list[Problem]]:
    """Interfaces (state, speed, ifindex, alias, MAC, addresses) and counters (``/interfaces``)."""
    table, problems = _entries(target, tree.get("interfaces", "interface"), "/interfaces")
    states: list[InterfaceState] = []
    counters: dict[str, InterfaceCounters] = {}
    for name, entry in table.items():
        where = f"/interfaces/interface[name={name}]"
        if not isinstance(entry, dict):
            problems.append(Problem(target=target, path=where, reason="expected an object"))
            continue
        try:
            iface = OcInterface.model_validate(_clean_counters(target, where, entry, problems))
        except ValidationError as exc:
            problems.extend(_problems(target, where, exc))
            continue
        state = iface.state
        if state is not None and state.counters is not None:
            counters[iface.name] = state.counters.observed()
        if state is None or state.oper_status is None:
            continue  # a counters-only or config-only entry
        eth = iface.ethernet.state if iface.ethernet else None
        states.append(
            InterfaceState(
                name=iface.name,
                oper_status=state.oper_status.value,
                speed_gbps=eth.speed if eth else None,
                if_index=state.ifindex,
                description=state.description,
                mac=eth.mac if eth else "",
                addresses=iface.addresses(),
            )
        )
    return states, counters, problems


def lldp_chassis_of(tree: OcTree) -> str:
    """The switch's own LLDP chassis-id (``/lldp/state/chassis-id``), if it said."""
    value = tree.get("lldp", "state", "chassis-id")
    return value if isinstance(value, str) else ""


def neighbors_of(tree: OcTree, target: str) -> tuple[list[LldpNeighbor], list[Problem]]:
    """LLDP neighbors from ``/lldp/interfaces``."""
    table, problems = _entries(target, tree.get("lldp", "interfaces", "interface"), "/lldp")
    found: list[LldpNeighbor] = []
    for name, entry in table.items():
        where = f"/lldp/interfaces/interface[name={name}]/neighbors"
        raw = entry.get("neighbors") if isinstance(entry, dict) else None
        if raw is None:
            continue
        entries = raw.get("neighbor") if isinstance(raw, dict) else None
        if not isinstance(entries, dict):
            try:  # not a keyed list: let the model say what is wrong with it
                OcLldpNeighbors.model_validate(raw)
            except ValidationError as exc:
                problems.extend(_problems(target, where, exc))
            continue
        for key, item in entries.items():
            # One malformed neighbour costs that neighbour, not the interface's others.
            try:
                neighbor = OcNeighbor.model_validate(item)
            except ValidationError as exc:
                problems.extend(_problems(target, f"{where}/neighbor[id={key}]", exc))
                continue
            st = neighbor.state
            address = st.management_address
            found.append(
                LldpNeighbor(
                    local_interface=name,
                    system_name=st.system_name,
                    port_id=st.port_id,
                    chassis_id=st.chassis_id,
                    port_description=st.port_description,
                    port_id_type=strip_module(st.port_id_type),
                    mgmt_address=address if isinstance(address, ipaddress.IPv4Address) else None,
                    kind=neighbor.kind(),
                )
            )
    return found, problems


def _child(node: Any, *names: str) -> Any:
    for name in names:
        node = node.get(name) if isinstance(node, dict) else None
    return node


def ecn_marks_of(tree: OcTree, target: str) -> tuple[dict[str, int], list[Problem]]:
    """ECN-marked packets per interface, summed over its output queues (``/qos``)."""
    table, problems = _entries(target, tree.get("qos", "interfaces", "interface"), "/qos")
    marks: dict[str, int] = {}
    for name, entry in table.items():
        queues = _child(entry, "output", "queues", "queue")
        if not isinstance(queues, dict):
            continue
        total = 0
        for qname, queue in queues.items():
            value = _child(queue, "state", "ecn-marked-pkts")
            if value is None:
                continue
            try:
                total += _counter64(value)
            except ValueError as exc:
                where = (
                    f"/qos/interfaces/interface[interface-id={name}]/output/queues"
                    f"/queue[name={qname}]/state/ecn-marked-pkts"
                )
                problems.append(Problem(target=target, path=where, reason=str(exc)))
        marks[name] = total
    return marks, problems


def hostname_of(tree: OcTree) -> str | None:
    for section in ("state", "config"):
        value = tree.get("system", section, "hostname")
        if isinstance(value, str) and value:
            return value
    return None


_COUNTER_FIELDS = {
    "in-octets": "in_octets",
    "out-octets": "out_octets",
    "in-errors": "in_errors",
    "out-errors": "out_errors",
    "in-discards": "in_discards",
    "out-discards": "out_discards",
}
_OPER_VALUES = frozenset(s.value for s in OperStatus)


def streamed_leaves(
    target: str, at: float, pairs: list[tuple[list[PathElem], Any]]
) -> tuple[list[OperChange | CounterSample], list[tuple[list[PathElem], Any]]]:
    """The fast path for what a stream carries most: one leaf per update (oper-status, a
    counter, ECN marks of a queue). Valid leaves become updates directly; everything else
    (containers, bad values) is returned for the general parser, which reports problems."""
    out: list[OperChange | CounterSample] = []
    rest: list[tuple[list[PathElem], Any]] = []
    counters: dict[str, dict[str, int]] = {}
    marks: dict[str, int] = {}
    for elems, value in pairs:
        names = [strip_module(n) for n, _ in elems]
        try:
            if names[:3] == ["interfaces", "interface", "state"] and "name" in elems[1][1]:
                iface = elems[1][1]["name"]
                if names[3:] == ["oper-status"] and value in _OPER_VALUES:
                    out.append(OperChange(target=target, interface=iface, oper_status=value, at=at))
                    continue
                if len(names) == 5 and names[3] == "counters" and names[4] in _COUNTER_FIELDS:
                    counters.setdefault(iface, {})[_COUNTER_FIELDS[names[4]]] = _counter64(value)
                    continue
            if names[:3] == ["qos", "interfaces", "interface"] and names[-1] == "ecn-marked-pkts":
                queue_of = elems[2][1].get("interface-id")
                if queue_of is not None:
                    marks[queue_of] = marks.get(queue_of, 0) + _counter64(value)
                    continue
        except (ValueError, TypeError):
            pass
        rest.append((elems, value))
    for iface, values in counters.items():
        sample = InterfaceCounters(**values)
        if iface in marks:
            sample = sample.model_copy(update={"ecn_marked": marks.pop(iface)})
        out.append(CounterSample(target=target, interface=iface, counters=sample, at=at))
    for iface, value in marks.items():
        counters_only = InterfaceCounters(ecn_marked=value)
        out.append(CounterSample(target=target, interface=iface, counters=counters_only, at=at))
    return out, rest
