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
Each round costs numpy work in proportion to what it freezes (the saturated resources' flows
and those flows' resources) plus a window of the lowest-reaching resources (:func:`_fill`), and
the number of rounds is the number of distinct bottleneck levels: an ECMP baseline at 131,072
GPUs (262,144 flows, some 5,700 levels) takes about a second, where reading the whole arrays
every round took 25 s.

The certificate of the result (checked by the tests): no resource is over capacity, and every
flow crosses a saturated resource on which its ``rate / weight`` is the largest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import cast

import numpy as np

from topology.arrays import distinct, spans
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
    return _fill(incidence, weights, capacity, WINDOW)


WINDOW = 4096
"""How many of the lowest-reaching resources a round looks at (see :func:`_fill`)."""

DENSE = 8
"""A round whose entries exceed 1/DENSE of the flows (or resources) marks every flow (sums
over every resource) instead of sorting its own: a plan without collisions freezes most
flows in one or two rounds."""


def _fill(
    incidence: Incidence, weights: FloatArray, capacity: FloatArray, window_size: int
) -> FloatArray:
    """Progressive filling, each round touching only what it changes.

    Every round computes the same floats as filling over the whole arrays (the test's
    reference): a resource's *reach* (the level at which it saturates, ``headroom / active
    weight``) is kept per resource and recomputed only where a round changed the inputs, and a
    round's frozen flows add their loads in the incidence's own order, so every sum is the same
    sum. What is new is how little a round reads, because at 131k GPUs an ECMP baseline has
    some 5,700 distinct levels and the whole-array round cost 10 ms:

    * the round's lowest reach comes from a *window*, the resources reaching at most ``top``:
      a reach never falls (freezing flows at the lowest level ``L`` turns ``h / a >= L`` into
      ``(h - wL) / (a - w) >= h / a``), so no resource outside the window can come below
      ``top``, and while the window's lowest (and the tolerance above it) stays at or below
      ``top`` it is the lowest of all. When it does not, the window is built again from every
      live resource (``window_size`` of the lowest);
    * the flows frozen come from the saturated resources' own entries (the incidence
      transposed), and their loads from their own entries: work in proportion to what freezes.
    """
    num_flows = incidence.num_flows
    num_resources = len(capacity)
    indptr, cols = incidence.indptr, incidence.indices
    lengths = incidence.lengths
    rows = incidence.rows
    level = np.zeros(num_flows, dtype=np.float64)
    active: BoolArray = lengths > 0
    frozen_load = np.zeros(num_resources, dtype=np.float64)
    active_weight = np.bincount(
        cols, weights=weights[rows] * active[rows], minlength=num_resources
    ).astype(np.float64)
    threshold = RELATIVE_TOLERANCE * np.maximum(weights.min(initial=np.inf), 1e-300)
    # The incidence transposed: the flows crossing resource r, entry by entry.
    flows_on = rows[np.argsort(cols, kind="stable")]
    on_ptr = np.zeros(num_resources + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=num_resources), out=on_ptr[1:])
    reach = np.full(num_resources, np.inf)
    live = np.flatnonzero(active_weight > threshold)
    reach[live] = np.maximum(capacity[live] - frozen_load[live], 0.0) / active_weight[live]
    remaining = int(np.count_nonzero(active))
    window = np.zeros(0, dtype=np.int64)
    top = -np.inf
    while remaining:
        seen = reach[window]
        # A resource whose flows have all frozen reaches at infinity: out of the window, even
        # when ``top`` is infinite (a window of every live resource), or a round would "hit"
        # it, freeze nothing and repeat forever.
        keep = (seen <= top) & (seen < np.inf)
        window, seen = window[keep], seen[keep]
        lowest = float(seen.min()) if seen.size else np.inf
        bound = lowest * (1 + RELATIVE_TOLERANCE) + 1e-300
        if not seen.size or bound > top:
            live = np.flatnonzero(reach < np.inf)
            if not live.size:  # cannot happen while a flow is active; a guard
                raise AssertionError("active flows but no live resource")
            seen = reach[live]
            lowest = float(seen.min())
            bound = lowest * (1 + RELATIVE_TOLERANCE) + 1e-300
            top = bound
            if live.size > window_size:
                top = max(top, float(np.partition(seen, window_size)[window_size]))
            else:
                top = np.inf
            keep = seen <= top
            window, seen = live[keep], seen[keep]
        hit = window[seen <= bound]
        crossing = flows_on[spans(on_ptr[hit], on_ptr[hit + 1] - on_ptr[hit])]
        if crossing.size * DENSE > num_flows:  # a big round: a mark per flow, no sort
            marked = np.zeros(num_flows, dtype=np.bool_)
            marked[crossing] = True
            newly = np.flatnonzero(marked & active)
        else:
            newly = distinct(crossing[active[crossing]])  # not np.unique: see topology.arrays
        level[newly] = lowest
        active[newly] = False
        remaining -= newly.size
        counts = lengths[newly]
        touched = cols[spans(indptr[newly], counts)]
        share = np.repeat(weights[newly], counts)
        # Per-resource sums over the same entries in the same order either way (bincount adds
        # each bin's entries in input order): by the round's own resources, or, for a big
        # round, over every resource without sorting.
        if touched.size * DENSE > num_resources:
            crossed = np.flatnonzero(np.bincount(touched, minlength=num_resources))
            frozen_load[crossed] += np.bincount(
                touched, weights=share * lowest, minlength=num_resources
            )[crossed]
            active_weight[crossed] -= np.bincount(touched, weights=share, minlength=num_resources)[
                crossed
            ]
        else:
            crossed, bins = np.unique(touched, return_inverse=True)
            frozen_load[crossed] += np.bincount(
                bins, weights=share * lowest, minlength=crossed.size
            )
            active_weight[crossed] -= np.bincount(bins, weights=share, minlength=crossed.size)
        active_weight[hit] = 0.0  # exactly, whatever rounding left behind
        # Every active flow on a hit resource froze this round, so none is live any more. Said
        # here for all of them, not only through ``crossed``: a resource whose flows had all
        # frozen before but whose weight kept a rounding residue above the threshold reaches
        # (hugely) late, comes up as the lowest when nothing else is left, freezes no flow,
        # and would otherwise be hit again forever.
        reach[hit] = np.inf
        alive = active_weight[crossed] > threshold
        still, gone = crossed[alive], crossed[~alive]
        reach[gone] = np.inf
        reach[still] = np.maximum(capacity[still] - frozen_load[still], 0.0) / active_weight[still]
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
