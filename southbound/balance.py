"""Dual-port balance: spread QPs over a NIC's ports (and so over planes) before paths are chosen.

Why: on dual-plane (HPN) or bonded-NIC fabrics each NIC has two ports, and which port a QP
leaves on decides which plane (or which ToR) carries it. Path planning cannot fix a bad choice
here: if most QPs of a NIC sit on port 0, port 0 is the bottleneck whatever the spines do. The
flow derivation (``solver.workload.patterns``) alternates ports per connection (QP ``g`` on port
``g mod ports``); that is even inside a connection of many QPs, but blind across connections: with
one QP per connection every QP of every NIC lands on port 0 and plane 1 idles, and with three
QPs every connection puts two on port 0.

:func:`balance_ports` decides per QP a *lane*, a (source port, destination port) pair that can
reach each other (same plane, both NIC links up, a path between their leaves). Connections are
taken largest first, and each QP goes to the lane that is, in order of priority:

1. least used by its own connection (so a connection's QPs are split as evenly as possible: C4P's
   dual-port balance);
2. least loaded at its NIC ports: the source port's transmit load and the destination port's
   receive load, over *all* connections of those NICs;
3. on the least loaded plane overall (so one-QP connections alternate planes);
4. first in port order (deterministic).

A port whose link is down offers no lane, so the same call moves QPs off a failed port. The
function takes anything flow-shaped and returns the new ends; :func:`rebalanced` applies them to
dataclass flows (the solver's ``Flow``) without importing the solver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from southbound.routes import FlowLike
from topology.index import FabricIndex
from topology.model import Fabric

F = TypeVar("F", bound=FlowLike)

Lane = tuple[int, int]
"""(source NIC port node, destination NIC port node)."""

_ConnectionKey = tuple[str, str, int, tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class BalanceResult:
    """New ``(src, dst)`` NIC port names per flow (input order), and what changed."""

    ends: tuple[tuple[str, str], ...]
    moved: int
    stranded: tuple[int, ...]
    spread_before: float
    spread_after: float


def _nic_ports(index: FabricIndex, name: str) -> tuple[int, ...]:
    info = index.port(name)
    return tuple(index.node(f"{info.host.name}:{p.name}") for p in info.nic.ports)


def _usable(index: FabricIndex, node: int) -> bool:
    out = index.out_resources[node]
    return len(out) == 1 and bool(index.res_usable[out[0]])


def _lanes(
    index: FabricIndex, src_ports: tuple[int, ...], dst_ports: tuple[int, ...]
) -> list[Lane]:
    """Port pairs that can carry a QP: same plane, NIC links up, a path between the leaves."""
    routing = index.routing
    lanes = []
    for s in src_ports:
        for d in dst_ports:
            if s == d or not (_usable(index, s) and _usable(index, d)):
                continue
            if index.plane[s] != index.plane[d]:
                continue
            if routing.path_count(index.leaf_of(s), index.leaf_of(d)):
                lanes.append((s, d))
    return lanes


def port_spread(fabric: Fabric, ends: Sequence[tuple[str, str]], rates: Sequence[float]) -> float:
    """The largest gap, over NICs and directions, between a NIC's most and least loaded port."""
    index = fabric.index
    tx: dict[int, float] = {}
    rx: dict[int, float] = {}
    nics: set[tuple[int, ...]] = set()
    for (src, dst), rate in zip(ends, rates, strict=True):
        s, d = index.node(src), index.node(dst)
        tx[s] = tx.get(s, 0.0) + rate
        rx[d] = rx.get(d, 0.0) + rate
        nics.add(_nic_ports(index, src))
        nics.add(_nic_ports(index, dst))
    spread = 0.0
    for ports in nics:
        if len(ports) > 1:
            for load in (tx, rx):
                values = [load.get(p, 0.0) for p in ports]
                spread = max(spread, max(values) - min(values))
    return spread


