"""Chains of moves: making room for a flow on a full fabric by moving as few others as possible.

Why its own module: a repair (:mod:`solver.repair.evict`) on a fabric whose leaf links all carry the
target load cannot place a displaced flow anywhere directly; every candidate is full somewhere,
and so is every place a flow in the way could go. What remains is a *chain*: the flow takes a
candidate full on one resource, a flow on that resource leaves for a candidate full on at most
one other (counting the room the chain's earlier moves freed), and so on until one lands where
there is room. It is the capacitated, many-colour form of a Kempe chain (an alternating path
that swaps two colours); on a full fabric nothing shorter exists.

**Price.** Chains are compared by the *new moves* they cost: a flow still on its previous path
costs one, a flow that has moved already moves again for free, and one sent back to its
previous path earns one back. The search is 0-1 breadth-first over resources (free steps
first), so the first chain found is a cheapest one under the search's limits (``CHAIN_DEPTH``
moves, ``CHAIN_NODES`` resources). Chains are priced on the loads alone and only the one kept
is made.

Also here: :func:`send_back` (moved flows return where a free chain makes room) and :func:`settle`
(complete an assignment that overloads a few resources, e.g. a relaxation's answer in
:mod:`solver.repair.moves`). The state they work on (loads and the flows on each resource,
:class:`~solver.repair.state.State`) is :mod:`solver.repair.state`'s, re-exported here.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from solver.repair.state import State as State
from solver.repair.state import limit_of as limit_of
from solver.repair.state import restore as restore
from solver.space.problem import Problem
from topology.index import BoolArray, FloatArray, IntArray

__all__ = [
    "State",
    "chain_options",
    "limit_of",
    "make",
    "place_by_chain",
    "relieve",
    "restore",
    "send_back",
    "settle",
]


CHAIN_DEPTH = 10
"""Longest chain of moves a shortest-chain search builds to relieve one resource."""

CHAIN_NODES = 2000
"""Resources a shortest-chain search visits before giving up."""


def _make(state: State, moves: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Make ``moves`` (flow, candidate) in order; returns what undoes them."""
    olds = []
    for g, k in moves:
        olds.append((g, int(state.choice[g])))
        state.remove(g)
        state.add(g, k)
    return olds


def _unmake(state: State, olds: list[tuple[int, int]]) -> None:
    for g, k in reversed(olds):
        state.remove(g)
        if k >= 0:
            state.add(g, k)


def _price(state: State, g: int, k: int) -> int:
    """What moving ``g`` to candidate ``k`` adds to the moves: one for a flow still on its
    previous path, nothing for one already moved (or without one), minus one for a return."""
    before = int(state.prior[g])
    if before < 0:
        return 0
    if k == before:
        return -1
    return 1 if state.choice[g] == before else 0


Step = tuple[IntArray, FloatArray]
"""What a chain's moves change on the loads: resources (repeats allowed) and amounts."""

_NO_STEP: Step = (np.zeros(0, dtype=np.int64), np.zeros(0))


def _step(state: State, step: Step, g: int, k: int) -> Step:
    """``step`` with the move of ``g`` (from where it is now) to candidate ``k`` added."""
    w = float(state.weight[g])
    old = int(state.choice[g])
    new = state.row(g, k)
    parts, amounts = [step[0], new], [step[1], np.full(new.size, w)]
    if old >= 0:
        parts.append(state.row(g, old))
        amounts.append(np.full(new.size, -w))
    return np.concatenate(parts), np.concatenate(amounts)


def _apply(state: State, step: Step, sign: float) -> None:
    """Add (``sign`` 1) or take back (-1) a chain's moves on the loads, in one call (the
    search looks at thousands of chains and makes only the one it keeps)."""
    if step[0].size:
        np.add.at(state.load, step[0], step[1] * sign)
        state.load[state.problem.pad] = 0.0


def _expand(
    state: State,
    res: int,
    chain: list[tuple[int, int]],
    step: Step,
    price: int,
    frozen: set[int],
    budget: int,
    done: set[int],
    queue: deque[tuple[int, list[tuple[int, int]], Step | None, int]],
) -> tuple[list[tuple[int, int]], int] | None:
    """One step of :func:`relieve`: the flows on ``res`` (after ``chain``, whose load changes
    are ``step``) and where they could go; a finished chain is made and returned, longer ones
    are queued."""
    limit = state.limit
    load = state.load
    prior, choice = state.prior, state.choice
    busy = frozen | {g for g, _ in chain}
    _apply(state, step, 1.0)
    try:
        for g in state.on(res):
            if g in busy:
                continue
            before = int(prior[g])
            old = int(choice[g])
            if before >= 0 and old == before and price + 1 >= budget:
                continue  # any move of it costs one, which the budget does not allow
            rows, scale, extra = state.moving(g, old)
            blocked = (load[rows] + extra) * scale > limit
            count = blocked.sum(axis=1)
            count[old] = rows.shape[1] + 1
            for k in np.flatnonzero(count == 0).tolist():
                total = price + _price(state, g, k)
                if total < budget:
                    moves = [*chain, (g, k)]
                    _apply(state, step, -1.0)
                    step = _NO_STEP  # taken back: nothing for ``finally`` to undo
                    _make(state, moves)
                    return moves, total
            for k in np.flatnonzero(count == 1).tolist():
                cost = _price(state, g, k)
                if price + max(cost, 0) >= budget:
                    continue
                nxt = int(rows[k][blocked[k]][0])
                if nxt in done:
                    continue
                item = (nxt, [*chain, (g, k)], step, price + cost)
                if cost <= 0:
                    queue.appendleft(item)
                else:
                    queue.append(item)
    finally:
        _apply(state, step, -1.0)
    return None


