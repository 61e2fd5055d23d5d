"""Constructive placements: least-loaded greedy, and exact spine colouring where it applies.

Why both here: neither needs a general solver, both run in milliseconds, and the planner uses
them the same way — to place some flows of a sub-problem onto the loads the others leave.

**Greedy least-loaded** (a baseline, CP-SAT's hint, and the incremental re-placer): flows in
order of weight, heaviest first (ties keep flow order), each takes the candidate path that
minimizes the largest utilization along it *after* adding the flow, ties broken by the sum of
those utilizations, then by candidate order. It is deterministic (the seed plays no part) and
known to be far from optimal on adversarial inputs (1.5x the optimum measured), which is why
it is a hint and never the last word where something better applies.

**Exact** (two tiers, equal weights): with every pair of a component able to use every spine of
the component over links of one capacity, choosing paths is bipartite edge colouring and
:func:`solver.exact.coloring.assign_spines` reaches ``ceil(Δ / S)``, the optimum, with each leaf's
flows spread evenly (so the number of links at that maximum is also least). With a previous
plan, :func:`solver.exact.coloring.assign_spines_stable` reaches the same bound keeping flows on
their spines where it can. This module only checks the structure and maps spine numbers to each
pair's candidate rows.
"""

from __future__ import annotations

import itertools

import numpy as np

from solver.exact.coloring import assign_spines, assign_spines_stable
from solver.search.greedytree import LEVELS_FROM, place_by_levels
from solver.space.problem import TOLERANCE, Problem
from solver.space.treecandidates import TreeCandidates
from topology.arrays import distinct
from topology.index import FloatArray, IntArray

__all__ = [
    "exact_reason",
    "exact_spines",
    "greedy_order",
    "place_exact",
    "place_greedy",
    "spine_rows",
]


def greedy_order(problem: Problem, flows: IntArray) -> IntArray:
    """``flows`` heaviest first; equal weights keep their order (a stable sort)."""
    return flows[np.argsort(-problem.weight[flows], kind="stable")]


def place_greedy(problem: Problem, flows: IntArray, load: FloatArray) -> IntArray:
    """Choose a candidate for each of ``flows`` (cross-leaf) on top of ``load``.

    ``load`` (per resource, plus the pad) is updated in place with the placed flows. Returns the
    choices aligned with ``flows``. The same choices are reached three ways: on two tiers in
    rounds of flows sharing no leaf (:func:`_place_two_tier`); on a fat-tree's lazy table by
    load levels (:mod:`solver.search.greedytree`) when its conditions hold (one power-of-two link
    scale, whole weights and loads), else over cached (agg, core) grids (:class:`_Grid`); and
    row by row otherwise.
    """
    choice = np.full(len(flows), -1, dtype=np.int64)
    if not len(flows):
        return choice
    if problem.two_tier and problem.tree is None:
        return _place_two_tier(problem, flows, load)
    position = np.empty(problem.num_flows, dtype=np.int64)
    position[flows] = np.arange(len(flows))
    tree = problem.tree
    if tree is not None and len(flows) >= LEVELS_FROM:
        order = greedy_order(problem, flows)
        found = place_by_levels(problem, tree, order, load)
        if found is not None:
            choice[position[order]] = found
            return choice
    cache: dict[int, tuple[IntArray, FloatArray]] = {}
    weights = problem.weight
    pairs = problem.pair
    grid_of: dict[int, _Grid] = {} if tree is None else _grids(problem, tree, pairs[flows])
    for f in greedy_order(problem, flows).tolist():
        p = int(pairs[f])
        grid = grid_of.get(p)
        if grid is not None:
            choice[position[f]] = grid.place(p, weights[f], load)
            continue
        entry = cache.get(p)
        if entry is None:
            rows = problem.candidates(p)
            if problem.tree is None:
                entry = (rows, problem.scale[rows])
                cache[p] = entry
            else:  # a fat-tree: one link speed, so every row of a pair scales alike, and the
                # rows stay in the problem's bounded cache (all of them would be gigabytes)
                entry = (rows, problem.scale[rows[:1]])
        rows, scale = entry
        w = weights[f]
        util = (load[rows] + w) * scale
        peak = util.max(axis=1)
        k = int(peak.argmin())
        best = peak[k]
        near = peak <= best + abs(best) * TOLERANCE
        if near.sum() > 1:  # ties: the least sum of utilizations, then candidate order
            total = np.where(near, util.sum(axis=1), np.inf)
            low = total.min()
            k = int((total <= low + abs(low) * TOLERANCE).argmax())
        load[rows[k]] += w
        choice[position[f]] = k
    return choice


