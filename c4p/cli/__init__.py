"""The ``c4p`` command line (typer + rich): one module per command group.

Why this shape: each command is a thin shell over a pure function of ``topology``, ``solver`` or
``southbound`` (or, for ``serve``, the controller runtime); :mod:`c4p.cli.common` holds the one
error path, so every error a user can cause comes out as ``error: <file>: <field>: <reason>``
and exit status 2, never as a traceback. Exit codes: 0 ok, 1 a finding (drift, an unanswered
target, a failed check), 2 bad input. Commands that need gRPC import it inside their body, so
the offline commands start fast.

Why the command groups are imported on first use (``app``, :func:`main`): ``c4p agent`` runs on
every GPU host for as long as the host runs, and the planner's commands load OR-Tools and
pandas (most of a process's memory); :func:`main` dispatches ``agent`` before any other group is
imported. Everything else sees the same ``app`` as before.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

__all__ = ["app", "main"]


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"c4p {version('c4p')}")
        except PackageNotFoundError:  # pragma: no cover - run from a checkout, not installed
            typer.echo("c4p (not installed)")
        raise typer.Exit()


def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print c4p's version and exit."
        ),
    ] = False,
) -> None:
    """Traffic engineering for RoCE fabrics: plan collision-free paths for collective flows."""


def build_app() -> typer.Typer:
    """The whole ``c4p`` command line: every group registered (imports them all)."""
    from c4p.cli.admin import admin_app
    from c4p.cli.agent import agent_cmd
    from c4p.cli.bench import bench_cmd
    from c4p.cli.discover import fabric_discover
    from c4p.cli.emulate import fabric_emulate
    from c4p.cli.evaluate import evaluate_cmd
    from c4p.cli.fabric import fabric_app
    from c4p.cli.jobs import jobs_app
    from c4p.cli.lab import lab_app
    from c4p.cli.plan import plan_cmd
    from c4p.cli.report import report_cmd
    from c4p.cli.serve import serve

    app = typer.Typer(
        name="c4p",
        help=(
            "Traffic engineering for RoCE fabrics: plan collision-free paths for collective flows."
        ),
        epilog="Exit codes: 0 ok; 1 a finding (drift, an unanswered target, a failed check); "
        "2 bad input or a refusal to start.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_main)
    app.add_typer(fabric_app, name="fabric")
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(lab_app, name="lab")
    app.add_typer(admin_app, name="admin")
    fabric_app.command("discover")(fabric_discover)
    fabric_app.command("emulate")(fabric_emulate)
    app.command("serve")(serve)
    app.command("plan")(plan_cmd)
    app.command("evaluate")(evaluate_cmd)
    app.command("bench")(bench_cmd)
    app.command("agent")(agent_cmd)
    app.command("report")(report_cmd)
    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # built once, on first use
        built = globals()["app"] = build_app()
        return built
    raise AttributeError(f"module 'c4p.cli' has no attribute {name!r}")


def main() -> None:
    """Console-script entry point (``c4p agent`` without importing the other groups)."""
    if sys.argv[1:2] == ["agent"]:
        from c4p.cli.agent import agent_app

        agent_app(prog_name="c4p agent", args=sys.argv[2:])
        return
    build_app()(prog_name="c4p")
