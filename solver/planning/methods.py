"""The methods each independent part of a plan gets, in order: kept as it is, coloured exactly
(alone or all such parts together), constructed (greedy, the fat-tree colouring, degraded
colouring, repair of the previous plan), then searched (LP bound, CP-SAT) and polished for fewer
moves while the budget lasts.

Why apart from :mod:`solver.planner`: the entry there checks its arguments, builds the problem,
matches the previous plan and assembles the :class:`~solver.planning.result.Plan`, the same for
every strategy; this is the choice of method per part, which is what a new fabric family's method
changes. The order, the budget's shares and the measurements behind them are told in
:mod:`solver.planner`'s docstring; the modules imported here only where used are its ``LAZY``.
"""

from __future__ import annotations

import time

import numpy as np

from solver.bounds.combinatorial import lp_bound, round_up
from solver.errors import SolverError
from solver.planning.components import Component, meets, objective, split
from solver.planning.structured import Option, Structured
from solver.search.greedy import exact_reason, exact_spines, place_exact, place_greedy
from solver.space.incremental import Previous
from solver.space.problem import Problem
from topology.index import IntArray

MIN_SEARCH_SECONDS = 0.02
"""A search (LP or CP-SAT) is not started with less time than this (plus its build cost)."""


BUILD_SECONDS_PER_PATH = 2e-5
"""Rough cost of building a CP-SAT model, per candidate variable, measured on 2 cores."""


REPAIR_SHARE = 0.1
"""Part of the remaining budget one repair may take (see ``Planner.slice``)."""


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


SWAPS_ALONE_FLOWS = 100_000
"""A part larger than this whose agg swaps reached the bound skips the degraded colouring: there
the swaps moved fewer (3-tier 32,768 GPUs, 65,536 flows: 46 against 76; 131,072 GPUs: 84
against 143) and the colouring was most of the re-plan (131k: 2.7 of 3.9 s CPU); on smaller
parts both run and the fewer moves are kept (8,192 GPUs: the colouring's 23 against 30)."""


class Planner:
    """State of one :func:`plan` call: the problem, the previous plan, the clock."""

    def __init__(
        self, problem: Problem, previous: Previous | None, strategy: str, seed: int, deadline: float
    ) -> None:
        self.problem = problem
        self.previous = previous
        self.strategy = strategy
        self.seed = seed
        self.deadline = deadline
        self.structured = Structured(problem, self.slice, deadline)
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
            weights = problem.weight[c.flows]
            swaps = (
                prior is not None
                and self.structured.intact_shape() is not None
                and bool(np.all(weights == weights[:1]))
            )
            # the one-link chains found nothing: agg swaps, then chains (an agg short of core
            # links; solver.repair.aggswap); on a large part first, and alone if they work
            large = len(c.flows) > SWAPS_ALONE_FLOWS
            cycled = None
            if swaps and large and prior is not None:
                _, cycled = self.structured.tree_repair(c, prior, cycles=True)
            if cycled is None:
                healed = self.structured.heal(c, prior)
                if healed is not None:
                    options.append(healed)
                    proven = self.at_bound(c, healed[0])
            if swaps and not large and prior is not None:
                _, cycled = self.structured.tree_repair(c, prior, cycles=True)
            if cycled is not None:  # after the colouring: a tie in moves keeps the colouring
                options.append((cycled, "tree-repair", True))
                proven = True
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
