"""The yardstick: how good an assignment of flows to paths is, for the links and for the jobs.

Why both views: the planner minimizes the worst link load, but an operator cares what the jobs
get. So an evaluation reports the links (load per directed resource, the worst switch-to-switch
link, how many are over capacity) and the jobs (max-min fair rates, the slowest rank pair of
each communicator, and the bus bandwidth that predicts), for any plan or for the ECMP baseline,
side by side.

Link figures. *Load* of a resource = sum of the ``rate`` (relative volume) of the flows on it.
*Utilization* = load / (capacity / reference line rate), the reference being the most common
NIC port speed: with equal speeds it is the number of rate-1 flows on the link, so ``1.0`` is
full and ``2.0`` a collision. Only switch-to-switch resources count: NIC links are fixed by the
endpoints and no plan can change them.

Rates. Weighted max-min fair rates (:mod:`solver.yardstick.fairness`) over *every* usable directed
resource, NIC links included, in Gb/s; weight = ``flow.rate``; a link that is down has capacity
0. A flow without a path (unreachable) gets 0.

Rank pairs. NCCL splits a connection's data evenly over its channels and QPs (by weight), so a
rank pair (per tree, for trees) finishes when its slowest QP does. Its rate is therefore
``total weight x min over its flows of (rate / weight)`` divided by ``Connection.pairs`` (the
rank pairs one rail-only all-to-all connection carries), not the sum of its flows' rates
(``sum_gbps``, also reported), which would hide a collision on one QP of several.

Bus bandwidth (nccl-tests: ``busbw = algbw * factor``, ``algbw = bytes / time``), from the
slowest rank pair rate ``m`` of a communicator of ``n`` ranks:

* ring (all-reduce, all-gather, reduce-scatter, broadcast): every hop carries the same data and
  the ring moves at its slowest hop, so ``busbw = m``;
* all-to-all: each rank sends ``S/n`` to each peer, so ``time = (S/n) / m``, ``algbw = n*m`` and
  ``busbw = algbw * (n-1)/n = (n-1) * m``;
* tree: each tree carries ``1/trees`` of the data at its slowest edge, so ``algbw = trees * m``,
  and ``busbw = 2(n-1)/n * trees * m`` for all-reduce (``trees * m`` for broadcast);
* explicit: ``busbw = m``.

That is bus bandwidth *per NIC* (per rail): the fraction reported is ``busbw / line rate`` of
the communicator's slowest NIC (sum of its port speeds), so a collision-free rail ring on a
non-blocking fabric predicts 1.0 and one collision on every ring 0.5. (nccl-tests' figure for an
``R``-rail host is ``R`` times the per-NIC one.) A job's figure is its slowest communicator's.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from solver.workload.flows import Communicator, Workload
from solver.workload.jobs import Collective, Pattern
from solver.yardstick.fairness import Incidence, max_min_fair_rates, resource_load
from topology.index import FloatArray, IntArray
from topology.model import Fabric

Path = Sequence[int] | None
OVER_TOLERANCE = 1e-9


@dataclass(frozen=True)
class LinkLoad:
    """One directed switch-to-switch resource and what is on it."""

    resource: int
    name: str
    capacity_gbps: float
    load: float
    utilization: float


@dataclass(frozen=True)
class PairResult:
    """A rank pair of a communicator (one tree of it, for trees), summed over channels and QPs."""

    job: str
    communicator: str
    src_rank: int
    dst_rank: int
    tree: int
    flows: int
    rate_gbps: float
    sum_gbps: float


@dataclass(frozen=True)
class CommunicatorResult:
    job: str
    communicator: str
    pattern: str
    collective: str
    ranks: int
    connections: int
    flows: int
    unreachable: int
    slowest_pair: tuple[int, int] | None
    slowest_rate_gbps: float | None
    busbw_gbps: float | None
    line_rate_gbps: float
    busbw_fraction: float | None
    """``None`` when the communicator has no network traffic (all its ranks on one host)."""


@dataclass(frozen=True)
class JobResult:
    job: str
    priority: int
    communicators: int
    flows: int
    unreachable: int
    slowest_communicator: str | None
    slowest_rate_gbps: float | None
    busbw_gbps: float | None
    line_rate_gbps: float | None
    busbw_fraction: float | None


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Everything known about one assignment; ``to_dict`` gives the JSON the CLI prints."""

    reference_line_rate_gbps: float
    max_link_load: float
    max_link_utilization: float
    links_over_capacity: int
    hottest: tuple[LinkLoad, ...]
    unreachable: tuple[str, ...]
    jobs: tuple[JobResult, ...]
    communicators: tuple[CommunicatorResult, ...]
    pair_table: _PairTable = field(repr=False)
    flow_rates_gbps: FloatArray = field(repr=False)
    resource_load: FloatArray = field(repr=False)

    @cached_property
    def pairs(self) -> tuple[PairResult, ...]:
        """Every rank pair's result, made when first read: ``c4p plan`` never reads them, and
        at 131k GPUs making them was 131,072 objects per evaluation (0.3-0.5 s)."""
        return tuple(self.pair_table.results())

    @property
    def min_busbw_fraction(self) -> float | None:
        values = [j.busbw_fraction for j in self.jobs if j.busbw_fraction is not None]
        return min(values) if values else None

    def to_dict(self, *, pairs: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reference_line_rate_gbps": self.reference_line_rate_gbps,
            "max_link_load": self.max_link_load,
            "max_link_utilization": self.max_link_utilization,
            "links_over_capacity": self.links_over_capacity,
            "min_busbw_fraction": self.min_busbw_fraction,
            "flows": int(len(self.flow_rates_gbps)),
            "unreachable": list(self.unreachable),
            "hottest": [asdict(h) for h in self.hottest],
            "jobs": [asdict(j) for j in self.jobs],
            "communicators": [asdict(c) for c in self.communicators],
        }
        if pairs:
            out["pairs"] = [asdict(p) for p in self.pairs]
        return out


