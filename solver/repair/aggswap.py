"""Agg swaps: the moves a fat-tree re-plan needs when an agg loses a core link on a full fabric.

Why its own module: when the link between agg ``(x, j)`` (pod ``x``, agg index ``j``) and a
core of group ``j`` goes down, the agg's core links carry two flows fewer each way. On a fabric
whose leaf links are all full (the shuffled ring: every leaf sends and receives exactly as many
flows as its uplinks hold at the bound) every leaf of pod ``x`` still sends exactly its share
through agg ``j``, so the flows of pod ``x`` through agg ``j`` that *leave the pod* must drop by
two and those *within the pod* rise by two: a flow within pod ``x`` must come to agg ``j`` from
another agg ``j2``, and at both its leaves a flow leaving or entering the pod on agg ``j`` must
go to ``j2`` in its place. Each of those changes a leaf link in another pod, which needs a flow
there to change from ``j2`` to ``j``, and so on: a *cycle* alternating between the two aggs
through the leaves, closed when it comes back. One-link chains
(:mod:`solver.repair.treechains`) cannot find that (its first step leaves two links over), and
the degraded colouring that followed them re-coloured whole pods (131,072 GPUs: 143 moves).

**A cycle** (:func:`_one_cycle`): a flow ``h`` within pod ``x`` on agg ``j2``; a flow ``a``
from ``h``'s source leaf out of the pod on agg ``j``; a flow ``d`` into ``h``'s destination
leaf from another pod on agg ``j``; then an alternating path of flows from ``a``'s destination
leaf back to ``d``'s source leaf, each leaving ``j2`` for ``j`` (arriving at a leaf) and ``j``
for ``j2`` (leaving one), found breadth-first from both ends and joined where they meet.
Swapping the aggs of every flow of the cycle keeps every leaf link's count, moves one flow
within pod ``x`` onto agg ``j`` and one flow each way off it. Flows that change agg take the
core of their new group with the most room; a core link left over is relieved afterwards by the
one-link chains (a core change within a group), as are the flows that lost their path.

**Guarantee.** None by itself: the caller (:func:`solver.repair.treemoves.repair_tree`) keeps the
result only where every flow then fits within the target, as for its other repairs.
"""

from __future__ import annotations

import time

import numpy as np

from solver.exact.treecounts import Counts

__all__ = ["swap_cycles"]

HALF_DEPTH = 7
"""Longest half of a cycle's alternating path searched from each end (flows)."""

CANDIDATES = 48
"""Cycle starts (a flow within the pod and its two neighbours on ``j``) searched before the
shortest cycle found is taken."""

MAX_CYCLES = 8
"""Most cycles one re-plan makes (two per agg that lost one core link); where more are needed
(a core lost: two for each pod's agg of its group) none is tried."""


def swap_cycles(state: Counts, todo: list[int], deadline: float) -> int:
    """Make the cycles the aggs short of core links need (module doc); how many were made.
    ``todo`` are the flows that lost their path (not placed on the state)."""
    made = 0
    del todo  # their previous paths are gone; the lost links' room is what counts
    short = _short(state)
    if sum(need for _, _, need in short) > MAX_CYCLES:
        return 0  # a lost core or more: the degraded colouring's case, not a few cycles'
    for x, j, need in short:
        for _ in range(need):
            if made >= MAX_CYCLES or time.perf_counter() > deadline:
                return made
            if not _one_cycle(state, x, j):
                break
            made += 1
    return made


def _short(state: Counts) -> list[tuple[int, int, int]]:
    """``(pod, agg index, cycles)`` of each agg with a lost core link: the room its lost links
    had, each way, less the room left on its live ones (the previous plan's paths over a lost
    link are not known here; on a full fabric they filled it)."""
    sh = state.shape
    out = []
    lost_up = ~state.ok[sh.agg_up]
    lost_down = ~state.ok[sh.agg_down]
    for x, j in zip(*np.nonzero(lost_up.any(axis=2) | lost_down.any(axis=2)), strict=True):
        need = 0
        for lost, links in ((lost_up, sh.agg_up[x, j]), (lost_down, sh.agg_down[x, j])):
            free = int(np.clip(state.room[links] - state.load[links], 0, None).sum())
            need = max(need, int(lost[x, j].sum()) * state.target - free)
        if need > 0:
            out.append((int(x), int(j), need))
    return out


def _agg(state: Counts, f: int) -> int:
    k = int(state.option[f])
    return k // state.shape.cores_per_group if state.far[f] else k


