"""``c4p jobs``: place jobs on a fabric and write their flow intents."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from c4p import report
from c4p.cli.common import JsonOption, console, emit, guarded
from c4p.files import load_fabric, save_model
from solver.patterns import derive_workload
from solver.placement import JobsGenParams, generate_jobs

jobs_app = typer.Typer(help="Generate job (flow intent) files.", no_args_is_help=True)


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

        emit(json_path, report.jobs_json(jobs, workload.flows), render)

    guarded(body)
