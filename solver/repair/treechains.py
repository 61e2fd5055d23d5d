"""One chain of moves over a fat-tree's layered counts: relieve a full link by moving its flows
along, each to an option full at most one link over, priced by new moves (0-1 breadth-first).

Why apart: both halves of a fat-tree re-plan run this search, placing the displaced flows
(:mod:`solver.repair.treemoves`) and sending moved flows back (:mod:`solver.repair.treereturn`);
here it is the one piece both import, so neither imports the other's half. The method and its
measurements are told in :mod:`solver.repair.treemoves`.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from solver.exact.treecounts import Chain, Counts
from topology.index import IntArray

DEPTH = 10
"""Longest chain of moves one search builds."""


NODES = 3000
"""Resources one chain search visits before giving up."""


PENDING = 1
"""Resources a chain may leave over at once. One is the classic chain. Two (an option full at
both leaf links, which a tight fabric needs to move a flow off a pod's short agg) was tried: a
best-first order by price plus resources left over found the 4,096-GPU light uplink's 12 moves
(3 fewer) but in 2 s, and plain breadth-first ran out of nodes; so one, with the degraded
colouring behind it for what that cannot place."""


def _relieve(
    state: Counts,
    starts: list[tuple[tuple[int, ...], Chain]],
    frozen: set[int],
    budget: int,
    deadline: float = float("inf"),
) -> tuple[Chain, int] | None:
    """The cheapest chain, under ``budget`` new moves, after which none of a start's
    resources (over their room after its moves) is over; made, with its price, or ``None``.

    A state is the chain so far and the resources it leaves over (at most :data:`PENDING`,
    or as many as a start has): the first of them is relieved by moving one of its flows to an
    option full on at most one other resource, which joins the rest. Breadth-first by price
    (0-1: moves of flows that have moved already are free, returns earn one back). The chain
    popped is on the loads while its flows' steps are read (:func:`_shift`); the loads are
    as they were when this returns, but for the chain made."""
    queue: deque[tuple[tuple[int, ...], Chain, int]] = deque((p, c, 0) for p, c in starts)
    done: set[tuple[int, ...]] = set()
    on: Chain = []  # the moves on the loads now: each chain popped shifts them to its own
    try:
        while queue:
            pending, chain, price = queue.popleft()
            if len(chain) > DEPTH or (len(pending) == 1 and chain and pending in done):
                continue  # one link left over by the chain's last move is over after it
            _shift(state, on, chain)
            on = chain
            count, room = state.count, state.rooms
            pending = tuple(r for r in pending if count[r] > room[r])
            if not pending:
                _shift(state, on, [])
                on = []
                state.make(chain)
                return chain, price
            if pending in done:
                continue
            done.add(pending)
            if len(done) > NODES or (len(done) % 64 == 0 and time.perf_counter() > deadline):
                return None
            res, rest = pending[0], pending[1:]
            busy = frozen | {f for f, _ in chain}
            for g in sorted(state.on(res)):
                if g in busy:
                    continue
                back = int(state.prior[g])  # returning there earns a move back
                step = state.price(g, -2)  # any other option
                if price + step >= budget:
                    continue  # any move of it costs one, which the budget does not allow
                # Options of a flow leaving the same link over are one step (Counts.escapes):
                # its cheapest (a return first); every core of one agg, when that leaf link
                # is full, ...
                for k, new in state.escapes(g):
                    cost = -1 if k == back else step
                    if price + max(cost, 0) >= budget:
                        continue
                    nxt = tuple(sorted(set(rest) | set(new))) if rest else new
                    if nxt in done:
                        continue
                    item = (nxt, [*chain, (g, k)], price + cost)
                    if cost <= 0:
                        queue.appendleft(item)
                    else:
                        queue.append(item)
        return None
    finally:
        _shift(state, on, [])


def _shift(state: Counts, was: Chain, now: Chain) -> None:
    """The loads from chain ``was``'s moves to chain ``now``'s (on the loads only, not made):
    the moves after the two chains' common start undone and done. A search pops chains that
    mostly share all but their last move, so a step shifts one or two moves' links, not every
    move of both chains; each move's links are remembered (:meth:`Counts.move`)."""
    same = 0
    for a, b in zip(was, now, strict=False):
        if a != b:
            break
        same += 1
    move, apply = state.move, state.apply
    for f, k in reversed(was[same:]):
        apply(*move(f, k), -1)
    for f, k in now[same:]:
        apply(*move(f, k), 1)


def _floor(state: Counts, r: int) -> int:
    """What relieving link ``r`` costs at least: one where every flow on it is still on its
    previous option (moving any is a new move), else nothing."""
    prior, option = state.prior, state.option
    return int(all(prior[g] >= 0 and option[g] == prior[g] for g in state.on(r)))


def _restore(state: Counts, saved: IntArray) -> None:
    for g in np.flatnonzero(state.option != saved).tolist():
        state.set(g, int(saved[g]))


def _moved(state: Counts) -> list[int]:
    return np.flatnonzero((state.prior >= 0) & (state.option != state.prior)).tolist()
