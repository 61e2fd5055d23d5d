"""What the planner returns: a :class:`Plan` — paths, objective, bounds, moves, and how.

Why a rich result rather than a list of paths: the controller must know what moved (to push
only those bindings), the operator how good the plan is (its gap to what no plan can beat) and
how it was found (exact, heuristic, solver, proven or not, how long), and the next re-plan needs
the plan itself as ``previous``. A plan is a frozen value tied to the snapshot it was made on.

It converts to and from :class:`solver.plans.PlanFile` (node names, hand-editable), so a plan
file written by ``c4p plan`` can be the ``previous`` of the next call: reading one does not
insist that every path is still valid — deciding what must move is the planner's job.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from solver.bounds import combinatorial_bounds, integral_units, round_up
from solver.candidates import Candidates
from solver.flows import Flow
from solver.plans import PlanFile, plan_from_paths
from solver.problem import Objective, build_problem
from topology.errors import TopologyError
from topology.model import Fabric

__all__ = ["Bounds", "Part", "Plan"]


@dataclass(frozen=True)
class Bounds:
    """Lower bounds on the max utilization; ``best`` is the largest, per sub-problem then max.

    ``lp`` and ``solver`` (CP-SAT's proven bound) are ``None`` where not computed; a part's
    notes say why (skipped as too large, not needed, no time).
    """

    combinatorial: float
    lp: float | None
    solver: float | None
    best: float


@dataclass(frozen=True)
class Part:
    """One independent sub-problem (a plane, a rail, ...): how it was solved and how well."""

    flows: int
    pairs: int
    method: str
    """Whose paths were kept: ``exact``, ``fattree``, ``greedy``, ``cpsat``, ``ecmp``, or
    ``kept`` (a re-plan left the sub-problem as the previous plan had it)."""
    status: str
    """``optimal`` (meets a lower bound, or proven by CP-SAT) or ``feasible``."""
    seconds: float
    max_utilization: float
    bound: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Plan:
    """Paths for every flow, aligned with ``flows`` (``()`` for an unreachable flow).

    ``paths[i]`` are resources of ``snapshot`` from the source NIC port to the destination one.
    """

    flows: tuple[Flow, ...]
    paths: tuple[tuple[int, ...], ...]
    objective: Objective
    bounds: Bounds
    moved: tuple[str, ...]
    unreachable: tuple[str, ...]
    parts: tuple[Part, ...]
    strategy: str
    seed: int
    budget: float
    seconds: float
    snapshot: Fabric = field(repr=False)
    candidates: Candidates | None = field(default=None, repr=False)
    """The snapshot's candidate table, which the next re-plan may filter (see
    :class:`solver.problem.Candidates`)."""

    @property
    def flow_ids(self) -> tuple[str, ...]:
        return tuple(f.id for f in self.flows)

    @property
    def gap(self) -> float:
        """``(max utilization - best bound) / best bound``; 0 when both are 0."""
        best, value = self.bounds.best, self.objective.max_utilization
        if best <= 0:
            return 0.0 if value <= 0 else float("inf")
        return max(0.0, (value - best) / best)

    @property
    def status(self) -> str:
        """``optimal`` when every part is, else ``feasible``."""
        return "optimal" if all(p.status == "optimal" for p in self.parts) else "feasible"

    def path_of(self, flow_id: str) -> tuple[int, ...]:
        for flow, path in zip(self.flows, self.paths, strict=True):
            if flow.id == flow_id:
                return path
        raise KeyError(flow_id)

    def summary(self) -> dict[str, Any]:
        """Everything but the paths, as plain data (for ``--json`` and logs)."""
        return {
            "strategy": self.strategy,
            "seed": self.seed,
            "budget_s": self.budget,
            "seconds": self.seconds,
            "status": self.status,
            "flows": len(self.flows),
            "objective": asdict(self.objective),
            "bounds": asdict(self.bounds),
            "gap": self.gap,
            "moved": len(self.moved),
            "unreachable": list(self.unreachable),
            "parts": [asdict(p) for p in self.parts],
        }

    # -- plan files --------------------------------------------------------------------------

    def to_plan_file(self, fabric: Fabric | None = None) -> PlanFile:
        """The plan as a :class:`PlanFile` (node names) for ``fabric`` (default its snapshot).

        ``fabric`` must number links like the snapshot (a later status change is fine).
        """
        target = self.snapshot if fabric is None else fabric
        return plan_from_paths(target, self.flows, self.paths, self.strategy, self.seed)

    @classmethod
    def from_plan_file(cls, plan_file: PlanFile, fabric: Fabric) -> Plan:
        """A plan read back on ``fabric`` to serve as ``previous`` (or to be measured).

        Paths are taken as written: a path over a link that is down is kept (the planner will
        move that flow); one naming a link ``fabric`` does not have becomes ``()``. Rates are
        the weights (priorities are not in the file).
        """
        flows = tuple(
            Flow(p.job, p.communicator, p.connection, p.qp, p.src, p.dst, p.rate)
            for p in plan_file.flows
        )
        index = fabric.index
        paths: list[tuple[int, ...]] = []
        for planned in plan_file.flows:
            try:
                paths.append(index.path_resources(planned.path) if planned.path else ())
            except TopologyError:
                paths.append(())
        problem = build_problem(fabric, flows, np.array([f.rate for f in flows]))
        units = integral_units(problem).tolist()
        bounds = combinatorial_bounds(problem).tolist()
        best = max((round_up(b, u) for b, u in zip(bounds, units, strict=True)), default=0.0)
        ids = problem.ids
        return cls(
            flows=flows,
            paths=tuple(paths),
            objective=problem.measure(problem.path_loads(paths)),
            bounds=Bounds(best, None, None, best),
            moved=(),
            unreachable=tuple(i for i, p in zip(ids, paths, strict=True) if not p),
            parts=(),
            strategy=plan_file.strategy,
            seed=plan_file.seed or 0,
            budget=0.0,
            seconds=0.0,
            snapshot=fabric,
        )
