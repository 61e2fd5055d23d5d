"""``c4p agent``: run the host agent (probes for the controller from this host's NICs).

The config is loaded and checked before anything starts, including the ports against the OS
(``--no-os-check`` skips that, for a config prepared elsewhere); a bad one exits with status 2
and one line per problem. The agent then runs until SIGINT/SIGTERM, reconnecting to its
controllers as long as it runs (see :mod:`c4p.agent.daemon`).
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
) -> None:
    """Run the host agent until SIGINT/SIGTERM."""
    import asyncio

    from c4p.agent.config import load_agent_config
    from c4p.agent.daemon import AgentDaemon
    from c4p.agent.probers import prober_factory
    from c4p.cli.common import guarded
    from c4p.service import telemetry

    settings = guarded(lambda: load_agent_config(config, os_check=os_check and None))
    factory = guarded(lambda: prober_factory(prober))
    if check_only:
        typer.echo(f"{config}: ok")
        return
    telemetry.configure("info", "json")
    daemon = AgentDaemon(settings, factory)
    asyncio.run(daemon.run_until_signal())


agent_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
agent_app.command()(agent_cmd)

if __name__ == "__main__":  # pragma: no cover
    agent_app(prog_name="c4p agent")