def switch_resources(fabric: Fabric) -> IntArray:
    """Directed resources between two switches (the ones a plan can change)."""
    index = fabric.index
    mask = (index.res_src < index.num_switches) & (index.res_dst < index.num_switches)
    return np.flatnonzero(mask)


def reference_line_rate(fabric: Fabric) -> float:
    """The most common NIC port speed (Gb/s) of the cabled ports; the fastest link if none."""
    index = fabric.index
    uplinks = index.port_uplinks[index.num_switches :]
    speeds = index.res_capacity[uplinks[uplinks >= 0]]
    if speeds.size:
        # The most common speed; among equally common ones the first met (as Counter would).
        values, first, counts = np.unique(speeds, return_index=True, return_counts=True)
        common = np.flatnonzero(counts == counts.max())
        return float(values[common[np.argmin(first[common])]])
    return float(np.max(index.res_capacity, initial=1.0))


def busbw_factor(comm: Communicator) -> float:
    """``busbw / slowest rank pair rate`` for a communicator (see the module docstring)."""
    n = comm.size
    if comm.pattern is Pattern.ALL_TO_ALL:
        return float(n - 1)
    if comm.pattern is Pattern.TREE:
        per_tree = 2 * (n - 1) / n if comm.collective is Collective.ALL_REDUCE else 1.0
        return per_tree * comm.trees
    return 1.0


_RATE = operator.attrgetter("rate")
"""A flow's rate, read by ``map`` (no Python step per flow)."""


def evaluate(
    fabric: Fabric, workload: Workload, paths: Sequence[Path], *, top: int = 10
) -> Evaluation:
    """Evaluate ``paths[i]`` (resources; ``None`` or empty: unreachable) for flow ``i``."""
    flows = workload.flows
    if len(paths) != len(flows):
        raise ValueError(f"{len(paths)} paths for {len(flows)} flows")
    index = fabric.index
    incidence = Incidence.from_paths(paths)
    weights = np.fromiter(map(_RATE, flows), np.float64, count=len(flows))
    capacity = np.where(index.res_usable, index.res_capacity, 0.0)
    rates = max_min_fair_rates(incidence, weights, capacity)
    load = resource_load(incidence, weights, index.num_resources)
    reachable = incidence.lengths > 0

    reference = reference_line_rate(fabric)
    inner = switch_resources(fabric)
    utilization = load[inner] / (index.res_capacity[inner] / reference)
    order = np.argsort(-utilization, kind="stable")[:top]
    hottest = tuple(
        LinkLoad(
            int(inner[k]),
            index.resource_name(int(inner[k])),
            float(index.res_capacity[inner[k]]),
            float(load[inner[k]]),
            float(utilization[k]),
        )
        for k in order
        if load[inner[k]] > 0
    )
    pairs = _pairs(workload, rates, weights)
    comm_results = _communicators(workload, pairs, reachable)
    return Evaluation(
        reference_line_rate_gbps=reference,
        max_link_load=float(np.max(load[inner], initial=0.0)),
        max_link_utilization=float(np.max(utilization, initial=0.0)),
        links_over_capacity=int(np.count_nonzero(utilization > 1.0 + OVER_TOLERANCE)),
        hottest=hottest,
        unreachable=tuple(flows[i].id for i in np.flatnonzero(~reachable).tolist()),
        jobs=_jobs(workload, comm_results),
        communicators=tuple(comm_results),
        pair_table=pairs,
        flow_rates_gbps=rates,
        resource_load=load,
    )


