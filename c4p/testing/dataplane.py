"""The emulated fabric's data plane: link state, carried traffic, counters, LLDP, faults.

Why separate from the protocol servers: the gNMI targets, the SNMP agent files and the tests
must all see *one* fabric. A link failed here is down on both of its switches, drops out of
both LLDP tables and stops counting at once, whichever protocol reads it. Counters integrate
the carried rate over time (``octets += rate * dt``), so a test sets a rate and reads back
utilization as a switch would report it. Time comes from an injectable clock.

What the emulator tells LLDP, per the conventions of :mod:`southbound.observed`: a switch
neighbor advertises its name and interface with bridge/router capabilities; a host NIC port
advertises the host name, the NIC port name, the NIC name as port description and (unless
``advertise_addresses=False``) the port's IPv4 address as management address.

Faults for the protocol servers (read by them, not acted on here): ``set_leaf`` overrides one
OpenConfig leaf with any JSON value (garbage included), ``set_raw`` replaces a whole Get
answer with raw bytes, ``set_delay`` makes a switch answer slowly.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from c4p.testing.flavours import Flavour, flavour
from southbound.observed import (
    InterfaceCounters,
    InterfaceState,
    LldpNeighbor,
    NeighborKind,
    Protocol,
    SwitchObservation,
)
from topology.index import natural_key
from topology.model import Fabric, LinkStatus, Switch, split_end


def mac_of(name: str) -> str:
    """A stable, locally administered MAC address for a device name (LLDP chassis-id)."""
    digest = hashlib.sha1(name.encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


@dataclass(frozen=True)
class EmulatedPort:
    """A switch interface and the cable on it (``side`` 0: the link's end ``a``)."""

    switch: str
    interface: str
    if_index: int
    link: int
    side: int
    peer: str
    speed_gbps: float


@dataclass(frozen=True)
class Neighbor:
    """What LLDP on ``local_interface`` has learned from the far end."""

    local_interface: str
    system_name: str
    port_id: str
    chassis_id: str
    port_description: str
    mgmt_address: ipaddress.IPv4Address | None
    is_switch: bool


@dataclass(frozen=True)
class PortCounters:
    in_octets: int
    out_octets: int
    in_errors: int
    out_errors: int
    in_discards: int
    out_discards: int
    ecn_marked: int


@dataclass
class _Direction:
    """One direction of one link: rates per second and what has accumulated since ``last``."""

    octets: float
    errors: float = 0.0
    discards: float = 0.0
    ecn: float = 0.0
    bytes_per_s: float = 0.0
    errors_per_s: float = 0.0
    discards_per_s: float = 0.0
    ecn_per_s: float = 0.0
    last: float = 0.0

    def settle(self, now: float, moving: bool) -> None:
        dt = max(0.0, now - self.last) if moving else 0.0
        self.octets += self.bytes_per_s * dt
        self.errors += self.errors_per_s * dt
        self.discards += self.discards_per_s * dt
        self.ecn += self.ecn_per_s * dt
        self.last = now


@dataclass
class _Faults:
    leaves: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)
    delay_s: float = 0.0


