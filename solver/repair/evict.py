"""Repair a plan at a target utilization: keep what may stay, evict the excess, re-place.

Why: after one failure, drain or restore the plan in force is almost right. Re-solving from
scratch and then steering the result back toward the old plan (what a secondary "fewest moves"
objective does) is slow and still moves more than needed; repairing it directly is both fast and
close to the least movement possible, and it comes with a *lower bound on the moves* so the
planner can say how close.

**Target.** Every switch-to-switch resource ``r`` may carry utilization ``<= z`` (``z`` is
normally the best lower bound on the max utilization: reaching it is optimal).

**Lower bound on moves.** A flow whose previous path is gone must move. Of the flows that may
stay, resource ``r`` holding load ``L_r`` with utilization above ``z`` must shed at least
``e_r = ceil((L_r * σ_r - z) / (w_r * σ_r))`` of them (``w_r`` its heaviest flow, ``σ_r`` its
scale). A flow's path crosses each *layer* of a Clos at most once (leaf->agg, agg->core,
core->agg, agg->leaf; in two tiers uplinks and downlinks), so moving one flow relieves at most one
resource per layer, and at least ``max over layers of sum e_r`` flows must move. Equal to the
minimum in the common cases (a failed link: its flows move and nothing else needs to).

**Method.** (1) *Evict*: on every resource above ``z`` (most over first), the flows that must
leave, preferring those that also relieve another over-full resource, then the lightest-loaded
alternatives. (2) *Place* the evicted and the unplaced flows, heaviest first, each on the
candidate whose worst utilization after adding it is least, if that is ``<= z``. (3) Where no
candidate fits, the *cheapest chain* (:mod:`solver.repair.chains`): the flow takes a candidate full
on one resource (or two), a flow on that resource leaves for a candidate full on at most one other
(counting the room the chain's earlier moves freed), and so on until one lands where there is
room; chains are priced in new moves (a flow that moved already moves again for free, one
sent back to its old path earns one back) and searched 0-1 breadth-first. This is the
capacitated, many-colour form of a Kempe chain; on a full fabric (every leaf link at ``z``)
nothing shorter exists. (4) Failing that, on two tiers a two-spine exchange
(:mod:`solver.repair.kempe`), then an *ejection chain* up to three levels deep: for each blocking
resource of the candidate with the fewest, relocate one flow that crosses it. If a flow still
does not fit, the repair fails at this ``z`` and the planner falls back to its other methods.
(5) Last, moved flows go back to their previous path wherever a chain of price zero makes
room. (6) Chains made one after another can collide (the first flow's cheapest chain takes
the room the next one's needed): on a component of up to :data:`LOOK_FLOWS` flows that moved
more than :func:`min_moves`, a second repair looks one chain ahead and is kept if it moves
fewer; ``joint`` also tries the stuck flows' chains chosen together
(:mod:`solver.repair.jointchains`). Each step only looks at the flows on the resources involved,
so a repair costs milliseconds even at 16k GPUs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from solver.repair.chains import (
    State,
    chain_options,
    limit_of,
    make,
    place_by_chain,
    restore,
    send_back,
)
from solver.repair.jointchains import place_together
from solver.repair.kempe import SpineGrid, exchange
from solver.space.problem import Problem
from topology.index import BoolArray, FloatArray, IntArray

__all__ = ["Repair", "layers", "min_moves", "repair"]


@dataclass(frozen=True)
class Repair:
    """A repaired assignment of a component's flows (aligned with them), if one reached ``z``."""

    choice: IntArray
    reached: bool
    moved: int
    """Flows that had a path that may stay and were moved anyway (ejections included)."""
    timed_out: bool = False
    """The deadline stopped the search (chains, exchanges, ejections) before every flow fit."""


def layers(problem: Problem) -> IntArray:
    """A layer number per resource (plus the pad): the (tier of its source, tier of its
    destination) pair, so that a path crosses each layer at most once."""
    index = problem.index
    tier = np.asarray(index.tier, dtype=np.int64)
    out = np.full(problem.pad + 1, -1, dtype=np.int64)
    out[:-1] = tier[index.res_src] * 16 + tier[index.res_dst]
    return out


