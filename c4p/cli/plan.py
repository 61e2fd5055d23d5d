"""``c4p plan``: every flow's path, beside ECMP, greedy and the lower bound; optional bindings."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from c4p.cli import views
from c4p.cli.common import (
    JsonOption,
    QuietOption,
    Timings,
    bulk_allocation,
    check_number,
    console,
    emit,
    guarded,
    progress,
)
from c4p.cli.outputs import DATA_SUFFIXES, check_kind, check_outputs
from c4p.files import load_data, load_model, model_from_data, save_model, write_text
from solver.planner import STRATEGIES, flow_weights, plan
from solver.planning.plans import PlanFile, plan_json_text
from solver.planning.result import Plan
from solver.space.problem import build_problem
from solver.workload.flows import Flow
from solver.workload.jobs import JobsFile
from solver.workload.patterns import derive_workload
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import evaluate
from topology.errors import C4pError
from topology.model import Fabric, LinkStatus

if TYPE_CHECKING:
    from solver.workload.flows import Workload
    from southbound.balance import JobsBalance


def balance_workload(fabric: Fabric, workload: Workload) -> tuple[Workload, JobsBalance] | None:
    """The workload with each job's QPs spread over its NICs' ports (``None``: no NIC has two
    ports, nothing to balance); see :func:`southbound.balance.balance_jobs`."""
    from southbound.balance import balance_jobs, multi_ported

    if not multi_ported(fabric):
        return None
    flows, summary = balance_jobs(fabric, workload.flows)
    return dataclasses.replace(workload, flows=tuple(flows)), summary


def apply_link_changes(fabric: Fabric, fail: list[str], drain: list[str]) -> Fabric:
    """The snapshot with links taken down (``--fail``) or drained (``--drain``)."""
    changes: dict[int, LinkStatus] = {}
    for names, status in ((fail, LinkStatus.DOWN), (drain, LinkStatus.DRAINED)):
        for name in names:
            changes[fabric.index.link_number(name)] = status
    return fabric.with_link_status(changes) if changes else fabric


def match_previous_plan(
    before: PlanFile, fabric: Fabric, flows: Sequence[Flow], path: Path
) -> dict[str, int]:
    """How the previous plan's flows match these jobs' (by flow id); refuses a plan made for
    another fabric, or one sharing no flow with these jobs (a plan for other jobs)."""
    if before.fabric != fabric.name:
        raise C4pError(
            f"--previous {path}: the plan is for fabric {before.fabric!r}, not {fabric.name!r}; "
            "give the plan in force on this fabric, or plan without --previous"
        )
    now = {f.id for f in flows}
    then = {p.id for p in before.flows}
    matched = len(now & then)
    if now and then and not matched:
        raise C4pError(
            f"--previous {path}: none of its {len(then)} flows is a flow of these jobs "
            f"(e.g. {min(then)!r}); it was made for other jobs"
        )
    return {"matched": matched, "new": len(now - then), "gone": len(then - now)}


LinkOption = Annotated[
    list[str] | None,
    typer.Option(
        help="A link ('a--b' with node names or 'dev:if' ends, or one end 'dev:if'); repeatable."
    ),
]


def plan_cmd(
    fabric_path: Annotated[Path, typer.Option("--fabric", help="Fabric file.")],
    jobs_path: Annotated[Path, typer.Option("--jobs", help="Jobs file.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Plan file to write.")],
    budget: Annotated[float, typer.Option(help="Seconds the search may take (0 to 3600).")] = 5.0,
    fail: LinkOption = None,
    drain: LinkOption = None,
    previous_path: Annotated[
        Path | None,
        typer.Option(
            "--previous", help="The plan in force: re-plan moving as few flows as needed."
        ),
    ] = None,
    strategy: Annotated[str, typer.Option(help=f"One of: {', '.join(STRATEGIES)}.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of the solver and of ECMP's QP numbers.")] = 0,
    bindings_path: Annotated[
        Path | None,
        typer.Option(
            "--bindings",
            help="Also write each QP's UDP source port / flow label (predicted from the "
            "switches' hash profiles), checked in the modeled data plane.",
        ),
    ] = None,
    bindings_dir: Annotated[
        Path | None,
        typer.Option(
            "--bindings-dir",
            help="Also write one small bindings file per host and job "
            "(DIR/<job>/<host>.c4pb) for libc4p's static mode.",
        ),
    ] = None,
    balance: Annotated[
        bool,
        typer.Option(
            help="Dual-port / dual-plane NICs: spread each job's QPs over its NICs' ports "
            "(planes) before planning; ECMP keeps the ports the jobs file gives.",
        ),
    ] = True,
    json_path: JsonOption = None,
    timings: Annotated[
        bool,
        typer.Option(
            "--timings",
            help="Print the seconds each phase took (imports, load, validate, ecmp, greedy, "
            "solve, write, evaluate, report) on standard error, and add them to --json.",
        ),
    ] = False,
    quiet: QuietOption = False,
) -> None:
    """Plan every flow's path; compare with ECMP, greedy and the lower bound."""

    clock = Timings()

    def body() -> int:
        check_number("--budget", budget, 0.0, 3600.0)
        check_outputs(("-o", output, DATA_SUFFIXES), ("--json", json_path, None),
                      ("--bindings", bindings_path, DATA_SUFFIXES))  # fmt: skip
        if strategy not in STRATEGIES:
            raise C4pError(f"--strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
        phase = clock.phase
        with progress(f"loading {fabric_path} and {jobs_path}"):
            with phase("load"):
                fabric_data = load_data(fabric_path)
                check_kind(fabric_data, fabric_path, "fabric")
            with phase("validate"):
                base = model_from_data(Fabric, fabric_data, fabric_path)
                # The parsed files go once validated (a 16k-GPU fabric's is 30 MB of dicts
                # and strings): what is built next reuses their memory instead of asking the
                # system for more, one page fault per 4 kB.
                del fabric_data
                fabric = apply_link_changes(base, fail or [], drain or [])
            with phase("load"):
                jobs_data = load_data(jobs_path)
                check_kind(jobs_data, jobs_path, "jobs")
            with phase("validate"):
                jobs = model_from_data(JobsFile, jobs_data, jobs_path)
                del jobs_data
                workload = derive_workload(fabric, jobs, str(jobs_path))
                ecmp_workload = workload  # what the kernel's own port choice gives
                balanced = balance_workload(fabric, workload) if balance else None
                if balanced is not None:
                    workload = balanced[0]
        previous = None
        matching: dict[str, int] | None = None
        if previous_path is not None:
            with phase("load"):
                before = load_model(PlanFile, previous_path)
                matching = match_previous_plan(before, fabric, workload.flows, previous_path)
                previous = Plan.from_plan_file(before, fabric)
        with progress(f"planning {len(workload.flows):,} flows (budget {budget:g} s)"):
            with phase("ecmp"):
                ecmp = ecmp_paths(fabric, ecmp_workload.flows, seed=seed)
            with phase("greedy"):
                shared = build_problem(fabric, *flow_weights(workload))  # greedy's and c4p's
                greedy = plan(fabric, workload, strategy="greedy", seed=seed, problem=shared)
            with phase("solve"):
                result = plan(fabric, workload, previous, budget=budget, seed=seed,
                              strategy=strategy, problem=shared)  # fmt: skip
        with progress(f"writing {output}"), phase("write"):
            if output.suffix.lower() == ".json":  # the common case: no model per flow
                write_text(output, plan_json_text(fabric, result.flows, result.paths,
                                                  result.strategy, result.seed))  # fmt: skip
            else:
                save_model(result.to_plan_file(), output)
        with progress("evaluating ECMP and the plan"), phase("evaluate"):
            evaluations = {
                "ecmp": evaluate(fabric, ecmp_workload, ecmp.paths),
                "c4p": evaluate(fabric, workload, result.paths),
            }
        with phase("evaluate"):
            comparison = views.PlanComparison(
                ecmp=evaluations["ecmp"], greedy=greedy, c4p=result, c4p_eval=evaluations["c4p"]
            )
            data = views.plan_json(comparison)
        if matching is not None:
            data["previous"] = matching
        if balanced is not None:
            data["balance"] = dataclasses.asdict(balanced[1])
        check = None
        if bindings_path is not None or bindings_dir is not None:
            # Imported here: most plans write no bindings, and these modules are slow to load.
            from c4p.agent.static import host_files, write_host_files
            from southbound.bindings import bindings_for_paths
            from southbound.routes import routes_from_flows
            from southbound.verify import verify

            routes = routes_from_flows(workload.flows, result.paths)
            bindings = bindings_for_paths(fabric, routes, epoch=1)
            if bindings_dir is not None:
                files = host_files(bindings, workload.connections)
                data["bindings_dir"] = [str(p) for p in write_host_files(files, bindings_dir)]
        if bindings_path is not None:
            save_model(bindings, bindings_path)
            check = verify(fabric, bindings, routes)
            data["bindings"] = {
                "file": str(bindings_path),
                "qps": len(bindings.bindings),
                "issues": len(bindings.issues),
                "as_planned": check.as_planned,
                "ok": check.ok,
                "differing_links": check.differing_links,
            }

        def render() -> None:
            if str(output) == "-":  # the plan went to standard output: nothing else there
                return
            views.print_plan(console, fabric, comparison, previous is not None)
            if matching is not None and (matching["new"] or matching["gone"]):
                console.print(
                    f"  previous plan: {matching['matched']} flows matched by id, "
                    f"{matching['new']} new (placed fresh), {matching['gone']} no longer in "
                    "the jobs (dropped)",
                    highlight=False,
                )
            if check is not None:
                console.print(check.summary(), highlight=False)
                console.print(f"wrote {bindings_path}")
            if bindings_dir is not None:
                console.print(f"wrote {len(data['bindings_dir'])} host files under {bindings_dir}")
            console.print(f"wrote {output}")

        with phase("report"):
            if timings:  # every phase but this one (the JSON is written inside it)
                data["timings"] = dict(clock.seconds)
            emit(json_path, data, render)
        if timings:
            Console(stderr=True).print(clock.line(), highlight=False)
        return unroutable(workload.flows, result.unreachable)

    with bulk_allocation():
        code = guarded(body)
    if code:
        raise typer.Exit(code=code)


def unroutable(flows: Sequence[Flow], lost: Sequence[str], shown: int = 10) -> int:
    """Name the flows the fabric cannot deliver on standard error (a bounded list and the
    count) and return the exit status: 1, a finding, when there are any.

    Why a finding: the plan of the other flows is still written and may be "optimal", but the
    jobs these flows belong to will not run (a NIC cable down, a leaf with no uplinks)."""
    if not lost:
        return 0
    ends = {f.id: f"{f.src} -> {f.dst}" for f in flows}
    err = Console(stderr=True)
    err.print(
        f"error: {len(lost):,} flows cannot be routed (no usable path between their NIC "
        "ports); the plan holds the others",
        highlight=False,
        soft_wrap=True,
    )
    for flow_id in lost[:shown]:
        err.print(f"  {flow_id}: {ends.get(flow_id, '?')}", highlight=False, soft_wrap=True)
    if len(lost) > shown:
        err.print(f"  and {len(lost) - shown:,} more (all in --json: plan.unreachable)")
    return 1
