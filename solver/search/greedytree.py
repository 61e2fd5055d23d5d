"""Greedy least-loaded on a fat-tree by load levels: the same choices, a few steps per flow.

Why a module of its own: :func:`solver.search.greedy.place_greedy` is a defined baseline (the
comparison table of ``c4p plan``, CP-SAT's hint), so a faster greedy must choose *exactly* the
same candidates; on a 16k-GPU fat-tree the per-flow numpy pass over a pair's 1,024 (agg, core)
cells was most of the greedy phase, and batching flows into rounds does not work there (a
cross-pod flow reads every core link of both its pods).

**The structure used.** A cross-pod candidate is an agg position ``t`` and a usable core ``s``
of that agg's group: links ``up[u,j]``, ``agg_up[pu,j,g]``, ``agg_down[pv,j,g]``,
``down[v,j]``. Greedy's rule (the least peak utilization after adding the flow, then the least
sum of utilizations, then candidate order) becomes, when every link has one speed and loads
are whole numbers (below), the least ``(max of the four loads, sum of the four loads)``, then
the least ``(t, s)``. With ``a, b`` the max and sum of the two leaf loads and ``x, y`` the two
core loads, a cell's key is ``(max(a, x, y), b + x + y)``: no smaller than ``(a, b)``. So:

* per leaf, its links' loads are kept as *levels*: ``{load: bitmask of positions}``; the few
  (source level, destination level) combinations give every position's ``(a, b)`` at once, and
  positions are visited from the least ``(a, b)`` up, stopping as soon as it cannot beat the
  best cell found (1.5 positions per flow on a 16k-GPU shuffled ring);
* per (pod, agg) the core links' loads are levels too, ``{load: bitmask of cores}``; a position's
  best cell is found over (up level, down level) combinations, ANDed with the pod pair's usable
  cores; the lowest set bit is the first core in candidate order.
* per pod, its aggs by their least core load, ``{least: bitmask of positions}``: no cell of a
  position beats ``(max(a, x0, y0), b + x0 + y0)`` with ``x0, y0`` the least loads of its two
  aggs, so whole sets of positions are passed over at once; and a usable core at both least
  loads meets that bound, so such a position needs no scan of its cells (only ``x0 + y0``
  reaches ``b + x0 + y0``). At 131,072 GPUs core loads are mostly above the leaves', and the
  walk over positions by ``(a, b)`` alone visited 11 positions per flow to scan 1.6 (the
  placement of a shuffled ring 5.2 -> 2.1-2.2 s CPU, the same choices).

Loads only grow by the flow's weight on the four links it takes, so each update moves four
bits between levels. It is plain Python on small integers, no numpy call per flow: ~6 us a flow
where the grid pass took ~30 (16k-GPU shuffled ring: 0.45-0.55 s -> 0.09-0.12 s).

**Why the choices are identical** (each call checks each condition on the links it reads: if one
fails, :func:`place_by_levels` returns ``None`` and greedy uses its grid pass). Every switch
link has one scale ``c``, a power of two; weights and the loads given are whole numbers ``>= 0``
and ``4 * (largest load + sum of weights)`` times :data:`TOLERANCE` is below one half. Then each
utilization ``(load + w) * c`` is an exact multiple of ``c`` below ``2**53 c``, the sums greedy
forms are exact, and greedy's tolerances (``peak <= best + |best| * TOLERANCE``, the same for
sums) admit only values *equal* to the least: greedy's float rule is the integer rule above.
Candidate order is (position, core rank) when every leaf lists its aggs in one order and every
agg its cores in one order (also checked), so bits in that order are candidate order.
"""

from __future__ import annotations

import math

import numpy as np

from solver.space.problem import TOLERANCE, Problem
from solver.space.treecandidates import TreeCandidates
from topology.arrays import distinct
from topology.index import FloatArray, IntArray

__all__ = ["LEVELS_FROM", "place_by_levels", "reason_not"]

LEVELS_FROM = 32
"""Calls with fewer flows keep greedy's grid pass: gathering a call's levels costs ~0.3 ms,
about ten flows of the grid pass, and a 16k-GPU ring's greedy is 400 calls of 1 or 8 flows
(one per component). Both give the same choices; this is only which is quicker."""

_MAX_BITS = 62
"""Positions and cores per group beyond this would not fit numpy's int64 bitmasks."""