def balance_ports(fabric: Fabric, flows: Sequence[FlowLike]) -> BalanceResult:
    """Choose each flow's source and destination NIC ports (see the module docstring).

    A flow whose NICs have no usable lane keeps its ports and is listed in ``stranded``.
    Unknown NIC port names raise :class:`~topology.errors.UnknownNameError`. Cost: one pass
    over the QPs, each weighing its connection's lanes (4 for two dual-port NICs).
    """
    index = fabric.index
    by_connection: dict[_ConnectionKey, list[int]] = {}
    for i, f in enumerate(flows):
        key = (
            f.job,
            f.communicator,
            f.connection,
            _nic_ports(index, f.src),
            _nic_ports(index, f.dst),
        )
        by_connection.setdefault(key, []).append(i)
    order = sorted(
        by_connection.items(), key=lambda item: -sum(flows[i].rate for i in item[1])
    )  # stable: equal sizes keep their first-appearance order
    tx: dict[int, float] = {}
    rx: dict[int, float] = {}
    plane_load: dict[int, float] = {}
    ends: list[tuple[str, str]] = [(f.src, f.dst) for f in flows]
    stranded: list[int] = []
    for (_, _, _, src_ports, dst_ports), members in order:
        lanes = _lanes(index, src_ports, dst_ports)
        if not lanes:
            stranded.extend(members)
            continue
        used_src: dict[int, int] = {}
        used_dst: dict[int, int] = {}
        for i in members:
            rate = flows[i].rate
            costs = [
                (
                    max(used_src.get(s, 0), used_dst.get(d, 0)),
                    max(tx.get(s, 0.0), rx.get(d, 0.0)),
                    tx.get(s, 0.0) + rx.get(d, 0.0),
                    plane_load.get(int(index.plane[s]), 0.0),
                )
                for s, d in lanes
            ]
            s, d = lanes[costs.index(min(costs))]
            used_src[s] = used_src.get(s, 0) + 1
            used_dst[d] = used_dst.get(d, 0) + 1
            tx[s] = tx.get(s, 0.0) + rate
            rx[d] = rx.get(d, 0.0) + rate
            plane = int(index.plane[s])
            plane_load[plane] = plane_load.get(plane, 0.0) + rate
            ends[i] = (index.node_names[s], index.node_names[d])
    rates = [f.rate for f in flows]
    before = port_spread(fabric, [(f.src, f.dst) for f in flows], rates)
    return BalanceResult(
        ends=tuple(ends),
        moved=sum(e != (f.src, f.dst) for e, f in zip(ends, flows, strict=True)),
        stranded=tuple(sorted(stranded)),
        spread_before=before,
        spread_after=port_spread(fabric, ends, rates),
    )


def rebalanced(fabric: Fabric, flows: Sequence[F]) -> list[F]:
    """:func:`balance_ports` applied to dataclass flows (``dataclasses.replace``)."""
    result = balance_ports(fabric, flows)
    out: list[F] = []
    for flow, (src, dst) in zip(flows, result.ends, strict=True):
        same = (flow.src, flow.dst) == (src, dst)
        replaced: Any = flow if same else dataclasses.replace(flow, src=src, dst=dst)  # type: ignore[type-var]
        out.append(replaced)
    return out


def multi_ported(fabric: Fabric) -> bool:
    """True when some NIC has more than one port (dual-port or dual-plane): only then is
    there a choice to balance."""
    return any(len(nic.ports) > 1 for host in fabric.hosts for nic in host.nics)


@dataclass(frozen=True)
class JobsBalance:
    """What balancing changed: QPs moved to other ports, the port spread before and after."""

    moved: int
    spread_before: float
    spread_after: float


def balance_jobs(fabric: Fabric, flows: Sequence[F]) -> tuple[list[F], JobsBalance]:
    """:func:`rebalanced`, one job at a time: what the product calls (``c4p plan``, the
    controller's reconcile step) on fabrics with multi-port NICs.

    Why per job: jobs share no NIC, so their port loads are independent, and balancing each
    job alone keeps a job's ports a function of its own flows (and the links' states): a job
    that registers, changes or leaves never moves another job's QPs to other ports (the plane
    tie-break of :func:`balance_ports` would otherwise see every job's load)."""
    if not flows or not multi_ported(fabric):
        same = list(flows)
        return same, JobsBalance(0, 0.0, 0.0)
    by_job: dict[str, list[int]] = {}
    for i, f in enumerate(flows):
        by_job.setdefault(f.job, []).append(i)
    out: list[F] = list(flows)
    for members in by_job.values():
        for i, flow in zip(members, rebalanced(fabric, [flows[i] for i in members]), strict=True):
            out[i] = flow
    rates = [f.rate for f in flows]
    moved = sum((a.src, a.dst) != (b.src, b.dst) for a, b in zip(flows, out, strict=True))
    return out, JobsBalance(
        moved=moved,
        spread_before=port_spread(fabric, [(f.src, f.dst) for f in flows], rates),
        spread_after=port_spread(fabric, [(f.src, f.dst) for f in out], rates),
    )
