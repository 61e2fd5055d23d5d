"""``c4p serve``: run the controller service (the main CLI registers :func:`serve`).

Why gRPC is imported late: the offline commands import no gRPC; the
service pulls in grpc, prometheus and the store (imported inside :func:`serve`, so registering
the command costs nothing). The main CLI registers it with ``app.command("serve")(serve)``. It is
run as a real process by tests with ``python -m c4p serve --config FILE``.

The config is loaded and checked before anything starts; a bad one exits with status 2 and one
line per problem (``error: FILE: field: reason``), never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def serve(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="Controller config (YAML or JSON).")
    ] = Path("configs/controller.yaml"),
    ready_file: Annotated[
        Path | None,
        typer.Option(help="Write the bound host:port here once serving (for supervisors)."),
    ] = None,
    check_only: Annotated[
        bool, typer.Option("--check", help="Validate the config and exit.")
    ] = False,
    no_balance: Annotated[
        bool,
        typer.Option(
            "--no-balance",
            help="Do not spread QPs over dual-port / dual-plane NICs' ports (overrides "
            "planner.balance_ports).",
        ),
    ] = False,
) -> None:
    """Serve the flow-intent and admin APIs until SIGINT/SIGTERM."""
    from c4p.cli.common import guarded
    from c4p.files import write_text
    from c4p.service import telemetry
    from c4p.service.process import run
    from c4p.service.serve import ServeConfig, load_config

    def body() -> ServeConfig:
        return load_config(config)

    settings = guarded(body)
    if no_balance:
        planner = settings.planner.model_copy(update={"balance_ports": False})
        settings = settings.model_copy(update={"planner": planner})
    if check_only:
        typer.echo(f"{config}: ok")
        return
    telemetry.configure(settings.logging.level, settings.logging.format)

    def ready(address: str) -> None:
        if ready_file is not None:
            write_text(ready_file, address + "\n")

    try:
        guarded(lambda: run(settings, ready))  # the store, discovery or a port may refuse
    except KeyboardInterrupt:  # SIGINT before the service's own handlers are in place
        raise typer.Exit(code=130) from None
