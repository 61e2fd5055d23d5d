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
imported, and any other command builds a command line holding only its own group, so ``c4p
plan`` never imports gRPC, the store or the lab (imports were a quarter of its run time).
Everything else sees the same ``app`` as before.
"""

from __future__ import annotations

# isort: off
from c4p.cli.process import STARTED as STARTED  # first: loading is timed from here
# isort: on

import gc
import importlib
import os
import sys
from typing import Annotated, Any

import typer

from c4p.cli.process import CLOSED_PIPE as CLOSED_PIPE
from c4p.cli.process import ClosedPipe as ClosedPipe

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


GROUPS: dict[str, tuple[str, str]] = {
    "fabric": ("c4p.cli.fabric", "fabric_app"),
    "jobs": ("c4p.cli.jobs", "jobs_app"),
    "lab": ("c4p.cli.lab", "lab_app"),
    "admin": ("c4p.cli.admin", "admin_app"),
}
"""Command groups: name -> (module, the ``typer.Typer`` in it)."""

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("c4p.cli.serve", "serve"),
    "plan": ("c4p.cli.plan", "plan_cmd"),
    "evaluate": ("c4p.cli.evaluate", "evaluate_cmd"),
    "bench": ("c4p.cli.bench", "bench_cmd"),
    "agent": ("c4p.cli.agent", "agent_cmd"),
    "report": ("c4p.cli.report", "report_cmd"),
}
"""Single commands: name -> (module, the function)."""

ONE_SHOT = frozenset({"plan", "evaluate", "jobs", "report"})
"""Commands that run to completion over files (not servers or agents): they run without the
cycle collector (see :func:`c4p.cli.common.bulk_allocation`)."""

FABRIC_COMMANDS: dict[str, tuple[str, str]] = {
    "discover": ("c4p.cli.discover", "fabric_discover"),
    "emulate": ("c4p.cli.emulate", "fabric_emulate"),
}
"""Commands of the ``fabric`` group that live in modules of their own."""


def _load(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def build_app(only: str | None = None) -> typer.Typer:
    """The ``c4p`` command line: every group registered (imports them all), or with ``only``
    one command or group (what :func:`main` runs, so ``c4p plan`` imports neither gRPC nor the
    store nor the lab; help and errors of that command read the same)."""
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
    for name, (module, attr) in GROUPS.items():
        if only in (None, name):
            group = _load(module, attr)
            if name == "fabric":
                for sub, (sub_module, sub_attr) in FABRIC_COMMANDS.items():
                    group.command(sub)(_load(sub_module, sub_attr))
            app.add_typer(group, name=name)
    for name, (module, attr) in COMMANDS.items():
        if only in (None, name):
            app.command(name)(_load(module, attr))
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

        _exit_at_once(run(agent_app, sys.argv[2:], "c4p agent"), tidy=False)  # raises SystemExit
        return
    first = sys.argv[1] if len(sys.argv) > 1 else None
    only = first if first in GROUPS or first in COMMANDS else None
    if only not in ONE_SHOT:
        _exit_at_once(run(build_app(only), sys.argv[1:]), tidy=False)  # raises SystemExit
        return
    _one_blas_thread()
    # A command that reads files, computes and exits builds long-lived data only (imports
    # included); the cycle collector would walk that growing heap every 700 allocations, and
    # once more at exit (a third of a second after a 16k-GPU plan): frozen objects it skips.
    gc.disable()
    code: object
    try:
        code = run(build_app(only), sys.argv[1:])
    except SystemExit as done:  # a command body that ends with sys.exit
        code = done.code
    gc.freeze()
    _exit_at_once(code)


def run(app: typer.Typer, args: list[str], prog_name: str = "c4p") -> int:
    """Run the command line on ``args`` and return its exit status, with c4p's conventions
    where click's differ.

    Why not click's own ("standalone") mode: it prints an argument error as a framed box of
    usage and hints (six lines for ``--gpus -5``) while c4p promises one line per problem, as
    every other bad input gets (``error: --gpus: ...``, exit 2); and it reports a closed pipe as
    exit 1, which c4p reserves for findings."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer.exceptions import Abort

    try:
        try:
            code = app(prog_name=prog_name, args=args, standalone_mode=False)
        except NoArgsIsHelpError as exc:  # ``c4p fabric``: the group's help, as before
            exc.show()
            return 2
        except ClickException as exc:
            message = " ".join(exc.format_message().split())
            print(f"error: {message} (see --help)", file=sys.stderr)
            return exc.exit_code
        except Abort:
            print("error: aborted", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        sys.stdout.flush()
    except (BrokenPipeError, ClosedPipe):
        return _closed_pipe()
    return code if isinstance(code, int) else 0


def _closed_pipe() -> int:
    """Standard output's reader is gone: point the descriptor at /dev/null so nothing else
    (a final flush at exit) fails on it, and end with :data:`CLOSED_PIPE`."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE


def _one_blas_thread() -> None:
    """Start numpy's BLAS (OpenBLAS) with one thread, unless the user chose otherwise.

    Why: OpenBLAS starts a worker per core when numpy is imported, and the worker spins for
    about a tenth of a second waiting for work before it sleeps (0.11 s of CPU in every
    ``c4p plan``, measured per thread in ``/proc``). No one-shot command calls BLAS (the
    planner's objective sums squares without ``np.dot`` for this reason, see
    :mod:`solver.space.problem`), so the worker only ever spins; on a 2-core host whose other core
    is busy, that spin takes its time from the command. Set before numpy is first imported
    (the command's own modules import it), which is the only time OpenBLAS reads it."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _exit_at_once(code: object, *, tidy: bool = True) -> None:
    """End a one-shot command's process without tearing its heap down object by object.

    Why: after a 16k-GPU plan the interpreter's own exit frees some million objects one at a
    time (the fabric, its index, the flows, the plans), 50-100 ms of nothing but waiting. A
    one-shot command has written its files (atomically, closed) and registers no exit
    handlers, so what is left to do is flushing standard output and error; the exit status is
    ``sys.exit``'s (``None`` is 0, a message is printed and is 1). Servers and the other
    long-running commands (``tidy=False``) end through ``sys.exit`` after the flush, so their
    exit handlers run."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            status = status or _closed_pipe()
        except (OSError, ValueError):  # what Python's own exit reports as 120
            status = status or 120
    if not tidy:
        sys.exit(status)
    os._exit(status)
