"""Stage-wise colouring of a fat-tree with links down or drained: lost links' colours get no room.

Why: on a degraded fat-tree the planner coloured the intact tree and repaired the flows whose
path was gone. When the fabric is tight (a 16k-GPU fat-tree under a ring: every leaf uplink and
nearly every agg-core link at the optimum's load), a local repair cannot find room that only a
global rebalancing across many leaves frees, and the plan stayed 50% above the bound. The issue's
hint applies: a failure removes colours from some vertices of the same bipartite structure, and
the colour splits of :mod:`solver.exact.fattree` are network flows, which handle capacities exactly.

**Method.** For a target ``K`` (the planner's bound, in flows per link), every set of the
splits gets a room per colour instead of one cap: leaf ``s`` and agg ``j`` have ``K`` if the
link ``s -> agg j`` (``agg j -> s`` for the destination side) is usable, else 0; agg ``(p, j)``
and core ``g`` have ``K`` if that agg-core link is usable. A split of a colour range in halves
then bounds each set's flows in the first half by the room of the first half's colours, and
from below by what the second half's colours cannot hold: every leaf of colour ``j`` ends with at
most its room, so no flow takes a lost link and none is above ``K``. Stage 1 (aggs) runs by
leaves (Theorem 1's sets); the leaf-wise colours may leave a pod more cross-pod flows on an agg
than its usable core links take (a core lost), which the alternating chains of
:mod:`solver.exact.podchains` fix by moving intra-pod flows onto that agg (at 16k GPUs the lost
core, drained core and two-link cases of the failure ladder all need them). If that fails, stage 1
runs by pods too (Theorem 2's sets: a pod's room per agg is ``K`` times its usable core links,
and each leaf link's room is split between the leaf's intra-pod and cross-pod flows, intra-pod
ones first under the aggs with the fewest core links). Stage 2 (cores) per agg as in the intact
case.

**Re-plans.** With ``previous``, the first method keeps every flow's old agg whose leaf links
are usable and places the displaced flows by alternating chains in the leaf graph
(:mod:`solver.exact.kempechain`), then the pod chains; stage 2 keeps every core of a group where all
fit and places the rest by chains in that group's pod graph. Only where that fails do the
splits above run (preferring the old colours), which moves far more flows.

**Guarantee.** None beyond what is checked: a split may find no circulation (the room is
too tight for the halving order), in which case the function returns ``None`` and the planner
keeps its other methods. A result is valid (every path over usable links) and at most ``K``
on every switch link, hence optimal when ``K`` is a lower bound; the moves of a re-plan are
not minimised (the planner reports a lower bound on them beside what moved).
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from solver.exact.fattree import (
    FatTreeAssignment,
    FatTreeShape,
    SplitInfeasible,
    _colour,
    _Family,
    _leaves,
    _paths,
)
from solver.exact.kempechain import Colouring
from solver.exact.podchains import fix_pods
from solver.repair.treemoves import send_back
from topology.index import BoolArray, IntArray

__all__ = ["SEND_BACK_SECONDS", "assign_degraded"]

SEND_BACK_SECONDS = 0.15
"""Most a re-plan spends sending moved flows back (:func:`solver.repair.treemoves.send_back`): a
16k-GPU lost core's colouring moved 260 flows, 177 after 0.3 s of it."""


def _cumulated(room: IntArray) -> IntArray:
    """``room[set, colour]`` as :class:`_Family` wants it: cumulated, a zero column first."""
    out = np.zeros((room.shape[0], room.shape[1] + 1), dtype=np.int64)
    np.cumsum(room, axis=1, out=out[:, 1:])
    return out


def _family(room: IntArray, parent: IntArray | None = None) -> _Family:
    count = room.shape[0]
    top = np.full(count, -1, dtype=np.int64) if parent is None else parent
    return _Family(top, room.max(axis=1, initial=0), _cumulated(room))


def _leaf_rooms(shape: FatTreeShape, ok: BoolArray, target: int) -> tuple[IntArray, IntArray]:
    """Per node and agg index: ``target`` where the leaf's uplink (downlink) is usable."""
    leaves = np.flatnonzero(shape.is_leaf)
    up = np.zeros(shape.up.shape, dtype=np.int64)
    down = np.zeros(shape.down.shape, dtype=np.int64)
    up[leaves] = target * ok[shape.up[leaves]]
    down[leaves] = target * ok[shape.down[leaves]]
    return up, down


