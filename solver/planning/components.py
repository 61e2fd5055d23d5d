"""Independent parts of a plan and how good a part's assignment is.

Why parts: leaf pairs that share no link cannot hurt each other, so the planner solves each
connected group (a plane, a rail of rail-aligned traffic) on its own, with its own lower
bound and its own clock, and a job that never meets the bottleneck still gets its own
lowest maximum. :class:`Component` is one such part while it is being solved; the planner,
the structured constructions and the plan's assembly all read and write it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.bounds.combinatorial import component_bounds, round_up
from solver.space.problem import TOLERANCE, Objective, Problem
from topology.index import IntArray

__all__ = ["Component", "meets", "objective", "split"]


@dataclass
class Component:
    """One sub-problem while it is being solved."""

    pairs: IntArray
    flows: IntArray
    resources: IntArray
    unit: float
    combinatorial: float
    choice: IntArray
    method: str = ""
    proven: bool = False
    lp: float | None = None
    solver_bound: float | None = None
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    min_moves: int | None = None
    moves_bound: int = 0
    """A lower bound on the moves at ``best`` from :mod:`solver.repair.moves`, where it ran."""

    @property
    def best(self) -> float:
        """The best lower bound known: combinatorial, LP or the solver's own."""
        return max(self.combinatorial, self.lp or 0.0, self.solver_bound or 0.0)


def split(problem: Problem) -> list[Component]:
    """Every component with its flows, resources and combinatorial bound, none solved yet."""
    bounds, units = component_bounds(problem)
    return [
        Component(
            pairs,
            flows,
            resources,
            float(unit),
            round_up(float(bound), float(unit)),
            np.full(len(flows), -1, dtype=np.int64),
        )
        for pairs, flows, resources, bound, unit in zip(
            problem.components(),
            problem.component_flows(),
            problem.component_resources(),
            bounds.tolist(),
            units.tolist(),
            strict=True,
        )
    ]


def objective(problem: Problem, c: Component, choice: IntArray) -> Objective:
    """The objective of ``choice`` (one candidate per flow of ``c``) on ``c``'s links only."""
    return problem.measure(problem.loads(c.flows, choice), resources=c.resources)


def meets(value: float, bound: float) -> bool:
    """Whether a max utilization reaches a bound, up to the problem's float tolerance."""
    return value <= bound * (1 + TOLERANCE) + TOLERANCE
