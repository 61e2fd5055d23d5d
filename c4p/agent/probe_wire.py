"""Probes and traces on the agent wire (``proto/c4p/v1/agent.proto``), both directions.

Why one module for both ends: the agent and the controller must read a hop the same way, and the
ICMP type of an answer matters (time exceeded = a hop on the way; net/host unreachable from a
switch = a black hole, not a lost answer). ``southbound.probing.HopReply`` carries the answering
address; a prober that also knows the ICMP type and code exposes them as ``icmp_type`` and
``icmp_code`` attributes on its hops, and :func:`icmp_of` reads them where present (an answer
without them is time exceeded; silence is type 0).

On the controller side :func:`trace_from` returns the :class:`~southbound.probing.Trace` the
path table learns from, with unreachable answers turned into silence (a black hole is not a
path: the table must not trust the port), and the black holes apart (:class:`BlackHole`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass

from c4p.api.v1 import agent_pb2 as pb
from southbound.probing import HopReply, Probe, Trace
from topology.roce import ROCE_UDP_DPORT

ICMP_TIME_EXCEEDED = 11
ICMP_UNREACHABLE = 3
ICMP_NET_UNREACHABLE = 0
ICMP_HOST_UNREACHABLE = 1
ICMP_PORT_UNREACHABLE = 3


def icmp_of(hop: HopReply) -> tuple[int, int]:
    """(type, code) of an answer: the prober's if it says, else time exceeded; (0, 0) if none."""
    if hop.address is None:
        return 0, 0
    kind = getattr(hop, "icmp_type", None)
    code = getattr(hop, "icmp_code", None)
    return (ICMP_TIME_EXCEEDED if kind is None else int(kind)), (0 if code is None else int(code))


def is_black_hole(icmp_type: int, icmp_code: int) -> bool:
    """Net or host unreachable: a router on the way had nowhere to send the probe."""
    return icmp_type == ICMP_UNREACHABLE and icmp_code in (
        ICMP_NET_UNREACHABLE,
        ICMP_HOST_UNREACHABLE,
    )


def spec_of(probe: Probe) -> pb.ProbeSpec:
    return pb.ProbeSpec(
        src=str(probe.src),
        dst=str(probe.dst),
        sport=probe.sport,
        dport=probe.dport,
        first_ttl=probe.first_ttl,
        max_ttl=probe.max_ttl,
    )


def probe_of(spec: pb.ProbeSpec) -> Probe:
    """The probe a spec asks for; ``ValueError`` naming the bad field."""
    try:
        src = ipaddress.IPv4Address(spec.src)
        dst = ipaddress.IPv4Address(spec.dst)
    except ValueError as exc:
        raise ValueError(f"address: {exc}") from None
    return Probe(
        src,
        dst,
        spec.sport,
        first_ttl=spec.first_ttl,
        max_ttl=spec.max_ttl,
        dport=spec.dport or ROCE_UDP_DPORT,
    )


def trace_message(index: int, trace: Trace) -> pb.ProbeTrace:
    hops = []
    for hop in trace.hops:
        kind, code = icmp_of(hop)
        hops.append(
            pb.Hop(
                ttl=hop.ttl,
                address="" if hop.address is None else str(hop.address),
                icmp_type=kind,
                icmp_code=code,
            )
        )
    return pb.ProbeTrace(index=index, hops=hops)


@dataclass(frozen=True, slots=True)
class BlackHole:
    """A probe answered "unreachable" by a router: the 5-tuple dies there."""

    probe: Probe
    ttl: int
    address: ipaddress.IPv4Address
    code: int


_HOP_FIELDS = {f.name for f in dataclasses.fields(HopReply)}
HOPS_CARRY_ICMP = "icmp_type" in _HOP_FIELDS
"""Whether ``HopReply`` carries the ICMP type (the real prober's branch adds it): then the path
table sees black holes itself; otherwise they are silenced so that it never trusts them."""


def trace_from(probe: Probe, message: pb.ProbeTrace) -> tuple[Trace, BlackHole | None]:
    """The trace to learn from and the black hole, if any (see :data:`HOPS_CARRY_ICMP`)."""
    hops: list[HopReply] = []
    hole: BlackHole | None = None
    for hop in message.hops:
        address = ipaddress.IPv4Address(hop.address) if hop.address else None
        if address is not None and is_black_hole(hop.icmp_type, hop.icmp_code):
            if hole is None:
                hole = BlackHole(probe, hop.ttl, address, hop.icmp_code)
            if not HOPS_CARRY_ICMP:
                address = None
        if HOPS_CARRY_ICMP and address is not None:
            kind = hop.icmp_type or ICMP_TIME_EXCEEDED
            hops.append(HopReply(hop.ttl, address, kind, hop.icmp_code))  # type: ignore[call-arg,unused-ignore]
        else:
            hops.append(HopReply(hop.ttl, address))
    return Trace(probe, tuple(hops)), hole


def silent(probe: Probe) -> Trace:
    """The trace of a probe nobody ran (refused, or no agent): every hop silent."""
    return Trace(probe, tuple(HopReply(t, None) for t in range(probe.first_ttl, probe.max_ttl + 1)))
