"""The planner: ``plan(snapshot, flows, previous) -> Plan``, the heart of the C4P loop.

Why one function: the offline CLI (what-if, sizing) and the live controller (react to a failure,
a job) ask the same question — which equal-cost path should each QP take on this snapshot — so
both call :func:`plan` (the solver is a function) and get a :class:`Plan` that says
what it chose, how good that is, what no plan can beat, and what moved.

**Objective**, lexicographic: (1) the maximum utilization of a switch-to-switch link, load being
``rate x job priority`` per flow and utilization as in :mod:`solver.yardstick.evaluate` (``load *
reference / capacity``); (2) for a fresh plan, the number of links at that maximum; (3) the
flows moved from ``previous``. With a previous plan, moves come *before* links-at-max: a live QP
is only moved when the maximum needs it, never to shave a tie (a bulk-synchronous job runs at
its worst link, which (1) already minimized). Sum of squared utilizations is reported too.
The order holds *per independent part* (below): a job whose flows share no link with the
bottleneck still gets its own lowest maximum, even if that moves one of its flows.

**Method, per independent sub-problem** (connected components of leaf pairs that share a
link: planes, rails of rail-aligned traffic) under strategy ``auto``:

1. two tiers, equal weights, every pair able to use every spine at one capacity:
   exact colouring (:mod:`solver.exact.coloring`) — optimal, in milliseconds;
2. a 3-tier fat-tree with equal weights and every link up: the stage-wise colouring of
   :mod:`solver.exact.fattree` — taken as it is when it meets its bound, else compared with greedy
   (a fresh plan colours all such parts in one call first and keeps each part's share that
   meets its own bound: 400 rails of a 16k-GPU ring in one call rather than 400);
3. otherwise the greedy least-loaded heuristic (:mod:`solver.search.greedy`);
4. while the result is above the best lower bound (:mod:`solver.bounds.combinatorial`) and time
remains:
   the LP bound where cheap, then CP-SAT (:mod:`solver.search.cpsat`) hinted with the incumbent,
   kept only if better. So ``auto`` is never worse than greedy.

Other strategies: ``exact`` (refuses sub-problems it cannot solve exactly), ``cpsat`` (greedy
hint, then always CP-SAT), ``greedy``, ``ecmp`` (the unplanned baseline of
:mod:`solver.yardstick.ecmp`).

**Degraded fabrics** (links down or drained): where the healthy methods no longer apply, a
fat-tree is coloured at the bound with the lost links' colours given no room (method
``degraded``, :mod:`solver.repair.degraded`); where that finds none, the intact fabric is coloured
exactly (every link taken as up) and the flows whose colour is gone are repaired to the bound
(:mod:`solver.repair.evict`; on 2 tiers with two-spine exchanges, :mod:`solver.repair.kempe`).
Meeting the bound proves the part optimal; otherwise the search below runs as before.

**Re-planning** (``previous`` given; :mod:`solver.space.incremental` decides which flows may stay).
A sub-problem whose flows may all stay and that is still at its bound is kept as it is (``kept``:
the common case, checked for all at once). Otherwise ``auto`` repairs the previous plan to the
bound: flows that may stay do, flows on over-full links are evicted, the rest are re-placed
(``repair``; on a fat-tree of equal weights first by chains over its layered link counts,
:mod:`solver.repair.treemoves`, which never reads a path row: ``tree-repair``). If that misses the
bound, the part is planned as a full plan and then repaired from the previous plan at the
utilization that reached, keeping the best by (max utilization, moves, links at max); on a
fat-tree whose chains found nothing (an agg short of core links on a full fabric) that includes
agg swaps (:mod:`solver.repair.aggswap`: 80 moves where the degraded colouring moved 143 at
131,072 GPUs). The plan
reports a lower bound on the moves (:func:`solver.repair.evict.min_moves`); where the repair moves
more than that and the part is small, :func:`solver.repair.moves.fewest_moves` looks for the exact
fewest (within a quarter second) and its proven bound raises the reported one. The snapshot's
candidate paths are derived from the previous plan's when only links went away. Strategy
``greedy`` keeps the old behaviour (keep what may stay, place the rest greedily).

**Budget** (seconds) bounds the search: LP and CP-SAT share what the constructive step leaves,
in proportion to sub-problem size. A repair searches ejection chains until it fits every flow,
so each gets at most :data:`REPAIR_SHARE` of what is left of the budget and then places the
rest where they fit best (a 16k-GPU re-plan after a lost core used to spend 18 s of a 10 s
budget there). Construction always runs (milliseconds; about a second at
16k GPUs for greedy), so a tiny budget returns the constructive plan, valid and a little late.
"""

from __future__ import annotations

import gc
import itertools
import math
import operator
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from solver.planning.assemble import assemble, ecmp_choice
from solver.planning.components import split
from solver.planning.methods import Planner
from solver.planning.result import Plan
from solver.space.incremental import match_previous
from solver.space.problem import SAME_LEAF, Problem, build_problem
from solver.workload.flows import Flow, Workload
from topology.index import FloatArray
from topology.model import Fabric

__all__ = ["STRATEGIES", "flow_weights", "plan"]

STRATEGIES = ("auto", "exact", "cpsat", "greedy", "ecmp")


LAZY = (
    "solver.search.cpsat",
    "solver.repair.moves",
    "solver.repair.evict",
    "solver.repair.chains",
    "solver.repair.jointchains",
    "solver.repair.kempe",
    "solver.repair.degraded",
    "solver.repair.treemoves",
    "solver.repair.state",
    "solver.repair.treechains",
    "solver.repair.treereturn",
    "solver.repair.aggswap",
)
"""Modules the planner (its methods per part, :mod:`solver.planning.methods`) imports only where
it uses them: re-plans (repair, chains, fewest moves), degraded fabrics and parts above their
bound (CP-SAT). A fresh plan on an intact fabric, what ``c4p plan`` mostly runs, never does, and
loading them was some 30 ms of its start (tested: ``tests/test_plan_fast_paths.py``)."""


