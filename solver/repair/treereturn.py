"""Sending moved flows back on a fat-tree: a flow that left its previous option returns where a
chain of flows that moved already (price zero) makes room, singly and then in pairs and triples
where no single return pays.

Why apart from :mod:`solver.repair.treemoves`: placing the displaced flows and returning the moved
ones are two steps with their own callers; the return also runs alone on a plan made by other
means (the degraded colouring, :mod:`solver.repair.degraded`, whose chains move many flows a
chain of already-moved flows could return). Both use the chain search of
:mod:`solver.repair.treechains`.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import numpy.typing as npt

from solver.exact.treecounts import Counts
from solver.exact.treeshape import FatTreeShape, _leaves
from solver.repair.treechains import _moved, _relieve, _restore
from topology.index import IntArray


def _return(state: Counts, group: tuple[int, ...], deadline: float = float("inf")) -> bool:
    """Flows ``group`` (all moved) back on their previous options, the links that leaves over
    relieved by chains costing fewer new moves than the returns earn; whether that was made
    (else nothing changed)."""
    saved = state.option.copy()
    for g in group:
        state.set(g, int(state.prior[g]))
    price, budget = 0, len(group)
    for g in group:
        for r in state.path[g].tolist():
            if state.load[r] <= state.room[r]:
                continue
            found = _relieve(state, [((r,), [])], set(group), budget - price, deadline)
            if found is None:
                _restore(state, saved)
                return False
            price += found[1]
    if price < budget:
        return True
    _restore(state, saved)
    return False


def _send_back(state: Counts, deadline: float = float("inf")) -> None:
    """Moved flows return to their previous option where that costs no other new move: it
    has room again, or a chain of flows that moved already (price zero) makes room."""
    for _ in range(3):
        changed = False
        for g in _moved(state):
            if time.perf_counter() > deadline:
                return
            if state.option[g] != state.prior[g] and _return(state, (g,)):
                changed = True
        if not changed:
            return


GROUP_FLOWS = 64
"""Most moved flows for which :func:`_send_back_groups` tries pairs and triples (a single
link's repair moves a dozen or two; a lost core's hundreds would make thousands of groups)."""


GROUP_SECONDS = 0.1
"""Most :func:`send_back` spends on groups, apart from its own deadline: they are tried only
for a single link's few moved flows, where they take 60-80 ms at 16,384 GPUs (3-tier, light
uplink: 74 groups), and the single returns before them may have spent that deadline."""


def _blocking(state: Counts, moved: list[int]) -> dict[int, set[int]]:
    """For each moved flow, the moved flows sitting on a link of its previous path: one of
    them leaving makes room for its return."""
    rows = state.paths(np.array(moved, dtype=np.int64), state.prior[moved])
    holders: dict[int, set[int]] = {}
    for b in moved:
        for r in state.held(b):
            holders.setdefault(r, set()).add(b)
    return {
        a: {b for r in rows[n].tolist() for b in holders.get(r, ()) if b != a}
        for n, a in enumerate(moved)
    }


def _reach(direct: dict[int, set[int]]) -> dict[int, set[int]]:
    """Each flow's closure under :func:`_blocking` (itself included)."""
    reach: dict[int, set[int]] = {}
    for a in direct:
        seen, todo = {a}, [a]
        while todo:
            for b in direct[todo.pop()]:
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        reach[a] = seen
    return reach


def _groups(moved: list[int], direct: dict[int, set[int]], size: int) -> list[tuple[int, ...]]:
    """The groups :func:`_send_back_groups` tries: pairs where one reaches the other
    (:func:`_reach`), triples where one member blocks or is blocked by both others directly.
    Why so few: each try is a few chain searches (about 1 ms at 16,384 GPUs), and groups
    whose members do not block each other seldom pay. On the 3-tier 16,384-GPU light uplink
    the pair that paid is joined by reach only, through other moved flows, and the triple
    that paid is a chain of direct blocking (each of two flows sits on the next one's previous
    path): 31 tries, where every pair and triple is 714 tries and the same two paid."""
    if size == 2:
        reach = _reach(direct)
        return [
            (a, b) for a, b in itertools.combinations(moved, 2) if b in reach[a] or a in reach[b]
        ]
    near = {a: direct[a] | {b for b in moved if a in direct[b]} for a in moved}
    return [
        group
        for group in itertools.combinations(moved, 3)
        if any(len(near[x].intersection(group)) == 2 for x in group)  # one blocks or frees both
    ]


def _send_back_groups(state: Counts, deadline: float = float("inf")) -> None:
    """After :func:`_send_back`: pairs, then triples, of moved flows returned at once where
    the chains making room cost fewer new moves than the returns earn.

    Why: a moved flow across pods sits on four links that its previous path does not use, and
    its return leaves up to four links over; one flow's return seldom pays for the chains
    that relieves, while two or three returns together do, each freeing links another's
    return needs (3-tier 16,384 GPUs, light uplink: after the degraded colouring's send-back
    15 moved besides the crossed, a pair then a triple took that to 13). Which groups are
    tried: :func:`_groups`. Bounded by ``deadline`` and :data:`GROUP_FLOWS`."""
    for size in (2, 3):
        moved = _moved(state)
        if len(moved) > GROUP_FLOWS or len(moved) < size:
            return
        changed = False
        for group in _groups(moved, _blocking(state, moved), size):
            if time.perf_counter() > deadline:
                return
            if all(state.option[g] != state.prior[g] for g in group) and _return(
                state, group, deadline
            ):
                changed = True
        if changed:
            _send_back(state, deadline)


def send_back(
    shape: FatTreeShape,
    usable: npt.ArrayLike,
    ends: tuple[npt.ArrayLike, npt.ArrayLike],
    previous: tuple[IntArray, IntArray],
    current: tuple[IntArray, IntArray],
    target: int,
    deadline: float = float("inf"),
) -> tuple[IntArray, IntArray]:
    """``current`` (agg index and core per flow, every flow placed within ``target``) with
    moved flows sent back to their ``previous`` option where a chain of flows that moved
    already makes room: fewer moves, the same links within ``target``. For a plan made without
    regard to moves (the degraded colouring's chains re-colour many flows)."""
    s, t = _leaves(shape, *ends)
    ok = np.append(np.asarray(usable, dtype=bool), False)
    far = shape.pod[s] != shape.pod[t]
    flows = np.flatnonzero(s != t)
    g_count = shape.cores_per_group

    def options(agg: IntArray, core: IntArray) -> IntArray:
        out = np.where(far, agg * g_count + core, agg)
        out[(agg < 0) | (far & (core < 0))] = -1
        return out[flows]

    state = Counts(shape, ok, (s[flows], t[flows]), options(*current), target)
    prior = options(*previous)
    placed = np.flatnonzero(prior >= 0)
    if placed.size:  # a previous option over a lost link is no place to return to
        rows = state.paths(placed, prior[placed])
        prior[placed[~state.ok[rows].all(axis=1)]] = -1
    state.prior = prior
    _send_back(state, deadline)
    _send_back_groups(state, time.perf_counter() + GROUP_SECONDS)
    best = state.option
    agg = np.array(current[0], dtype=np.int64, copy=True)
    core = np.array(current[1], dtype=np.int64, copy=True)
    mine = far[flows]
    agg[flows] = np.where(mine, best // g_count, best)
    core[flows[mine]] = best[mine] % g_count
    return agg, core