class FabricEmulator:
    """Mutable state of an emulated fabric; every method is thread-safe."""

    def __init__(
        self,
        fabric: Fabric,
        *,
        clock: Callable[[], float] = time.monotonic,
        advertise_addresses: bool = True,
        counter_base: int = 1 << 40,
        flavours: Mapping[str, str] | str | None = None,
    ) -> None:
        self.fabric = fabric
        self.advertise_addresses = advertise_addresses
        names = [s.name for s in fabric.switches]
        if isinstance(flavours, str):
            flavours = dict.fromkeys(names, flavours)
        self._flavours = {n: flavour((flavours or {}).get(n, "openconfig")) for n in names}
        self._switch_by_name = {s.name: s for s in fabric.switches}
        self._clock = clock
        self._lock = threading.Lock()
        # One condition per switch on the one lock: a change wakes only its switches' streams.
        self._conds = {s.name: threading.Condition(self._lock) for s in fabric.switches}
        self._versions: dict[str, int] = {s.name: 0 for s in fabric.switches}
        self._up = [link.status is not LinkStatus.DOWN for link in fabric.links]
        now = clock()
        self._dirs = [
            _Direction(octets=float(counter_base), last=now) for _ in range(2 * len(fabric.links))
        ]
        self._faults: dict[str, _Faults] = {s.name: _Faults() for s in fabric.switches}
        self._switch_names = {s.name for s in fabric.switches}
        self._cable(fabric)

    def _cable(self, fabric: Fabric) -> None:
        """Build the switches' cabled ports from ``fabric``'s links (under the lock, or
        before any thread may see the emulator)."""
        switch_names = self._switch_names
        ports: dict[str, list[tuple[str, int, int, str, float]]] = {
            s.name: [] for s in fabric.switches
        }
        for li, link in enumerate(fabric.links):
            for side, (end, peer) in enumerate(((link.a, link.b), (link.b, link.a))):
                device, interface = split_end(end)
                if device in switch_names:
                    ports[device].append((interface, li, side, peer, link.speed_gbps))
        self._ports: dict[str, tuple[EmulatedPort, ...]] = {}
        self._port_by_name: dict[tuple[str, str], EmulatedPort] = {}
        for switch, rows in ports.items():
            rows.sort(key=lambda r: natural_key(r[0]))
            made = tuple(
                EmulatedPort(switch, name, i + 1, li, side, peer, speed)
                for i, (name, li, side, peer, speed) in enumerate(rows)
            )
            self._ports[switch] = made
            for port in made:
                self._port_by_name[(switch, port.interface)] = port
        index = fabric.index
        self._nic_of_port = {
            f"{p.host.name}:{p.port.name}": (p.nic.name, p.port.address) for p in index.ports
        }

    def rewire(self, fabric: Fabric) -> None:
        """Re-cable the live fabric as ``fabric`` has it (same switches): a cable moved to
        another port or switch, added, pulled or re-speeded. Both ends' interface tables and
        LLDP answer the new wiring at once, as after a technician's work; a link kept (same
        two ends) keeps its state and counters, a new one comes up with fresh counters.
        Streams of every switch are woken (their next sample shows the new cabling)."""
        if {s.name for s in fabric.switches} != self._switch_names:
            raise ValueError("rewire: the new fabric must have the same switches")
        now = self._clock()
        with self._lock:
            before = {frozenset(k.ends): i for i, k in enumerate(self.fabric.links)}
            up, dirs = [], []
            for link in fabric.links:
                old = before.get(frozenset(link.ends))
                if old is None:
                    up.append(link.status is not LinkStatus.DOWN)
                    dirs += [_Direction(octets=float(1 << 40), last=now) for _ in range(2)]
                else:
                    up.append(self._up[old])
                    dirs += [self._dirs[2 * old], self._dirs[2 * old + 1]]
            self.fabric = fabric
            self._up, self._dirs = up, dirs
            self._cable(fabric)
            for name in self._versions:
                self._versions[name] += 1
                self._conds[name].notify_all()

    # -- structure ---------------------------------------------------------------------------

    def flavour_of(self, switch: str) -> Flavour:
        """The OS dialect ``switch`` speaks (see :mod:`c4p.testing.flavours`)."""
        return self._flavours[switch]

    def switch(self, name: str) -> Switch:
        return self._switch_by_name[name]

    def link_index(self, switch: str, interface: str) -> int:
        return self._port_by_name[(switch, interface)].link

    @property
    def switches(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.fabric.switches)

    def ports(self, switch: str) -> tuple[EmulatedPort, ...]:
        """The switch's cabled interfaces in natural order; ``if_index`` counts from 1."""
        return self._ports[switch]

    def port(self, switch: str, interface: str) -> EmulatedPort:
        return self._port_by_name[(switch, interface)]

    def _link(self, link: str) -> int:
        return self.fabric.index.link_number(link)

    # -- link state --------------------------------------------------------------------------

    def link_up(self, link: int) -> bool:
        with self._lock:
            return self._up[link]

    def oper_up(self, switch: str, interface: str) -> bool:
        return self.link_up(self.port(switch, interface).link)

    def fail_link(self, link: str) -> None:
        """Take a link down (by id ``a--b`` or an end): both interfaces go oper-down."""
        self._set_link(self._link(link), False)

    def restore_link(self, link: str) -> None:
        self._set_link(self._link(link), True)

    def _set_link(self, li: int, up: bool) -> None:
        now = self._clock()
        with self._lock:
            if self._up[li] == up:
                return
            for d in (2 * li, 2 * li + 1):
                self._dirs[d].settle(now, self._up[li])
            self._up[li] = up
            for end in self.fabric.links[li].ends:
                device, _ = split_end(end)
                if device in self._versions:
                    self._versions[device] += 1
                    self._conds[device].notify_all()

    def version(self, switch: str) -> int:
        with self._lock:
            return self._versions[switch]

    def wait_for_change(self, switch: str, seen: int, timeout: float) -> int:
        """Block until the switch's state version differs from ``seen`` (or timeout/poke)."""
        with self._lock:
            if self._versions[switch] == seen:
                self._conds[switch].wait(timeout)
            return self._versions[switch]

    def poke(self) -> None:
        """Wake every waiter (a protocol server uses this when a stream ends)."""
        with self._lock:
            for cond in self._conds.values():
                cond.notify_all()

    # -- traffic and counters ----------------------------------------------------------------

    def set_link_load(
        self,
        link: str,
        gbps_ab: float,
        gbps_ba: float | None = None,
        *,
        errors_per_s: float = 0.0,
        discards_per_s: float = 0.0,
        ecn_marks_per_s: float = 0.0,
    ) -> None:
        """Traffic a link carries (a->b, b->a, Gbit/s); counters integrate it over time.

        Per direction: the receiver counts ``errors_per_s`` in-errors, the sender counts
        ``discards_per_s`` out-discards and ``ecn_marks_per_s`` ECN-marked packets.
        """
        li = self._link(link)
        rates = (gbps_ab, gbps_ab if gbps_ba is None else gbps_ba)
        now = self._clock()
        with self._lock:
            for r, gbps in enumerate(rates):
                d = self._dirs[2 * li + r]
                d.settle(now, self._up[li])
                d.bytes_per_s = gbps * 1e9 / 8
                d.errors_per_s = errors_per_s
                d.discards_per_s = discards_per_s
                d.ecn_per_s = ecn_marks_per_s

    def add_flow(self, nodes: Sequence[str], gbps: float) -> None:
        """Add ``gbps`` to every directed link along a path given as node names."""
        resources = self.fabric.index.path_resources(nodes)
        now = self._clock()
        with self._lock:
            for res in resources:
                d = self._dirs[res]
                d.settle(now, self._up[res // 2])
                d.bytes_per_s += gbps * 1e9 / 8

    def counters(self, switch: str, interface: str) -> PortCounters:
        port = self.port(switch, interface)
        li = port.link
        out_d, in_d = (2 * li, 2 * li + 1) if port.side == 0 else (2 * li + 1, 2 * li)
        now = self._clock()
        with self._lock:
            for d in (out_d, in_d):
                self._dirs[d].settle(now, self._up[li])
            tx, rx = self._dirs[out_d], self._dirs[in_d]
            return PortCounters(
                in_octets=int(rx.octets),
                out_octets=int(tx.octets),
                in_errors=int(rx.errors),
                out_errors=0,
                in_discards=0,
                out_discards=int(tx.discards),
                ecn_marked=int(tx.ecn),
            )

    def rates(self, switch: str, interface: str) -> tuple[float, float]:
        """Configured (in, out) bytes per second of an interface (0 while the link is down)."""
        port = self.port(switch, interface)
        li = port.link
        out_d, in_d = (2 * li, 2 * li + 1) if port.side == 0 else (2 * li + 1, 2 * li)
        with self._lock:
            if not self._up[li]:
                return 0.0, 0.0
            return self._dirs[in_d].bytes_per_s, self._dirs[out_d].bytes_per_s

    # -- LLDP --------------------------------------------------------------------------------

    def neighbors(self, switch: str) -> list[Neighbor]:
        """LLDP neighbors of a switch: one per cabled interface whose link is up."""
        out: list[Neighbor] = []
        for port in self.ports(switch):
            if not self.link_up(port.link):
                continue
            device, interface = split_end(port.peer)
            if device in self._switch_names:
                out.append(
                    Neighbor(
                        port.interface, device, interface, mac_of(device), interface, None, True
                    )
                )
                continue
            nic, address = self._nic_of_port[port.peer]
            out.append(
                Neighbor(
                    local_interface=port.interface,
                    system_name=device,
                    port_id=interface,
                    chassis_id=mac_of(device),
                    port_description=nic,
                    mgmt_address=address if self.advertise_addresses else None,
                    is_switch=False,
                )
            )
        return out

    def observation(self, switch: str, *, at: float | None = None) -> SwitchObservation:
        """What a perfect driver would observe on ``switch`` now (no protocol involved).

        For pure tests of discovery and for benchmarks of it; protocol tests use the servers.
        """
        interfaces, counters = [], {}
        for port in self.ports(switch):
            status = "UP" if self.link_up(port.link) else "DOWN"
            interfaces.append(
                InterfaceState(name=port.interface, oper_status=status, speed_gbps=port.speed_gbps)
            )
            c = self.counters(switch, port.interface)
            counters[port.interface] = InterfaceCounters(
                in_octets=c.in_octets,
                out_octets=c.out_octets,
                in_errors=c.in_errors,
                out_errors=c.out_errors,
                in_discards=c.in_discards,
                out_discards=c.out_discards,
                ecn_marked=c.ecn_marked,
            )
        neighbors = [
            LldpNeighbor(
                local_interface=n.local_interface,
                system_name=n.system_name,
                port_id=n.port_id,
                chassis_id=n.chassis_id,
                port_description=n.port_description,
                mgmt_address=n.mgmt_address,
                kind=NeighborKind.SWITCH if n.is_switch else NeighborKind.HOST,
            )
            for n in self.neighbors(switch)
        ]
        return SwitchObservation(
            target=switch,
            protocol=Protocol.GNMI,
            at=time.time() if at is None else at,
            hostname=switch,
            interfaces=tuple(interfaces),
            neighbors=tuple(neighbors),
            counters=counters,
        )

    # -- faults ------------------------------------------------------------------------------

    def set_leaf(self, switch: str, path: str, value: Any) -> None:
        """Answer ``value`` (any JSON value) at OpenConfig leaf ``path`` of ``switch``."""
        with self._lock:
            self._faults[switch].leaves[path] = value
            self._versions[switch] += 1
            self._conds[switch].notify_all()

    def set_raw(self, switch: str, subtree: str, payload: bytes) -> None:
        """Answer a Get of ``subtree`` (e.g. ``/lldp/interfaces``) with these raw bytes."""
        self.set_raws([switch], {subtree: payload})

    def set_raws(self, switches: Iterable[str], answers: Mapping[str, bytes]) -> None:
        """Answer Gets of each subtree of ``answers`` with its raw bytes on all ``switches`` at
        once: a discovery round running meanwhile sees all of them or none (a whole-fabric
        collector outage, not a half-made one)."""
        with self._lock:
            for switch in switches:
                self._faults[switch].raw.update(answers)

    def set_delay(self, switch: str, seconds: float) -> None:
        """Make every unary answer of ``switch`` wait this long."""
        with self._lock:
            self._faults[switch].delay_s = seconds

    def clear_faults(self, switch: str | None = None) -> None:
        with self._lock:
            for name in [switch] if switch else list(self._faults):
                self._faults[name] = _Faults()
                self._versions[name] += 1
                self._conds[name].notify_all()

    def leaf_overrides(self, switch: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._faults[switch].leaves)

    def raw_answer(self, switch: str, subtree: str) -> bytes | None:
        with self._lock:
            return self._faults[switch].raw.get(subtree)

    def delay(self, switch: str) -> float:
        with self._lock:
            return self._faults[switch].delay_s

    def links_of(self, switches: Iterable[str]) -> list[int]:
        """Numbers of the links with an end on any of ``switches``."""
        names = set(switches)
        return sorted({p.link for s in names for p in self.ports(s)})