def min_moves(problem: Problem, flows: IntArray, prior: IntArray, z: float) -> int:
    """The lower bound of the module docstring: flows of ``flows`` that had a path (``prior``
    is ``-2`` for a flow without a previous path, ``-1`` for one whose path is gone) and must
    move for every resource to be at utilization ``<= z``."""
    forced = np.flatnonzero(prior == -1)
    kept = prior >= 0
    load: FloatArray = np.zeros(problem.pad + 1)
    extra = 0
    if kept.any():
        rows = problem.row_paths(problem.rows(flows[kept], prior[kept]))
        w = np.repeat(problem.weight[flows[kept]], rows.shape[1])
        res = rows.ravel()
        load = np.bincount(res, weights=w, minlength=problem.pad + 1).astype(np.float64)
        heaviest = np.zeros(problem.pad + 1)
        np.maximum.at(heaviest, res, w)
        scale = problem.scale
        over = np.flatnonzero((load * scale > limit_of(z)) & (scale > 0))
        if over.size:
            excess = np.ceil((load[over] * scale[over] - z) / (heaviest[over] * scale[over]) - 1e-9)
            layer = layers(problem)[over]
            codes = np.unique(layer, return_inverse=True)[1].ravel()
            extra = int(np.bincount(codes, weights=excess).max())
    # Equal weights: a displaced flow that fits on no candidate beside the flows that stay
    # lands on a link that was full, which some staying flow must leave; a moved flow leaves
    # one unit on each link of its path (at most ``H`` links), so ``ceil(stuck / H)`` moves.
    limit = limit_of(z)
    stuck = 0
    for f in flows[forced].tolist():
        rows = problem.candidates(int(problem.pair[f]))
        util = (load[rows] + problem.weight[f]) * problem.scale[rows]
        stuck += int(not np.any(util.max(axis=1) <= limit))
    weights = problem.weight[flows]
    if stuck and np.all(weights == weights[0]):  # one unit freed serves one displaced flow
        hops = problem.width
        extra = max(extra, -(-stuck // max(hops, 1)))
    return len(forced) + extra


def _evict(state: State) -> list[int]:
    """Remove flows from every resource above the limit (see the module docstring)."""
    problem = state.problem
    scale = problem.scale
    evicted: list[int] = []
    over = np.flatnonzero(state.load * scale > state.limit)
    order = over[np.argsort(-(state.load[over] * scale[over]), kind="stable")]
    for r in order.tolist():
        if state.load[r] * scale[r] <= state.limit:
            continue
        members = state.on(r)

        def score(i: int) -> tuple[int, float, int]:
            row = state.row(i, int(state.choice[i]))
            others = int(np.count_nonzero(state.load[row] * scale[row] > state.limit)) - 1
            return (-others, -float(state.weight[i]), i)

        for i in sorted(members, key=score):
            if state.load[r] * scale[r] <= state.limit:
                break
            state.remove(i)
            evicted.append(i)
    return evicted


EJECT_ROWS = 8
"""Candidates of a flow an ejection chain tries (fewest blocking resources first)."""

EJECT_DEPTH = 3
"""Levels of an ejection chain: a flow, the flows it displaces, the flows those displace."""

EJECT_DEEPER = 4
"""Flows on a blocking resource whose own ejection a chain tries one level deeper."""


def _eject(
    state: State, i: int, moved: BoolArray, depth: int = 2, frozen: frozenset[int] = frozenset()
) -> bool:
    """Place ``i`` by relocating one flow off each blocking resource of some candidate; a
    relocated flow that fits nowhere may in turn eject others, ``depth`` levels in all."""
    if time.perf_counter() > state.deadline:
        return False
    problem = state.problem
    scale = problem.scale
    util = state.utils(i)
    over = util > state.limit
    blocking = over.sum(axis=1)
    # Candidates blocked by the same resources fail alike: try one of each, fewest first.
    rows = state.candidates(i)
    signatures = np.where(over, rows, -1)
    order: list[int] = []
    seen: set[bytes] = set()
    for k in np.argsort(blocking, kind="stable").tolist():
        key = signatures[k].tobytes()
        if key not in seen:
            seen.add(key)
            order.append(k)
            if len(order) == EJECT_ROWS:
                break
    chain = frozen | {i}
    for k in order:
        saved = state.choice.copy()
        row = state.row(i, k)
        blocked = [r for r in row.tolist() if (state.load[r] + state.weight[i]) * scale[r]
                   > state.limit]  # fmt: skip
        state.add(i, k)
        ok = True
        for r in blocked:
            if state.load[r] * scale[r] <= state.limit:
                continue
            members = sorted((g for g in state.on(r) if g not in chain),
                             key=lambda g: (not moved[g], g))  # fmt: skip
            done = False
            for n, g in enumerate(members):
                old = int(state.choice[g])
                state.remove(g)
                k2 = state.best_fit(g)
                if k2 >= 0 and k2 != old:
                    state.add(g, k2)
                    done = True
                    break
                if depth > 1 and n < EJECT_DEEPER:
                    before = state.choice.copy()
                    if _eject(state, g, moved, depth - 1, chain) and (
                        state.load[r] * scale[r] <= state.limit
                    ):
                        done = True
                        break
                    restore(state, before)
                if state.choice[g] < 0:
                    state.add(g, old)
            if not done:
                ok = False
                break
        if ok:
            moved[state.choice != saved] = True
            return True
        restore(state, saved)
    return False


MAX_EXCHANGES = 64
"""Spine pairs a two-spine exchange tries for one flow before giving up on it."""


def _swap(state: State, grid: SpineGrid, i: int, z: float) -> bool:
    """Place ``i`` by a two-spine exchange (:mod:`solver.repair.kempe`), the one changing least:
    ``i`` goes to a spine ``a`` with room on one of its two links, and flows on ``a`` trade
    places with flows on a spine ``b`` that has room where ``a`` has none."""
    problem = state.problem
    index = problem.index
    u, v = problem.pair_leaves[state.pair[i]].tolist()
    lp = int(np.searchsorted(grid.pairs, state.pair[i]))
    usable = grid.rows[lp] >= 0
    scale, w = problem.scale, state.weight[i]

    def room(res: IntArray) -> BoolArray:
        ok: BoolArray = res >= 0
        ok[ok] = index.res_usable[res[ok]]
        safe = np.where(ok, res, problem.pad)
        fits: BoolArray = ok & ((state.load[safe] + w) * scale[safe] <= state.limit)
        return fits

    between = index.resource_between
    spines = grid.spines.tolist()
    room_up = room(np.array([between.get((u, s), -1) for s in spines], dtype=np.int64))
    room_down = room(np.array([between.get((s, v), -1) for s in spines], dtype=np.int64))
    combos: list[tuple[int, int]] = []
    for a in np.flatnonzero(usable & (room_up | room_down)).tolist():
        others = room_down if room_up[a] else room_up
        combos.extend((a, b) for b in np.flatnonzero(others).tolist() if b != a)
    best: IntArray | None = None
    changes = 0
    for a, b in combos[:MAX_EXCHANGES]:
        out = exchange(problem, grid, state.flows, state.choice, state.load, i, a, b, z)
        if out is None:
            continue
        n = int(np.count_nonzero(out != state.choice))
        if best is None or n < changes:
            best, changes = out, n
    if best is None:
        return False
    for g in np.flatnonzero(best != state.choice).tolist():
        k = int(best[g])
        state.remove(g)
        state.add(g, k)
    return True


def repair(
    problem: Problem,
    flows: IntArray,
    prior: IntArray,
    z: float,
    grid: SpineGrid | None = None,
    *,
    lookahead: int = 0,
    deadline: float = float("inf"),
    joint: bool = False,
) -> Repair:
    """Repair the component's ``flows`` (``prior``: each one's previous candidate, ``< 0``
    where none may stay) to utilization ``<= z``; see the module docstring. ``grid`` (2-tier
    components of equal weights) enables two-spine exchanges.

    ``lookahead`` > 0 (offline use: seconds, not milliseconds) tries, for that many of the
    flows that need a chain, every way of placing each (:func:`solver.repair.chains.chain_options`)
    with the rest placed as usual, and keeps the way that moves least overall.

    After ``deadline`` (a ``time.perf_counter()`` value) no chain, exchange or ejection starts
    and look-ahead stops branching: the rest are placed where they fit best and the result
    says it timed out (always a valid assignment).

    ``joint`` also places the flows that need a chain together (:mod:`solver.repair.jointchains`)
    and keeps whichever of the two ways moves fewer (about three times the chain searches of
    the plain repair: offline use, or a caller with the time)."""
    choice = np.where(prior >= 0, prior, -1).astype(np.int64)
    state = State(problem, flows, choice, z, deadline)
    state.prior = prior
    moved = np.zeros(len(flows), dtype=bool)
    evicted = _evict(state)
    moved[evicted] = True
    free = np.flatnonzero(choice < 0)
    order = free[np.argsort(-state.weight[free], kind="stable")].tolist()
    if lookahead > 0:
        start = choice.copy()
        best = _look(state, order, moved, grid, z, lookahead, deadline)
        restore(state, start)
        if best is None:
            return Repair(choice, False, 0)
        for g in np.flatnonzero(best != choice).tolist():
            state.remove(g)
            state.add(g, int(best[g]))
        reached = True
    else:
        start = choice.copy()
        reached = _place(state, order, moved, grid, z)
        if reached:
            send_back(state, prior)
        if joint and reached and time.perf_counter() < deadline:
            _try_together(state, start, order, grid, z)
        if reached and len(flows) <= LOOK_FLOWS and time.perf_counter() < deadline:
            _try_looking(state, start, order, grid, z, deadline)
    had = prior >= 0
    changed = had & (choice != prior)
    return Repair(choice, reached, int(np.count_nonzero(changed)), state.timed_out)


def _place(
    state: State, order: list[int], moved: BoolArray, grid: SpineGrid | None, z: float
) -> bool:
    """Place the flows of ``order`` one by one (steps 2-4 of the module docstring); whether
    every one fitted (one that did not takes its least bad candidate)."""
    reached = True
    for i in order:
        k = state.best_fit(i)
        if k >= 0:
            state.add(i, k)
            continue
        late = time.perf_counter() > state.deadline
        if not late and place_by_chain(state, i, moved):
            continue
        if not late and grid is not None and _swap(state, grid, i, z):
            continue
        if not late and _eject(state, i, moved, EJECT_DEPTH):
            continue
        state.timed_out = state.timed_out or time.perf_counter() > state.deadline
        reached = False
        util = state.utils(i)
        state.add(i, int(np.argmin(util.max(axis=1))))
    return reached


LOOK_FLOWS = 1000
"""Components up to this many flows get a second repair looking one chain ahead when the first
moved more than the counting bound (milliseconds there; on the ladder's 8,096-flow component
it costs seconds and found nothing better)."""

LOOK_SECONDS = 0.25
"""Most that second repair spends before placing the rest where they fit best (it takes a few
tens of milliseconds where it applies; the cap is for the unusual case, and generous so that
a slow machine finds the same answer)."""


def _try_looking(
    state: State,
    start: IntArray,
    order: list[int],
    grid: SpineGrid | None,
    z: float,
    deadline: float,
) -> None:
    """Repair again from ``start`` trying every chain of the first flow that needs one
    (:func:`_look`, depth one), and keep that if it moves fewer flows than the state's
    assignment; skipped where that already meets :func:`min_moves`. (A small full fabric
    whose leaf lost a spine: the cheapest chain of the first displaced flow took the room the
    second one's needed, 6 moves where 5 was the minimum.)"""
    prior = state.prior
    had = prior >= 0
    done = state.choice.copy()
    before = int(np.count_nonzero(had & (done != prior)))
    if before == 0:
        return
    problem = state.problem
    extra = min_moves(problem, state.flows, np.where(prior >= 0, prior, -1), z)
    if before <= extra - int(np.count_nonzero(prior < 0)):
        return
    restore(state, start)
    moved = np.zeros(len(prior), dtype=bool)
    stop = min(deadline, time.perf_counter() + LOOK_SECONDS)
    best = _look(state, order, moved, grid, z, 1, stop)
    restore(state, done)
    if best is not None and int(np.count_nonzero(had & (best != prior))) < before:
        for g in np.flatnonzero(best != done).tolist():
            state.remove(g)
            state.add(g, int(best[g]))


def _try_together(
    state: State, start: IntArray, order: list[int], grid: SpineGrid | None, z: float
) -> None:
    """Place ``order`` again from ``start``, the flows that fit nowhere together
    (:func:`solver.repair.jointchains.place_together`), and keep that if it moves fewer flows than
    the state's assignment (which reached the target)."""
    prior = state.prior
    had = prior >= 0
    done = state.choice.copy()
    before = int(np.count_nonzero(had & (done != prior)))
    restore(state, start)
    moved = np.zeros(len(prior), dtype=bool)
    stuck = []
    for i in order:
        k = state.best_fit(i)
        if k >= 0:
            state.add(i, k)
        else:
            stuck.append(i)
    left = place_together(state, stuck, moved)
    if _place(state, left, moved, grid, z):
        send_back(state, prior)
        if int(np.count_nonzero(had & (state.choice != prior))) < before:
            return
    restore(state, done)


def _look(
    state: State,
    order: list[int],
    moved: BoolArray,
    grid: SpineGrid | None,
    z: float,
    depth: int,
    deadline: float,
) -> IntArray | None:
    """The assignment moving least among the ways of placing the next ``depth`` flows that
    need a chain (the rest as :func:`_place` does), or ``None`` if none reaches ``z``."""
    prior = state.prior
    for n, i in enumerate(order):
        k = state.best_fit(i)
        if k >= 0:
            state.add(i, k)
            continue
        late = time.perf_counter() > deadline
        options = [] if depth <= 0 or late else chain_options(state, i)
        if not options:
            if not _place(state, order[n:], moved, grid, z):
                return None
            send_back(state, prior)
            return state.choice.copy()
        best: IntArray | None = None
        fewest = len(prior) + 1
        for _, moves in options:
            saved = state.choice.copy()
            make(state, moves)
            found = _look(state, order[n + 1 :], moved, grid, z, depth - 1, deadline)
            restore(state, saved)
            if found is not None:
                count = int(np.count_nonzero((prior >= 0) & (found != prior)))
                if count < fewest:
                    best, fewest = found, count
        return best
    send_back(state, prior)
    return state.choice.copy()