def _stage_one(
    shape: FatTreeShape,
    ok: BoolArray,
    ends: tuple[IntArray, IntArray],
    hint: IntArray,
    target: int,
    method: str,
) -> IntArray:
    """An agg index per cross-leaf flow within the rooms (raises :class:`SplitInfeasible`)."""
    s, d = ends
    n, aggs, pods = shape.is_leaf.size, shape.aggs, shape.pods
    up, down = _leaf_rooms(shape, ok, target)
    if method == "leaf":
        return _colour((s, d), (_family(up), _family(down)), hint, aggs, True)
    intra = shape.pod[s] == shape.pod[d]
    parent = np.full(2 * n + pods, -1, dtype=np.int64)
    parent[:n] = np.where(shape.is_leaf, 2 * n + shape.pod, -1)
    cores = (ok[shape.agg_up].sum(axis=2), ok[shape.agg_down].sum(axis=2))  # [pod, j]
    pod = np.where(shape.is_leaf, shape.pod, 0)
    families = []
    for side, (x, leaf_room) in enumerate(((s, up), (d, down))):
        near = np.bincount(x[intra], minlength=n)
        inner = _intra_room(leaf_room, near, cores[side][pod])
        room = np.concatenate([leaf_room - inner, inner, target * cores[side]])
        families.append(_family(room, parent))
    members = (s + n * intra, d + n * intra)
    return _colour(members, (families[0], families[1]), hint, aggs, True)


def _intra_room(leaf_room: IntArray, near: IntArray, cores: IntArray) -> IntArray:
    """Each leaf link's share of room for intra-pod flows (the rest is for cross-pod ones):
    one unit a link per round, links under the aggs with the fewest usable core links first
    (intra-pod flows need no core), until the leaf's ``near`` intra-pod flows have room. The
    two shares of a link add up to its room, so the leaf link stays within the target (what
    Theorem 2's separate caps cannot promise)."""
    nodes = np.arange(leaf_room.shape[0])
    order = np.argsort(cores, axis=1, kind="stable")
    inner = np.zeros_like(leaf_room)
    left = near.copy()
    for _ in range(int(leaf_room.max(initial=0))):
        for j in order.T:
            can = (left > 0) & (leaf_room[nodes, j] > inner[nodes, j])
            inner[nodes[can], j[can]] += 1
            left[can] -= 1
        if not left.any():
            break
    return inner


def _stage_two(
    shape: FatTreeShape,
    ok: BoolArray,
    ends: tuple[IntArray, IntArray],
    agg: IntArray,
    hint: IntArray,
    target: int,
) -> IntArray:
    """A core of group ``agg`` per cross-pod flow within the rooms of the agg-core links."""
    s, d = ends
    pods, g = shape.pods, shape.cores_per_group
    sets: tuple[IntArray, IntArray] = (agg * pods + shape.pod[s], agg * pods + shape.pod[d])
    rooms = [
        target * ok[links].transpose(1, 0, 2).reshape(shape.aggs * pods, g)
        for links in (shape.agg_up, shape.agg_down)
    ]
    return _colour(sets, (_family(rooms[0]), _family(rooms[1])), hint, g, True)


def _kept_aggs(
    shape: FatTreeShape,
    ok: BoolArray,
    ends: tuple[IntArray, IntArray],
    prev: IntArray,
    target: int,
) -> IntArray | None:
    """Each flow's previous agg index where its leaf links are usable, the others' an agg with
    room at both leaves, by an alternating chain if need be (:mod:`solver.exact.kempechain`);
    ``None`` if a leaf link would be over ``target`` or a flow finds no chain (then a whole
    stage 1 runs)."""
    s, d = ends
    up, down = _leaf_rooms(shape, ok, target)
    agg = prev.copy()
    placed = agg >= 0
    placed[placed] = ok[shape.up[s[placed], agg[placed]]] & ok[shape.down[d[placed], agg[placed]]]
    agg[~placed] = -1
    graph = Colouring(s, d, agg, up, down)
    if not graph.within():
        return None
    for f in np.flatnonzero(~placed).tolist():
        if not graph.place(f):
            return None
    return graph.colour


def _groups_to_redo(
    shape: FatTreeShape,
    ok: BoolArray,
    ends: tuple[IntArray, IntArray],
    agg: IntArray,
    keep: IntArray,
    far: BoolArray,
    target: int,
) -> IntArray:
    """Core groups (agg indices) whose cross-pod flows cannot all keep their previous core:
    one has none (new agg, or its core link is gone) or a core link would be over ``target``.
    Stage 2 recolours only these: the other groups' cores stay as they were (no moves)."""
    s, d = ends
    pod = shape.pod
    redo = np.zeros(shape.aggs, dtype=bool)
    np.logical_or.at(redo, agg[far & (keep < 0)], True)
    kept = np.flatnonzero(far & (keep >= 0))
    j, g = agg[kept], keep[kept]
    used = np.concatenate([shape.agg_up[pod[s[kept]], j, g], shape.agg_down[pod[d[kept]], j, g]])
    load = np.bincount(used, minlength=ok.size)
    bad = (load > target) | ((load > 0) & ~ok)
    np.logical_or.at(redo, np.tile(j, 2)[bad[used]], True)
    return np.flatnonzero(redo)