@dataclass(frozen=True, eq=False)
class _Grouping:
    """How a workload's flows group into rank pairs and communicators (paths play no part).

    Why cached: ``c4p plan`` evaluates ECMP and the plan over the same workload, and at 16k
    GPUs building these keys was most of an evaluation.
    """

    keys: list[tuple[str, str, int, int, int]]
    """Per rank pair: (job, communicator, src rank, dst rank, tree), in first-seen order."""
    pair_of_flow: IntArray
    divisor: FloatArray
    comm_index: dict[tuple[str, str], int]
    """Communicator keys (job, id) numbered: the numbers the arrays below use."""
    comm_of_pair: IntArray
    comm_of_flow: IntArray
    connections: IntArray
    """Per communicator key: its connections and flows."""
    flows: IntArray


_PAIR_KEY = operator.attrgetter("job", "communicator", "src_rank", "dst_rank", "tree")
_COMM_KEY = operator.attrgetter("job", "communicator")
_PAIRS = operator.attrgetter("pairs")
_COMM_OF_PAIR = operator.itemgetter(0, 1)

_GROUPINGS: weakref.WeakKeyDictionary[Workload, _Grouping] = weakref.WeakKeyDictionary()


def _grouping(workload: Workload) -> _Grouping:
    found = _GROUPINGS.get(workload)
    if found is not None:
        return found
    # Read with attrgetter, map and dicts (C loops, no Python step per connection): the loop
    # over 131,072 connections at 131k GPUs was 0.3 s of every first evaluation.
    conns = workload.connections
    keys = list(map(_PAIR_KEY, conns))
    key_of = {key: k for k, key in enumerate(dict.fromkeys(keys))}
    conn_pair = np.fromiter(map(key_of.__getitem__, keys), np.int64, count=len(keys))
    # Each pair's divisor is its first connection's ``pairs``: a dict filled last to first
    # keeps the first connection of each key.
    first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))
    every_divisor = np.fromiter(map(_PAIRS, conns), np.float64, count=len(conns))
    firsts = np.fromiter(map(first.__getitem__, key_of), np.int64, count=len(key_of))
    pair_of_flow = conn_pair[workload.flow_connection]
    # Communicators by (job, id): those of the connections, then any without connections.
    comm_keys = list(map(_COMM_KEY, conns))
    comm_index: dict[tuple[str, str], int] = {
        key: i for i, key in enumerate(dict.fromkeys(comm_keys))
    }
    comm_of_conn = np.fromiter(
        map(comm_index.__getitem__, comm_keys), np.int64, count=len(comm_keys)
    )
    for comm in workload.communicators:
        comm_index.setdefault((comm.job, comm.id), len(comm_index))
    comm_of_pair = np.fromiter(
        map(comm_index.__getitem__, map(_COMM_OF_PAIR, key_of)), np.int64, count=len(key_of)
    )
    comm_of_flow = comm_of_conn[workload.flow_connection]
    found = _Grouping(
        keys=list(key_of),
        pair_of_flow=pair_of_flow,
        divisor=every_divisor[firsts],
        comm_index=comm_index,
        comm_of_pair=comm_of_pair,
        comm_of_flow=comm_of_flow,
        connections=np.bincount(comm_of_conn, minlength=len(comm_index)),
        flows=np.bincount(comm_of_flow, minlength=len(comm_index)),
    )
    _GROUPINGS[workload] = found
    return found


@dataclass(frozen=True, eq=False)
class _PairTable:
    """Every rank pair's figures as columns (what :class:`PairResult` objects are made from)."""

    keys: list[tuple[str, str, int, int, int]]
    flows: IntArray
    rate: FloatArray
    """The pair's rate (see the module docstring), Gb/s."""
    total: FloatArray
    """The sum of its flows' rates, Gb/s."""

    def results(self) -> list[PairResult]:
        return [
            _pair_result(job, comm, src, dst, tree, n, rate, total)
            for (job, comm, src, dst, tree), n, rate, total in zip(
                self.keys, self.flows.tolist(), self.rate.tolist(), self.total.tolist(),
                strict=True,
            )
        ]  # fmt: skip