def relieve(
    state: State,
    r: int | list[tuple[int, list[tuple[int, int]]]],
    frozen: set[int],
    budget: int = CHAIN_DEPTH,
) -> tuple[list[tuple[int, int]], int] | None:
    """The cheapest chain of moves that brings resource ``r`` back within the limit: a flow
    leaves ``r`` for a candidate that is full on at most one resource (counting the room the
    chain's earlier moves freed), whose excess a next flow relieves the same way, until one
    lands where everything has room: the capacitated, many-colour form of a Kempe chain.
    Cheapest by :func:`_price` (moving a flow that has moved already is free), searched 0-1
    breadth-first over resources, at most ``CHAIN_DEPTH`` moves and under ``budget``.
    ``frozen`` flows do not move. ``r`` may instead be several starts ``(resource, moves that
    made it overfull)``, searched together. Returns the moves ``(flow, candidate)``, made,
    and their price, or ``None`` (nothing changed)."""
    starts = [(r, [])] if isinstance(r, int) else r
    queue: deque[tuple[int, list[tuple[int, int]], Step | None, int]] = deque(
        (res, chain, None, 0) for res, chain in starts
    )
    done: set[int] = set()
    visited = 0
    while queue:
        res, chain, before, price = queue.popleft()
        if res in done or len(chain) >= CHAIN_DEPTH:
            continue
        done.add(res)
        visited += 1
        if visited > CHAIN_NODES:
            return None
        # The load changes of a queued chain are worked out only once it is expanded: most
        # are never (a 3-tier step queues about fifteen).
        step = _chain_step(state, chain) if before is None else _step(state, before, *chain[-1])
        found = _expand(state, res, chain, step, price, frozen, budget, done, queue)
        if found is not None:
            return found
    return None


def _chain_step(state: State, chain: list[tuple[int, int]]) -> Step:
    step = _NO_STEP
    for g, k in chain:
        step = _step(state, step, g, k)
    return step


def chain_options(
    state: State, i: int, slack: int | None = None
) -> list[tuple[int, list[tuple[int, int]]]]:
    """Every way :func:`place_by_chain` could place ``i``, one per set of full resources on
    its candidates (each relieved by its own cheapest chain), cheapest first, as ``(price,
    moves)``; nothing is changed. For a search that looks ahead (:func:`solver.repair.evict.repair`
    with ``lookahead``): the cheapest chain for one flow may leave the next one dearer.
    ``slack`` keeps only options at most that much dearer than the cheapest found so far
    (candidates full on one resource are priced first), which cuts each chain search short."""
    util = state.utils(i)
    blocked = util > state.limit
    count = blocked.sum(axis=1)
    rows = state.candidates(i)
    out: list[tuple[int, list[tuple[int, int]]]] = []
    seen: set[bytes] = set()
    cheapest: int | None = None
    for k in np.argsort(count, kind="stable").tolist():
        if not 1 <= count[k] <= 2:
            continue
        key = np.where(blocked[k], rows[k], -1).tobytes()
        if key in seen:
            continue
        seen.add(key)
        budget = None if slack is None or cheapest is None else cheapest + slack + 1
        option = _price_candidate(state, i, k, rows[k][blocked[k]].tolist(), budget)
        if option is not None:
            out.append(option)
            cheapest = option[0] if cheapest is None else min(cheapest, option[0])
    out.sort(key=lambda option: option[0])
    return out


def make(state: State, moves: list[tuple[int, int]]) -> None:
    """Make the moves ``(flow, candidate)`` of a chain, in order."""
    _make(state, moves)


