"""What the planner returns: a :class:`Plan` — paths, objective, bounds, moves, and how.

Why a rich result rather than a list of paths: the controller must know what moved (to push
only those bindings), the operator how good the plan is (its gap to what no plan can beat) and
how it was found (exact, heuristic, solver, proven or not, how long), and the next re-plan needs
the plan itself as ``previous``. A plan is a frozen value tied to the snapshot it was made on.

It converts to and from :class:`solver.planning.plans.PlanFile` (node names, hand-editable), so a
plan file written by ``c4p plan`` can be the ``previous`` of the next call: reading one does not
insist that every path is still valid — deciding what must move is the planner's job.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from solver.bounds.combinatorial import component_bounds, round_up
from solver.planning.plans import PlanFile, plan_from_paths
from solver.space.candidates import Candidates
from solver.space.problem import Objective, Problem, build_problem
from solver.space.treecandidates import TreeLayout
from solver.workload.flows import Flow
from topology.errors import TopologyError
from topology.index import FloatArray
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
    """Whose paths were kept: ``exact``, ``fattree``, ``greedy``, ``cpsat``, ``ecmp``,
    ``repair`` (:mod:`solver.repair.evict`: the previous plan, or the intact fabric's colouring,
    with the displaced flows re-placed), or ``kept`` (a re-plan left the sub-problem as the
    previous plan had it)."""
    status: str
    """``optimal`` (meets a lower bound, or proven by CP-SAT) or ``feasible``."""
    seconds: float
    max_utilization: float
    bound: float
    notes: tuple[str, ...] = ()
    min_moves: int | None = None
    """For a re-plan: a lower bound on the flows any plan must move to reach this part's max
    utilization from the previous plan (:func:`solver.repair.evict.min_moves`)."""


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
    candidates: Candidates | TreeLayout | None = field(default=None, repr=False)
    min_moves: int | None = None
    """For a re-plan: a lower bound on the flows any plan reaching this plan's max
    utilization per part must move (the sum of the parts'); ``None`` without a previous."""
    weights: FloatArray | None = field(default=None, repr=False)
    """Each flow's weight (rate x priority) as planned; ``None`` means the rates."""
    """The snapshot's candidate table, which the next re-plan may filter (see
    :class:`solver.space.problem.Candidates`)."""

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
            "min_moves": self.min_moves,
            "unreachable": list(self.unreachable),
            "parts": [asdict(p) for p in self.parts],
        }

    @property
    def weighted(self) -> bool:
        """True when job priorities made some flow's weight differ from its rate: then the
        objective and bounds are in rate x priority units, not plain rate units."""
        if self.weights is None:
            return False
        rates = np.fromiter((f.rate for f in self.flows), np.float64, count=len(self.flows))
        return not np.array_equal(rates, self.weights)

    @property
    def rate_utilization(self) -> float:
        """The busiest switch-to-switch link's load in NIC line rates (1.0 = one full-rate
        flow), priorities left out: the unit of ``c4p evaluate`` and of ECMP's column."""
        if not self.weighted:
            return self.objective.max_utilization
        problem = self._rate_problem
        assert problem is not None
        return problem.measure(problem.path_loads(self.paths)).max_utilization

    @property
    def rate_bound(self) -> float:
        """The best combinatorial lower bound in plain rate units (``bounds.best`` when no
        priority applies)."""
        if not self.weighted:
            return self.bounds.best
        problem = self._rate_problem
        assert problem is not None
        bounds, units = (values.tolist() for values in component_bounds(problem))
        return max((round_up(b, u) for b, u in zip(bounds, units, strict=True)), default=0.0)

    @cached_property
    def _rate_problem(self) -> Problem | None:
        if not self.weighted:
            return None
        rates = np.fromiter((f.rate for f in self.flows), np.float64, count=len(self.flows))
        return build_problem(self.snapshot, self.flows, rates, self.candidates)

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
        bounds, units = (values.tolist() for values in component_bounds(problem))
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
