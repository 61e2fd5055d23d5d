"""The solver: flows from job intents, the planner, the ECMP baseline, plans, and the yardstick.

The entry point is :func:`plan` (:mod:`solver.planner`): paths for every flow of a snapshot,
with bounds, moves and how they were found, as a :class:`Plan`.

Depends on :mod:`topology` only and does no I/O: text in and out goes through
:mod:`topology.formats` (``parse_model`` / ``dump_model``) with the models defined here.
"""

from solver.ecmp import EcmpResult, ecmp_paths, random_qpns
from solver.errors import JobError, LocatedError, PlacementError, PlanError, SolverError
from solver.evaluate import (
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
from solver.fairness import Incidence, bottleneck_certificate, max_min_fair_rates, resource_load
from solver.flows import Communicator, Connection, Flow, Workload
from solver.jobs import (
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
from solver.patterns import derive_workload, flows_for_jobs
from solver.placement import JobsGenParams, PlacementMode, generate_jobs, place_hosts
from solver.planner import STRATEGIES, flow_weights, plan
from solver.plans import PlanFile, PlannedFlow, paths_from_plan, plan_from_paths
from solver.problem import Objective
from solver.result import Bounds, Part, Plan

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
