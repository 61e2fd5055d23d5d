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
candidate fits, the *cheapest chain* (:func:`_relieve`): the flow takes a candidate full on one
resource (or two), a flow on that resource leaves for a candidate full on at most one other
(counting the room the chain's earlier moves freed), and so on until one lands where there is
room; chains are priced in new moves (a flow that moved already moves again for free, one
sent back to its old path earns one back) and searched 0-1 breadth-first. This is the
capacitated, many-colour form of a Kempe chain; on a full fabric (every leaf link at ``z``)
nothing shorter exists. (4) Failing that, on two tiers a two-spine exchange
(:mod:`solver.kempe`), then an *ejection chain* up to three levels deep: for each blocking
resource of the candidate with the fewest, relocate one flow that crosses it. If a flow still
does not fit, the repair fails at this ``z`` and the planner falls back to its other methods.
(5) Last, moved flows go back to their previous path wherever a chain of price zero makes
room. Each step only looks at the flows on the resources involved, so a repair costs
milliseconds even at 16k GPUs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from solver.kempe import SpineGrid, exchange
from solver.problem import TOLERANCE, Problem
from topology.index import BoolArray, FloatArray, IntArray

__all__ = ["Repair", "layers", "min_moves", "repair", "settle"]


@dataclass(frozen=True)
class Repair:
    """A repaired assignment of a component's flows (aligned with them), if one reached ``z``."""

    choice: IntArray
    reached: bool
    moved: int
    """Flows that had a path that may stay and were moved anyway (ejections included)."""


def layers(problem: Problem) -> IntArray:
    """A layer number per resource (plus the pad): the (tier of its source, tier of its
    destination) pair, so that a path crosses each layer at most once."""
    index = problem.index
    tier = np.asarray(index.tier, dtype=np.int64)
    out = np.full(problem.pad + 1, -1, dtype=np.int64)
    out[:-1] = tier[index.res_src] * 16 + tier[index.res_dst]
    return out


def _limit(z: float) -> float:
    return z * (1 + TOLERANCE) + TOLERANCE


def min_moves(problem: Problem, flows: IntArray, prior: IntArray, z: float) -> int:
    """The lower bound of the module docstring: flows of ``flows`` that had a path (``prior``
    is ``-2`` for a flow without a previous path, ``-1`` for one whose path is gone) and must
    move for every resource to be at utilization ``<= z``."""
    forced = np.flatnonzero(prior == -1)
    kept = prior >= 0
    load: FloatArray = np.zeros(problem.pad + 1)
    extra = 0
    if kept.any():
        rows = problem.table[problem.rows(flows[kept], prior[kept])]
        w = np.repeat(problem.weight[flows[kept]], rows.shape[1])
        res = rows.ravel()
        load = np.bincount(res, weights=w, minlength=problem.pad + 1).astype(np.float64)
        heaviest = np.zeros(problem.pad + 1)
        np.maximum.at(heaviest, res, w)
        scale = problem.scale
        over = np.flatnonzero((load * scale > _limit(z)) & (scale > 0))
        if over.size:
            excess = np.ceil((load[over] * scale[over] - z) / (heaviest[over] * scale[over]) - 1e-9)
            layer = layers(problem)[over]
            codes = np.unique(layer, return_inverse=True)[1].ravel()
            extra = int(np.bincount(codes, weights=excess).max())
    # Equal weights: a displaced flow that fits on no candidate beside the flows that stay
    # lands on a link that was full, which some staying flow must leave; a moved flow leaves
    # one unit on each link of its path (at most ``H`` links), so ``ceil(stuck / H)`` moves.
    limit = _limit(z)
    stuck = 0
    for f in flows[forced].tolist():
        rows = problem.candidates(int(problem.pair[f]))
        util = (load[rows] + problem.weight[f]) * problem.scale[rows]
        stuck += int(not np.any(util.max(axis=1) <= limit))
    weights = problem.weight[flows]
    if stuck and np.all(weights == weights[0]):  # one unit freed serves one displaced flow
        hops = int(problem.table.shape[1])
        extra = max(extra, -(-stuck // max(hops, 1)))
    return len(forced) + extra


class _State:
    """Loads and the flows on each resource, for one component, while repairing."""

    def __init__(self, problem: Problem, flows: IntArray, choice: IntArray, z: float) -> None:
        self.problem = problem
        self.flows = flows
        self.choice = choice
        self.prior: IntArray = np.full(len(flows), -2, dtype=np.int64)
        """Each flow's previous candidate (``< 0``: none), to price moves."""
        self.limit = _limit(z)
        self.weight = problem.weight[flows]
        self.pair = problem.pair[flows]
        self.load: FloatArray = np.zeros(problem.pad + 1)
        self.now = np.full((len(flows), problem.table.shape[1]), problem.pad, dtype=np.int64)
        placed = np.flatnonzero(choice >= 0)
        if placed.size:
            self.now[placed] = problem.table[problem.rows(flows[placed], choice[placed])]
            self.load = problem.loads(flows[placed], choice[placed])
        self.load[problem.pad] = 0.0
        self.users: dict[int, set[int]] = {}
        """Flows on a resource, for the resources asked about so far (kept by add/remove):
        the few blocking resources are asked about thousands of times in a 3-tier repair."""

        self._sorted: tuple[IntArray, IntArray] | None = None
        self._since: set[int] = set()

    def on(self, r: int) -> list[int]:
        """Positions of the flows whose current path crosses resource ``r``.

        The first question sorts every path's resources once (a chain search asks about
        hundreds of resources); later ones read that sorted copy and check the few flows that
        have changed since."""
        users = self.users.get(r)
        if users is None:
            if self._sorted is None or len(self._since) > 64:
                flat = self.now.ravel()
                order = np.argsort(flat, kind="stable")
                self._sorted = (flat[order], order // self.now.shape[1])
                self._since = set()
            keys, owners = self._sorted
            lo, hi = np.searchsorted(keys, [r, r + 1]).tolist()
            maybe = set(owners[lo:hi].tolist()) | self._since
            near = np.fromiter(maybe, np.int64, count=len(maybe))
            users = set(near[(self.now[near] == r).any(axis=1)].tolist())
            self.users[r] = users
        return sorted(users)

    def row(self, i: int, k: int) -> IntArray:
        p = self.problem
        row: IntArray = p.table[p.offset[self.pair[i]] + k]
        return row

    def candidates(self, i: int) -> IntArray:
        return self.problem.candidates(int(self.pair[i]))

    def remove(self, i: int) -> None:
        k = int(self.choice[i])
        if k < 0:
            return
        row = self.row(i, k)
        self.load[row] -= self.weight[i]
        self.load[self.problem.pad] = 0.0
        self.now[i] = self.problem.pad
        if self._sorted is not None:
            self._since.add(i)
        if self.users:
            for r in row.tolist():
                users = self.users.get(r)
                if users is not None:
                    users.discard(i)
        self.choice[i] = -1

    def add(self, i: int, k: int) -> None:
        row = self.row(i, k)
        self.load[row] += self.weight[i]
        self.load[self.problem.pad] = 0.0
        self.now[i] = row
        if self._sorted is not None:
            self._since.add(i)
        if self.users:
            for r in row.tolist():
                users = self.users.get(r)
                if users is not None:
                    users.add(i)
        self.choice[i] = k

    def utils(self, i: int) -> FloatArray:
        """Utilization along each candidate of flow ``i`` were it added there."""
        rows = self.candidates(i)
        util: FloatArray = (self.load[rows] + self.weight[i]) * self.problem.scale[rows]
        return util

    def best_fit(self, i: int) -> int:
        """The candidate that keeps ``i``'s worst utilization least if within the limit,
        ties by the sum; ``-1`` if none fits."""
        util = self.utils(i)
        peak = util.max(axis=1)
        fits = np.flatnonzero(peak <= self.limit)
        if not fits.size:
            return -1
        best = peak[fits].min()
        tied = fits[peak[fits] <= best + abs(best) * TOLERANCE]
        if tied.size > 1:
            total = util[tied].sum(axis=1)
            return int(tied[np.argmin(total)])
        return int(tied[0])


def _evict(state: _State) -> list[int]:
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


def _restore(state: _State, saved: IntArray) -> None:
    for g in np.flatnonzero(state.choice != saved).tolist():
        state.remove(g)
        if saved[g] >= 0:
            state.add(g, int(saved[g]))


def _eject(
    state: _State, i: int, moved: BoolArray, depth: int = 2, frozen: frozenset[int] = frozenset()
) -> bool:
    """Place ``i`` by relocating one flow off each blocking resource of some candidate; a
    relocated flow that fits nowhere may in turn eject others, ``depth`` levels in all."""
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
                    _restore(state, before)
                if state.choice[g] < 0:
                    state.add(g, old)
            if not done:
                ok = False
                break
        if ok:
            moved[state.choice != saved] = True
            return True
        _restore(state, saved)
    return False


CHAIN_DEPTH = 10
"""Longest chain of moves a shortest-chain search builds to relieve one resource."""

CHAIN_NODES = 2000
"""Resources a shortest-chain search visits before giving up."""


def _make(state: _State, moves: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Make ``moves`` (flow, candidate) in order; returns what undoes them."""
    olds = []
    for g, k in moves:
        olds.append((g, int(state.choice[g])))
        state.remove(g)
        state.add(g, k)
    return olds


def _unmake(state: _State, olds: list[tuple[int, int]]) -> None:
    for g, k in reversed(olds):
        state.remove(g)
        if k >= 0:
            state.add(g, k)


def _price(state: _State, g: int, k: int) -> int:
    """What moving ``g`` to candidate ``k`` adds to the moves: one for a flow still on its
    previous path, nothing for one already moved (or without one), minus one for a return."""
    before = int(state.prior[g])
    if before < 0:
        return 0
    if k == before:
        return -1
    return 1 if state.choice[g] == before else 0


def _shift(state: _State, chain: list[tuple[int, int]], sign: float) -> None:
    """Add (``sign`` 1) or take back (-1) the chain's moves on the loads only: a search
    looks at hundreds of chains and makes none of them. (A path crosses a resource once.)"""
    load = state.load
    for g, k in chain:
        w = float(state.weight[g]) * sign
        old = int(state.choice[g])
        if old >= 0:
            load[state.row(g, old)] -= w
        load[state.row(g, k)] += w
    load[state.problem.pad] = 0.0


def _expand(
    state: _State,
    res: int,
    chain: list[tuple[int, int]],
    price: int,
    frozen: set[int],
    budget: int,
    done: set[int],
    queue: deque[tuple[int, list[tuple[int, int]], int]],
) -> tuple[list[tuple[int, int]], int] | None:
    """One step of :func:`_relieve`: the flows on ``res`` (after ``chain``) and where they
    could go; a finished chain is made and returned, longer ones are queued."""
    scale = state.problem.scale
    limit = state.limit
    busy = frozen | {g for g, _ in chain}
    _shift(state, chain, 1.0)
    try:
        for g in state.on(res):
            if g in busy:
                continue
            before = int(state.prior[g])
            old = int(state.choice[g])
            if before >= 0 and old == before and price + 1 >= budget:
                continue  # any move of it costs one, which the budget does not allow
            rows = state.candidates(g)
            # Where a candidate shares a resource with its current path (the same column: a
            # pair's paths cross each layer at the same hop), moving adds nothing there.
            stays = rows == state.row(g, old)
            util = (state.load[rows] + state.weight[g] * ~stays) * scale[rows]
            blocked = util > limit
            count = blocked.sum(axis=1)
            count[old] = rows.shape[1] + 1
            for k in np.flatnonzero(count == 0).tolist():
                total = price + _price(state, g, k)
                if total < budget:
                    moves = [*chain, (g, k)]
                    _shift(state, chain, -1.0)
                    chain = []  # taken back: nothing for ``finally`` to undo
                    _make(state, moves)
                    return moves, total
            for k in np.flatnonzero(count == 1).tolist():
                step = _price(state, g, k)
                if price + max(step, 0) >= budget:
                    continue
                nxt = int(rows[k][blocked[k]][0])
                if nxt in done:
                    continue
                item = (nxt, [*chain, (g, k)], price + step)
                if step <= 0:
                    queue.appendleft(item)
                else:
                    queue.append(item)
    finally:
        _shift(state, chain, -1.0)
    return None


def _relieve(
    state: _State,
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
    queue: deque[tuple[int, list[tuple[int, int]], int]] = deque(
        (res, chain, 0) for res, chain in starts
    )
    done: set[int] = set()
    visited = 0
    while queue:
        res, chain, price = queue.popleft()
        if res in done or len(chain) >= CHAIN_DEPTH:
            continue
        done.add(res)
        visited += 1
        if visited > CHAIN_NODES:
            return None
        found = _expand(state, res, chain, price, frozen, budget, done, queue)
        if found is not None:
            return found
    return None


def _chain(state: _State, i: int, moved: BoolArray) -> bool:
    """Place ``i`` where the fewest new moves make room (:func:`_relieve`): on a candidate
    full on one resource, all such searched together; if that costs moves, also on the
    candidates full on two, each relieved in turn."""
    problem = state.problem
    scale = problem.scale
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
        found = _relieve(state, starts, {i})
        if found is not None:
            best, cost = found
        _restore(state, saved)
    seen: set[bytes] = set()
    for k in np.flatnonzero(count == 2).tolist():
        if cost <= 1 or len(seen) >= TWO_ROWS:
            break
        key = np.where(blocked[k], rows[k], -1).tobytes()
        if key in seen:
            continue
        seen.add(key)
        saved = state.choice.copy()
        state.add(i, k)
        moves: list[tuple[int, int]] = [(i, k)]
        price = 0
        for r in rows[k][blocked[k]].tolist():
            if state.load[r] * scale[r] <= state.limit:
                continue
            got = _relieve(state, r, {i}, cost - price)
            if got is None:
                price = cost
                break
            moves.extend(got[0])
            price += got[1]
        if price < cost:
            best, cost = moves, price
        _restore(state, saved)
    if best is None:
        return False
    _make(state, best)
    for g, _ in best[1:]:
        moved[g] = True
    return True


TWO_ROWS = 8
"""Candidates full on two resources a chain search tries (one per pair of resources)."""


MAX_EXCHANGES = 64
"""Spine pairs a two-spine exchange tries for one flow before giving up on it."""


def _swap(state: _State, grid: SpineGrid, i: int, z: float) -> bool:
    """Place ``i`` by a two-spine exchange (:mod:`solver.kempe`), the one changing least:
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
    problem: Problem, flows: IntArray, prior: IntArray, z: float, grid: SpineGrid | None = None
) -> Repair:
    """Repair the component's ``flows`` (``prior``: each one's previous candidate, ``< 0``
    where none may stay) to utilization ``<= z``; see the module docstring. ``grid`` (2-tier
    components of equal weights) enables two-spine exchanges."""
    choice = np.where(prior >= 0, prior, -1).astype(np.int64)
    state = _State(problem, flows, choice, z)
    state.prior = prior
    moved = np.zeros(len(flows), dtype=bool)
    evicted = _evict(state)
    moved[evicted] = True
    free = np.flatnonzero(choice < 0)
    order = free[np.argsort(-state.weight[free], kind="stable")]
    reached = True
    for i in order.tolist():
        k = state.best_fit(i)
        if k >= 0:
            state.add(i, k)
            continue
        if _chain(state, i, moved):
            continue
        if grid is not None and _swap(state, grid, i, z):
            continue
        if _eject(state, i, moved, EJECT_DEPTH):
            continue
        reached = False
        util = state.utils(i)
        state.add(i, int(np.argmin(util.max(axis=1))))
    if reached:
        _undo(state, prior)
    had = prior >= 0
    changed = had & (choice != prior)
    return Repair(choice, reached, int(np.count_nonzero(changed)))


def _undo(state: _State, prior: IntArray) -> None:
    """Send moved flows back to their previous path where that costs no other new move: it
    has room again (an ejection a later placement made unnecessary), or a chain of flows that
    moved already (:func:`_relieve`, price zero) makes room; until nothing changes."""
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
                found = _relieve(state, r, {g}, 1 - price)
                if found is None:
                    price = 1
                    break
                price += found[1]
            if price < 1:
                changed = True
            else:
                _restore(state, saved)
        if not changed:
            return


UNDO_ROUNDS = 3
"""Passes of :func:`_undo` over the moved flows."""


def settle(
    problem: Problem, flows: IntArray, prior: IntArray, choice: IntArray, z: float
) -> IntArray | None:
    """``choice`` (every flow placed, some resources over ``z``) made to fit by shortest
    chains off each over-full resource, then moved flows sent back where that is free
    (:func:`_undo`); ``None`` if some resource cannot be relieved. Completes an answer that
    is almost right, e.g. a relaxation's (:mod:`solver.moves`)."""
    state = _State(problem, flows, choice.copy(), z)
    state.prior = prior
    scale = problem.scale
    for _ in range(len(flows)):
        over = np.flatnonzero(state.load * scale > state.limit)
        if not over.size:
            _undo(state, prior)
            return state.choice
        if _relieve(state, int(over[0]), set()) is None:
            return None
    return None
