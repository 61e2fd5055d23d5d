"""Path probing: Paris-traceroute probes, the ``Prober`` seam, and a prober over the modelled
data plane.

Why probing: vendors do not publish how their ECMP hash key is built, and the mapping changes
when a group's membership changes, so the truth about which source port takes which path comes
from the fabric itself. A probe is a UDP packet with the *same* 5-tuple a QP
would use (source and destination NIC addresses, the candidate source port, destination port
4791); Paris traceroute keeps that 5-tuple fixed and only raises the IP TTL, so every probe of a
trace follows the same path and the switch at hop ``t`` answers the probe sent with TTL ``t``
(ICMP time exceeded). The answers, in TTL order, are the path.

The seam: :class:`Prober` has one method, ``trace_many``, which takes a batch of probes and
returns one :class:`Trace` per probe. Batches let a real prober keep many probes in flight under
a rate limit, and let the modelled one forward thousands at once. A raw-socket prober implements
it by sending, for each probe and each TTL in ``first_ttl..max_ttl``, a UDP datagram from the
probe's source address and port with that TTL (``IP_TTL`` on a ``SOCK_RAW``/``SOCK_DGRAM``
socket), matching ICMP time-exceeded replies to (probe, TTL) by the quoted header, and putting
the replying address, or ``None`` on timeout, in :class:`HopReply`. It must run on (or as) the
source host, because the source address and NIC are part of the 5-tuple.

:class:`ModeledProber` answers from ``topology.forwarding`` with the hash profiles of *its own*
fabric snapshot: the path-table code is given only the topology, never those profiles. Its
snapshot can be replaced (a link failing under the controller), and it can drop answers (ICMP
rate limiting) with a seeded generator.

:class:`AddressBook` turns replying addresses back into fabric nodes: switch management
addresses and NIC port addresses by default, plus any interface addresses discovery adds.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from topology.errors import UnknownNameError
from topology.forwarding import forward_many
from topology.index import FabricIndex
from topology.model import Fabric
from topology.roce import ROCE_UDP_DPORT, SPORT_MAX, UDP_PROTOCOL, FiveTuple

IPv4 = ipaddress.IPv4Address
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
"""A probe's ends and answers: IPv4, or IPv6 on an IPv6 fabric (``southbound.netprobe``)."""


@dataclass(frozen=True, slots=True)
class Probe:
    """One Paris-traceroute: a fixed 5-tuple sent with TTL ``first_ttl`` .. ``max_ttl``.

    TTL 1 expires at the source NIC's own leaf, TTL ``t`` at the ``t``-th switch of the path,
    and the TTL one past the last switch reaches the destination NIC.
    """

    src: IPAddress
    dst: IPAddress
    sport: int
    first_ttl: int = 1
    max_ttl: int = 8
    dport: int = ROCE_UDP_DPORT
    protocol: int = UDP_PROTOCOL

    def __post_init__(self) -> None:
        if not 0 <= self.sport <= SPORT_MAX:
            raise ValueError(f"sport: {self.sport} is not a UDP port")
        if not 1 <= self.first_ttl <= self.max_ttl <= 255:
            raise ValueError(
                f"first_ttl/max_ttl: need 1 <= first_ttl <= max_ttl <= 255, "
                f"got {self.first_ttl}, {self.max_ttl}"
            )

    @property
    def five_tuple(self) -> FiveTuple:
        return FiveTuple(
            src_ip=self.src,
            dst_ip=self.dst,
            protocol=self.protocol,
            src_port=self.sport,
            dst_port=self.dport,
        )

    @property
    def packets(self) -> int:
        """Packets the trace sends: one per TTL."""
        return self.max_ttl - self.first_ttl + 1


ICMP_DEST_UNREACHABLE = 3
ICMP_TIME_EXCEEDED = 11
ICMP_PORT_UNREACHABLE = 3
"""Code of destination-unreachable meaning the probe *reached* a host that has no such port."""
BLACK_HOLE_CODES = frozenset({0, 1, 6, 7})
"""Destination-unreachable codes that mean a router had no route (net/host unreachable or
unknown): the path ends in a black hole there, which is an answer, not a lost one."""


@dataclass(frozen=True, slots=True)
class HopReply:
    """Who answered the probe sent with ``ttl``: an address, or ``None`` (no answer), and with
    which ICMP message (time exceeded by default, as a modelled switch answers)."""

    ttl: int
    address: IPAddress | None
    icmp_type: int = ICMP_TIME_EXCEEDED
    icmp_code: int = 0

    @property
    def black_hole(self) -> bool:
        """A router answered "no route" (net/host unreachable): the path stops there."""
        return (
            self.address is not None
            and self.icmp_type == ICMP_DEST_UNREACHABLE
            and self.icmp_code in BLACK_HOLE_CODES
        )


@dataclass(frozen=True, slots=True)
class Trace:
    """The answers to one probe, one :class:`HopReply` per TTL sent, in TTL order."""

    probe: Probe
    hops: tuple[HopReply, ...]

    def at(self, ttl: int) -> IPAddress | None:
        """The address that answered at ``ttl`` (``None`` if silent or not sent)."""
        i = ttl - self.probe.first_ttl
        return self.hops[i].address if 0 <= i < len(self.hops) else None

    @property
    def black_hole(self) -> HopReply | None:
        """The first answer saying "no route" (see :attr:`HopReply.black_hole`), if any."""
        return next((h for h in self.hops if h.black_hole), None)


