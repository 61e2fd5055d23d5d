"""Fast path choice for equal-rate flows on a 3-tier fat-tree: two rounds of balanced colouring.

Why: CP-SAT over every (flow, path) pair of a 3-tier fabric is slow at thousands of flows, yet the
fat-tree's structure makes most instances colouring problems solved exactly in milliseconds. The
planner calls this for that structure and keeps CP-SAT for what it cannot prove.

**Structure** (:func:`analyse`, recognised in :mod:`solver.exact.treeshape`): pods of leaves and
``A`` aggs, each leaf cabled to every agg of its pod; ``C = A*G`` cores in ``A`` groups of ``G``;
agg ``j`` of every pod cabled to exactly the cores of group ``j``; every switch link up, one speed.
Between leaves ``s != t`` of a pod a flow picks an agg index ``j``; across pods, ``j`` and a core
``g`` of group ``j``. Link ``s -> agg j`` carries the flows of ``s`` coloured ``j``; agg ``(p,j) ->
core (j,g)`` the cross-pod flows of pod ``p`` coloured ``(j,g)``; links down mirror these.

**Bound.** Leaf ``s`` spreads its ``d_s`` cross-leaf flows out (in) over ``A`` links, pod ``p`` its
``D_p`` cross-pod flows out (in) over ``C`` agg-core links: every plan loads some link with ``K =
max(ceil(Δ/A), ceil(Π/C))`` flows or more (``Δ``, ``Π``: the largest ``d_s``, ``D_p``).

**Stage 2** (core in group). If each pod has ``D_pj <= G*K`` cross-pod flows coloured ``j`` (both
ways), colouring that pod multigraph with ``G`` colours, at most ``K`` per pod and colour (the split
argument of :mod:`solver.exact.coloring`), loads every agg-core link with ``K`` at most.

**Theorem 1 (leaf-balanced).** Colour the leaf multigraph with ``A`` colours equitably (``floor`` or
``ceil(d/A) <= K`` flows per leaf and colour). Leaf ``s`` adds ``<= min(c_s, K)`` (``c_s``: its
cross-pod flows) to ``D_pj``, so if ``sum over s in p of min(c_s, K) <= G*K`` for every pod both
ways, the plan reaches ``K``: optimal. That holds whenever a pod has at most ``G`` leaves (aggs with
as many core links as leaf links): every non-blocking fat-tree, ``k``-ary and
``fat_tree_for_gpus`` ones included.

**Theorem 2 (pod-balanced).** Source side: sets ``X_s`` (cross-pod flows out of leaf ``s``) nested
in ``P_p`` (out of pod ``p``), and ``I_s`` (from ``s`` to another leaf of its pod); the destination
side mirrors it. Both sides laminar, halving ``n`` colours into ``n1 + n2`` is a circulation
``source -> P_p -> X_s -> flows -> X'_t -> P'_q -> sink`` (``I_s``, ``I'_t`` hang off source and
sink) with throughput bounds ``floor``/``ceil`` of each set's share ``d*n1/n``. Sending ``n1/n`` of
every flow meets them and network matrices are totally unimodular, so an integral circulation
exists; recursing as in :mod:`solver.exact.coloring`, each set ends with ``floor`` or
``ceil(|set|/A)`` per colour. So ``D_pj <= ceil(D_p/A) <= G*ceil(D_p/C)`` and a leaf link carries
``<= ceil(c_s/A) + ceil(i_s/A) <= ceil(d_s/A) + 1`` (``i_s``: intra-pod flows): within ``K + 1``,
and at ``K`` when every leaf has ``ceil(c_s/A) + ceil(i_s/A) <= K`` both ways, e.g. when no flow
stays in a pod.

**Limits.** Leaf totals with pods make four pairwise crossing families, not totally unimodular,
and ``K`` is not always attainable: pods ``{0,1}``, ``{2,3}``, ``A = 2``, ``G = 1``, flows ``0<->1,
2<->3, 0->2, 1->3, 2->1, 3->0`` have ``K = 1`` and optimum 2 (leaf 0 and pod 0 put ``0->1`` and
``1->3`` on one agg, leaves 1 and 2 then put ``2->3`` there too, both into leaf 3). So
:func:`assign_fat_tree` runs Theorem 1, and if it misses ``K`` Theorem 2, then two heuristic passes
(each method in cap mode seeded with the other's colours), keeping the best: exact under either
theorem's condition, else within ``K + 1``; ``optimal`` tells which.

**Stable re-planning.** With ``previous`` paths, splits use caps (``[max(0, d - n2*cap), min(d,
n1*cap)]``, still met by the proportional flow) and cost ``-1`` per flow staying in the half of its
previous choice, ``+1`` per flow pulled into it, as
:func:`solver.exact.coloring.assign_spines_stable`. Caps: ``K`` per leaf, ``G*K`` per pod, ``K``
(or what stage 1 left) per core link; Theorem 2 caps ``I_s`` at ``ceil(i_s/A)``, ``X_s`` at
``max(ceil(c_s/A), K - ceil(i_s/A))``. The guarantees hold, a previous plan at ``K`` is kept whole;
moves are minimised per level, not globally.

**Cost.** Per method run, ``ceil(log2 A) + ceil(log2 G)`` min-cost-flow solves over one arc per
distinct (leaf pair, previous choice) and one per set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from ortools.graph.python import min_cost_flow

from solver.exact.treeshape import FatTreeShape as FatTreeShape
from solver.exact.treeshape import _bound, _shape
from solver.exact.treeshape import _leaves as _leaves
from solver.exact.treeshape import analyse as analyse
from solver.exact.treeshape import applies as applies
from solver.exact.treeshape import lower_bound as lower_bound
from topology.arrays import distinct
from topology.index import BoolArray, IntArray
from topology.model import Fabric

__all__ = [
    "FatTreeAssignment",
    "FatTreeShape",
    "analyse",
    "applies",
    "assign_fat_tree",
    "lower_bound",
]

_KEEP, _FREE, _PULL = 0, 1, 2
"""A flow's relation to a split: previous choice in the first half, unknown, in the second."""


