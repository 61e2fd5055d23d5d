"""What a switch told us, independent of the protocol that carried it.

Why a neutral form: gNMI (OpenConfig JSON_IETF) and SNMP (IF-MIB, LLDP-MIB) describe the same
facts, interfaces with their state and speed, LLDP neighbors and counters, in different
shapes. Each driver turns its protocol into these models, and everything above (building a
fabric, rates, events) is written once against them.

Conventions a switch's LLDP neighbors must follow for c4p to place them (the emulator in
``c4p.testing`` follows them):

* a **switch** neighbor advertises its name as LLDP *system-name* (the target name in the
  targets file) and the interface name as *port-id*; its system capabilities include bridge
  or router;
* a **host NIC port** advertises the host name as *system-name* and the NIC port name as
  *port-id* (so the link end is ``"<system-name>:<port-id>"``, the fabric's NIC port node);
  *port-description* carries the NIC name (``nic3``) the port belongs to; the *management
  address* is the NIC port's IPv4 address when the host advertises it (lldpd can be told to);
  its capabilities are station-only or absent.

Counters are 64-bit and arrive as strings or numbers; here they are Python ints, or ``None``
when the switch did not report that counter.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum

from pydantic import Field

from topology.base import Frozen


class Observed(Frozen):
    """Base: frozen and strict about keys (these are built by drivers, never by users)."""


class Protocol(StrEnum):
    GNMI = "gnmi"
    SNMP = "snmp"


class InterfaceState(Observed):
    """One interface: its operational state and speed (``None`` when not reported)."""

    name: str
    oper_status: str = Field(description="OpenConfig spelling: UP, DOWN, LOWER_LAYER_DOWN, ...")
    speed_gbps: float | None = None
    if_index: int | None = Field(
        default=None, description="ifIndex (LLDP port-id subtype local on Junos names it)."
    )
    description: str = Field(default="", description="Description / alias (SONiC's alias).")
    mac: str = Field(default="", description="Port MAC, lower case with colons, if reported.")
    addresses: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...] = Field(
        default=(), description="IPv4/IPv6 addresses of its subinterfaces (IP-MIB on SNMP)."
    )

    @property
    def up(self) -> bool:
        return self.oper_status == "UP"


class InterfaceCounters(Observed):
    """Cumulative counters of one interface; ``None`` = not reported by the switch."""

    in_octets: int | None = None
    out_octets: int | None = None
    in_errors: int | None = None
    out_errors: int | None = None
    in_discards: int | None = None
    out_discards: int | None = None
    ecn_marked: int | None = Field(default=None, description="ECN-marked packets, all queues.")

    def merged(self, newer: InterfaceCounters) -> InterfaceCounters:
        """These counters with every counter ``newer`` reports replaced by its value."""
        update = {k: v for k, v in newer.model_dump().items() if v is not None}
        return self.model_copy(update=update)


class NeighborKind(StrEnum):
    SWITCH = "switch"
    HOST = "host"
    UNKNOWN = "unknown"


class LldpNeighbor(Observed):
    """An LLDP neighbor seen on ``local_interface``."""

    local_interface: str
    system_name: str
    port_id: str
    chassis_id: str = ""
    port_description: str = ""
    port_id_type: str = Field(
        default="",
        description="LLDP port-id subtype as OpenConfig spells it: INTERFACE_NAME, LOCAL, "
        "MAC_ADDRESS, INTERFACE_ALIAS, ... (empty: not reported).",
    )
    mgmt_address: ipaddress.IPv4Address | None = None
    kind: NeighborKind = Field(
        default=NeighborKind.UNKNOWN,
        description="From LLDP system capabilities: bridge/router -> switch, station -> host.",
    )


class Problem(Observed):
    """Something a target sent that could not be used, located by target and path."""

    target: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.target}: {self.path}: {self.reason}"


class SwitchObservation(Observed):
    """Everything one round of questions to one switch returned."""

    target: str
    protocol: Protocol
    at: float = Field(description="Wall-clock time (seconds) the answers were received.")
    hostname: str | None = None
    chassis_id: str = Field(default="", description="Its own LLDP chassis-id, if reported.")
    interfaces: tuple[InterfaceState, ...] = ()
    neighbors: tuple[LldpNeighbor, ...] = ()
    counters: dict[str, InterfaceCounters] = Field(default_factory=dict)
    problems: tuple[Problem, ...] = ()

    def interface(self, name: str) -> InterfaceState | None:
        for iface in self.interfaces:
            if iface.name == name:
                return iface
        return None

    def with_oper_status(self, changes: dict[str, str]) -> SwitchObservation:
        """A copy where interface ``name`` has oper-status ``changes[name]``."""
        if not changes:
            return self
        interfaces = tuple(
            i.model_copy(update={"oper_status": changes[i.name]}) if i.name in changes else i
            for i in self.interfaces
        )
        return self.model_copy(update={"interfaces": interfaces})


# -- what a watching session reports, one item at a time --------------------------------------


class OperChange(Observed):
    """An interface's oper-status as a switch streamed or polled it (``at``: switch time)."""

    target: str
    interface: str
    oper_status: str
    at: float

    @property
    def up(self) -> bool:
        return self.oper_status == "UP"


class CounterSample(Observed):
    """Counters of one interface at one instant (``at``: switch time, seconds)."""

    target: str
    interface: str
    counters: InterfaceCounters
    at: float


class StreamSynced(Observed):
    """The target has sent every current value once; from now on only changes and samples."""

    target: str
    at: float


class LldpChanged(Observed):
    """The target streamed a change of its LLDP neighbour tables (ON_CHANGE): look again."""

    target: str
    at: float


WatchUpdate = OperChange | CounterSample | StreamSynced | LldpChanged | Problem
"""What :meth:`southbound.drivers.Session.watch` hands to its callback."""