def _stage_two_kept(
    shape: FatTreeShape,
    ok: BoolArray,
    ends: tuple[IntArray, IntArray],
    agg: IntArray,
    keep: IntArray,
    target: int,
) -> IntArray:
    """Stage 2 for a re-plan: flows keep their previous core, the others take a core with
    room at both pods, by an alternating chain if need be; if a flow finds none, or the kept
    ones overfill a link, the whole stage 2 of these groups (:func:`_stage_two`, preferring
    ``keep``)."""
    s, d = ends
    pods = shape.pods
    rooms = [
        target * ok[links].transpose(1, 0, 2).reshape(shape.aggs * pods, -1)
        for links in (shape.agg_up, shape.agg_down)
    ]
    if np.count_nonzero(keep < 0) * 4 > keep.size:  # mostly new: the splits are faster
        return _stage_two(shape, ok, ends, agg, keep, target)
    graph = Colouring(
        agg * pods + shape.pod[s], agg * pods + shape.pod[d], keep.copy(), rooms[0], rooms[1]
    )
    if graph.within() and all(graph.place(f) for f in np.flatnonzero(keep < 0).tolist()):
        return graph.colour
    return _stage_two(shape, ok, ends, agg, keep, target)


def _fits(
    shape: FatTreeShape,
    ok: BoolArray,
    ends: tuple[IntArray, IntArray],
    choice: tuple[IntArray, IntArray],
    target: int,
) -> bool:
    """Every flow placed on usable links, none over ``target`` (what :func:`send_back` needs)."""
    (s, d), (agg, core) = ends, choice
    on, far = s != d, shape.pod[s] != shape.pod[d]
    if np.any(agg[on] < 0) or np.any(core[far] < 0):
        return False
    j, g = agg[on], core[on]
    hops = [shape.up[s[on], j], shape.down[d[on], j]]
    cross = far[on]
    hops += [shape.agg_up[shape.pod[s[on]][cross], j[cross], g[cross]],
             shape.agg_down[shape.pod[d[on]][cross], j[cross], g[cross]]]  # fmt: skip
    used = np.concatenate(hops)
    return bool(ok[used].all()) and int(np.bincount(used).max(initial=0)) <= target


def assign_degraded(
    shape: FatTreeShape,
    usable: BoolArray,
    src_leaf: npt.ArrayLike,
    dst_leaf: npt.ArrayLike,
    target: int,
    previous: tuple[IntArray, IntArray] | None = None,
) -> FatTreeAssignment | None:
    """Switch paths of equal-rate flows over ``usable`` resources with at most ``target`` flows
    on every switch link, or ``None`` when the splits find no room (see the module doc).

    ``shape`` is the cabling's (:func:`solver.exact.fattree.analyse` with ``ignore_status``);
    ``previous`` gives each flow's former agg index and core (``-1`` for none; a path over
    usable links only) to keep where the rooms allow.
    """
    s, d = _leaves(shape, src_leaf, dst_leaf)
    ok = np.append(np.asarray(usable, dtype=bool), False)
    none = np.full(s.size, -1, dtype=np.int64)
    prev_agg, prev_core = none, none
    if previous is not None:
        prev_agg, prev_core = previous
    had = prev_agg >= 0
    on = s != d
    far = shape.pod[s] != shape.pod[d]
    methods = ("previous", "leaf", "pod") if previous is not None else ("leaf", "pod")
    for method in methods:
        agg, core = none.copy(), none.copy()
        try:
            if method == "previous":  # the old aggs where they still fit: chains fix pods
                kept = _kept_aggs(shape, ok, (s[on], d[on]), prev_agg[on], target)
                if kept is None:
                    continue
                agg[on] = kept
            else:
                agg[on] = _stage_one(shape, ok, (s[on], d[on]), prev_agg[on], target, method)
            if method != "pod":  # leaf-wise colours may leave pods over: chains fix that
                moving = (prev_agg < 0) | (far & (prev_core < 0)) if had.any() else None
                fixed = fix_pods(shape, ok, (s[on], d[on]), agg[on], target,
                                 None if moving is None else moving[on])  # fmt: skip
                if fixed is None:
                    continue
                agg[on] = fixed
            keep = np.where(agg == prev_agg, prev_core, -1)
            redo = far & np.isin(agg, _groups_to_redo(shape, ok, (s, d), agg, keep, far, target))
            core[far & ~redo] = keep[far & ~redo]
            if redo.any():
                core[redo] = _stage_two_kept(shape, ok, (s[redo], d[redo]), agg[redo],
                                             keep[redo], target)  # fmt: skip
        except SplitInfeasible:
            continue
        if previous is not None and _fits(shape, ok, (s, d), (agg, core), target):
            # the chains above re-colour flows whose agg or core changed: send back those a
            # chain of flows that moved already makes room for (fewer moves, same target)
            deadline = time.perf_counter() + SEND_BACK_SECONDS
            agg, core = send_back(shape, usable, (s, d), previous, (agg, core), target, deadline)
        paths = _paths(shape, s, d, agg, core)
        used = np.fromiter((r for p in paths for r in p), np.int64)
        load = np.bincount(used, minlength=ok.size)
        if not ok[used].all() or load.max(initial=0) > target:
            continue
        moved = int((had & ((agg != prev_agg) | (core != prev_core))).sum())
        peak = int(load.max(initial=0))
        return FatTreeAssignment(paths, agg, core, target, peak, moved, f"degraded-{method}")
    return None