class _Links:
    """Rows of links (a leaf's uplinks by position, a (pod, agg)'s core links by rank): their
    loads as Python floats and as levels, so that a flow's step reads no numpy array.

    ``least`` (each row's least load) and ``by_least`` are kept by :meth:`add` only; the
    leaves' rows are updated inline in :func:`place_by_levels`, and their least is not read."""

    def __init__(self, res: IntArray, load: FloatArray) -> None:
        self.res = res
        rows = load[res]
        self.values: list[list[float]] = rows.tolist()
        self.levels: list[dict[float, int]] = []
        self.least: list[float] = rows.min(axis=1, initial=math.inf).tolist()
        self.by_least: list[dict[float, int]] = []  # see group_by_least
        full = (1 << res.shape[1]) - 1
        even = (rows.min(axis=1, initial=0.0) == rows.max(axis=1, initial=0.0)).tolist()
        for row, flat in zip(self.values, even, strict=True):
            if flat:  # every row before the first flow: no loop over its links
                self.levels.append({row[0]: full} if row else {})
                continue
            levels: dict[float, int] = {}
            for i, x in enumerate(row):
                levels[x] = levels.get(x, 0) | (1 << i)
            self.levels.append(levels)

    def add(self, row: int, col: int, w: float) -> None:
        """The link at ``(row, col)`` carries ``w`` more: its bit moves up a level."""
        values, levels = self.values[row], self.levels[row]
        old = values[col]
        new = values[col] = old + w
        bit = 1 << col
        rest = levels[old] ^ bit
        levels[new] = levels.get(new, 0) | bit
        if rest:
            levels[old] = rest
        else:
            del levels[old]
            if old == self.least[row]:  # loads only grow: the least moves up, if at all
                least = self.least[row] = min(levels)
                if self.by_least:
                    self._regroup(row, old, least)

    def group_by_least(self, rows_per_group: int, position_bit: list[int]) -> None:
        """Keep, per group of ``rows_per_group`` rows (a pod's aggs), its rows by their least
        load: ``{least: bitmask}``, row ``g * rows_per_group + j`` as bit ``position_bit[j]``
        (its agg's leaf position), so a flow bounds whole sets of positions at once."""
        self._per_group, self._position_bit = rows_per_group, position_bit
        for g in range(len(self.least) // rows_per_group if rows_per_group else 0):
            levels: dict[float, int] = {}
            for j in range(rows_per_group):
                x = self.least[g * rows_per_group + j]
                levels[x] = levels.get(x, 0) | position_bit[j]
            self.by_least.append(levels)

    def _regroup(self, row: int, old: float, new: float) -> None:
        g, j = divmod(row, self._per_group)
        bit, levels = self._position_bit[j], self.by_least[g]
        rest = levels[old] ^ bit
        if rest:
            levels[old] = rest
        else:
            del levels[old]
        levels[new] = levels.get(new, 0) | bit

    def write(self, load: FloatArray) -> None:
        """Put the loads back into ``load``."""
        if self.values:
            load[self.res] = np.asarray(self.values)


def _bits(mask: np.ndarray) -> list[int]:
    """Rows of a boolean matrix as Python int bitmasks (column ``i`` is bit ``i``)."""
    weights = np.left_shift(np.int64(1), np.arange(mask.shape[-1], dtype=np.int64))
    packed: list[int] = (mask.astype(np.int64) @ weights).ravel().tolist()
    return packed


class _Setup:
    """What one call reads, gathered for the pairs of its flows only (greedy runs once per
    component: a 16k-GPU ring is hundreds of calls of a few flows), and whether the module
    doc's conditions hold for it (:attr:`reason`)."""

    def __init__(
        self, problem: Problem, tree: TreeCandidates, order: IntArray, load: FloatArray
    ) -> None:
        shape, layout = tree.layout.shape, tree.layout
        n_aggs = shape.aggs
        self.reason: str | None = None
        pairs = problem.pair[order]
        self.used = used = distinct(pairs)
        self.local = np.searchsorted(used, pairs)
        self.weights = problem.weight[order]
        if n_aggs > _MAX_BITS or shape.cores_per_group > _MAX_BITS:
            self.reason = "more aggs per pod or cores per group than bits in a mask"
            return
        jord = tree.jord[used]
        if len(used) and np.any(jord != jord[:1]):
            self.reason = "leaves list their aggs in different orders"
            return
        self.perm_t = jt = jord[0] if len(used) else np.arange(n_aggs)
        far = tree.far[used]
        qs, q_local = np.unique(tree.pp[used[far]], return_inverse=True)
        src, src_row = np.unique(tree.pod_pairs[qs, 0], return_inverse=True)
        dst, dst_row = np.unique(tree.pod_pairs[qs, 1], return_inverse=True)
        # ``distinct``, not ``np.union1d`` (``np.unique`` without options): besides the slow
        # hash table (topology.arrays), its first call in a process costs 8-14 ms to set up,
        # and this was the only such call of a ``c4p plan``.
        gorder = layout.gorder[distinct(np.concatenate((src, dst)))]
        if np.any(gorder != gorder[:1]):
            self.reason = "aggs list their cores in different orders"
            return
        gsel = np.broadcast_to(layout.gorder[:1], (len(src), *layout.gorder.shape[1:]))
        up = np.take_along_axis(shape.agg_up[src], gsel, 2).reshape(
            len(src) * n_aggs, shape.cores_per_group
        )
        gsel = np.broadcast_to(layout.gorder[:1], (len(dst), *layout.gorder.shape[1:]))
        down = np.take_along_axis(shape.agg_down[dst], gsel, 2).reshape(
            len(dst) * n_aggs, shape.cores_per_group
        )
        sources, self.u_row = np.unique(tree.u[used], return_inverse=True)
        sinks, self.v_row = np.unique(tree.v[used], return_inverse=True)
        leaf_up, leaf_down = shape.up[sources][:, jt], shape.down[sinks][:, jt]
        read = np.concatenate([leaf_up.ravel(), leaf_down.ravel(), up.ravel(), down.ravel()])
        self.reason = _numbers_reason(problem, read, self.weights, load)
        if self.reason is not None:
            return
        self.core_up, self.core_down = _Links(up, load), _Links(down, load)
        self.leaf_up, self.leaf_down = _Links(leaf_up, load), _Links(leaf_down, load)
        q_of = np.full(len(used), -1, dtype=np.int64)
        q_of[far] = q_local.ravel()
        self.q_of = q_of
        self.far = far
        self.su_of = src_row.ravel() * n_aggs  # a pod pair's first row in core_up
        self.sd_of = dst_row.ravel() * n_aggs
        self.positions = _bits(tree.count[used] > 0)  # per pair: positions with a candidate
        self.usable = _bits(tree.core_ok[qs])  # per (pod pair, j): usable cores in rank order


def _numbers_reason(
    problem: Problem, read: IntArray, weights: FloatArray, load: FloatArray
) -> str | None:
    """Which condition on scales, weights and loads fails for the links ``read``, if any."""
    scale = problem.scale[read]
    if scale.size and scale.min() != scale.max():
        return "switch links of several speeds"
    if scale.size and (not scale[0] > 0 or math.frexp(float(scale[0]))[0] != 0.5):
        return "the link scale is not a power of two"
    if not (np.all(weights > 0) and np.all(weights == np.floor(weights))):
        return "weights are not whole numbers"
    given = load[read]
    if not (np.all(given >= 0) and np.all(given == np.floor(given))):
        return "loads are not whole numbers >= 0"
    if not math.isfinite(float(load[problem.pad])):
        return "the pad's load is not finite"
    bound = float(given.max(initial=0.0)) + float(weights.sum())
    if not 4 * bound * TOLERANCE < 0.5:
        return "loads too large for the tolerance to separate whole numbers"
    return None


def reason_not(
    problem: Problem, tree: TreeCandidates, flows: IntArray, load: FloatArray
) -> str | None:
    """``None`` when :func:`place_by_levels` places ``flows`` on ``load``, else which
    condition of the module doc fails (then it returns ``None`` and greedy uses its grids)."""
    return _Setup(problem, tree, flows, load).reason


def place_by_levels(
    problem: Problem, tree: TreeCandidates, order: IntArray, load: FloatArray
) -> IntArray | None:
    """Greedy's choices for the cross-leaf flows ``order`` (already in greedy's order) on a
    fat-tree's lazy table, aligned with ``order``, ``load`` updated in place; ``None`` (and
    ``load`` untouched) where a condition of the module doc fails."""
    setup = _Setup(problem, tree, order, load)
    if setup.reason is not None:
        return None
    n_aggs = tree.layout.shape.aggs
    used, local, weights = setup.used, setup.local, setup.weights
    perm_t: list[int] = setup.perm_t.tolist()
    leaf_up, leaf_down = setup.leaf_up, setup.leaf_down
    core_up, core_down = setup.core_up, setup.core_down
    up_of: list[int] = setup.u_row.ravel().tolist()
    down_of: list[int] = setup.v_row.ravel().tolist()
    up_levels, down_levels = leaf_up.levels, leaf_down.levels
    up_values, down_values = leaf_up.values, leaf_down.values
    cu_levels, cd_levels = core_up.levels, core_down.levels
    position_bit = [0] * n_aggs
    for t_, j_ in enumerate(perm_t):
        position_bit[j_] = 1 << t_
    core_up.group_by_least(n_aggs, position_bit)
    core_down.group_by_least(n_aggs, position_bit)
    cu_groups, cd_groups = core_up.by_least, core_down.by_least
    positions, usable = setup.positions, setup.usable
    far: list[bool] = setup.far.tolist()
    pp: list[int] = setup.q_of.tolist()
    su_of: list[int] = setup.su_of.tolist()
    sd_of: list[int] = setup.sd_of.tolist()
    inf = math.inf
    padded, pad_load = tree.width > 2, float(load[problem.pad])
    chosen_t: list[int] = []  # lists, not arrays: a numpy element write per flow is slower
    chosen_rank: list[int] = []

    for p, w in zip(local.tolist(), weights.tolist(), strict=True):
        u, v = up_of[p], down_of[p]
        lu, ld = up_levels[u], down_levels[v]
        allowed = positions[p]
        combos: list[tuple[float, float, int]] = []
        for xu, mu in lu.items():
            m1 = mu & allowed
            if m1:
                for xd, md in ld.items():
                    m = m1 & md
                    if m:
                        combos.append((xu if xu > xd else xd, xu + xd, m))
        combos.sort()
        if not far[p]:  # two hops: the least (a, b), then the first position
            a, b, bit = combos[0]
            for a2, b2, m in combos[1:]:
                if a2 == a and b2 == b:
                    bit |= m
            t = (bit & -bit).bit_length() - 1
            chosen_t.append(t)
            chosen_rank.append(0)
            if padded:  # greedy adds the weight to the padded row's pad column, once
                pad_load += w
        else:
            q = pp[p]
            su, sd = su_of[q], sd_of[q]
            qa = q * n_aggs
            best1, best2, t = inf, inf, n_aggs
            best_cells = 0
            gu, gd = cu_groups[su // n_aggs], cd_groups[sd // n_aggs]
            for a, b, m in combos:
                if a > best1 or (a == best1 and b > best2):
                    break
                # Positions split by their aggs' least core loads x0, y0: no cell of one
                # beats (max(a, x0, y0), b + x0 + y0), so whole sets are passed over.
                for x0, mx0 in gu.items():
                    m1 = m & mx0
                    if not m1:
                        continue
                    for y0, my0 in gd.items():
                        m2 = m1 & my0
                        if not m2:
                            continue
                        lb1 = a if a > x0 else x0
                        if y0 > lb1:
                            lb1 = y0
                        lb2 = b + x0 + y0
                        while m2:
                            low = m2 & -m2
                            tt = low.bit_length() - 1
                            if lb1 > best1 or (
                                lb1 == best1 and (lb2 > best2 or (lb2 == best2 and tt > t))
                            ):
                                break  # positions come in rising order; the best only falls
                            m2 ^= low
                            j = perm_t[tt]
                            ok = usable[qa + j]
                            xs, ys = cu_levels[su + j], cd_levels[sd + j]
                            cells = xs[x0] & ys[y0] & ok
                            if cells:  # the bound is met, by these cores only (x + y least)
                                k1, k2 = lb1, lb2
                            else:
                                k1, k2 = inf, inf
                            for x, mx in () if cells else xs.items():
                                mx &= ok
                                if not mx:
                                    continue
                                for y, my in ys.items():
                                    mm = mx & my
                                    if not mm:
                                        continue
                                    c1 = x if x > y else y
                                    if c1 < a:
                                        c1 = a
                                    c2 = b + x + y
                                    if c1 < k1 or (c1 == k1 and c2 < k2):
                                        k1, k2, cells = c1, c2, mm
                                    elif c1 == k1 and c2 == k2:
                                        cells |= mm
                            if k1 < best1 or (
                                k1 == best1 and (k2 < best2 or (k2 == best2 and tt < t))
                            ):
                                best1, best2, t, best_cells = k1, k2, tt, cells
            s = (best_cells & -best_cells).bit_length() - 1
            bit_s = 1 << s
            chosen_t.append(t)
            chosen_rank.append((usable[qa + perm_t[t]] & (bit_s - 1)).bit_count())
            j = perm_t[t]
            core_up.add(su + j, s, w)
            core_down.add(sd + j, s, w)
        # leaf_up.add(u, t, w) and leaf_down.add(v, t, w), written out: four calls a flow
        # were a fifth of the loop, and a leaf's least load is never asked for.
        bit = 1 << t
        for values, levels in ((up_values[u], lu), (down_values[v], ld)):
            old = values[t]
            new = values[t] = old + w
            rest = levels[old] ^ bit
            levels[new] = levels.get(new, 0) | bit
            if rest:
                levels[old] = rest
            else:
                del levels[old]

    for links in (leaf_up, leaf_down, core_up, core_down):
        links.write(load)
    load[problem.pad] = pad_load
    count = tree.count[used]
    first = np.cumsum(count, axis=1) - count
    out: IntArray = first[local, np.asarray(chosen_t, dtype=np.int64)] + np.asarray(
        chosen_rank, dtype=np.int64
    )
    return out
