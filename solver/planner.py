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
utilization that reached, keeping the best by (max utilization, moves, links at max). The plan
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

from solver.bounds.combinatorial import lp_bound, round_up
from solver.errors import SolverError
from solver.planning.assemble import assemble, ecmp_choice
from solver.planning.components import Component, meets, objective, split
from solver.planning.result import Plan
from solver.planning.structured import Option, Structured
from solver.search.greedy import exact_reason, exact_spines, place_exact, place_greedy
from solver.space.incremental import Previous, match_previous
from solver.space.problem import SAME_LEAF, Problem, build_problem
from solver.workload.flows import Flow, Workload
from topology.index import FloatArray, IntArray
from topology.model import Fabric

__all__ = ["STRATEGIES", "flow_weights", "plan"]

STRATEGIES = ("auto", "exact", "cpsat", "greedy", "ecmp")

MIN_SEARCH_SECONDS = 0.02
"""A search (LP or CP-SAT) is not started with less time than this (plus its build cost)."""

BUILD_SECONDS_PER_PATH = 2e-5
"""Rough cost of building a CP-SAT model, per candidate variable, measured on 2 cores."""

LAZY = (
    "solver.search.cpsat",
    "solver.repair.moves",
    "solver.repair.evict",
    "solver.repair.chains",
    "solver.repair.jointchains",
    "solver.repair.kempe",
    "solver.repair.degraded",
    "solver.repair.treemoves",
)
"""Modules this planner imports only where it uses them: re-plans (repair, chains, fewest
moves), degraded fabrics and parts above their bound (CP-SAT). A fresh plan on an intact
fabric, what ``c4p plan`` mostly runs, never does, and loading them was some 30 ms of its
start (tested: ``tests/test_plan_fast_paths.py``)."""

REPAIR_SHARE = 0.1
"""Part of the remaining budget one repair may take (see ``_Planner.slice``)."""

QUICK_REPAIR_SECONDS = 0.1
"""On a fat-tree, the first repair of a re-plan (keep what may stay, re-place the rest) stops
after this: when it works it takes milliseconds (a 16k-GPU fat-tree losing its busiest uplink:
20 ms), and when it cannot the degraded colouring reaches the bound in a fraction of a second
instead."""

LP_SHARE = 0.25
"""Part of a sub-problem's time the LP bound may take before CP-SAT."""

POLISH_SECONDS = 0.25
"""Most a re-plan spends in all looking for fewer moves than its repairs made
(:mod:`solver.repair.moves`)."""

POLISH_OPTIONS = 4000
"""Largest neighbourhood (candidates of its free flows) that search takes on: milliseconds."""

POLISH_FLOWS = 1000
"""Largest component a re-plan searches for fewer moves (larger ones: ``c4p bench``)."""


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