def _one_cycle(state: Counts, x: int, j: int) -> bool:
    """One cycle for agg ``(x, j)`` (module doc), made; ``False`` where none is found."""
    sh = state.shape
    pod, s, t = sh.pod, state.s, state.t
    intra = np.flatnonzero(~state.far & (pod[s] == x) & (state.option >= 0) & (state.option != j))
    found: list[tuple[int, int, int, int, list[int]]] = []
    tried = 0
    for h in intra.tolist():
        j2 = int(state.option[h])
        a_set = [a for a in state.on(int(sh.up[s[h], j])) if state.far[a] and _agg(state, a) == j]
        d_set = [d for d in state.on(int(sh.down[t[h], j])) if state.far[d] and _agg(state, d) == j]
        for a in sorted(a_set):
            for d in sorted(d_set):
                path = _join(state, x, j, j2, int(t[a]), int(s[d]), {h, a, d})
                tried += 1
                if path is not None:
                    found.append((h, j2, a, d, path))
        if tried >= CANDIDATES and found:
            break
    if not found:
        return False
    # the cycle whose moves plus the core links it leaves over (each a chain to relieve, a
    # move or two) are fewest: tried on the counts and taken back
    best, fewest = found[0], None
    for cycle in sorted(found, key=lambda c: len(c[4]))[:CANDIDATES]:
        undo = _make(state, j, cycle)
        cost = len(undo) + int(np.count_nonzero(state.load > state.room))
        state.unmake(undo)
        if fewest is None or cost < fewest:
            best, fewest = cycle, cost
    _make(state, j, best)
    return True


def _make(
    state: Counts, j: int, cycle: tuple[int, int, int, int, list[int]]
) -> list[tuple[int, int]]:
    """Swap the aggs of ``cycle``'s flows (see :func:`_one_cycle`); the undo list."""
    h, j2, a, d, path = cycle
    # every flow of the cycle off its path first, so that each finds the core slots the
    # others left (a flow leaving j2 at a leaf frees the core link a flow arriving there uses)
    goes = [(h, j)] + [(f, j2) for f in (a, d, *path[1::2])] + [(f, j) for f in path[0::2]]
    undo = [(f, int(state.option[f])) for f, _ in goes]
    for f, _ in goes:
        state.set(f, -1)
    for f, agg in goes:
        _move(state, f, agg)
    return undo


def _half(
    state: Counts, x: int, j: int, j2: int, start: int, forward: bool, used: set[int]
) -> dict[tuple[int, int], list[int]]:
    """Alternating paths from leaf ``start``, by the leaf and side they reach.

    Forward from a destination leaf (side 1): a flow arriving there on ``j2`` (to leave it for
    ``j``) leads to its source leaf (side 0), from which a flow on ``j`` (to leave it for
    ``j2``) leads to its destination leaf, and so on. Backward from a source leaf (side 0):
    the same flows read the other way. Flows of pod ``x`` (but the cycle's own) are left out:
    changing them would undo the cycle's work there."""
    sh = state.shape
    pod, s, t = sh.pod, state.s, state.t
    reached: dict[tuple[int, int], list[int]] = {(start, 1 if forward else 0): []}
    frontier = [(start, 1 if forward else 0)]
    for _ in range(HALF_DEPTH):
        nxt = []
        for leaf, side in frontier:
            path = reached[(leaf, side)]
            if forward:  # at a destination leaf take a j2 flow arriving; at a source a j flow
                link, want = (sh.down[leaf, j2], j2) if side == 1 else (sh.up[leaf, j], j)
            else:  # at a source leaf take a j2 flow leaving; at a destination a j flow arriving
                link, want = (sh.up[leaf, j2], j2) if side == 0 else (sh.down[leaf, j], j)
            for f in sorted(state.on(int(link))):
                if f in used or f in path or _agg(state, f) != want:
                    continue
                if pod[s[f]] == x or pod[t[f]] == x:
                    continue
                other = (int(s[f]), 0) if side == 1 else (int(t[f]), 1)
                if other not in reached:
                    reached[other] = path + [f]
                    nxt.append(other)
        frontier = nxt
    return reached


def _join(
    state: Counts, x: int, j: int, j2: int, begin: int, end: int, used: set[int]
) -> list[int] | None:
    """The alternating path of flows from destination leaf ``begin`` to source leaf ``end``
    (module doc): first a flow leaving ``j2`` for ``j``, last one too; ``None`` if none is
    found within twice :data:`HALF_DEPTH` flows."""
    ahead = _half(state, x, j, j2, begin, True, used)
    back = _half(state, x, j, j2, end, False, used)
    best: list[int] | None = None
    for key, first in ahead.items():
        second = back.get(key)
        if second is None or (not first and not second):
            continue
        path = first + second[::-1]
        if len(path) % 2 == 0 or len(set(path)) != len(path):
            continue
        if best is None or len(path) < len(best):
            best = path
    return best


def _move(state: Counts, f: int, j: int) -> None:
    """Flow ``f`` to agg index ``j``; across pods on the core of group ``j`` with the most
    room up from its source pod and down into its destination pod (a full one is relieved
    afterwards)."""
    if not state.far[f]:
        state.set(f, j)
        return
    sh = state.shape
    up = sh.agg_up[sh.pod[state.s[f]], j]
    down = sh.agg_down[sh.pod[state.t[f]], j]
    free_up, free_down = state.room[up] - state.load[up], state.room[down] - state.load[down]
    # room at both ends first, then at one (the other is relieved by a chain in the group)
    score = 4 * ((free_up > 0).astype(np.int64) + (free_down > 0)) + free_up + free_down
    score = np.where(state.ok[up] & state.ok[down], score, -(1 << 20))
    state.set(f, j * sh.cores_per_group + int(np.argmax(score)))
