"""The planner's methods that use the fabric's structure: fat-tree colourings and healing.

Why apart from the planner: these are the constructions that *prove* a part optimal
without a search (a fat-tree's stage-wise colouring, the degraded colouring with the lost
links' colours removed, the intact colouring repaired to the bound), and they share caches
that outlive one part — the cabling's fat-tree shape (every link taken as up), the shape with
links' status, and each 2-tier part's spine grid. The planner (:mod:`solver.planner`) decides
*when* to call them and compares what they return; this module only says *how*.

Each method returns ``(choice, method, proven)`` or ``None`` where it does not apply, so a
miss always leaves the planner's other methods to run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from solver.exact import fattree
from solver.exact.coloring import assign_spines
from solver.planning.components import Component
from solver.search.greedy import spine_rows
from solver.space.incremental import match_middles
from solver.space.problem import Problem
from topology.index import IntArray

if TYPE_CHECKING:
    from solver.repair.kempe import SpineGrid

__all__ = ["Option", "Structured"]

Option = tuple[IntArray, str, bool]
"""A candidate assignment of a part: (choice per flow, method name, proven optimal)."""


def _choice_of(problem: Problem, flows: IntArray, paths: Sequence[Sequence[int]]) -> IntArray:
    """The candidate index of each flow's switch path (``-1`` where it is no candidate)."""
    middles = np.full((len(flows), problem.width), problem.pad, dtype=np.int64)
    for i, path in enumerate(paths):
        middles[i, : len(path)] = path
    return match_middles(problem, flows, middles)


