"""What every ``c4p`` command shares: the console, ``--json``, and the one error path.

Why one module: each command is a thin shell over a pure function of ``topology``, ``solver``
or ``southbound``; it reads files, calls the function, prints a table and, with ``--json FILE``,
writes the same figures for machines (``--json -`` writes JSON to standard output instead of
tables). Every error a user can cause comes out as ``error: <file>: <field>: <reason>`` and exit
status 2, never as a traceback; :func:`guarded` is the only place that turns errors into exits.

Exit codes: 0 ok; 1 a finding (drift, an unanswered target, a failed check); 2 bad input or a
refusal to start (a bad option or file, a damaged store, a port in use).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from c4p.errors import C4pError
from c4p.files import write_json
from topology.formats import problems_of

console = Console()
T = TypeVar("T")

JsonOption = Annotated[
    Path | None,
    typer.Option("--json", help="Also write the figures as JSON to this file ('-': stdout only)."),
]


def fail(message: str) -> None:
    """Print ``error: message`` on stderr and exit with status 2 (bad input)."""
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def guarded(func: Callable[[], T]) -> T:
    """Run a command body, turning every user-caused error into a clear message and exit 2:
    c4p's own errors, invalid values (``ValueError``, pydantic's ``ValidationError``) and
    files that cannot be read or written (``OSError``: a directory, no permission, a full
    disk)."""
    try:
        return func()
    except C4pError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail("; ".join(f"{p}: {r}" if p else r for p, r in problems_of(exc)))
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        fail(f"{where}{exc.strerror or exc}")
    except ValueError as exc:
        fail(str(exc))
    raise AssertionError("unreachable")


def check_number(option: str, value: float, low: float, high: float) -> float:
    """A finite number within ``[low, high]``, or a :class:`C4pError` naming the option (typer
    lets ``nan`` and ``inf`` through its ranges)."""
    if not math.isfinite(value) or not low <= value <= high:
        raise C4pError(f"{option} {value}: expected a number from {low:g} to {high:g}")
    return value


@contextmanager
def progress(description: str) -> Iterator[None]:
    """A spinner with the elapsed time on standard error while long work runs (nothing when
    standard error is not a terminal, so logs and pipes stay clean)."""
    err = Console(stderr=True)
    if not err.is_terminal:
        yield
        return
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        bar.add_task(description, total=None)
        yield


def emit(json_path: Path | None, data: Any, render: Callable[[], None]) -> None:
    """Render for people unless ``--json -``; write JSON where ``--json`` says."""
    if json_path is None or str(json_path) != "-":
        render()
    if json_path is not None:
        write_json(data, json_path)


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs as keyword arguments (dashes in keys become underscores)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise C4pError(f"--set {pair!r}: expected KEY=VALUE")
        out[key.strip().replace("-", "_")] = value.strip()
    return out