def _rounds(first: IntArray, second: IntArray) -> IntArray:
    """Per item (in order): one more than the latest round of an earlier item sharing its
    ``first`` or its ``second`` value, so that no round holds two items sharing either, and an
    item comes after every earlier one that shares one."""
    last: dict[tuple[int, int], int] = {}
    out = np.empty(len(first), dtype=np.int64)
    for i, (a, b) in enumerate(zip(first.tolist(), second.tolist(), strict=True)):
        r = max(last.get((0, a), -1), last.get((1, b), -1)) + 1
        last[(0, a)] = last[(1, b)] = r
        out[i] = r
    return out


def _place_two_tier(problem: Problem, flows: IntArray, load: FloatArray) -> IntArray:
    """:func:`place_greedy` on two tiers, many flows per numpy pass, with the same choices.

    Why it is the same: a two-tier candidate is (an up-link of the source leaf, a down-link
    into the destination leaf), so a flow's choice reads only loads that flows from its source
    leaf or into its destination leaf change. Taken in rounds where no two flows share either
    leaf, and after every earlier flow that shares one (:func:`_rounds`), each flow sees
    exactly the loads it sees one by one. A 16k-GPU rail-optimized shuffled ring (16,328
    cross-leaf flows) takes 1,422 rounds instead of 16,328 steps of a dozen small numpy calls
    each."""
    choice = np.full(len(flows), -1, dtype=np.int64)
    order = greedy_order(problem, flows)
    position = np.empty(problem.num_flows, dtype=np.int64)
    position[flows] = np.arange(len(flows))
    pairs = problem.pair[order]
    leaves = problem.pair_leaves[pairs]
    rounds = _rounds(leaves[:, 0], leaves[:, 1])
    by_round = np.argsort(rounds, kind="stable")
    bounds = np.searchsorted(rounds[by_round], np.arange(int(rounds.max()) + 2)).tolist()
    offset, table, scale = problem.offset, problem.table, problem.scale
    weight = problem.weight[order[by_round]]
    equal = bool(np.all(weight == weight[0]))
    at = position[order[by_round]]
    p_all = pairs[by_round]
    count = offset[p_all + 1] - offset[p_all]
    k_all = np.arange(int(count.max()))[None, :]
    span = np.arange(int(np.diff(bounds).max(initial=0)))
    # The flows' candidate rows and their scales, gathered for many rounds at once (at most
    # GATHER_CELLS entries) and sliced per round: rounds are about a dozen flows each, and
    # gathering them round by round was a third of the time.
    per_flow = k_all.size * table.shape[1]
    for block in _blocks(bounds, max(1, GATHER_CELLS // max(per_flow, 1))):
        first, last = block[0], block[-1]
        valid = k_all < count[first:last, None]
        rows_all = table[np.where(valid, offset[p_all[first:last]][:, None] + k_all, 0)]
        scale_all = scale[rows_all]
        absent = np.where(valid, 0.0, np.inf)  # added to a peak: no such candidate
        for lo, hi in itertools.pairwise(block):
            rows = rows_all[lo - first : hi - first]
            w = weight[lo] if equal else weight[lo:hi][:, None, None]
            util = (load[rows] + w) * scale_all[lo - first : hi - first]
            peak = util.max(axis=2) + absent[lo - first : hi - first]
            n = span[: hi - lo]
            k = peak.argmin(axis=1)
            best = peak[n, k][:, None]
            near = peak <= best + np.abs(best) * TOLERANCE
            tie = near.sum(axis=1) > 1
            if tie.any():  # ties: the least sum of utilizations, then candidate order
                total = np.where(near, util.sum(axis=2), np.inf)
                low = total.min(axis=1)[:, None]
                k = np.where(tie, (total <= low + np.abs(low) * TOLERANCE).argmax(axis=1), k)
            chosen = rows[n, k]
            if equal:
                np.add.at(load, chosen.ravel(), w)
            else:
                np.add.at(load, chosen.ravel(), np.repeat(weight[lo:hi], chosen.shape[1]))
            choice[at[lo:hi]] = k
    return choice


GATHER_CELLS = 1 << 20
"""Most candidate-hop entries :func:`_place_two_tier` gathers at once (8 MB per array)."""


def _blocks(bounds: list[int], flows: int) -> list[list[int]]:
    """``bounds`` (round starts, then the end) cut into runs of whole rounds of about
    ``flows`` flows each (a longer round is a run of its own); each run is its rounds' starts
    and its end, so consecutive runs share a bound."""
    out: list[list[int]] = []
    run = [bounds[0]]
    for b in bounds[1:]:
        if b - run[0] > flows and len(run) > 1:
            out.append(run)
            run = [run[-1]]
        run.append(b)
    if len(run) > 1:
        out.append(run)
    return out


def _grids(problem: Problem, tree: TreeCandidates, pairs: IntArray) -> dict[int, _Grid]:
    """The (agg, core) grid of every cross-pod pair among ``pairs``, one object per distinct
    (pod pair, agg order, usable cells): found in one pass over the pairs, not per flow."""
    far = distinct(pairs[tree.far[pairs]])
    if not len(far):
        return {}
    # Each pair's key as bytes cut from one buffer: a dictionary of 15,000 short byte strings
    # is ten times faster than np.unique over the rows.
    keys = np.ascontiguousarray(np.column_stack([tree.pp[far], tree.jord[far], tree.count[far]]))
    raw, width = keys.tobytes(), keys.shape[1] * keys.itemsize
    grids: dict[bytes, _Grid] = {}
    out: dict[int, _Grid] = {}
    for n, p in enumerate(far.tolist()):
        key = raw[n * width : (n + 1) * width]
        grid = grids.get(key)
        if grid is None:
            grid = grids[key] = _Grid(problem, tree, p)
        out[p] = grid
    return out


class _Grid:
    """The (agg position, core) grid of the cross-pod pairs that share a pod pair, an agg order
    and the usable cells (a leaf's lost link empties a position): the grid's core-link
    resources and scales, and which cells are candidates, in candidate order.

    Why cached: a 16k-GPU fat-tree's shuffled ring has 30,000 cross-pod flows over a few
    hundred such grids; gathering the grid's resources from the 3-D cabling tables per flow
    was most of the greedy baseline's 4 s. Why a rectangular form: on an intact grid (every
    position with the same cores) the leaf links' utilizations broadcast over the cores
    instead of being gathered per cell (a third fewer numpy calls per flow)."""

    def __init__(self, problem: Problem, tree: TreeCandidates, p: int) -> None:
        shape = tree.layout.shape
        q = int(tree.pp[p])
        pu, pv = (int(x) for x in tree.pod_pairs[q])
        js = tree.jord[p]
        cores = tree.gnth[q, js]  # [t, i]: the i-th usable core of position t's agg
        count = tree.count[p]
        valid = np.arange(cores.shape[1])[None, :] < count[:, None]
        self.tree, self.scale, self.shape = tree, problem.scale, shape
        self.tt, self.ii = np.nonzero(valid)  # candidate order: position, then core
        self.js = js
        self.rectangular = bool(count.min() == count.max())
        if self.rectangular:  # [t, i] arrays; raveled, they are in candidate order
            width = int(count[0])
            self.up_core = shape.agg_up[pu, js[:, None], cores[:, :width]]
            self.down_core = shape.agg_down[pv, js[:, None], cores[:, :width]]
        else:
            self.up_core = shape.agg_up[pu, js[self.tt], cores[self.tt, self.ii]]
            self.down_core = shape.agg_down[pv, js[self.tt], cores[self.tt, self.ii]]
        self.s_up_core = self.scale[self.up_core]
        self.s_down_core = self.scale[self.down_core]

    def place(self, p: int, w: float, load: FloatArray) -> int:
        """:func:`place_greedy`'s step for cross-pod pair ``p`` of a fat-tree's lazy table, on
        this grid instead of materialized rows: the same utilizations (each hop's ``(load + w)
        * scale``), the same peak (the most of the four), the same tie-break (the least sum,
        added hop by hop in path order, then candidate order), so the same choice."""
        tree, shape, scale = self.tree, self.shape, self.scale
        up = shape.up[int(tree.u[p]), self.js]
        down = shape.down[int(tree.v[p]), self.js]
        util_up = (load[up] + w) * scale[up]
        util_down = (load[down] + w) * scale[down]
        util_core_up = (load[self.up_core] + w) * self.s_up_core
        util_core_down = (load[self.down_core] + w) * self.s_down_core
        if self.rectangular:
            util_up, util_down = util_up[:, None], util_down[:, None]
        else:
            util_up, util_down = util_up[self.tt], util_down[self.tt]
        peak = np.maximum(np.maximum(util_up, util_down), np.maximum(util_core_up, util_core_down))
        peak = peak.ravel()
        k = int(peak.argmin())
        best = peak[k]
        near = peak <= best + abs(best) * TOLERANCE
        if np.count_nonzero(near) > 1:  # ties: the least sum of utilizations, then order
            total = (util_up + util_core_up + util_core_down + util_down).ravel()
            total = np.where(near, total, np.inf)
            low = total.min()
            k = int((total <= low + abs(low) * TOLERANCE).argmax())
        t = int(self.tt[k])
        core_up, core_down = self.up_core.flat[k], self.down_core.flat[k]
        load[[int(up[t]), int(core_up), int(core_down), int(down[t])]] += w
        return k


# -- exact colouring ------------------------------------------------------------------------


def spine_rows(problem: Problem, pairs: IntArray) -> tuple[IntArray, IntArray]:
    """Spines of the component (sorted) and ``rows[pair position, spine position] = k``."""
    index = problem.index
    counts = problem.num_candidates(pairs)
    starts = problem.offset[pairs]
    first = np.cumsum(counts) - counts
    all_rows = np.arange(int(counts.sum())) + np.repeat(starts - first, counts)
    spine_of_row = index.res_dst[problem.table[all_rows, 0]]
    spines = distinct(spine_of_row)
    local = np.searchsorted(spines, spine_of_row)
    within = all_rows - np.repeat(starts, counts)
    owner = np.repeat(np.arange(len(pairs)), counts)
    rows = np.full((len(pairs), len(spines)), -1, dtype=np.int64)
    rows[owner, local] = within
    return spines, rows


def exact_spines(problem: Problem, pairs: IntArray, flows: IntArray) -> IntArray | str:
    """The spines of a component if exact colouring solves it, else why it does not apply."""
    if not problem.two_tier:
        return "the fabric has more than two tiers"
    if not len(flows):
        return np.empty(0, dtype=np.int64)
    w = problem.weight[flows]
    if np.any(w != w[0]):
        return "flows have unequal weights (rate x priority)"
    counts = problem.num_candidates(pairs)
    spines, _ = spine_rows(problem, pairs)
    if np.any(counts != len(spines)):
        return "some leaf pairs cannot use every spine (failed, drained or missing links)"
    first = problem.offset[pairs]
    rows = problem.table[(first[:, None] + np.arange(len(spines))[None, :]).ravel()]
    scale = problem.scale[rows[:, :2]]
    if np.any(scale != scale.flat[0]):
        return "leaf-spine links have unequal capacities"
    return spines


def exact_reason(problem: Problem, pairs: IntArray, flows: IntArray) -> str | None:
    """``None`` if exact colouring solves this component, else why it does not apply."""
    found = exact_spines(problem, pairs, flows)
    return found if isinstance(found, str) else None


def place_exact(
    problem: Problem, pairs: IntArray, flows: IntArray, previous: IntArray | None = None
) -> IntArray:
    """Optimal choices for ``flows`` of a component where :func:`exact_reason` is ``None``,
    or of several such components with one spine set (``pairs`` sorted): they share no vertex
    of the leaf multigraph, so one colouring serves them all, each leaf spread evenly.

    ``previous`` (aligned with ``flows``) gives each flow's earlier candidate or ``-1``; when
    given, flows stay where the bound allows.
    """
    if not len(flows):
        return np.empty(0, dtype=np.int64)
    spines, rows = spine_rows(problem, pairs)
    local_pair = np.searchsorted(pairs, problem.pair[flows])
    leaves = problem.pair_leaves[problem.pair[flows]]
    if previous is None:
        spine = assign_spines(leaves[:, 0], leaves[:, 1], len(spines))
    else:
        prev_spine = np.full(len(flows), -1, dtype=np.int64)
        has = previous >= 0
        if has.any():
            row = problem.offset[problem.pair[flows[has]]] + previous[has]
            prev_spine[has] = np.searchsorted(spines, problem.index.res_dst[problem.table[row, 0]])
        spine = assign_spines_stable(leaves[:, 0], leaves[:, 1], len(spines), prev_spine)
    return rows[local_pair, spine]
