"""Two-spine exchanges on a 2-tier fabric: the capacitated form of a Kempe chain.

Why: a repair (:mod:`solver.repair.evict`) sometimes cannot place a flow ``u -> v`` directly — every
spine with room on ``u``'s uplink is full on its downlink to ``v`` and the other way round — and
one-step ejections are not enough when the links around ``u`` are all at the target (a leaf that
lost a spine carries exactly ``z`` on each of the others). In edge colouring the classical answer
is a Kempe chain: swap two colours ``a`` and ``b`` along an alternating path. With link
capacities above one, the same exchange is a flow problem, and solved exactly:

Take spine ``a`` with room at ``u`` and spine ``b`` with room at ``v``. The flows now on ``a``
or ``b`` whose leaf pair may use both (and the new flow) are re-split between the two: a leaf
``x`` with ``d`` such flows and room ``c_a``, ``c_b`` on its links to ``a`` and ``b`` must send
between ``max(0, d - c_b)`` and ``min(d, c_a)`` of them to ``a``, on both sides (uplinks at
source leaves, downlinks at destination leaves). These are degree bounds on a bipartite
multigraph — a circulation ``source -> leaf -> leaf -> sink`` with a network (totally
unimodular) matrix — so an integral split exists exactly when a fractional one does, and a
min-cost circulation finds one that changes the fewest flows' spines (cost ``-1`` per flow kept
on ``a``, ``+1`` per flow moved onto it). Flows whose pair cannot use the other spine stay put
and only take room. One solve is a few milliseconds; the repair tries a handful of ``(a, b)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.graph.python import min_cost_flow

from solver.space.problem import Problem
from topology.arrays import distinct
from topology.index import FloatArray, IntArray

__all__ = ["SpineGrid", "exchange"]


@dataclass(frozen=True, eq=False)
class SpineGrid:
    """A 2-tier component's candidates by spine: ``rows[local pair, spine] = k`` or ``-1``,
    ``spine_of[table row]`` the spine (local number) of each candidate row of the problem."""

    pairs: IntArray
    spines: IntArray
    rows: IntArray
    spine_of: IntArray

    @classmethod
    def build(cls, problem: Problem, pairs: IntArray) -> SpineGrid:
        index = problem.index
        counts = problem.num_candidates(pairs)
        starts = problem.offset[pairs]
        first = np.cumsum(counts) - counts
        all_rows = np.arange(int(counts.sum())) + np.repeat(starts - first, counts)
        spine_of_row = index.res_dst[problem.table[all_rows, 0]]
        spines = distinct(spine_of_row)
        local = np.searchsorted(spines, spine_of_row)
        owner = np.repeat(np.arange(len(pairs)), counts)
        rows = np.full((len(pairs), len(spines)), -1, dtype=np.int64)
        rows[owner, local] = all_rows - np.repeat(starts, counts)
        spine_of = np.full(len(problem.table), -1, dtype=np.int64)
        spine_of[all_rows] = local
        return cls(pairs, spines, rows, spine_of)


def _room(load: FloatArray, scale: FloatArray, res: IntArray, w: float, z: float) -> IntArray:
    """Flows of weight ``w`` that fit on each resource up to utilization ``z``."""
    cap = np.floor(z / (w * scale[res]) + 1e-9).astype(np.int64)
    return np.maximum(cap - np.rint(load[res] / w).astype(np.int64), 0)


def exchange(
    problem: Problem,
    grid: SpineGrid,
    flows: IntArray,
    choice: IntArray,
    load: FloatArray,
    new: int,
    a: int,
    b: int,
    z: float,
) -> IntArray | None:
    """New choices for ``flows`` (equal weights) placing flow position ``new`` on spine ``a``
    or ``b`` by re-splitting the flows on those spines; ``None`` if no split fits ``z``.

    ``choice`` holds each flow's candidate (``-1`` unplaced), ``load`` the load per resource of
    the placed ones (``new`` unplaced). Returns a full copy of ``choice``.
    """
    offset = problem.offset
    pair = problem.pair[flows]
    local_pair = np.searchsorted(grid.pairs, pair)
    w = float(problem.weight[flows[new]])
    placed = choice >= 0
    spine = np.full(len(flows), -1, dtype=np.int64)
    spine[placed] = grid.spine_of[offset[pair[placed]] + choice[placed]]
    both = (grid.rows[local_pair, a] >= 0) & (grid.rows[local_pair, b] >= 0)
    mobile = np.flatnonzero(((spine == a) | (spine == b)) & both)
    if grid.rows[local_pair[new], a] < 0:
        return None
    forced = not both[new]  # the new flow may only take ``a``
    members = np.append(mobile, new)
    lp = local_pair[members]
    ka, kb = grid.rows[lp, a], grid.rows[lp, b]
    kb[-1] = ka[-1] if forced else kb[-1]
    up_a = problem.table[offset[pair[members]] + ka, 0]
    up_b = problem.table[offset[pair[members]] + kb, 0]
    down_a = problem.table[offset[pair[members]] + ka, 1]
    down_b = problem.table[offset[pair[members]] + kb, 1]
    # Room left by everything but the members (which are lifted off the loads).
    lifted = load.copy()
    on_a, on_b = spine[members] == a, spine[members] == b
    np.subtract.at(lifted, up_a[on_a], w)
    np.subtract.at(lifted, down_a[on_a], w)
    np.subtract.at(lifted, up_b[on_b], w)
    np.subtract.at(lifted, down_b[on_b], w)
    scale = problem.scale
    leaves = problem.pair_leaves[pair[members]]
    left_keys, left = np.unique(leaves[:, 0], return_inverse=True)
    right_keys, right = np.unique(leaves[:, 1], return_inverse=True)
    n_left, n_right = len(left_keys), len(right_keys)

    def bounds(vertex: IntArray, n: int, ra: IntArray, rb: IntArray) -> tuple[IntArray, IntArray]:
        degree = np.bincount(vertex, minlength=n)
        room_a, room_b = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        room_a[vertex] = _room(lifted, scale, ra, w, z)
        room_b[vertex] = _room(lifted, scale, rb, w, z)
        return np.maximum(0, degree - room_b), np.minimum(degree, room_a)

    left_lo, left_hi = bounds(left, n_left, up_a, up_b)
    right_lo, right_hi = bounds(right, n_right, down_a, down_b)
    if np.any(left_lo > left_hi) or np.any(right_lo > right_hi):
        return None
    category = np.where(on_a, 0, np.where(on_b, 2, 1))
    arc_keys, arc_of = np.unique((left * n_right + right) * 3 + category, return_inverse=True)
    arc_of = arc_of.ravel()
    arc_count = np.bincount(arc_of)
    arc_pair, arc_category = np.divmod(arc_keys, 3)
    source, sink = n_left + n_right, n_left + n_right + 1
    arc_tail, arc_head = arc_pair // n_right, arc_pair % n_right + n_left
    tails = np.concatenate([np.full(n_left, source), np.arange(n_right) + n_left, arc_tail])
    heads = np.concatenate([np.arange(n_left), np.full(n_right, sink), arc_head])
    arc_lo = np.where((arc_category == 1) & forced, arc_count, 0)
    caps = np.concatenate([left_hi - left_lo, right_hi - right_lo, arc_count - arc_lo])
    costs = np.concatenate([np.zeros(n_left + n_right, dtype=np.int64), arc_category - 1])
    flow = min_cost_flow.SimpleMinCostFlow()
    flow.add_arcs_with_capacity_and_unit_cost(tails, heads, caps, costs)
    flow.add_arc_with_capacity_and_unit_cost(sink, source, len(members), 0)
    supply = np.concatenate([left_lo, -right_lo, [-left_lo.sum(), right_lo.sum()]])
    np.subtract.at(supply, arc_tail, arc_lo)
    np.add.at(supply, arc_head, arc_lo)
    flow.set_nodes_supplies(np.arange(supply.size), supply)
    if flow.solve() != flow.OPTIMAL:
        return None
    to_a = flow.flows(np.arange(n_left + n_right, n_left + n_right + len(arc_keys))) + arc_lo
    # Within an arc, flows already on ``a`` take its places first (they need not move).
    order = np.lexsort((category, arc_of))
    rank = np.empty(len(members), dtype=np.int64)
    sorted_arc = arc_of[order]
    starts = np.searchsorted(sorted_arc, sorted_arc)
    rank[order] = np.arange(len(members)) - starts
    goes_a = rank < to_a[arc_of]
    out = choice.copy()
    out[members] = np.where(goes_a, ka, kb)
    return out
