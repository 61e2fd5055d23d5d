"""``c4p jobs``: place jobs on a fabric and write their flow intents."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from c4p.cli import views
from c4p.cli.admin import CaFile, CertFile, KeyFile, ServerName, client_tls
from c4p.cli.common import JsonOption, check_number, console, emit, guarded
from c4p.cli.outputs import DATA_SUFFIXES, check_outputs
from c4p.files import load_fabric, load_model, save_model
from solver.workload.jobs import JobsFile, Layout, Pattern
from solver.workload.patterns import derive_workload
from solver.workload.placement import JobsGenParams, PlacementMode, generate_jobs


class GenPattern(StrEnum):
    """The patterns a generator can lay out (``explicit`` needs connections from a person)."""

    RING = Pattern.RING.value
    ALL_TO_ALL = Pattern.ALL_TO_ALL.value
    TREE = Pattern.TREE.value


jobs_app = typer.Typer(
    help="Generate job (flow intent) files; submit them to a running controller.",
    no_args_is_help=True,
)


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
        check_outputs(("-o", output, DATA_SUFFIXES), ("--json", json_path, None))
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
            views.print_jobs(console, jobs, workload.flows)
            console.print(f"wrote {output}")

        emit(json_path, views.jobs_json(jobs, workload.flows), render)

    guarded(body)


@jobs_app.command("submit")
def jobs_submit(
    jobs_path: Annotated[Path, typer.Argument(help="Jobs file (.yaml or .json).")],
    controller: Annotated[
        str, typer.Option("--controller", envvar="C4P_ADDRESS", help="The controller's host:port.")
    ] = "127.0.0.1:50051",
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait until every QP is bound (and verified where "
            "agents probe), printing progress.",
        ),  # fmt: skip
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 300.0,
    tenant: Annotated[str, typer.Option(help="Tenant of every job (rollout policy).")] = "",
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the registration credential (default: "
            "$C4P_REGISTER_TOKEN; none on an open loopback controller)."
        ),  # fmt: skip
    ] = None,
    tokens: Annotated[
        Path | None,
        typer.Option(
            help="Write each job's token here (JSON, mode 0600): release and watch need it."
        ),  # fmt: skip
    ] = None,
    ca_file: CaFile = None,
    cert_file: CertFile = None,
    key_file: KeyFile = None,
    server_name: ServerName = None,
    json_path: JsonOption = None,
) -> None:
    """Register every job of a jobs file with a running controller and submit its intents.

    Exit 0 when submitted (with --wait: when every QP is bound), 1 on a finding or the
    timeout, 2 on bad input or a refusal."""
    from rich.console import Console

    from c4p.cli.submit import register_token, run

    check = guarded(lambda: check_number("--timeout", timeout, 0.0, 86_400.0))
    jobs = guarded(lambda: load_model(JobsFile, jobs_path))
    token = guarded(lambda: register_token(token_file))
    tls = client_tls(ca_file, cert_file, key_file, server_name)
    out = Console(stderr=True) if str(json_path) == "-" else console
    submitted, code = run(controller, jobs, tls, token, tenant, wait, check, tokens, out)
    emit(json_path, {"jobs": [j.figures() for j in submitted]}, lambda: None)
    if code:
        raise typer.Exit(code=code)
