"""From job intents to flows: the connections each communication pattern opens.

Why: the flows C4P plans are not arbitrary; they follow from where ranks sit and how NCCL lays
out its collectives. This module is that derivation, kept in one place so that the planner, the
ECMP baseline and the evaluation all count the same flows.

The patterns (``n`` ranks in the communicator; each connection is repeated for every channel
and carried by ``qps_per_connection`` QPs, one flow each):

* **ring, rail layout**: one ring per rail over NIC *r* of each host, in rank order
  (``host k -> host k+1``, wrapping). ``H`` hosts x ``R`` rails gives ``H*R`` connections
  (``2`` per rail when ``H == 2``: both directions; none when ``H == 1``).
* **ring, flat layout**: one ring over the ranks in order; a hop between two ranks of one host
  goes over NVLink and opens no network connection. ``broadcast`` uses the chain without the
  closing hop.
* **tree**: binary trees in heap order (the parent of position ``i`` is ``(i-1)//2``), per rail
  or flat like rings; with ``trees: 2`` the second tree is built over the reversed order, so
  the leaves of one are the inner nodes of the other (NCCL's double binary tree). All-reduce
  opens both directions of every tree edge (reduce up, broadcast down); broadcast only down.
  The tree number is folded into the channel: ``channel = tree * channels + c``.
* **all-to-all**: every ordered pair of ranks on different hosts. ``rail_only``: only pairs on
  the same rail; NVLink forwards the rest (PXN), so such a connection carries the data of every
  rank of its source host (``Connection.pairs``).
* **explicit**: the listed rank pairs, each with its own ``qps`` and ``rate`` if given.

Dual-port NICs (dual-plane fabrics): QP ``g = channel * qps + q`` of a rank pair uses port
``g mod ports`` at both ends, so a pair's QPs and channels alternate between the two planes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from solver.errors import JobError
from solver.workload.flows import (
    Communicator,
    Connection,
    Flow,
    Workload,
    make_connection,
    make_flow,
)
from solver.workload.jobs import (
    Collective,
    CommunicatorSpec,
    JobsFile,
    JobSpec,
    Layout,
    Pattern,
    RankNic,
    checked_placements,
)
from topology.model import Fabric

MAX_FLOWS = 2_000_000
"""Refuse job sets that would make more flows than this (full all-to-all grows as n^2)."""


@dataclass(frozen=True)
class Edge:
    """A directed rank pair of a pattern, before channels and QPs are applied."""

    src: RankNic
    dst: RankNic
    tree: int = 0
    pairs: int = 1
    qps: int | None = None
    rate: float | None = None


def _edge(
    src: RankNic, dst: RankNic, tree: int, pairs: int, qps: int | None, rate: float | None
) -> Edge:
    """``Edge(src, dst, tree, pairs, qps, rate)`` as its constructor makes it: the fields in
    the instance's ``__dict__`` in field order (no ``__post_init__``; the tests hold the two to
    each other). Why: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, 2 us for these six, and a pattern makes one per rank pair
    (16,384 for a 16k-GPU ring or shuffled ring). The price: the instance holds a dict of its
    own (some 180 bytes more than the constructor's inline values; they live as long as the
    derivation)."""
    edge: Edge = object.__new__(Edge)
    edge.__dict__.update(src=src, dst=dst, tree=tree, pairs=pairs, qps=qps, rate=rate)
    return edge


def _groups(members: list[RankNic], layout: Layout) -> list[list[RankNic]]:
    if layout is Layout.FLAT:
        return [members]
    by_rail: dict[int, list[RankNic]] = {}
    for r in members:
        by_rail.setdefault(r.rail, []).append(r)
    return [by_rail[rail] for rail in sorted(by_rail)]


EdgeFields = tuple[RankNic, RankNic, int, int, int | None, float | None]
"""An :class:`Edge`'s fields as a plain tuple, in field order: ``(src, dst, tree, pairs, qps,
rate)``. Why: :func:`derive_workload` reads each pair's fields once and keeps no edge, so the
patterns yield tuples (some 60 ns each) and only :func:`pattern_edges` makes ``Edge`` records
of them (1 us each; a 16k-GPU ring or shuffled ring opens 16,384 pairs)."""


def _ring(members: list[RankNic], spec: CommunicatorSpec) -> Iterator[EdgeFields]:
    closing = spec.collective is not Collective.BROADCAST
    for group in _groups(members, spec.ring):
        m = len(group)
        if m < 2:
            continue
        hops = range(m) if closing and m > 2 else range(m - 1)
        for i in hops:
            yield (group[i], group[(i + 1) % m], 0, 1, None, None)
        if closing and m == 2:
            yield (group[1], group[0], 0, 1, None, None)


def _tree(members: list[RankNic], spec: CommunicatorSpec) -> Iterator[EdgeFields]:
    both = spec.collective is not Collective.BROADCAST
    for group in _groups(members, spec.ring):
        for t in range(spec.trees):
            order = group if t == 0 else group[::-1]
            for i in range(1, len(order)):
                parent, child = order[(i - 1) // 2], order[i]
                if both:
                    yield (child, parent, t, 1, None, None)
                yield (parent, child, t, 1, None, None)


def _all_to_all(members: list[RankNic], spec: CommunicatorSpec) -> Iterator[EdgeFields]:
    per_host: dict[str, int] = {}
    for r in members:
        per_host[r.host] = per_host.get(r.host, 0) + 1
    for a in members:
        for b in members:
            if a.host == b.host or (spec.rail_only and a.rail != b.rail):
                continue
            yield (a, b, 0, per_host[a.host] if spec.rail_only else 1, None, None)


def _explicit(ranks: tuple[RankNic, ...], spec: CommunicatorSpec) -> Iterator[EdgeFields]:
    for c in spec.connections:
        yield (ranks[c.src_rank], ranks[c.dst_rank], 0, 1, c.qps, c.rate)


def _pattern_fields(ranks: tuple[RankNic, ...], spec: CommunicatorSpec) -> list[EdgeFields]:
    """:func:`pattern_edges` as field tuples (:data:`EdgeFields`)."""
    members = list(ranks) if spec.ranks is None else [ranks[r] for r in spec.ranks]
    if spec.pattern is Pattern.RING:
        edges = _ring(members, spec)
    elif spec.pattern is Pattern.TREE:
        edges = _tree(members, spec)
    elif spec.pattern is Pattern.ALL_TO_ALL:
        edges = _all_to_all(members, spec)
    else:
        edges = _explicit(ranks, spec)
    return [e for e in edges if e[0].host != e[1].host]


def pattern_edges(ranks: tuple[RankNic, ...], spec: CommunicatorSpec) -> list[Edge]:
    """The directed rank pairs a communicator opens, NVLink hops (same host) left out."""
    return [_edge(*fields) for fields in _pattern_fields(ranks, spec)]


def _flow_count(ranks: tuple[RankNic, ...], spec: CommunicatorSpec) -> int:
    """Flows a communicator will make, counted before any is built (for :data:`MAX_FLOWS`)."""
    n = len(ranks) if spec.ranks is None else len(spec.ranks)
    if spec.pattern is Pattern.ALL_TO_ALL:
        per_channel = n * (n - 1) * spec.qps_per_connection
    elif spec.pattern is Pattern.EXPLICIT:
        per_channel = sum(c.qps or spec.qps_per_connection for c in spec.connections)
    else:
        per_channel = 2 * spec.trees * n * spec.qps_per_connection
    return per_channel * spec.channels


def _communicator(
    fabric: Fabric, job: JobSpec, spec: CommunicatorSpec, ranks: tuple[RankNic, ...]
) -> Communicator:
    members = list(ranks) if spec.ranks is None else [ranks[r] for r in spec.ranks]
    return Communicator(
        job=job.id,
        id=spec.id,
        pattern=spec.pattern,
        collective=spec.collective,
        size=len(members),
        trees=spec.trees if spec.pattern is Pattern.TREE else 1,
        priority=job.priority,
        line_rate_gbps=min(r.line_rate for r in members),
    )


def derive_workload(fabric: Fabric, jobs: JobsFile, source: str | None = None) -> Workload:
    """Check the jobs against the fabric, then build every flow, connection and communicator.

    Raises :class:`JobError` (with field paths) if the jobs do not fit the fabric or would
    make more than :data:`MAX_FLOWS` flows.
    """
    placed = checked_placements(fabric, jobs, source)
    estimate = sum(
        _flow_count(ranks, spec)
        for job, ranks in zip(jobs.jobs, placed, strict=True)
        for spec in job.communicators
    )
    if estimate > MAX_FLOWS:
        raise JobError([("jobs", f"would make about {estimate:,} flows (limit {MAX_FLOWS:,})")])
    flows: list[Flow] = []
    connections: list[Connection] = []
    communicators: list[Communicator] = []
    add_flow, add_connection = flows.append, connections.append
    for job, ranks in zip(jobs.jobs, placed, strict=True):
        job_id = job.id
        for spec in job.communicators:
            communicators.append(_communicator(fabric, job, spec, ranks))
            edges = _pattern_fields(ranks, spec)
            spec_id, spec_qps, spec_rate = spec.id, spec.qps_per_connection, spec.rate
            index = 0
            trees = spec.trees if spec.pattern is Pattern.TREE else 1
            for tree in range(trees):
                # One tree (every pattern but trees): all edges, without a filter per channel.
                in_tree = edges if trees == 1 else [e for e in edges if e[2] == tree]
                for c in range(spec.channels):
                    channel = tree * spec.channels + c
                    for src, dst, _, pairs, edge_qps, edge_rate in in_tree:
                        qps = edge_qps or spec_qps
                        rate = edge_rate or spec_rate
                        add_connection(
                            make_connection(
                                job_id, spec_id, index, src.rank, dst.rank, channel,
                                src.host, src.nic, dst.host, dst.nic, qps, pairs, tree,
                            )
                        )  # fmt: skip
                        src_ports, dst_ports = src.ports, dst.ports
                        for q in range(qps):
                            g = channel * qps + q
                            add_flow(
                                make_flow(
                                    job_id, spec_id, index, q,
                                    src_ports[g % len(src_ports)],
                                    dst_ports[g % len(dst_ports)],
                                    rate,
                                )
                            )  # fmt: skip
                        index += 1
    return Workload.build(flows, connections, communicators)


def flows_for_jobs(fabric: Fabric, jobs: JobsFile) -> list[Flow]:
    """The flows (one per QP) of every job, in job, communicator, connection, QP order."""
    return list(derive_workload(fabric, jobs).flows)