class Structured:
    """The structured constructions of one :func:`solver.planner.plan` call.

    ``slice`` gives the deadline of one repair (a share of what is left of the budget).
    """

    def __init__(self, problem: Problem, slice: Callable[[], float], end: float = math.inf) -> None:
        self.problem = problem
        self.slice = slice
        self.end = end
        """When the plan's budget ends (``time.perf_counter``)."""
        self._shape: fattree.FatTreeShape | str | None = None
        self._intact_shape: fattree.FatTreeShape | str | None = None
        self._grids: dict[int, SpineGrid] = {}

    def intact_shape(self) -> fattree.FatTreeShape | None:
        """The fat-tree shape of the cabling (every link taken as up), if it has one."""
        if self._intact_shape is None:
            problem = self.problem
            self._intact_shape = (
                problem.tree.layout.shape
                if problem.tree is not None
                else fattree.analyse(problem.fabric, ignore_status=True)
            )
        return None if isinstance(self._intact_shape, str) else self._intact_shape

    def grid(self, c: Component) -> SpineGrid | None:
        """The spine grid of a 2-tier component of equal weights (two-spine exchanges)."""
        problem = self.problem
        weights = problem.weight[c.flows]
        if not problem.two_tier or not len(c.flows) or np.any(weights != weights[0]):
            return None
        key = id(c)
        if key not in self._grids:
            from solver.repair.kempe import SpineGrid  # repairs only (see solver.planner's LAZY)

            self._grids[key] = SpineGrid.build(problem, c.pairs)
        return self._grids[key]

    def previous_paths(self, c: Component, prior: IntArray | None) -> list[tuple[int, ...]] | None:
        """Each flow's previous switch path (``()`` for none) as the colourings take it."""
        if prior is None:
            return None
        problem = self.problem
        rows = problem.offset[problem.pair[c.flows]] + np.maximum(prior, 0)
        return [
            tuple(r[: problem.hops[p]]) if k >= 0 else ()
            for r, p, k in zip(
                problem.row_paths(rows).tolist(),
                problem.pair[c.flows].tolist(),
                prior.tolist(),
                strict=True,
            )
        ]

    def tree_shape(self) -> fattree.FatTreeShape | None:
        """The fat-tree shape with the links' status, if the fabric is an intact fat-tree."""
        if self._shape is None:  # a lazy table's layout has the shape: no pass over links
            problem = self.problem
            self._shape = (
                problem.tree.layout.intact_status(problem.fabric)
                if problem.tree is not None
                else fattree.analyse(problem.fabric)
            )
        return None if isinstance(self._shape, str) else self._shape

    def fat_trees(self, parts: Sequence[Component]) -> list[IntArray | None]:
        """The fat-tree colouring of many fresh parts in one call, each part's share of it
        (``None`` for a part it does not apply to).

        Why: a rail ring on a 16k-GPU fat-tree is 400 parts; coloured one by one that is 0.5 s
        of set-up per call. Parts share no link, so every path of the union is one of its own
        part's candidates, and each part's utilization is measured on its own links: the
        caller keeps the share of a part that meets that part's own bound (proven optimal
        then) and colours the others alone."""
        problem = self.problem
        shape = None if problem.two_tier else self.tree_shape()
        out: list[IntArray | None] = [None] * len(parts)
        if shape is None:
            return out
        groups: dict[float, list[int]] = {}
        for k, c in enumerate(parts):
            weights = problem.weight[c.flows]
            if len(c.flows) and np.all(weights == weights[0]):
                groups.setdefault(float(weights[0]), []).append(k)
        for members in groups.values():
            flows = np.concatenate([parts[k].flows for k in members])
            leaves = problem.pair_leaves[problem.pair[flows]]
            result = fattree.assign_fat_tree(shape, leaves[:, 0], leaves[:, 1])
            choice = _choice_of(problem, flows, result.paths)
            cuts = np.cumsum([len(parts[k].flows) for k in members])[:-1]
            for k, mine in zip(members, np.split(choice, cuts), strict=True):
                out[k] = None if np.any(mine < 0) else mine
        return out

    def fat_tree(self, c: Component, prior: IntArray | None) -> Option | None:
        """The :mod:`solver.exact.fattree` assignment where it applies (equal weights, intact
        tree)."""
        problem = self.problem
        weights = problem.weight[c.flows]
        if problem.two_tier or not len(c.flows) or np.any(weights != weights[0]):
            return None
        shape = self.tree_shape()
        if shape is None:
            return None
        leaves = problem.pair_leaves[problem.pair[c.flows]]
        previous = self.previous_paths(c, prior)
        result = fattree.assign_fat_tree(shape, leaves[:, 0], leaves[:, 1], previous)
        choice = _choice_of(problem, c.flows, result.paths)
        if np.any(choice < 0):  # the two would disagree on the candidates: do not use it
            return None
        return choice, "fattree", result.optimal

    def tree_repair(
        self, c: Component, prior: IntArray, cycles: bool = False
    ) -> tuple[bool, IntArray | None]:
        """The previous plan repaired at the bound by chains over a fat-tree's layered counts
        (:mod:`solver.repair.treemoves`): whether that applies (the bound a whole flow count), and
        the choice, ``None`` where no chain is found within its ``REPAIR_SECONDS``. With
        ``cycles``, agg swaps first (:mod:`solver.repair.aggswap`), within ``CYCLE_SECONDS``."""
        shape = None if self.problem.two_tier else self.intact_shape()
        target = c.best / c.unit if c.unit > 0 else math.nan
        if shape is None or math.isnan(target) or abs(round(target) - target) > 1e-6:
            return False, None
        if cycles:  # agg swaps are for an agg that lost a core link
            usable = self.problem.index.res_usable
            links = np.concatenate([shape.agg_up.ravel(), shape.agg_down.ravel()])
            if usable[links[links >= 0]].all():
                return True, None
        from solver.repair.treemoves import CYCLE_SECONDS, REPAIR_SECONDS, replan_choice

        now = time.perf_counter()
        deadline = min(self.slice(), now + REPAIR_SECONDS)
        if cycles:  # the last constructive try: its own seconds, within the budget's end
            deadline = min(max(deadline, now + CYCLE_SECONDS), self.end)
        choice = replan_choice(self.problem, c.flows, prior, shape, round(target), deadline, cycles)
        return True, choice

    def heal(self, c: Component, prior: IntArray | None) -> Option | None:
        """Colour the intact structure (every link taken as up), keep the flows whose colour
        is still a candidate, and repair the rest to the bound (:mod:`solver.repair.evict`); with
        ``prior``, the previous plan's valid paths are the start instead."""
        problem = self.problem
        weights = problem.weight[c.flows]
        if not len(c.flows) or np.any(weights != weights[0]):
            return None
        coloured = self.degraded(c, prior)
        if coloured is not None:
            return coloured
        start = self.intact(c)
        if start is None:
            return None
        if prior is not None:  # flows whose old path is still fine keep it
            start = np.where(prior >= 0, prior, start)
        from solver.repair.evict import repair  # degraded fabrics only (see solver.planner's LAZY)

        fixed = repair(problem, c.flows, start, c.best, self.grid(c), deadline=self.slice())
        if not fixed.reached:
            return None
        return fixed.choice, "repair", True

    def degraded(self, c: Component, prior: IntArray | None) -> Option | None:
        """A degraded fat-tree coloured at the bound with the lost links' colours removed
        (:mod:`solver.repair.degraded`), keeping previous paths where it can; ``None`` where it does
        not apply or finds no room."""
        problem = self.problem
        shape = None if problem.two_tier else self.intact_shape()
        if shape is None or math.isnan(c.unit) or c.unit <= 0:
            return None
        target = c.best / c.unit
        if round(target) < 1 or abs(round(target) - target) > 1e-6:
            return None
        leaves = problem.pair_leaves[problem.pair[c.flows]]
        previous = None
        if prior is not None:  # a candidate's agg index and core, read off its first hops
            rows = problem.row_paths(problem.offset[problem.pair[c.flows]] + np.maximum(prior, 0))
            far = shape.pod[leaves[:, 0]] != shape.pod[leaves[:, 1]]
            agg = np.where(prior >= 0, shape.choice[rows[:, 0]], -1)
            core = np.where(
                (prior >= 0) & far, shape.choice[rows[:, min(1, rows.shape[1] - 1)]], -1
            )
            previous = (agg, core)
        from solver.repair.degraded import assign_degraded  # degraded fabrics only

        result = assign_degraded(shape, problem.index.res_usable,
                                 leaves[:, 0], leaves[:, 1], round(target), previous)  # fmt: skip
        if result is None:
            return None
        choice = _choice_of(problem, c.flows, result.paths)
        if np.any(choice < 0):
            return None
        return choice, "degraded", True

    def intact(self, c: Component) -> IntArray | None:
        """Each flow's candidate under the exact colouring of the intact fabric (every link
        up), ``-1`` where that path is down or drained; ``None`` where no colouring applies."""
        problem = self.problem
        leaves = problem.pair_leaves[problem.pair[c.flows]]
        if problem.two_tier:
            spines, rows = spine_rows(problem, c.pairs)
            spine = assign_spines(leaves[:, 0], leaves[:, 1], len(spines))
            return rows[np.searchsorted(c.pairs, problem.pair[c.flows]), spine]
        shape = self.intact_shape()
        if shape is None:
            return None
        result = fattree.assign_fat_tree(shape, leaves[:, 0], leaves[:, 1])
        return _choice_of(problem, c.flows, result.paths)
