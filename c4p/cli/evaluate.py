"""``c4p evaluate``: each job's slowest connection and bus bandwidth, ECMP beside a plan."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from c4p.cli import views
from c4p.cli.common import JsonOption, console, emit, guarded
from c4p.files import load_fabric, load_model
from solver.planning.plans import PlanFile, paths_from_plan
from solver.workload.jobs import JobsFile
from solver.workload.patterns import derive_workload
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import Evaluation, evaluate


def evaluate_cmd(
    fabric_path: Annotated[Path, typer.Option("--fabric", help="Fabric file.")],
    jobs_path: Annotated[Path, typer.Option("--jobs", help="Jobs file.")],
    plan_path: Annotated[
        Path | None, typer.Option("--plan", help="Plan file to evaluate beside ECMP.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the QP numbers behind ECMP ports.")] = 0,
    json_path: JsonOption = None,
) -> None:
    """Predict each job's slowest connection and bus bandwidth under ECMP (and a plan)."""

    def body() -> None:
        fabric = load_fabric(fabric_path)
        workload = derive_workload(fabric, load_model(JobsFile, jobs_path), str(jobs_path))
        ecmp = ecmp_paths(fabric, workload.flows, seed=seed)
        results: dict[str, Evaluation] = {"ecmp": evaluate(fabric, workload, ecmp.paths)}
        if plan_path is not None:
            plan = load_model(PlanFile, plan_path)
            paths = paths_from_plan(fabric, workload.flows, plan, str(plan_path))
            results["plan"] = evaluate(fabric, workload, paths)
        emit(
            json_path,
            views.evaluation_json(results),
            lambda: views.print_evaluations(console, fabric, results),
        )

    guarded(body)
