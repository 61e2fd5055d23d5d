"""Weighted max-min fair rates by progressive filling, and link loads, with numpy.

Why max-min fairness: RoCE congestion control (DCQCN) shares a congested link roughly equally
among the QPs crossing it, and a QP slowed on one link leaves its share on the others to the
rest. The max-min fair allocation is the steady state of that sharing, so it predicts what each
flow gets once paths are fixed: a plan with one collision and a plan with none differ exactly
where a job notices.

The algorithm (progressive filling, weighted): all unfrozen flows grow together, flow ``f`` at
``weight[f] * level``. A resource saturates at the level ``(capacity - frozen load) / (weight
of its unfrozen flows)``; the lowest such level is reached first, every flow crossing a
resource saturated there is frozen at it, and filling continues until every flow is frozen.
Each round costs numpy work over the entries of the flow-resource incidence (CSR) of the
flows not yet frozen and over the live resources, and the number of rounds is the number of
distinct bottleneck levels, so tens of thousands of flows take milliseconds.

The certificate of the result (checked by the tests): no resource is over capacity, and every
flow crosses a saturated resource on which its ``rate / weight`` is the largest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import cast

import numpy as np

from topology.index import BoolArray, FloatArray, IntArray

RELATIVE_TOLERANCE = 1e-9
"""Levels within this relative distance of the lowest are reached in the same round."""


@dataclass(frozen=True, eq=False)
class Incidence:
    """Which resources each flow crosses, in CSR form: flow ``f`` uses
    ``indices[indptr[f]:indptr[f+1]]``. A flow with no resources has no path (unreachable)."""

    indptr: IntArray
    indices: IntArray

    @property
    def num_flows(self) -> int:
        return len(self.indptr) - 1

    @property
    def lengths(self) -> IntArray:
        return np.diff(self.indptr)

    @property
    def rows(self) -> IntArray:
        """The flow of every entry of ``indices``."""
        return np.repeat(np.arange(self.num_flows, dtype=np.int64), self.lengths)

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int] | None]) -> Incidence:
        """Paths as resource sequences; ``None`` or empty for a flow without a path.

        Read with ``map`` and ``chain`` (C iterators) where no path is ``None``, the usual
        case: a generator step per resource was 30 ms per call at 16k GPUs."""
        rows = cast(Sequence[Sequence[int]], paths)  # checked just below
        if None in paths:
            rows = [p if p else () for p in paths]
        lengths = np.fromiter(map(len, rows), np.int64, count=len(rows))
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        indices = np.fromiter(chain.from_iterable(rows), np.int64, count=int(indptr[-1]))
        return cls(indptr, indices)


def resource_load(incidence: Incidence, weights: FloatArray, num_resources: int) -> FloatArray:
    """Sum of the weights of the flows on each resource (a flow counts once per resource)."""
    return np.bincount(
        incidence.indices, weights=weights[incidence.rows], minlength=num_resources
    ).astype(np.float64)


def max_min_fair_rates(
    incidence: Incidence, weights: FloatArray, capacity: FloatArray
) -> FloatArray:
    """Weighted max-min fair rate of every flow (same unit as ``capacity``).

    Flows without resources get rate 0 (they cannot send). ``weights`` must be positive;
    ``capacity`` non-negative (0 for a link that is down: every flow on it gets 0).
    """
    num_flows = incidence.num_flows
    weights = np.asarray(weights, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    if weights.shape != (num_flows,):
        raise ValueError(f"weights: expected {num_flows} values, got shape {weights.shape}")
    if num_flows and not (weights > 0).all():
        raise ValueError("weights must all be positive")
    if (capacity < 0).any():
        raise ValueError("capacity must be non-negative")
    rows = incidence.rows
    cols = incidence.indices
    num_resources = len(capacity)
    level = np.zeros(num_flows, dtype=np.float64)
    active: BoolArray = incidence.lengths > 0
    frozen_load = np.zeros(num_resources, dtype=np.float64)
    active_weight = np.bincount(
        cols, weights=weights[rows] * active[rows], minlength=num_resources
    ).astype(np.float64)
    threshold = RELATIVE_TOLERANCE * np.maximum(weights.min(initial=np.inf), 1e-300)
    # Each round reads only what can still change, in the order the whole arrays had, so
    # every sum is the same sum (an ECMP baseline at 16k GPUs is some 85 rounds): the entries
    # of unfrozen flows, the live resources, and the resources the round's frozen flows
    # cross (their per-resource sums by bincount, over the same entries in the same order).
    rows, cols = rows[active[rows]], cols[active[rows]]
    saturated = np.zeros(num_resources, dtype=np.bool_)
    # A resource's active weight only falls (frozen flows' weights are taken off; a hit
    # resource's is set to 0, below the threshold), so the live resources of a round are
    # those of the round before still above it: filtered, not found again among all
    # resources (98,304 at 16k GPUs, some 85 rounds for an ECMP baseline).
    live = np.flatnonzero(active_weight > threshold)
    while rows.size:
        live = live[active_weight[live] > threshold]
        headroom = np.maximum(capacity[live] - frozen_load[live], 0.0)
        reach = headroom / active_weight[live]
        if not reach.size:  # cannot happen while a flow is active; a guard
            raise AssertionError("active flows but no live resource")
        lowest = float(reach.min())
        hit = live[reach <= lowest * (1 + RELATIVE_TOLERANCE) + 1e-300]
        saturated[hit] = True
        newly = np.zeros(num_flows, dtype=np.bool_)
        newly[rows[saturated[cols]]] = True
        saturated[hit] = False
        level[newly] = lowest
        active &= ~newly
        entries = newly[rows]
        touched, flows_of = cols[entries], rows[entries]
        crossed, bins = np.unique(touched, return_inverse=True)
        share = weights[flows_of]
        frozen_load[crossed] += np.bincount(bins, weights=share * lowest, minlength=crossed.size)
        active_weight[crossed] -= np.bincount(bins, weights=share, minlength=crossed.size)
        active_weight[hit] = 0.0  # exactly, whatever rounding left behind
        rows, cols = rows[~entries], cols[~entries]
    return level * weights


def bottleneck_certificate(
    incidence: Incidence,
    weights: FloatArray,
    capacity: FloatArray,
    rates: FloatArray,
    tolerance: float = 1e-6,
) -> list[str]:
    """What is wrong with ``rates`` as a weighted max-min fair allocation (empty if nothing).

    Checks that no resource is over capacity and that every flow with a path crosses a
    saturated resource where its ``rate / weight`` is the largest of the flows there.
    """
    problems: list[str] = []
    num_resources = len(capacity)
    load = resource_load(incidence, rates, num_resources)
    scale = max(float(np.max(capacity, initial=0.0)), 1.0)
    over = np.flatnonzero(load > capacity + tolerance * scale)
    problems.extend(f"resource {r}: load {load[r]} > capacity {capacity[r]}" for r in over)
    share = rates / weights
    top = np.full(num_resources, -np.inf)
    np.maximum.at(top, incidence.indices, share[incidence.rows])
    saturated = load >= capacity - tolerance * scale
    for f in range(incidence.num_flows):
        res = incidence.indices[incidence.indptr[f] : incidence.indptr[f + 1]]
        if res.size == 0:
            continue
        ok = saturated[res] & (share[f] >= top[res] - tolerance * scale)
        if not ok.any():
            problems.append(f"flow {f}: no saturated resource where it has the largest share")
    return problems