_RATE, _JOB = operator.attrgetter("rate"), operator.attrgetter("job")


def flow_weights(
    flows: Workload | Sequence[Flow], priorities: Mapping[str, float] | None = None
) -> tuple[tuple[Flow, ...], FloatArray]:
    """Flows and their weights ``rate x priority``; priorities default to a workload's jobs'."""
    prio: dict[str, float] = {}
    if isinstance(flows, Workload):
        prio.update((c.job, float(c.priority)) for c in flows.communicators)
        flow_list = flows.flows
    else:
        flow_list = tuple(flows)
    if priorities:
        for job, value in priorities.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"priorities[{job!r}] must be a positive number, got {value!r}")
        prio.update(priorities)
    # Read with attrgetter and map (no Python step per flow: this runs for every plan, three
    # times per ``c4p plan``); a factor of 1.0 is left out, which changes no product.
    rates = np.fromiter(map(_RATE, flow_list), np.float64, count=len(flow_list))
    if any(factor != 1.0 for factor in prio.values()):
        factors = map(prio.get, map(_JOB, flow_list), itertools.repeat(1.0))
        rates *= np.fromiter(factors, np.float64, count=len(flow_list))
    return flow_list, rates


def plan(
    snapshot: Fabric,
    flows: Workload | Sequence[Flow],
    previous: Plan | None = None,
    *,
    budget: float = 5.0,
    seed: int = 0,
    strategy: str = "auto",
    priorities: Mapping[str, float] | None = None,
    problem: Problem | None = None,
) -> Plan:
    """Give every flow an equal-cost path on ``snapshot``; see the module docstring.

    ``flows`` may be a :class:`Workload` (its jobs' priorities apply) or plain flows;
    ``priorities`` (job id -> weight factor) overrides. ``previous`` is the plan in force (a
    :class:`Plan`, possibly read back with :meth:`Plan.from_plan_file`). Raises ``ValueError``
    for an unknown strategy or a negative budget, :class:`solver.errors.PlanError` for flows the
    fabric does not have, :class:`solver.errors.SolverError` when ``exact`` does not apply.

    ``problem``: one :func:`solver.space.problem.build_problem` made for these flows and weights on
    ``snapshot``, for a caller planning them twice (``c4p plan`` runs greedy beside c4p: one
    build of a 16k-GPU problem is a tenth of a second). Used only for a fresh plan of exactly
    those flows; otherwise built here as usual.

    Runs with Python's cyclic garbage collector paused (:func:`_collector_paused`).
    """
    with _collector_paused():
        return _plan(snapshot, flows, previous, budget, seed, strategy, priorities, problem)


_PAUSE_LOCK = threading.Lock()
_pauses = [0, False]  # plans running, whether the collector was enabled before the first


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a plan runs, back as it was after the last.

    Why: a re-plan allocates enough to trigger a full collection now and then, and a full
    collection walks every object the *process* holds (the fabric, the jobs, the plan in force:
    139,000 objects at 4,096 GPUs), not the re-plan's own: measured in the first re-plan after
    a link failure at 4,096 GPUs (3-tier, light uplink), 0.119-0.133 s with the collector
    and 0.074-0.077 s with it paused, the same 13 moves. A plan's own garbage is freed by
    reference counting (numpy arrays, tuples, dicts without cycles); any cycles it leaves wait
    for the next collection after it. Counted, so plans in several threads of the service
    switch it back only when the last one ends."""
    with _PAUSE_LOCK:
        if _pauses[0] == 0:
            _pauses[1] = gc.isenabled()
            gc.disable()
        _pauses[0] += 1
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _pauses[0] -= 1
            if _pauses[0] == 0 and _pauses[1]:
                gc.enable()


def _plan(
    snapshot: Fabric,
    flows: Workload | Sequence[Flow],
    previous: Plan | None,
    budget: float,
    seed: int,
    strategy: str,
    priorities: Mapping[str, float] | None,
    problem: Problem | None,
) -> Plan:
    """:func:`plan`'s body, with the collector paused."""
    started = time.perf_counter()
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    if not (budget >= 0 and math.isfinite(budget)):
        raise ValueError(f"budget must be a non-negative number of seconds, got {budget!r}")
    flow_list, weight = flow_weights(flows, priorities)
    reuse = None if previous is None else previous.candidates
    if not (
        problem is not None
        and previous is None
        and problem.fabric is snapshot
        and (problem.flows is flow_list or problem.flows == tuple(flow_list))
        and np.array_equal(problem.weight, weight)
    ):
        problem = build_problem(snapshot, flow_list, weight, reuse)
    prior = None
    if previous is not None:
        prior = match_previous(problem, previous.flows, previous.paths, previous.snapshot)
    if strategy == "ecmp":
        paths, choice = ecmp_choice(problem, seed)
        components = split(problem)
        for c in components:
            c.choice, c.method = choice[c.flows], "ecmp"
    else:
        components = Planner(problem, prior, strategy, seed, started + budget).run()
        choice = np.where(problem.pair == SAME_LEAF, 0, -1).astype(np.int64)
        for c in components:
            choice[c.flows] = c.choice
        kept = None
        if prior is not None and previous is not None and prior.aligned:
            kept = (previous.paths, prior.had & (prior.choice == choice) & (choice >= 0))
        paths = problem.paths(choice, kept)
    return assemble(problem, choice, components, prior, paths, strategy, seed, budget, started)