@dataclass(frozen=True, eq=False)
class FatTreeAssignment:
    """A switch path per flow (``()`` within one leaf), its load, and the lower bound."""

    paths: list[tuple[int, ...]]
    agg: IntArray
    """Agg index ``j`` per flow, ``-1`` within one leaf."""
    core: IntArray
    """Core ``g`` of group ``agg`` per cross-pod flow, ``-1`` otherwise."""
    lower_bound: int
    max_load: int
    """Most flows on one directed switch-to-switch link."""
    moved: int
    """Flows with a previous path that now take another."""
    method: str
    """``leaf-balanced`` (Theorem 1), ``pod-balanced`` (Theorem 2), or a heuristic pass:
    ``pod-capped`` (seeded with Theorem 1's colours), ``leaf-capped`` (with Theorem 2's)."""

    @property
    def optimal(self) -> bool:
        """True when the load meets the lower bound, which proves it optimal."""
        return self.max_load == self.lower_bound


@dataclass(frozen=True)
class _Family:
    """One side's sets: ``parent[set]`` (a set holding it, or ``-1``) and ``cap[set]``; or,
    with ``room``, a capacity per set and colour (``room[set, colour]``, cumulated along the
    colours: ``room[set, c]`` is the room of colours ``< c``), which a split then respects as
    caps do (:mod:`solver.repair.degraded`: colours lost with links have none)."""

    parent: IntArray
    cap: IntArray
    room: IntArray | None = None


class SplitInfeasible(RuntimeError):
    """A colour split's circulation has no solution (only possible with ``room``)."""