def _pairs(workload: Workload, rates: FloatArray, weights: FloatArray) -> _PairTable:
    """Group flows into rank pairs and compute each pair's rate (see the module docstring)."""
    grouping = _grouping(workload)
    pair_of_flow = grouping.pair_of_flow
    count = len(grouping.keys)
    total_weight = np.bincount(pair_of_flow, weights=weights, minlength=count)
    total_rate = np.bincount(pair_of_flow, weights=rates, minlength=count)
    flows = np.bincount(pair_of_flow, minlength=count)
    least_share = np.full(count, np.inf)
    np.minimum.at(least_share, pair_of_flow, rates / weights)
    effective = total_weight * least_share / grouping.divisor
    return _PairTable(grouping.keys, flows, effective, total_rate.astype(np.float64, copy=False))


def _pair_result(
    job: str,
    communicator: str,
    src_rank: int,
    dst_rank: int,
    tree: int,
    flows: int,
    rate_gbps: float,
    sum_gbps: float,
) -> PairResult:
    """``PairResult(...)`` as its constructor makes it: the fields in the instance's
    ``__dict__``, in field order (a frozen dataclass has no other state; PairResult has no
    ``__post_init__``, which the tests check with the fields' names).

    Why: a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
    (the class's own refuses), 1.9 us for these eight; one ``dict.update`` is 0.8 us, and
    ``c4p plan`` makes one per rank pair twice (ECMP's and the plan's evaluation: 32,768 at
    16k GPUs). The price: the instance holds a dict of its own (184 bytes more than the
    constructor's inline values, some 6 MB at 16k GPUs; attribute reads ~10% slower)."""
    pair: PairResult = object.__new__(PairResult)
    pair.__dict__.update(
        job=job,
        communicator=communicator,
        src_rank=src_rank,
        dst_rank=dst_rank,
        tree=tree,
        flows=flows,
        rate_gbps=rate_gbps,
        sum_gbps=sum_gbps,
    )
    return pair


def _communicators(
    workload: Workload,
    pairs: _PairTable,
    reachable: np.ndarray[Any, np.dtype[np.bool_]],
) -> list[CommunicatorResult]:
    grouping = _grouping(workload)
    count = len(grouping.comm_index)
    # Each communicator's slowest pair: the first (in pair order) of the lowest rate.
    rate = pairs.rate
    order = np.lexsort((np.arange(len(rate)), rate, grouping.comm_of_pair))
    firsts = np.flatnonzero(np.diff(grouping.comm_of_pair[order], prepend=-1) != 0)
    slowest_of: dict[int, int] = {
        int(grouping.comm_of_pair[order[i]]): int(order[i]) for i in firsts.tolist()
    }
    lost = np.bincount(grouping.comm_of_flow[~reachable], minlength=count).tolist()
    conns, flow_count = grouping.connections.tolist(), grouping.flows.tolist()
    results: list[CommunicatorResult] = []
    for comm in workload.communicators:
        i = grouping.comm_index[(comm.job, comm.id)]
        k = slowest_of.get(i)
        slowest = None
        if k is not None:
            _, _, src_rank, dst_rank, _ = pairs.keys[k]
            slowest = (src_rank, dst_rank, float(rate[k]))
        busbw = busbw_factor(comm) * slowest[2] if slowest else None
        results.append(
            CommunicatorResult(
                job=comm.job,
                communicator=comm.id,
                pattern=comm.pattern.value,
                collective=comm.collective.value,
                ranks=comm.size,
                connections=conns[i],
                flows=flow_count[i],
                unreachable=lost[i],
                slowest_pair=slowest[:2] if slowest else None,
                slowest_rate_gbps=slowest[2] if slowest else None,
                busbw_gbps=busbw,
                line_rate_gbps=comm.line_rate_gbps,
                busbw_fraction=busbw / comm.line_rate_gbps if busbw is not None else None,
            )
        )
    return results


def _jobs(workload: Workload, comms: list[CommunicatorResult]) -> tuple[JobResult, ...]:
    priority: dict[str, int] = {}
    for c in workload.communicators:
        priority.setdefault(c.job, c.priority)
    out: list[JobResult] = []
    for job, prio in priority.items():
        mine = [c for c in comms if c.job == job]
        rated = [c for c in mine if c.busbw_fraction is not None]
        worst = min(rated, key=lambda c: c.busbw_fraction or 0.0) if rated else None
        rates = [c.slowest_rate_gbps for c in rated if c.slowest_rate_gbps is not None]
        out.append(
            JobResult(
                job=job,
                priority=prio,
                communicators=len(mine),
                flows=sum(c.flows for c in mine),
                unreachable=sum(c.unreachable for c in mine),
                slowest_communicator=worst.communicator if worst else None,
                slowest_rate_gbps=min(rates) if rates else None,
                busbw_gbps=worst.busbw_gbps if worst else None,
                line_rate_gbps=worst.line_rate_gbps if worst else None,
                busbw_fraction=worst.busbw_fraction if worst else None,
            )
        )
    return tuple(out)