def place_by_chain(state: State, i: int, moved: BoolArray) -> bool:
    """Place ``i`` where the fewest new moves make room (:func:`relieve`): on a candidate
    full on one resource, all such searched together; if that costs moves, also on the
    candidates full on two, each relieved in turn."""
    util = state.utils(i)
    blocked = util > state.limit
    count = blocked.sum(axis=1)
    rows = state.candidates(i)
    best: list[tuple[int, int]] | None = None
    cost = CHAIN_DEPTH + 1
    starts: list[tuple[int, list[tuple[int, int]]]] = []
    firsts: set[int] = set()
    for k in np.flatnonzero(count == 1).tolist():
        r = int(rows[k][blocked[k]][0])
        if r not in firsts:
            firsts.add(r)
            starts.append((r, [(i, k)]))
    if starts:
        saved = state.choice.copy()
        found = relieve(state, starts, {i})
        if found is not None:
            best, cost = found
        restore(state, saved)
    seen: set[bytes] = set()
    for k in np.flatnonzero(count == 2).tolist():
        if cost <= 1 or len(seen) >= TWO_ROWS:
            break
        key = np.where(blocked[k], rows[k], -1).tobytes()
        if key in seen:
            continue
        seen.add(key)
        full = rows[k][blocked[k]].tolist()
        floors = [_floor(state, r) for r in full]
        if sum(floors) >= cost:
            continue  # its chains cost at least their floors: no cheaper than ``best``
        option = _price_candidate(state, i, k, full, cost, floors)
        if option is not None and option[0] < cost:
            cost, best = option
    if best is None:
        return False
    _make(state, best)
    for g, _ in best[1:]:
        moved[g] = True
    return True


def _floor(state: State, r: int) -> int:
    """What relieving ``r`` costs at least: one where every flow on it is still on its
    previous path (moving any of them is a new move), else nothing."""
    prior, choice = state.prior, state.choice
    return int(all(prior[g] >= 0 and choice[g] == prior[g] for g in state.on(r)))


def _price_candidate(
    state: State,
    i: int,
    k: int,
    full: list[int],
    budget: int | None,
    floors: list[int] | None = None,
) -> tuple[int, list[tuple[int, int]]] | None:
    """Put ``i`` on candidate ``k`` and relieve each of its ``full`` resources by its cheapest
    chain (:func:`relieve`): ``(price, moves)``, or ``None`` if one cannot be relieved. With a
    ``budget`` the chains together cost less than it; without, each may cost up to
    :data:`CHAIN_DEPTH`. ``floors`` (what each resource's chain costs at least,
    :func:`_floor`) leave the first chains only the budget the later ones cannot need: a
    search under a budget ends only when it is spent, so a tight one is most of the saving.
    The state is left as it was."""
    scale = state.problem.scale
    saved = state.choice.copy()
    state.add(i, k)
    moves: list[tuple[int, int]] = [(i, k)]
    price = 0
    later = [0] * len(full) if floors is None else [sum(floors[n + 1 :]) for n in range(len(full))]
    try:
        for n, r in enumerate(full):
            if state.load[r] * scale[r] <= state.limit:
                continue
            left = CHAIN_DEPTH if budget is None else budget - price - later[n]
            got = relieve(state, r, {i}, left)
            if got is None:
                return None
            moves.extend(got[0])
            price += got[1]
        return price, moves
    finally:
        restore(state, saved)


TWO_ROWS = 32
"""Candidates full on two resources a chain search tries (one per pair of resources). Eight
left the 2-tier 4,096-GPU light-uplink re-plan at 14 moves: the flow whose two full links
each take one direct move (price 2, where its best one-resource chain cost 3) was the
sixteenth such candidate; with 32 (a spine's worth on the ladder) it moves 13, the minimum
12, for about 7% more time, the floors keeping the extra searches short."""


def send_back(state: State, prior: IntArray) -> None:
    """Send moved flows back to their previous path where that costs no other new move: it
    has room again (an ejection a later placement made unnecessary), or a chain of flows that
    moved already (:func:`relieve`, price zero) makes room; until nothing changes."""
    problem = state.problem
    scale = problem.scale
    for _ in range(UNDO_ROUNDS):
        changed = False
        for g in np.flatnonzero((prior >= 0) & (state.choice != prior)).tolist():
            if state.choice[g] == prior[g]:
                continue
            saved = state.choice.copy()
            state.remove(g)
            state.add(g, int(prior[g]))
            row = state.row(g, int(prior[g]))
            price = 0
            for r in row.tolist():
                if state.load[r] * scale[r] <= state.limit:
                    continue
                found = relieve(state, r, {g}, 1 - price)
                if found is None:
                    price = 1
                    break
                price += found[1]
            if price < 1:
                changed = True
            else:
                restore(state, saved)
        if not changed:
            return


UNDO_ROUNDS = 3
"""Passes of :func:`send_back` over the moved flows."""


def settle(
    problem: Problem, flows: IntArray, prior: IntArray, choice: IntArray, z: float
) -> IntArray | None:
    """``choice`` (every flow placed, some resources over ``z``) made to fit by shortest
    chains off each over-full resource, then moved flows sent back where that is free
    (:func:`send_back`); ``None`` if some resource cannot be relieved. Completes an answer that
    is almost right, e.g. a relaxation's (:mod:`solver.repair.moves`)."""
    state = State(problem, flows, choice.copy(), z)
    state.prior = prior
    scale = problem.scale
    for _ in range(len(flows)):
        over = np.flatnonzero(state.load * scale > state.limit)
        if not over.size:
            send_back(state, prior)
            return state.choice
        if relieve(state, int(over[0]), set()) is None:
            return None
    return None
