"""The ``c4p`` command line: fabrics, jobs and evaluation (typer + rich).

Why this shape: each command is a thin shell over a pure function of ``topology`` or
``solver``; it reads files, calls the function, prints a table and, with ``--json FILE``, writes
the same figures for machines (``--json -`` writes JSON to standard output instead of tables).
Every error a user can cause comes out as ``error: <file>: <field>: <reason>`` and exit status 2,
never as a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console

from c4p import report
from c4p.discover_cli import fabric_discover
from c4p.errors import C4pError, SolverError, SouthboundError, TopologyError
from c4p.files import load_fabric, load_model, save_fabric, save_model, write_json, write_text
from c4p.serve_cli import serve
from solver.ecmp import ecmp_paths
from solver.evaluate import Evaluation, evaluate
from solver.jobs import JobsFile
from solver.patterns import derive_workload
from solver.placement import JobsGenParams, generate_jobs
from solver.planner import STRATEGIES, plan
from solver.plans import PlanFile, paths_from_plan
from solver.result import Plan
from southbound.bindings import bindings_for_paths
from southbound.routes import routes_from_flows
from southbound.verify import verify
from topology.analysis import summarize
from topology.formats import problems_of
from topology.generators import GENERATORS, generate, sized_for_gpus
from topology.model import Fabric, LinkStatus

app = typer.Typer(
    name="c4p",
    help="Traffic engineering for RoCE fabrics: plan collision-free paths for collective flows.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
fabric_app = typer.Typer(help="Generate and inspect fabric files.", no_args_is_help=True)
jobs_app = typer.Typer(help="Generate job (flow intent) files.", no_args_is_help=True)
app.add_typer(fabric_app, name="fabric")
app.add_typer(jobs_app, name="jobs")
fabric_app.command("discover")(fabric_discover)
app.command("serve")(serve)

console = Console()
T = TypeVar("T")

JsonOption = Annotated[
    Path | None,
    typer.Option("--json", help="Also write the figures as JSON to this file ('-': stdout only)."),
]


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def guarded(func: Callable[[], T]) -> T:
    """Run a command body, turning every user-caused error into a clear message and exit 2."""
    try:
        return func()
    except (TopologyError, SolverError, SouthboundError, C4pError) as exc:
        _fail(str(exc))
    except ValidationError as exc:
        _fail("; ".join(f"{p}: {r}" if p else r for p, r in problems_of(exc)))
    raise AssertionError("unreachable")


def _emit(json_path: Path | None, data: Any, render: Callable[[], None]) -> None:
    if json_path is None or str(json_path) != "-":
        render()
    if json_path is not None:
        write_json(data, json_path)


def _parse_sets(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise C4pError(f"--set {pair!r}: expected KEY=VALUE")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


@fabric_app.command("generate")
def fabric_generate(
    kind: Annotated[str, typer.Argument(help=f"One of: {', '.join(GENERATORS)}.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Fabric file (.yaml or .json).")],
    gpus: Annotated[
        int | None, typer.Option(help="Size the fabric for this many GPUs (one NIC each).")
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", help="A generator parameter, KEY=VALUE (repeatable)."),
    ] = None,
    json_path: JsonOption = None,
) -> None:
    """Generate a leaf-spine, rail-optimized, fat-tree or dual-plane fabric."""

    def body() -> None:
        if kind not in GENERATORS:
            raise C4pError(f"unknown fabric kind {kind!r}; choose one of {', '.join(GENERATORS)}")
        params = _parse_sets(sets or [])
        fabric = sized_for_gpus(kind, gpus, **params) if gpus else generate(kind, **params)
        save_fabric(fabric, output)
        summary = summarize(fabric)

        def render() -> None:
            report.print_summary(console, summary)
            console.print(f"wrote {output}")

        _emit(json_path, report.summary_json(summary), render)

    guarded(body)


@fabric_app.command("show")
def fabric_show(
    path: Annotated[Path, typer.Argument(help="Fabric file.")],
    json_path: JsonOption = None,
) -> None:
    """Counts, oversubscription per tier and bisection bandwidth of a fabric file."""

    def body() -> None:
        summary = summarize(load_fabric(path))
        _emit(
            json_path, report.summary_json(summary), lambda: report.print_summary(console, summary)
        )

    guarded(body)


@jobs_app.command("generate")
def jobs_generate(
    fabric_path: Annotated[Path, typer.Option("--fabric", help="Fabric file to place jobs on.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Jobs file (.yaml or .json).")],
    count: Annotated[int, typer.Option("--count", help="Number of jobs.")] = 1,
    hosts: Annotated[int, typer.Option(help="Hosts per job (every NIC of a host is a rank).")] = 4,
    pattern: Annotated[str, typer.Option(help="ring | all-to-all | tree.")] = "ring",
    ring: Annotated[str, typer.Option(help="Ring/tree layout: rail | flat.")] = "rail",
    placement: Annotated[
        str, typer.Option(help="contiguous | random | fragmented.")
    ] = "contiguous",
    channels: Annotated[int, typer.Option(help="Channels per connection.")] = 1,
    qps: Annotated[int, typer.Option(help="QPs per connection.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed for random and fragmented placement.")] = 0,
    json_path: JsonOption = None,
) -> None:
    """Place jobs on a fabric (no two jobs share a host) and write their flow intents."""

    def body() -> None:
        fabric = load_fabric(fabric_path)
        params = JobsGenParams.model_validate(
            {
                "jobs": count,
                "hosts_per_job": hosts,
                "pattern": pattern,
                "ring": ring,
                "placement": placement,
                "channels": channels,
                "qps_per_connection": qps,
                "seed": seed,
            }
        )
        jobs = generate_jobs(fabric, params)
        workload = derive_workload(fabric, jobs)
        save_model(jobs, output)

        def render() -> None:
            report.print_jobs(console, jobs, workload.flows)
            console.print(f"wrote {output}")

        _emit(json_path, report.jobs_json(jobs, workload.flows), render)

    guarded(body)


@app.command("evaluate")
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
        _emit(
            json_path,
            report.evaluation_json(results),
            lambda: report.print_evaluations(console, fabric, results),
        )

    guarded(body)


def apply_link_changes(fabric: Fabric, fail: list[str], drain: list[str]) -> Fabric:
    """The snapshot with links taken down (``--fail``) or drained (``--drain``)."""
    changes: dict[int, LinkStatus] = {}
    for names, status in ((fail, LinkStatus.DOWN), (drain, LinkStatus.DRAINED)):
        for name in names:
            changes[fabric.index.link_number(name)] = status
    return fabric.with_link_status(changes) if changes else fabric


LinkOption = Annotated[
    list[str] | None,
    typer.Option(
        help="A link ('a--b' with node names or 'dev:if' ends, or one end 'dev:if'); repeatable."
    ),
]


@app.command("plan")
def plan_cmd(
    fabric_path: Annotated[Path, typer.Option("--fabric", help="Fabric file.")],
    jobs_path: Annotated[Path, typer.Option("--jobs", help="Jobs file.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Plan file to write.")],
    budget: Annotated[float, typer.Option(help="Seconds the search may take.")] = 5.0,
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
    json_path: JsonOption = None,
) -> None:
    """Plan every flow's path; compare with ECMP, greedy and the lower bound."""

    def body() -> None:
        if strategy not in STRATEGIES:
            raise C4pError(f"--strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
        base = load_fabric(fabric_path)
        fabric = apply_link_changes(base, fail or [], drain or [])
        workload = derive_workload(fabric, load_model(JobsFile, jobs_path), str(jobs_path))
        previous = None
        if previous_path is not None:
            previous = Plan.from_plan_file(load_model(PlanFile, previous_path), fabric)
        ecmp = ecmp_paths(fabric, workload.flows, seed=seed)
        greedy = plan(fabric, workload, strategy="greedy", seed=seed)
        result = plan(fabric, workload, previous, budget=budget, seed=seed, strategy=strategy)
        save_model(result.to_plan_file(), output)
        evaluations = {
            "ecmp": evaluate(fabric, workload, ecmp.paths),
            "c4p": evaluate(fabric, workload, result.paths),
        }
        comparison = report.PlanComparison(
            ecmp=evaluations["ecmp"], greedy=greedy, c4p=result, c4p_eval=evaluations["c4p"]
        )
        data = report.plan_json(comparison)
        check = None
        if bindings_path is not None:
            routes = routes_from_flows(workload.flows, result.paths)
            bindings = bindings_for_paths(fabric, routes, epoch=1)
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
            report.print_plan(console, fabric, comparison, previous is not None)
            if check is not None:
                console.print(check.summary(), highlight=False)
                console.print(f"wrote {bindings_path}")
            console.print(f"wrote {output}")

        _emit(json_path, data, render)

    guarded(body)


@app.command("bench")
def bench_cmd(
    quick: Annotated[bool, typer.Option(help="Only the small scenarios (under a minute).")] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Markdown table (default docs/benchmarks.md; out/bench-quick.md with --quick).",
        ),
    ] = None,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", help="PNG plot (default beside the table).")
    ] = None,
    only: Annotated[
        str | None, typer.Option(help="Run only scenarios whose name contains this text.")
    ] = None,
    service: Annotated[
        bool,
        typer.Option(
            help="Instead, measure the controller service over gRPC on loopback: "
            "SubmitIntents to all bindings received for a 1,024-rank job, bindings per second."
        ),
    ] = False,
    json_path: JsonOption = None,
) -> None:
    """Run the scenario ladder: ECMP, greedy, c4p and the lower bound side by side."""
    from c4p import bench

    if service:
        from c4p.service import bench as service_bench

        result = guarded(service_bench.run)
        for line in result.lines():
            console.print(line, highlight=False)
        return

    def body() -> None:
        ladder = [s for s in bench.scenarios() if (s.quick or not quick)]
        if only:
            ladder = [s for s in ladder if only in s.name]
        if not ladder:
            raise C4pError(f"no scenario matches {only!r}")
        table = output or Path("out/bench-quick.md" if quick else "docs/benchmarks.md")
        image = plot_path or table.with_name(table.stem + ".png")
        started = time.perf_counter()

        def progress(row: bench.Row) -> None:
            if json_path is None or str(json_path) != "-":
                console.print(
                    f"{row.scenario}: {row.flows:,} flows, max util ECMP {row.util_ecmp:.2f} / "
                    f"greedy {row.util_greedy:.2f} / c4p {row.util_c4p:.2f} / bound "
                    f"{row.bound:.2f}, {row.solve_s:.3f} s"
                    + ("" if row.moved is None else
                       f", re-plan {row.replan_s:.3f} s moved {row.moved}/{row.crossed}"),
                    highlight=False,
                )  # fmt: skip

        rows = bench.run(ladder, progress)
        elapsed = time.perf_counter() - started
        command = (
            "c4p bench" + (" --quick" if quick else "") + (f" --only '{only}'" if only else "")
        )
        text = bench.markdown(rows, command, elapsed).replace("benchmarks.png", image.name)
        write_text(table, text)
        bench.plot(rows, image)
        _emit(json_path, bench.rows_json(rows), lambda: console.print(f"wrote {table}, {image}"))

    guarded(body)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="c4p")


if __name__ == "__main__":  # pragma: no cover
    main()
