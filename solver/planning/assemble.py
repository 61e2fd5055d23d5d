"""A finished plan from the planner's parts: paths, objective, bounds, moves and notes.

Why apart: assembling is the one place where every part's figures meet the whole plan's —
the objective over all links, the bounds of every part, what moved against the previous plan
and the least that had to (:func:`solver.repair.evict.min_moves`, raised by a proven bound from
:mod:`solver.repair.moves` where it ran). Keeping it out of the planner's search keeps both short.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from solver.planning.components import Component, meets, objective
from solver.planning.result import Bounds, Part, Plan
from solver.space.incremental import Previous, match_middles
from solver.space.problem import SAME_LEAF, UNREACHABLE, Problem
from solver.yardstick.ecmp import ecmp_paths
from topology.index import IntArray

__all__ = ["assemble", "ecmp_choice"]


def ecmp_choice(problem: Problem, seed: int) -> tuple[tuple[tuple[int, ...], ...], IntArray]:
    """ECMP's paths and the candidate each is (``-1`` if, impossibly, none)."""
    paths = ecmp_paths(problem.fabric, problem.flows, seed).paths
    choice = np.where(problem.pair == SAME_LEAF, 0, -1).astype(np.int64)
    cross = problem.cross
    middles = np.full((len(cross), max(problem.width, 1)), problem.pad, dtype=np.int64)
    for i, f in enumerate(cross.tolist()):
        middle = paths[f][1:-1]
        middles[i, : len(middle)] = middle
    choice[cross] = match_middles(problem, cross, middles)
    return paths, choice


def assemble(
    problem: Problem,
    choice: IntArray,
    components: list[Component],
    prior: Previous | None,
    paths: Sequence[tuple[int, ...]],
    strategy: str,
    seed: int,
    budget: float,
    started: float,
) -> Plan:
    """The :class:`Plan` of ``choice`` (one candidate per flow) with its parts' figures."""
    reachable = problem.pair != UNREACHABLE
    moved_mask = np.zeros(problem.num_flows, dtype=bool)
    if prior is not None:
        moved_mask = prior.had & reachable & (prior.choice != choice)
    placed = problem.cross[choice[problem.cross] >= 0]
    if strategy == "ecmp" and len(placed) < len(problem.cross):
        load = problem.path_loads(paths)  # an ECMP path that is no candidate (impossible)
    else:
        load = problem.loads(placed, choice[placed])
    overall = problem.measure(load, int(moved_mask.sum()))
    parts = []
    least_moves = 0
    for c in components:
        local = objective(problem, c, c.choice)
        optimal = c.proven or meets(local.max_utilization, c.best)
        if prior is not None:
            from solver.repair.evict import min_moves  # re-plans only (see solver.planner's LAZY)

            mine = np.where(prior.had[c.flows], prior.choice[c.flows], -2)
            c.min_moves = min_moves(problem, c.flows, mine, local.max_utilization)
            if meets(local.max_utilization, c.best):  # the polish bound is at ``best``
                c.min_moves = max(c.min_moves, c.moves_bound)
            least_moves += c.min_moves
        parts.append(
            Part(
                flows=len(c.flows),
                pairs=len(c.pairs),
                method=c.method,
                status="optimal" if optimal else "feasible",
                seconds=c.seconds,
                max_utilization=local.max_utilization,
                bound=c.best,
                notes=c.notes,
                min_moves=c.min_moves,
            )
        )
    lps = [c.lp for c in components if c.lp is not None]
    solved = [c.solver_bound for c in components if c.solver_bound is not None]
    bounds = Bounds(
        combinatorial=max((c.combinatorial for c in components), default=0.0),
        lp=max(lps) if lps else None,
        solver=max(solved) if solved else None,
        best=max((c.best for c in components), default=0.0),
    )
    ids = problem.ids
    return Plan(
        flows=problem.flows,
        paths=tuple(paths),
        objective=overall,
        bounds=bounds,
        moved=tuple(ids[i] for i in np.flatnonzero(moved_mask).tolist()),
        min_moves=None if prior is None else least_moves,
        weights=problem.weight,
        unreachable=tuple(ids[i] for i in np.flatnonzero(~reachable).tolist()),
        parts=tuple(parts),
        strategy=strategy,
        seed=seed,
        budget=budget,
        seconds=time.perf_counter() - started,
        snapshot=problem.fabric,
        candidates=problem.candidate_table,
    )
