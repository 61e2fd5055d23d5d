"""``c4p jobs``: place jobs on a fabric and write their flow intents."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from c4p import report
from c4p.cli.common import JsonOption, console, emit, guarded
from c4p.files import load_fabric, save_model
from solver.workload.jobs import Layout, Pattern
from solver.workload.patterns import derive_workload
from solver.workload.placement import JobsGenParams, PlacementMode, generate_jobs


class GenPattern(StrEnum):
    """The patterns a generator can lay out (``explicit`` needs connections from a person)."""

    RING = Pattern.RING.value
    ALL_TO_ALL = Pattern.ALL_TO_ALL.value
    TREE = Pattern.TREE.value


jobs_app = typer.Typer(help="Generate job (flow intent) files.", no_args_is_help=True)


@jobs_app.command("generate")
def jobs_generate(
    fabric_path: Annotated[Path, typer.Option("--fabric", help="Fabric file to place jobs on.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Jobs file (.yaml or .json; '-': stdout).")
    ],
    count: Annotated[int, typer.Option("--count", min=1, help="Number of jobs.")] = 1,
    hosts: Annotated[
        int, typer.Option(min=1, help="Hosts per job (every NIC of a host is a rank).")
    ] = 4,
    pattern: Annotated[GenPattern, typer.Option(help="How the ranks connect.")] = GenPattern.RING,
    ring: Annotated[Layout, typer.Option(help="Ring/tree layout.")] = Layout.RAIL,
    placement: Annotated[
        PlacementMode, typer.Option(help="Where jobs land on the fabric.")
    ] = PlacementMode.CONTIGUOUS,
    channels: Annotated[int, typer.Option(min=1, help="Channels per connection.")] = 1,
    qps: Annotated[int, typer.Option(min=1, help="QPs per connection.")] = 1,
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
            if str(output) == "-":  # the jobs went to standard output: nothing else there
                return
            report.print_jobs(console, jobs, workload.flows)
            console.print(f"wrote {output}")

        emit(json_path, report.jobs_json(jobs, workload.flows), render)

    guarded(body)
