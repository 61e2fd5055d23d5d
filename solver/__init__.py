"""The solver: flows from job intents, the planner, the ECMP baseline, plans, and the yardstick.

The entry point is :func:`plan` (:mod:`solver.planner`): paths for every flow of a snapshot,
with bounds, moves and how they were found, as a :class:`Plan`.

Depends on :mod:`topology` only and does no I/O: text in and out goes through
:mod:`topology.formats` (``parse_model`` / ``dump_model``) with the models defined here.

The names below are loaded on first use (PEP 562): ``import solver.errors`` (which every layer
above does, through ``c4p.errors``) must not load OR-Tools and pandas, which the host agent on
every GPU host never needs (they are most of a process's memory).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from solver.errors import JobError, LocatedError, PlacementError, PlanError, SolverError
    from solver.planner import STRATEGIES, flow_weights, plan
    from solver.planning.plans import PlanFile, PlannedFlow, paths_from_plan, plan_from_paths
    from solver.planning.result import Bounds, Part, Plan
    from solver.space.problem import Objective
    from solver.workload.flows import Communicator, Connection, Flow, Workload
    from solver.workload.jobs import (
        Collective,
        CommunicatorSpec,
        ConnectionSpec,
        JobsFile,
        JobSpec,
        Layout,
        Pattern,
        RankSpec,
        check_jobs,
    )
    from solver.workload.patterns import derive_workload, flows_for_jobs
    from solver.workload.placement import JobsGenParams, PlacementMode, generate_jobs, place_hosts
    from solver.yardstick.ecmp import EcmpResult, ecmp_paths, random_qpns
    from solver.yardstick.evaluate import (
        CommunicatorResult,
        Evaluation,
        JobResult,
        LinkLoad,
        PairResult,
        busbw_factor,
        evaluate,
        reference_line_rate,
        switch_resources,
    )
    from solver.yardstick.fairness import (
        Incidence,
        bottleneck_certificate,
        max_min_fair_rates,
        resource_load,
    )

_MODULES = (
    "errors",
    "workload.flows",
    "workload.jobs",
    "planning.result",
    "space.problem",
    "yardstick.fairness",
    "yardstick.ecmp",
    "yardstick.evaluate",
    "workload.patterns",
    "workload.placement",
    "planning.plans",
    "planner",
)
"""Where the names of ``__all__`` live, searched in this order on first use."""


def __getattr__(name: str) -> object:
    if name in __all__:
        for module in _MODULES:
            found = importlib.import_module(f"solver.{module}")
            if hasattr(found, name):
                value = getattr(found, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module 'solver' has no attribute {name!r}")


__all__ = [
    "STRATEGIES",
    "Bounds",
    "Collective",
    "Communicator",
    "CommunicatorResult",
    "CommunicatorSpec",
    "Connection",
    "ConnectionSpec",
    "EcmpResult",
    "Evaluation",
    "Flow",
    "Incidence",
    "JobError",
    "JobResult",
    "JobSpec",
    "JobsFile",
    "JobsGenParams",
    "Layout",
    "LinkLoad",
    "LocatedError",
    "Objective",
    "PairResult",
    "Part",
    "Pattern",
    "PlacementError",
    "PlacementMode",
    "Plan",
    "PlanError",
    "PlanFile",
    "PlannedFlow",
    "RankSpec",
    "SolverError",
    "Workload",
    "bottleneck_certificate",
    "busbw_factor",
    "check_jobs",
    "derive_workload",
    "ecmp_paths",
    "evaluate",
    "flow_weights",
    "flows_for_jobs",
    "generate_jobs",
    "max_min_fair_rates",
    "paths_from_plan",
    "place_hosts",
    "plan",
    "plan_from_paths",
    "random_qpns",
    "reference_line_rate",
    "resource_load",
    "switch_resources",
]