class _Planner:
    """State of one :func:`plan` call: the problem, the previous plan, the clock."""

    def __init__(
        self, problem: Problem, previous: Previous | None, strategy: str, seed: int, deadline: float
    ) -> None:
        self.problem = problem
        self.previous = previous
        self.strategy = strategy
        self.seed = seed
        self.deadline = deadline
        self.structured = Structured(problem, self.slice)
        self._polish_left = POLISH_SECONDS

    def slice(self) -> float:
        """The deadline of one repair: a share of what is left of the budget (a repair that
        cannot reach its target searches ejection chains until stopped; the planner's other
        methods, then the search, need the rest)."""
        now = time.perf_counter()
        return now + max(self.deadline - now, 0.0) * REPAIR_SHARE

    def key(self, c: Component, choice: IntArray) -> tuple[float, ...]:
        """What "better" means for a component: the objective, lexicographically."""
        util, at_max = objective(self.problem, c, choice).key()
        if self.previous is None:
            return (util, at_max)
        moved = self.previous.had[c.flows] & (self.previous.choice[c.flows] != choice)
        return (util, float(np.count_nonzero(moved)), at_max)

    def prior(self, c: Component) -> IntArray | None:
        return None if self.previous is None else self.previous.choice[c.flows]

    def at_bound(self, c: Component, choice: IntArray | None = None) -> bool:
        chosen = c.choice if choice is None else choice
        return meets(objective(self.problem, c, chosen).max_utilization, c.best)

    def run(self) -> list[Component]:
        components = split(self.problem)
        todo = components
        if self.previous is not None and self.strategy in ("auto", "greedy"):
            todo = self.keep_untouched(components)
        if self.previous is None and self.strategy in ("auto", "exact"):
            self.exact_together(todo)
        if self.previous is None and self.strategy == "auto":
            self.trees_together([c for c in todo if not c.method])
        for c in todo:
            if not c.method:
                self.construct(c)
        pending = [c for c in components if self.strategy == "cpsat"]
        if self.strategy == "auto":
            pending = [c for c in todo if not self.at_bound(c)]
        weight_left = sum(len(c.flows) for c in pending)
        for c in pending:
            remaining = self.deadline - time.perf_counter()
            share = remaining * len(c.flows) / max(weight_left, 1)
            weight_left -= len(c.flows)
            if share <= 0:
                c.notes += ("search skipped: budget spent",)
                continue
            self.improve(c, share)
        return components

    def keep_untouched(self, components: list[Component]) -> list[Component]:
        """Components whose every flow may stay, and does so at the bound, are done as they
        are (checked all at once: the common case of a re-plan); the rest are returned."""
        assert self.previous is not None
        problem = self.problem
        prior = self.previous.choice
        cross = problem.cross
        kept = cross[prior[cross] >= 0]
        peaks = problem.peaks(problem.loads(kept, prior[kept]))
        rest = []
        for k, c in enumerate(components):
            if np.all(prior[c.flows] >= 0) and meets(float(peaks[k]), c.best):
                c.choice, c.method = prior[c.flows], "kept"
            else:
                rest.append(c)
        return rest

    # -- construction ---------------------------------------------------------------------

    def exact_together(self, components: list[Component]) -> None:
        """Exact colouring of every component it solves, one call per spine set: components
        share no leaf-multigraph vertex, so colouring their union colours each optimally (512
        rails of a 16k-GPU fabric in one call rather than 512)."""
        problem = self.problem
        groups: dict[tuple[int, ...], list[Component]] = {}
        for c in components:
            spines = exact_spines(problem, c.pairs, c.flows)
            if not isinstance(spines, str) and len(c.flows):
                groups.setdefault(tuple(spines.tolist()), []).append(c)
        for members in groups.values():
            start = time.perf_counter()
            pairs = np.sort(np.concatenate([c.pairs for c in members]))
            choice = place_exact(problem, pairs, np.concatenate([c.flows for c in members]))
            parts = np.split(choice, np.cumsum([len(c.flows) for c in members])[:-1])
            seconds = (time.perf_counter() - start) / len(members)
            for c, mine in zip(members, parts, strict=True):
                c.choice, c.method, c.proven, c.seconds = mine, "exact", True, seconds

    def trees_together(self, components: list[Component]) -> None:
        """Fresh fat-tree parts coloured in one call (:meth:`Structured.fat_trees`); a part
        whose share meets its own bound is done (proven optimal), the others are constructed
        one by one as before."""
        if len(components) < 2:
            return
        start = time.perf_counter()
        shares = self.structured.fat_trees(components)
        seconds = (time.perf_counter() - start) / len(components)
        for c, choice in zip(components, shares, strict=True):
            if choice is not None and self.at_bound(c, choice):
                c.choice, c.method, c.proven, c.seconds = choice, "fattree", True, seconds

    def construct(self, c: Component) -> None:
        """The constructive step for one component (see the module docstring)."""
        start = time.perf_counter()
        problem = self.problem
        prior = self.prior(c)
        options: list[Option] = []
        if prior is not None and self.strategy != "exact":
            # Keep what may stay, evict what must go, re-place: at the bound, done.
            if self.strategy == "auto":
                deadline = self.slice()
                weights = problem.weight[c.flows]
                if self.structured.intact_shape() is not None and np.all(weights == weights[:1]):
                    # a fat-tree of equal weights: chains over its layered counts first
                    # (solver.repair.treemoves); where they apply and fail on a large part, the
                    # generic repair (the same chains on path rows, slower; on a small part the
                    # exact fewest moves follow it) is skipped for the degraded colouring
                    applies, moved = self.structured.tree_repair(c, prior)
                    if moved is not None:
                        c.choice, c.method = self.fewer_moves(c, prior, moved), "tree-repair"
                        c.seconds = time.perf_counter() - start
                        return
                    deadline = min(deadline, time.perf_counter() + QUICK_REPAIR_SECONDS)
                    if applies and len(c.flows) > POLISH_FLOWS:
                        deadline = 0.0
                fixed = None
                if deadline > 0.0:
                    from solver.repair.evict import repair  # re-plans only (see LAZY)

                    grid = self.structured.grid(c)
                    fixed = repair(problem, c.flows, prior, c.best, grid, deadline=deadline)
                if fixed is not None and fixed.reached:
                    c.choice, c.method = self.fewer_moves(c, prior, fixed.choice), "repair"
                    c.seconds = time.perf_counter() - start
                    return
            options.append((self.greedy(c.flows, prior), "greedy", False))
            if self.at_bound(c, options[0][0]):
                c.choice, c.method = options[0][:2]
                c.seconds = time.perf_counter() - start
                return
        if self.strategy in ("auto", "exact"):
            reason = exact_reason(problem, c.pairs, c.flows)
            if reason is None:
                options.append((place_exact(problem, c.pairs, c.flows, prior), "exact", True))
            elif self.strategy == "exact":
                leaves = problem.pair_leaves[c.pairs[0]]
                names = problem.index.node_names
                raise SolverError(
                    f"strategy 'exact' does not apply to the flows between "
                    f"{names[leaves[0]]} and {names[leaves[1]]} (and {len(c.flows) - 1} others "
                    f"sharing links with them): {reason}"
                )
        if self.strategy == "auto" and not any(method == "exact" for _, method, _ in options):
            tree = self.structured.fat_tree(c, prior)
            if tree is not None:
                options.append(tree)
        proven = any(optimal for _, _, optimal in options)
        if self.strategy == "auto" and not proven:
            healed = self.structured.heal(c, prior)
            if healed is not None:
                options.append(healed)
                proven = self.at_bound(c, healed[0])
        if prior is None and self.strategy != "exact" and not proven:
            options.append((self.greedy(c.flows, None), "greedy", False))
        keys = [self.key(c, choice) for choice, _, _ in options]
        best = min(range(len(options)), key=lambda i: keys[i])
        c.choice, c.method, c.proven = options[best]
        z = float(keys[best][0])
        if prior is not None and self.strategy == "auto" and not meets(z, c.best):
            # The same max utilization with fewer moves: repair the previous plan to it (at
            # the bound the first repair already tried and failed).
            from solver.repair.evict import repair  # re-plans only (see LAZY)

            fixed = repair(
                problem, c.flows, prior, z, self.structured.grid(c), deadline=self.slice()
            )
            if fixed.reached and self.key(c, fixed.choice) < keys[best]:
                c.choice, c.method = fixed.choice, "repair"
        c.seconds = time.perf_counter() - start

    def fewer_moves(self, c: Component, prior: IntArray, choice: IntArray) -> IntArray:
        """A repair at the bound that moves more than the counting bound allows, on a
        component small enough for it: the exact fewest moves of :mod:`solver.repair.moves` (its
        bound is kept for the report either way)."""
        from solver.repair.evict import min_moves
        from solver.repair.moves import fewest_moves  # re-plans only (see LAZY)

        assert self.previous is not None
        problem = self.problem
        mine = np.where(self.previous.had[c.flows], prior, -2)
        moves = int(np.count_nonzero((mine != -2) & (choice != mine)))
        if len(c.flows) > POLISH_FLOWS or moves <= min_moves(problem, c.flows, mine, c.best):
            return choice
        started = time.perf_counter()
        left = min(self._polish_left, self.deadline - started)
        if left <= MIN_SEARCH_SECONDS:
            return choice
        found = fewest_moves(problem, c.flows, mine, c.best, choice, time_limit=left,
                             seed=self.seed, max_options=POLISH_OPTIONS, chains=False)  # fmt: skip
        self._polish_left -= time.perf_counter() - started
        c.moves_bound = found.bound
        if found.choice is not None and found.moves is not None and found.moves < moves:
            c.notes += (found.note,)
            return found.choice
        return choice

    def greedy(self, flows: IntArray, prior: IntArray | None) -> IntArray:
        """Greedy for ``flows``; with ``prior``, flows that may stay do and the rest follow."""
        problem = self.problem
        load = np.zeros(problem.pad + 1)
        choice = np.full(len(flows), -1, dtype=np.int64)
        free = np.ones(len(flows), dtype=bool)
        if prior is not None:
            free = prior < 0
            choice[~free] = prior[~free]
            load = problem.loads(flows[~free], prior[~free])
        choice[free] = place_greedy(problem, flows[free], load)
        return choice

    # -- search ---------------------------------------------------------------------------

    def improve(self, c: Component, share: float) -> None:
        """LP bound, then CP-SAT, within ``share`` seconds; keeps the best assignment."""
        start = time.perf_counter()
        problem = self.problem
        if self.strategy == "auto" and share > MIN_SEARCH_SECONDS:
            value, note = lp_bound(problem, c.pairs, c.flows, share * LP_SHARE)
            c.notes += (note,)
            if value is not None:
                c.lp = round_up(value, c.unit)
            if self.at_bound(c):
                c.seconds += time.perf_counter() - start
                return
        left = share - (time.perf_counter() - start)
        paths = int(problem.num_candidates(c.pairs).sum())
        if left < MIN_SEARCH_SECONDS + BUILD_SECONDS_PER_PATH * paths:
            c.notes += (f"CP-SAT skipped: {max(left, 0):.3f} s left for {paths:,} candidates",)
        else:
            from solver.search.cpsat import solve_cpsat  # parts above their bound only (see LAZY)

            outcome = solve_cpsat(
                problem,
                c.pairs,
                c.flows,
                c.choice,
                lower_bound=c.best,
                time_limit=left,
                seed=self.seed,
                previous=self.prior(c),
            )
            c.notes += (f"CP-SAT: {outcome.note}",)
            if outcome.bound is not None:
                c.solver_bound = round_up(outcome.bound, c.unit)
            if self.key(c, outcome.choice) < self.key(c, c.choice):
                c.choice, c.method = outcome.choice, "cpsat"
            c.proven = c.proven or (outcome.proven and c.method == "cpsat")
        c.seconds += time.perf_counter() - start


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
        components = _Planner(problem, prior, strategy, seed, started + budget).run()
        choice = np.where(problem.pair == SAME_LEAF, 0, -1).astype(np.int64)
        for c in components:
            choice[c.flows] = c.choice
        kept = None
        if prior is not None and previous is not None and prior.aligned:
            kept = (previous.paths, prior.had & (prior.choice == choice) & (choice >= 0))
        paths = problem.paths(choice, kept)
    return assemble(problem, choice, components, prior, paths, strategy, seed, budget, started)
