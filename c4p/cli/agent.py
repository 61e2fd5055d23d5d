"""``c4p agent``: run the host agent: probes from this host's NICs for the controller, and,
with a ``bindings:`` section, the host's ranks' bindings on a Unix socket (``libc4p``).

The config is loaded and checked before anything starts, including the ports against the OS
(``--no-os-check`` skips that, for a config prepared elsewhere); a bad one exits with status 2
and one line per problem. The agent then runs until SIGINT/SIGTERM, reconnecting to its
controllers as long as it runs (see :mod:`c4p.agent.daemon`). An agent without ``ports`` only
serves bindings (no raw sockets needed; ``--prober`` is then unused).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def agent_cmd(
    config: Annotated[Path, typer.Option("--config", "-c", help="Agent config (YAML or JSON).")],
    prober: Annotated[
        str, typer.Option(help="Prober: 'socket' (real packets) or 'modeled:FABRIC'.")
    ] = "socket",
    os_check: Annotated[
        bool, typer.Option("--os-check/--no-os-check", help="Check ports against the OS.")
    ] = True,
    check_only: Annotated[
        bool, typer.Option("--check", help="Validate the config and exit.")
    ] = False,
    ready_file: Annotated[
        Path | None,
        typer.Option(help="Write the agent's components here once all have started."),
    ] = None,
) -> None:
    """Run the host agent until SIGINT/SIGTERM."""
    import asyncio

    from c4p.agent.config import load_agent_config
    from c4p.agent.daemon import AgentDaemon, Component
    from c4p.agent.local import BindingsSide
    from c4p.agent.probers import prober_factory
    from c4p.agent.telemetry import TelemetryBook
    from c4p.cli.common import fail, guarded
    from c4p.files import write_text
    from c4p.service import telemetry

    settings = guarded(lambda: load_agent_config(config, os_check=os_check and None))
    factory = guarded(lambda: prober_factory(prober))
    if check_only:
        typer.echo(f"{config}: ok")
        return
    telemetry.configure("info", "json")
    components: list[Component] = []
    # The ranks' reports, folded for the controller: only with a controller session to send them
    # on (a bindings-only agent reads its ranks' REPORT frames and drops them, counted).
    book = TelemetryBook(settings.host) if settings.ports else None
    if settings.bindings is not None:
        components.append(BindingsSide(settings, book))
    daemon = AgentDaemon(settings, factory, components=components, telemetry=book)

    def ready() -> None:
        if ready_file is not None:
            write_text(ready_file, " ".join(c.name for c in daemon.components) + "\n")

    try:
        asyncio.run(daemon.run_until_signal(ready))
    except OSError as exc:  # the socket's directory, owner or the state directory
        fail(f"{config}: bindings: cannot start: {exc}")


agent_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
agent_app.command()(agent_cmd)

if __name__ == "__main__":  # pragma: no cover
    agent_app(prog_name="c4p agent")