def _halve(
    level: tuple[IntArray, IntArray, IntArray, bool],
    members: tuple[IntArray, IntArray],
    families: tuple[_Family, _Family],
    category: IntArray,
) -> IntArray:
    """How many of each item's flows take the first ``size // 2`` colours of its group.

    ``level`` is each item's colour group (its first colour), group size and weight, and whether
    bounds are caps. One circulation serves the whole level: source -> top sets -> bottom sets
    -> items -> bottom sets -> top sets -> sink, each set a node per colour group, its throughput
    bounds a lower bound and a capacity on the arc into it (left) or out of it (right).
    """
    group, size, weight, stable = level

    def sets(family: _Family, member: IntArray) -> tuple[IntArray, ...]:
        count = family.parent.size
        top_set = family.parent[member]
        bottom, top, nested = group * count + member, group * count + top_set, top_set >= 0
        keys = distinct(np.concatenate([bottom, top[nested]]))
        at_bottom, at_top = np.searchsorted(keys, bottom), np.searchsorted(keys, top[nested])
        degree = np.bincount(at_bottom, weights=weight, minlength=keys.size)
        d = (degree + np.bincount(at_top, weights=weight[nested], minlength=keys.size)).astype(
            np.int64
        )
        n = np.ones(keys.size, dtype=np.int64)
        n[at_bottom], n[at_top] = size, size[nested]
        n1, cap = n // 2, family.cap[keys % count]
        if family.room is not None:
            room, first = family.room[keys % count], keys // count
            lo = np.maximum(0, d - (_along(room, first + n) - _along(room, first + n1)))
            hi = np.minimum(d, _along(room, first + n1) - _along(room, first))
        elif stable:
            lo, hi = np.maximum(0, d - (n - n1) * cap), np.minimum(d, n1 * cap)
        else:
            lo, hi = d * n1 // n, -(-d * n1 // n)
        parent_set = family.parent[keys % count]
        parent = np.searchsorted(keys, keys - keys % count + parent_set)
        return at_bottom, lo, hi, np.where(parent_set >= 0, parent, -1)

    left_at, left_lo, left_hi, left_up = sets(families[0], members[0])
    right_at, right_lo, right_hi, right_up = sets(families[1], members[1])
    nl, nr = left_lo.size, right_lo.size
    source, sink = nl + nr, nl + nr + 1
    tails = np.concatenate([np.where(left_up >= 0, left_up, source), np.arange(nr) + nl])
    heads = np.concatenate([np.arange(nl), np.where(right_up >= 0, right_up + nl, sink)])
    lo = np.concatenate([left_lo, right_lo])
    supply = np.zeros(nl + nr + 2, dtype=np.int64)
    np.subtract.at(supply, tails, lo)
    np.add.at(supply, heads, lo)
    flow = min_cost_flow.SimpleMinCostFlow()
    caps = np.concatenate([left_hi, right_hi]) - lo
    if np.any(caps < 0):  # a set's rooms cannot take its flows (only possible with room)
        raise SplitInfeasible("a colour split's bounds cross")
    flow.add_arcs_with_capacity_and_unit_cost(tails, heads, caps, np.zeros_like(lo))
    items = flow.add_arcs_with_capacity_and_unit_cost(
        left_at, right_at + nl, weight, category - _FREE
    )
    flow.add_arc_with_capacity_and_unit_cost(sink, source, int(weight.sum()), 0)
    flow.set_nodes_supplies(np.arange(supply.size), supply)
    status = flow.solve()
    if status != flow.OPTIMAL:  # without room impossible: the proportional flow is feasible
        raise SplitInfeasible(f"colour split circulation not solved (status {status})")
    return np.asarray(flow.flows(items), dtype=np.int64)


def _along(table: IntArray, column: IntArray) -> IntArray:
    picked: IntArray = np.take_along_axis(table, column[:, None], axis=1)[:, 0]
    return picked


