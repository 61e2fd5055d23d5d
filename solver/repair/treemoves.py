"""Re-plans on a fat-tree by chains of moves over its layered counts: the previous plan kept,
only what must move moved.

Why its own module: after a link fails, drains or comes back, a re-plan should keep every flow
whose path is still usable and move the few that must go, plus as few others as make room for
them. The generic chain search (:mod:`solver.repair.chains`) does that on any fabric but walks path
rows of a lazily built candidate table (a 3-tier 4,096-GPU light-uplink re-plan spent 0.15 s of
its 0.18 s there), and the degraded colouring (:mod:`solver.repair.degraded`) that followed it when
it ran out of time re-coloured every flow whose agg or core a colour chain touched (a 16k-GPU lost
core: 292 moved where 38-60 suffice).

**Layers.** On a fat-tree (:mod:`solver.exact.fattree`: ``A`` aggs per pod, ``A`` core groups of
``G``) a flow's path is one *option*: an agg index ``j`` within its pod, and across pods a core
``g`` of group ``j``. Its resources are the leaf links ``s -> agg j`` and ``agg j -> t`` (the
option's ``j``) and, across pods, the agg-core links ``(p, j) -> (j, g)`` and ``(j, g) -> (q,
j)``. So a move either keeps ``j`` and changes only ``g`` (an agg-core move: leaf links
untouched) or changes ``j`` (leaf-link move). The state is those counts only
(:class:`solver.exact.treecounts.Counts`): the options of a flow read off the shape's tables by
layer, never a path table; of one flow's options, those leaving the same one link over are one
step of the search (with a full leaf link, every core of that agg is).

**Chains.** A displaced flow takes an option full on at most one resource; one flow on that
resource leaves for an option full on at most one other, and so on until one lands where
everything has room (the capacitated form of a Kempe chain, as in :mod:`solver.repair.chains`).
Chains are priced by new moves: a flow still on its previous option costs one, one already moved
is free, a return earns one back; the search is 0-1 breadth-first over resources, so the first
chain found is a cheapest one within ``DEPTH`` moves and ``NODES`` resources. Displaced flows
are placed in several orders (every order when few, while :data:`MORE_ORDERS_SECONDS` lasts)
and the cheapest result kept; moved flows are then sent back where a free chain makes room.

**Sending back** (:func:`send_back`) is that last step on its own, for a plan made by other
means: the degraded colouring's chains move many flows that a chain of already-moved flows
could return (a 16k-GPU lost core: 260 moved besides the crossed, 204 after 0.15 s of it).
Where few moved, pairs and triples of them are then returned together where no single return
pays (:func:`_send_back_groups`; the 3-tier 16,384-GPU light uplink: 18 moved -> 16 for 40 ms).

**Two full links.** Where a few displaced flows are to be placed (a single link's worth,
:data:`TWO_FLOWS`), each flow whose cheapest one-link chain moves more than one other also
tries options full at *two* links, each relieved by its own chain (:func:`_place_on_two`), and
keeps the cheaper. On a full fabric an option full at both leaf links is often relieved by one
direct move at each, where every one-link chain is a long detour. Where that finds no place
for a flow, the one-link orders run (and the degraded colouring behind them).

**Measured** (3-tier 4,096 GPUs, shuffled ring, light uplink down): one-link chains alone place
the three displaced flows moving 12 others (15 in all, as the generic repair); with two-link
options 13 (the minimum is 12), in 1,201 chain steps
(:meth:`solver.exact.treecounts.Counts.escapes`). Until the tenth pass the one-link run came first
and the two-link one was a second run from the start (2,470 steps), each step gathered and packed
the loads of a flow's links, and each chain priced was put on the loads and taken off whole: the
repair took 0.14-0.3 s. The tenth pass made it 0.08-0.11 s (1,452 steps); the eleventh remembered
each move's links, found a link's flows without numpy and probed a two-link option's second link
first: the whole re-plan 0.096-0.136 s -> 0.080-0.081 s, the same 13 moves (side by side, loaded
machine). Before the steps were read
off the layers as bits, it took 0.44-0.57 s and, cut by :data:`REPAIR_SECONDS`, ended at 15
moves in some runs. Over eight light-uplink cases (2,048 and 4,096 GPUs, four seeds) the
two-link options moved fewer in four (10 to 9, 13 to 10, 15 to 13, 12 to 10) and never more.
The lost-core, drained-core and light-uplink rows at 16,384 GPUs find no one-resource chain
(a pod's agg short of core links needs flows to leave it at both leaf ends) and fall to the
degraded colouring, sent back.

**Where.** The chain search both steps run is :mod:`solver.repair.treechains`; sending back
is :mod:`solver.repair.treereturn` (``send_back`` re-exported here); this module places the
displaced flows and turns a re-plan's problem into options and back (:func:`replan_choice`).

**Guarantee.** None beyond what is checked: the result is returned only when every flow is on a
usable option and no switch link carries more than ``target`` flows, so it meets the bound when
``target`` is the bound. Moves are not proven minimal; the planner reports a lower bound beside
them (and the tests compare them with an independent CP-SAT minimum on small fat-trees).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.exact.treecounts import BIG, Chain, Counts
from solver.exact.treeshape import FatTreeShape, _leaves
from solver.repair.treechains import DEPTH as DEPTH
from solver.repair.treechains import NODES as NODES
from solver.repair.treechains import PENDING, _floor, _relieve, _restore
from solver.repair.treereturn import _send_back
from solver.repair.treereturn import send_back as send_back
from solver.space.incremental import match_middles
from solver.space.problem import Problem
from topology.index import IntArray

__all__ = [
    "DEPTH",
    "NODES",
    "ORDERS",
    "REPAIR_SECONDS",
    "TreeRepair",
    "replan_choice",
    "repair_tree",
    "send_back",
]


ORDERS = 24
"""Orders of the displaced flows tried (all of them for up to four flows)."""

MORE_ORDERS_SECONDS = 0.005
"""Orders after the first are tried only while this much time has not passed since the start:
on the failure ladder no other order ever moved fewer (4,096 GPUs: the light uplink's six
orders 12-14 moves besides the crossed, the first 12), and 20 ms of them tripled a lost core's
repair time."""

CYCLE_SECONDS = 1.0
"""Most a re-plan gives agg swaps and the chains after them (:mod:`solver.repair.aggswap`),
after the one-link chains found nothing (3-tier 32,768 GPUs, an agg-core link down: 0.2 s)."""

REPAIR_SECONDS = 0.3
"""Most a re-plan gives these chains. Where they work they take 5-300 ms (3-tier 4,096 GPUs);
where they cannot place a flow they stop at :data:`NODES` in tens of ms; a tighter cap only
made a loaded machine's re-plan fall to the slower degraded colouring (0.1 s: a 4,096-GPU
light-uplink re-plan at load 3.5 took 0.59 s instead of ~0.2 s)."""


@dataclass(frozen=True)
class TreeRepair:
    """A repaired plan: agg index and core per flow (``-1``: none, as in
    :class:`solver.exact.fattree.FatTreeAssignment`), and how many flows with a previous option
    left it."""

    agg: IntArray
    core: IntArray
    moved: int


def _place(state: Counts, f: int, deadline: float, two: bool = False) -> int | None:
    """Put unplaced flow ``f`` where the fewest new moves make room; their price, or ``None``.
    ``two`` also tries options full on two links (:func:`_place_on_two`)."""
    count, hi, lo = state.blocked(f)
    free = np.flatnonzero(count == 0)
    if free.size:  # room everywhere: the option with the most slack on its fullest link
        rows = state.paths(np.full(free.size, f), free)
        slack = (state.room[rows] - state.load[rows]).min(axis=1)
        state.set(f, int(free[np.argmax(slack)]))
        return 0
    starts: list[tuple[tuple[int, ...], Chain]] = []
    seen: set[tuple[int, ...]] = set()
    for k in np.flatnonzero(count <= PENDING).tolist():
        key = tuple(sorted({int(hi[k]), int(lo[k])}))
        if key not in seen:
            seen.add(key)
            starts.append((key, [(f, k)]))
    saved = state.option.copy() if two else None  # a copy per flow: only when it is used
    found = _relieve(state, starts, {f}, DEPTH + 1, deadline)
    if found is None:
        return None
    if saved is not None and found[1] > 1:
        return _place_on_two(state, f, (count, hi, lo), seen, saved, found[1], deadline)
    return found[1]


TWO_STARTS = 64
"""Options full on two links a flow tries once its cheapest one-link chain costs more than
one move (see :func:`_place_on_two`)."""

TWO_FLOWS = 8
"""Most displaced flows placed with options full on two links as well (a failed, drained or
restored link's worth; a lost core displaces dozens, where a second repair with them cost
0.2-0.3 s at 16,384 GPUs and moved more)."""


def _place_on_two(
    state: Counts,
    f: int,
    blocked: tuple[IntArray, IntArray, IntArray],
    seen: set[tuple[int, ...]],
    saved: IntArray,
    cost: int,
    deadline: float,
) -> int:
    """With ``f`` placed by a one-link chain of price ``cost`` (made; ``saved`` the state
    before it), try ``f`` on options full on two links instead, each link relieved by its own
    chain, and keep the cheapest (made); its price.

    Why: on a full 3-tier fabric a flow entering a leaf whose uplink failed finds one-link
    chains only through long detours, while an option full at both its leaf links is often
    relieved by one direct move at each (4,096 GPUs, a light uplink lost: 15 moves in all with
    one-link chains only, 13 with these, the minimum 12). Each second chain's floor
    (:func:`_floor`) is kept out of the first one's budget: a search under a budget ends only
    when the budget is spent, so a tight one is most of the saving. Only where a one-link
    chain was found: where none is, the degraded colouring follows, and this would only cost
    time (16,384 GPUs: 0.15 s, nothing found).

    A first link that no chain relieved under some budget is not searched again under as
    much for another option of ``f`` (``hopeless``): between the tries only ``f``'s option
    differs, and a chain relieving a leaf link seldom passes through ``f``'s other links. That
    is a judgement, not a proof; it took the 4,096-GPU light uplink's two-link steps from 1,216
    to 878, and changed no result on 48 ladder cases (2,048 and 4,096 GPUs, four seeds).

    Likewise the second link is probed first at its floor (a search priced only as cheap as
    that, a few steps): where nothing so cheap relieves it with ``f`` on the option, its floor
    rises by one, and the first link's search gets one move less. The first link's chain
    comes between the probe and the second link's own search, so this too is a judgement: on
    that re-plan the flow whose one-link chain cost five and no option on two links did better
    spent 722 steps proving it, now 487 (all two-link steps 878 -> 627), and the 48 cases
    kept every path."""
    count, hi, lo = blocked
    best = state.option.copy()
    _restore(state, saved)
    tried = 0
    hopeless: dict[int, int] = {}
    for k in np.flatnonzero(count == 2).tolist():
        if cost <= 1 or tried >= TWO_STARTS or time.perf_counter() > deadline:
            break
        key = (min(int(lo[k]), int(hi[k])), max(int(lo[k]), int(hi[k])))
        if key in seen:
            continue
        seen.add(key)
        floors = [_floor(state, r) for r in key]
        if sum(floors) >= cost:
            continue
        tried += 1
        state.set(f, k)
        price = 0
        last = key[1]
        if floors[0] + floors[1] + 1 < cost and state.load[last] > state.room[last]:
            # the second link at its floor: where nothing that cheap relieves it, one more
            # (probing again at each floor above cost more than it saved: 1,201 -> 1,794 steps)
            probe = _relieve(state, [((last,), [])], {f}, floors[1] + 1, deadline)
            if probe is None:
                floors[1] += 1
            else:
                _restore(state, saved)
                state.set(f, k)
        for n, r in enumerate(key):
            if state.load[r] <= state.room[r]:
                continue
            left = cost - price - sum(floors[n + 1 :])
            if n == 0 and hopeless.get(r, 0) >= left:
                price = cost  # no chain relieved it under as much with f on its other links
                break
            got = _relieve(state, [((r,), [])], {f}, left, deadline)
            if got is None:
                if n == 0:
                    hopeless[r] = max(hopeless.get(r, 0), left)
                price = cost
                break
            price += got[1]
        if price < cost:
            cost, best = price, state.option.copy()
        _restore(state, saved)
    _restore(state, best)
    return cost


def _run(
    state: Counts, order: list[int], deadline: float, budget: int, two: bool = False
) -> int | None:
    """Relieve over-full resources, place ``order``'s flows, send moved ones back: the
    moves, or ``None`` where something found no chain (or the moves reached ``budget``)."""
    for _ in range(state.option.size):
        over = np.flatnonzero(state.load > state.room)
        if not over.size:
            break
        if (
            time.perf_counter() > deadline
            or _relieve(state, [((int(over[0]),), [])], set(), DEPTH + 1, deadline) is None
        ):
            return None
    for f in order:
        if time.perf_counter() > deadline or _place(state, f, deadline, two) is None:
            return None
        if state.moves() >= budget:
            return None
    _send_back(state)
    return state.moves()


def _orders(flows: list[int], count: int) -> list[list[int]]:
    """The given order first, then others: every permutation of a few flows, else rotations
    and the reverse. Only the ``count`` kept are built: building every rotation of a step's
    new flows first (n squared entries) took a 131k-GPU server past 20 GB when a burst of
    submissions landed in one re-plan."""
    if len(flows) <= 4:
        return [list(p) for p in itertools.permutations(flows)][:count]
    out = [flows, flows[::-1]]
    out += [flows[k:] + flows[:k] for k in range(1, min(len(flows), count - 1))]
    return out[:count]


def repair_tree(
    shape: FatTreeShape,
    usable: npt.ArrayLike,
    src_leaf: npt.ArrayLike,
    dst_leaf: npt.ArrayLike,
    previous: tuple[IntArray, IntArray],
    target: int,
    deadline: float = float("inf"),
    cycles: bool = False,
) -> TreeRepair | None:
    """Every flow on its previous agg index and core where that path is usable and within
    ``target`` flows a switch link; the others placed by chains of moves (module doc).
    ``None`` when a flow finds no chain before ``deadline``. With ``cycles``, agg swaps
    (:mod:`solver.repair.aggswap`) come first, for where the chains alone found nothing.

    ``shape`` is the cabling's (:func:`solver.exact.fattree.analyse` with ``ignore_status``);
    ``previous`` is each flow's former agg index and core (``-1``: none, or within a pod).
    """
    started = time.perf_counter()
    s, t = _leaves(shape, src_leaf, dst_leaf)
    ok = np.append(np.asarray(usable, dtype=bool), False)
    prev_agg, prev_core = (np.asarray(a, dtype=np.int64) for a in previous)
    on = s != t
    far = shape.pod[s] != shape.pod[t]
    g_count = shape.cores_per_group
    option = np.where(far, prev_agg * g_count + prev_core, prev_agg)
    option[~on | (prev_agg < 0) | (far & (prev_core < 0))] = -1
    flows = np.flatnonzero(on)
    state = Counts(shape, ok, (s[flows], t[flows]), option[flows], target)
    # The chains' time starts now: counting a 131,072-GPU fabric's flows takes a few tenths
    # of a second, which left them none of REPAIR_SECONDS there.
    deadline += time.perf_counter() - started
    # A previous option over a lost link is gone: that flow must move.
    lost = (state.option >= 0) & ~state.ok[state.path].all(axis=1)
    for f in np.flatnonzero(lost).tolist():
        state.set(f, -1)
    start = state.option.copy()
    todo = np.flatnonzero(start < 0).tolist()
    must = int(np.count_nonzero(lost))
    best: IntArray | None = None
    fewest = BIG
    if todo and len(todo) <= TWO_FLOWS and not cycles:
        got = _run(state, todo, deadline, fewest, two=True)
        if got is not None:
            best, fewest = state.option.copy(), got
        else:
            _restore(state, start)
    for k, order in enumerate(_orders(todo, ORDERS) if best is None and not cycles else []):
        if k and time.perf_counter() > min(deadline, started + MORE_ORDERS_SECONDS):
            break
        if k:
            _restore(state, start)
        got = _run(
            state, order, min(deadline, started + MORE_ORDERS_SECONDS) if k else deadline, fewest
        )
        if got is not None and got < fewest:
            best, fewest = state.option.copy(), got
            if fewest <= must:  # no order moves fewer
                break
    if cycles:
        # An agg short of core links on a full fabric: no one-link chain exists; swap aggs
        # along cycles first (solver.repair.aggswap), then the chains as before.
        from solver.repair.aggswap import swap_cycles

        if swap_cycles(state, todo, deadline):
            got = _run(state, todo, deadline, BIG)
            if got is not None:
                best = state.option.copy()
    if best is None:
        return None
    agg = np.full(s.size, -1, dtype=np.int64)
    core = np.full(s.size, -1, dtype=np.int64)
    mine = far[flows]
    agg[flows] = np.where(mine, best // g_count, best)
    core[flows[mine]] = best[mine] % g_count
    had = prev_agg >= 0
    moved = int(np.count_nonzero(had & ((agg != prev_agg) | (core != prev_core))))
    return TreeRepair(agg, core, moved)


def replan_choice(
    problem: Problem,
    flows: IntArray,
    prior: IntArray,
    shape: FatTreeShape,
    target: int,
    deadline: float,
    cycles: bool = False,
) -> IntArray | None:
    """:func:`repair_tree` for the planner: ``prior`` (candidate per flow, ``-1``: none or
    gone) read as aggs and cores off the candidates' first hops, the answer as candidates;
    ``None`` where it finds no repair or a path is no candidate."""
    leaves = problem.pair_leaves[problem.pair[flows]]
    rows = problem.row_paths(problem.offset[problem.pair[flows]] + np.maximum(prior, 0))
    far = shape.pod[leaves[:, 0]] != shape.pod[leaves[:, 1]]
    agg = np.where(prior >= 0, shape.choice[rows[:, 0]], -1)
    core = np.where((prior >= 0) & far, shape.choice[rows[:, min(1, rows.shape[1] - 1)]], -1)
    usable = problem.index.res_usable
    result = repair_tree(
        shape, usable, leaves[:, 0], leaves[:, 1], (agg, core), target, deadline, cycles
    )
    if result is None:
        return None
    # Only the flows that moved need their candidate found (vectorised middles: within a
    # pod ``(up, down)``, across ``(up, agg-core, core-agg, down)``).
    moved = np.flatnonzero((result.agg != agg) | (result.core != core) | (prior < 0))
    choice = prior.copy()
    if moved.size:
        s, t = leaves[moved, 0], leaves[moved, 1]
        j, g = result.agg[moved], result.core[moved]
        cross = g >= 0
        middles = np.full((moved.size, problem.width), problem.pad, dtype=np.int64)
        middles[:, 0] = shape.up[s, j]
        middles[:, 1] = np.where(cross, shape.agg_up[shape.pod[s], j, np.maximum(g, 0)],
                                 shape.down[t, j])  # fmt: skip
        if problem.width > 2:
            middles[cross, 2] = shape.agg_down[shape.pod[t[cross]], j[cross], g[cross]]
            middles[cross, 3] = shape.down[t[cross], j[cross]]
        choice[moved] = match_middles(problem, flows[moved], middles)
    return None if np.any(choice < 0) else choice
