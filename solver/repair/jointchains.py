"""Stuck flows placed together: each one's cheap chains priced alone, one per flow chosen jointly.

Why: a repair (:mod:`solver.repair.evict`) places the flows that fit nowhere one after the other,
each by its cheapest chain of moves (:mod:`solver.repair.chains`). The first chain may take the room
the next flow's cheap chain needed, and that flow then pays for a long one. On a 2-tier fabric
whose leaf lost a spine it is the rule, not the exception: the flows displaced *into* that leaf
all end their chains on its few free downlinks (4,096 GPUs, a light uplink lost: the repair,
pricing eight two-resource candidates per flow, moved 14 flows in all where the cheapest
chains of the three displaced flows, priced alone, sum to 12 and do not collide).

**Options.** From one state (every flow that fits directly already placed) each stuck flow's
ways of being placed by chains are priced alone (:func:`solver.repair.chains.chain_options`: one per
set of full resources on its candidates, each relieved by its cheapest chain, priced in new
moves), keeping those within :data:`SLACK` of its cheapest. Different options end on different
free room, which is what lets two flows' chains coexist.

**Choice.** One option per stuck flow, by a depth-first search over the options in price
order, cut where the price so far plus the cheapest option of each flow left cannot beat the
best combination found. A combination is valid when its chains move different flows and their
moves, made together, keep every resource within the limit (each chain was priced alone from
the same state, so that is all there is to check). Chains that would *help* each other (one
freeing the room another lands on) are not found this way; the caller keeps the sequential
repair's answer where it moves fewer.
"""

from __future__ import annotations

from solver.repair.chains import State, chain_options, make
from topology.index import BoolArray

__all__ = ["Option", "choose", "place_together"]

Option = tuple[int, list[tuple[int, int]]]
"""A chain placing one stuck flow: its price in new moves and its moves ``(flow, candidate)``,
the stuck flow's own placement first."""

SLACK = 1
"""Options kept per stuck flow: those at most this much dearer than its cheapest (a wider
slack found nothing better on the ladder's rows and prices more chains)."""

MOST_FLOWS = 8
"""Most stuck flows chosen together (more: the search over combinations is not attempted)."""

MOST_COMBINATIONS = 20000
"""Combinations the choice visits before it settles for the best found."""


def _delta(state: State, moves: list[tuple[int, int]]) -> dict[int, float]:
    """What ``moves`` add to each resource's load (the pad left out)."""
    pad = state.problem.pad
    out: dict[int, float] = {}
    for g, k in moves:
        w = float(state.weight[g])
        old = int(state.choice[g])
        if old >= 0:
            for r in state.row(g, old).tolist():
                out[r] = out.get(r, 0.0) - w
        for r in state.row(g, k).tolist():
            out[r] = out.get(r, 0.0) + w
    out.pop(pad, None)
    return out


def _fits(state: State, deltas: list[dict[int, float]]) -> bool:
    """Whether chains priced alone from this state fit together: the loads of all their
    moves within the limit (the caller checks that they move different flows)."""
    total: dict[int, float] = {}
    for delta in deltas:
        for r, d in delta.items():
            total[r] = total.get(r, 0.0) + d
    scale, load, limit = state.problem.scale, state.load, state.limit
    return all((load[r] + d) * scale[r] <= limit for r, d in total.items() if d > 0)


def choose(state: State, per_flow: list[list[Option]]) -> list[Option] | None:
    """One option per flow, valid together, of least total price (see the module
    docstring); ``None`` if no combination is valid within the search's limits."""
    order = sorted(range(len(per_flow)), key=lambda n: len(per_flow[n]))
    lists = [per_flow[n] for n in order]
    floor = [o[0][0] for o in lists]
    rest = [sum(floor[n:]) for n in range(len(lists) + 1)]
    deltas = [[_delta(state, moves) for _, moves in options] for options in lists]
    movers = [[frozenset(g for g, _ in moves) for _, moves in options] for options in lists]
    best: list[Option] | None = None
    best_price = sum(o[-1][0] for o in lists) + 1
    visits = 0

    def walk(n: int, picked: list[int], busy: frozenset[int], price: int) -> None:
        nonlocal best, best_price, visits
        if n == len(lists):
            best = [lists[m][c] for m, c in enumerate(picked)]
            best_price = price
            return
        for c, option in enumerate(lists[n]):
            visits += 1
            if visits > MOST_COMBINATIONS or price + option[0] + rest[n + 1] >= best_price:
                return  # options are in price order: the later ones cannot do better
            if busy & movers[n][c]:
                continue
            picked.append(c)
            if _fits(state, [deltas[m][p] for m, p in enumerate(picked)]):
                walk(n + 1, picked, busy | movers[n][c], price + option[0])
            picked.pop()

    walk(0, [], frozenset(), 0)
    if best is None:
        return None
    back = [0] * len(best)
    for pos, n in enumerate(order):
        back[n] = pos
    return [best[back[n]] for n in range(len(best))]


def place_together(state: State, stuck: list[int], moved: BoolArray) -> list[int]:
    """Place the ``stuck`` flows (each fits nowhere directly) by one chain each, chosen
    together; returns the flows left unplaced (all of them where no combination fits)."""
    if not 2 <= len(stuck) <= MOST_FLOWS:
        return stuck
    per_flow = [chain_options(state, i, SLACK) for i in stuck]
    if any(not o for o in per_flow):
        return stuck
    picked = choose(state, per_flow)
    if picked is None:
        return stuck
    for _, moves in picked:
        make(state, moves)
        for g, _ in moves[1:]:
            moved[g] = True
    return []