def _colour(
    members: tuple[IntArray, IntArray],
    families: tuple[_Family, _Family],
    previous: IntArray,
    colours: int,
    stable: bool,
) -> IntArray:
    """A colour in ``range(colours)`` per flow, by halving colour ranges level by level.

    Flows of one (left set, right set, previous colour) are one item with a weight; each split
    cuts an item in two pieces, which keep the item's ``origin`` down to a single colour.
    """
    left, right = members
    if not left.size:
        return np.zeros(0, dtype=np.int64)
    width, radix = families[1].parent.size, colours + 1
    keys, item_of_flow, weight = np.unique(
        (left * width + right) * radix + previous + 1, return_inverse=True, return_counts=True
    )
    item_left, item_right = np.divmod(keys // radix, width)
    prev = keys % radix - 1
    origin = np.arange(keys.size)
    low = np.zeros(keys.size, dtype=np.int64)
    size = np.full(keys.size, colours, dtype=np.int64)
    pieces: list[tuple[IntArray, IntArray, IntArray]] = []
    while size.size:
        single = size == 1
        pieces.append((origin[single], low[single], weight[single]))
        origin, item_left, item_right, prev, low, size, weight = (
            x[~single] for x in (origin, item_left, item_right, prev, low, size, weight)
        )
        if not size.size:
            break
        mid = low + size // 2
        category = np.where(
            (prev >= low) & (prev < mid),
            _KEEP,
            np.where((prev >= mid) & (prev < low + size), _PULL, _FREE),
        )
        first = _halve((low, size, weight, stable), (item_left, item_right), families, category)
        weight = np.concatenate([first, weight - first])
        kept = weight > 0
        weight, low = weight[kept], np.concatenate([low, mid])[kept]
        size = np.concatenate([size // 2, size - size // 2])[kept]
        origin, item_left, item_right, prev = (
            np.tile(x, 2)[kept] for x in (origin, item_left, item_right, prev)
        )
    origin, colour, weight = (np.concatenate(x) for x in zip(*pieces, strict=True))
    order = np.lexsort((colour, origin))
    result = np.empty(left.size, dtype=np.int64)
    result[np.argsort(item_of_flow, kind="stable")] = np.repeat(colour[order], weight[order])
    return result


def _ceil_share(ends: IntArray, count: int, parts: int) -> IntArray:
    return -(-np.bincount(ends, minlength=count) // parts)


@dataclass(frozen=True)
class _Flows:
    """The flows' leaves on one fat-tree, and their lower bound ``K``."""

    shape: FatTreeShape
    s: IntArray
    d: IntArray
    bound: int

    def aggs(self, hint: IntArray, method: str, stable: bool) -> IntArray:
        """Stage 1: an agg index per flow (``-1`` within one leaf), by Theorem 1 or 2."""
        shape, bound, on = self.shape, self.bound, self.s != self.d
        n, a, p = shape.is_leaf.size, shape.aggs, shape.pods
        s, d, agg = self.s[on], self.d[on], np.full(self.s.size, -1, dtype=np.int64)
        if method == "leaf":
            leaves = _Family(np.full(n, -1, dtype=np.int64), np.full(n, bound, dtype=np.int64))
            agg[on] = _colour((s, d), (leaves, leaves), hint[on], a, stable)
            return agg
        intra = shape.pod[s] == shape.pod[d]
        parent = np.full(2 * n + p, -1, dtype=np.int64)
        parent[:n] = np.where(shape.is_leaf, 2 * n + shape.pod, -1)
        family = []
        for ends in (s, d):
            cross_cap, intra_cap = _ceil_share(ends[~intra], n, a), _ceil_share(ends[intra], n, a)
            pod_cap = np.full(p, shape.cores_per_group * bound, dtype=np.int64)
            cap = np.concatenate([np.maximum(cross_cap, bound - intra_cap), intra_cap, pod_cap])
            family.append(_Family(parent, cap))
        members = (s + n * intra, d + n * intra)
        agg[on] = _colour(members, (family[0], family[1]), hint[on], a, stable)
        return agg

    def cores(self, agg: IntArray, hint: IntArray, stable: bool) -> IntArray:
        """Stage 2: a core of group ``agg`` per cross-pod flow (else ``-1``), ``<= K`` if it can."""
        shape, far = self.shape, self.shape.pod[self.s] != self.shape.pod[self.d]
        sets, g, core = shape.aggs * shape.pods, shape.cores_per_group, np.full_like(agg, -1)
        ends = tuple(agg[far] * shape.pods + shape.pod[x[far]] for x in (self.s, self.d))
        family = [
            _Family(
                np.full(sets, -1, dtype=np.int64), np.maximum(self.bound, _ceil_share(e, sets, g))
            )
            for e in ends
        ]
        core[far] = _colour((ends[0], ends[1]), (family[0], family[1]), hint[far], g, stable)
        return core

    def loads(self, agg: IntArray, core: IntArray) -> IntArray:
        """Flows per resource."""
        shape, s, d, on, far = self.shape, self.s, self.d, agg >= 0, core >= 0
        used = [
            shape.up[s[on], agg[on]],
            shape.down[d[on], agg[on]],
            shape.agg_up[shape.pod[s[far]], agg[far], core[far]],
            shape.agg_down[shape.pod[d[far]], agg[far], core[far]],
        ]
        return np.bincount(np.concatenate(used), minlength=shape.choice.size)


def _paths(
    shape: FatTreeShape, s: IntArray, d: IntArray, agg: IntArray, core: IntArray
) -> list[tuple[int, ...]]:
    paths: list[tuple[int, ...]] = [()] * s.size
    near = np.flatnonzero((agg >= 0) & (core < 0))
    hops = (shape.up[s[near], agg[near]], shape.down[d[near], agg[near]])
    for f, *path in zip(near.tolist(), *(h.tolist() for h in hops), strict=True):
        paths[f] = tuple(path)
    far = np.flatnonzero(core >= 0)
    j, g = agg[far], core[far]
    far_hops = (
        shape.up[s[far], j],
        shape.agg_up[shape.pod[s[far]], j, g],
        shape.agg_down[shape.pod[d[far]], j, g],
        shape.down[d[far], j],
    )
    for f, *path in zip(far.tolist(), *(h.tolist() for h in far_hops), strict=True):
        paths[f] = tuple(path)
    return paths


def _previous(
    shape: FatTreeShape, s: IntArray, d: IntArray, previous: Sequence[Sequence[int]]
) -> tuple[IntArray, IntArray, BoolArray]:
    """Previous agg and core per flow (``-1`` unless the old path is one of the flow's now)."""
    if len(previous) != s.size:
        raise ValueError(f"previous has {len(previous)} paths for {s.size} flows")
    old = [tuple(int(r) for r in path) for path in previous]
    hop, limit = np.full((2, s.size), -1, dtype=np.int64), (shape.aggs, shape.cores_per_group)
    for f, path in enumerate(old):
        for i, r in enumerate(path[:2]):
            choice = int(shape.choice[r]) if 0 <= r < shape.choice.size else -1
            hop[i, f] = choice if choice < limit[i] else -1
    agg, core = hop
    valid = [p == q for p, q in zip(_paths(shape, s, d, agg, core), old, strict=True)]
    far = shape.pod[s] != shape.pod[d]
    keep = np.array(valid, dtype=np.bool_) & (agg >= 0) & ((core >= 0) == far)
    had = np.array([bool(p) for p in old], dtype=np.bool_)
    return np.where(keep, agg, -1), np.where(keep, core, -1), had


def assign_fat_tree(
    fabric: Fabric | FatTreeShape,
    src_leaf: npt.ArrayLike,
    dst_leaf: npt.ArrayLike,
    previous: Sequence[Sequence[int]] | None = None,
) -> FatTreeAssignment:
    """A switch path per equal-rate flow between leaves, within the module's guarantees.

    ``src_leaf``/``dst_leaf`` are leaf switch node ids (``FabricIndex`` numbering); every path
    is one of ``Routing.switch_paths(src, dst)``. ``previous`` gives each flow's former switch
    path (``()`` for none) to keep where the bounds allow. Raises ``ValueError`` when the fabric
    does not have the structure (:func:`applies` tells why) or a flow end is not a leaf.
    """
    shape = _shape(fabric)
    s, d = _leaves(shape, src_leaf, dst_leaf)
    bound = _bound(shape, s, d)
    stable = previous is not None
    none = np.full(s.size, -1, dtype=np.int64)
    prev_agg, prev_core, had = (
        _previous(shape, s, d, previous) if previous is not None else (none, none, none >= 0)
    )
    flows = _Flows(shape, s, d, bound)
    best: tuple[tuple[int, int, int], FatTreeAssignment] | None = None
    runs: list[IntArray] = []
    for method, seed in (("leaf", None), ("pod", None), ("pod", 0), ("leaf", 1)):
        hint = prev_agg if seed is None else runs[seed]
        runs.append(agg := flows.aggs(hint, method, stable or seed is not None))
        core = flows.cores(agg, np.where(agg == prev_agg, prev_core, -1), stable)
        loads = flows.loads(agg, core)
        peak = int(loads.max(initial=0))
        moved = int((had & ((agg != prev_agg) | (core != prev_core))).sum())
        score = (peak, int((loads == peak).sum()), moved)
        if best is None or score < best[0]:
            name = f"{method}-{'balanced' if seed is None else 'capped'}"
            best = (score, FatTreeAssignment([], agg, core, bound, peak, moved, name))
        if best[0][0] <= bound:
            break
    assert best is not None
    return replace(best[1], paths=_paths(shape, s, d, best[1].agg, best[1].core))