class Prober(Protocol):
    """Sends Paris-traceroute probes and reports the answers (see the module docstring)."""

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        """One trace per probe, in order. Never raises for a path that does not answer."""
        ...


class AddressBook:
    """Replying address -> fabric node number, for one fabric's topology.

    Defaults: every switch's ``mgmt_address`` and loopback/interface ``addresses``, and every NIC
    port's address. ``extra`` adds further addresses by node name.
    """

    def __init__(self, fabric: Fabric, extra: Mapping[str, IPv4 | str] | None = None) -> None:
        index = fabric.index
        self._node: dict[IPAddress, int] = dict(index.node_of_address)
        for number, switch in enumerate(fabric.switches):
            for owned in switch.all_addresses():
                self._node[owned] = number
        for name, address in (extra or {}).items():
            self._node[ipaddress.ip_address(address)] = index.node(name)

    def node(self, address: IPAddress) -> int | None:
        """The node that owns ``address``, or ``None`` if no node of the fabric does."""
        return self._node.get(address)


def _answering_addresses(
    index: FabricIndex, addresses: Mapping[str, IPv4 | str] | None
) -> list[IPv4 | None]:
    """The address each node answers probes from: its override, mgmt address or NIC address."""
    out: list[IPv4 | None] = [None] * index.num_nodes
    for number, switch in enumerate(index.fabric.switches):
        out[number] = switch.mgmt_address
    for port in index.ports:
        out[port.node] = port.port.address
    for name, address in (addresses or {}).items():
        out[index.node(name)] = ipaddress.IPv4Address(address)
    missing = [index.node_names[i] for i in range(index.num_switches) if out[i] is None]
    if missing:
        raise UnknownNameError(
            f"switches without an address to answer probes from: {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}; give mgmt_address or addresses="
        )
    return out


class ModeledProber:
    """A :class:`Prober` over ``topology.forwarding`` with its own (hidden) fabric snapshot.

    ``loss`` is the chance that any one answer is lost (seeded by ``seed``);
    ``destination_answers`` is whether the destination NIC answers the probe that reaches it
    (a RoCE NIC usually drops it silently). ``traces`` and ``packets`` count what was sent.
    """

    def __init__(
        self,
        fabric: Fabric,
        *,
        addresses: Mapping[str, IPv4 | str] | None = None,
        loss: float = 0.0,
        seed: int = 0,
        destination_answers: bool = True,
    ) -> None:
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss: {loss} is not a probability below 1")
        self._addresses = addresses
        self._loss = loss
        self._rng = np.random.default_rng(seed)
        self._destination_answers = destination_answers
        self.traces = 0
        self.packets = 0
        self.set_fabric(fabric)

    @property
    def fabric(self) -> Fabric:
        return self._fabric

    def set_fabric(self, fabric: Fabric) -> None:
        """The network changed (a link went down or came back): answer from ``fabric`` now."""
        self._fabric = fabric
        self._answer = _answering_addresses(fabric.index, self._addresses)

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        index = self._fabric.index
        results: list[Trace | None] = [None] * len(probes)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, probe in enumerate(probes):
            groups.setdefault((probe.protocol, probe.dport), []).append(i)
        for (protocol, dport), members in groups.items():
            src = [index.node_of_address.get(probes[i].src, -1) for i in members]
            dst = [index.node_of_address.get(probes[i].dst, -1) for i in members]
            known = [k for k, (s, d) in enumerate(zip(src, dst, strict=True)) if s >= 0 <= d]
            paths: list[tuple[int, ...]] = [()] * len(members)
            if known:
                forwarded = forward_many(
                    self._fabric,
                    np.asarray([src[k] for k in known], dtype=np.int64),
                    np.asarray([dst[k] for k in known], dtype=np.int64),
                    np.asarray([probes[members[k]].sport for k in known], dtype=np.int64),
                    protocol=protocol,
                    dst_udp_port=dport,
                )
                for k, path in zip(known, forwarded, strict=True):
                    paths[k] = path
            for k, i in enumerate(members):
                results[i] = self._trace(probes[i], paths[k])
        return [t for t in results if t is not None]

    def _trace(self, probe: Probe, path: tuple[int, ...]) -> Trace:
        index = self._fabric.index
        # Node at hop t (1-based): the switches of the path, then the destination NIC port.
        hops = [int(index.res_dst[r]) for r in path]
        if hops and not self._destination_answers:
            hops.pop()
        ttls = range(probe.first_ttl, probe.max_ttl + 1)
        lost = self._rng.random(len(ttls)) < self._loss if self._loss else None
        replies = []
        for k, ttl in enumerate(ttls):
            answer = self._answer[hops[ttl - 1]] if ttl <= len(hops) else None
            if lost is not None and lost[k]:
                answer = None
            replies.append(HopReply(ttl, answer))
        self.traces += 1
        self.packets += len(ttls)
        return Trace(probe, tuple(replies))
