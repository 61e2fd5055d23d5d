"""What every ``c4p`` command shares: the console, ``--json``, and the one error path.

Why one module: each command is a thin shell over a pure function of ``topology``, ``solver``
or ``southbound``; it reads files, calls the function, prints a table and, with ``--json FILE``,
writes the same figures for machines (``--json -`` writes JSON to standard output instead of
tables). Every error a user can cause comes out as ``error: <file>: <field>: <reason>`` and exit
status 2, never as a traceback; :func:`guarded` is the only place that turns errors into exits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console

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
    """Run a command body, turning every user-caused error into a clear message and exit 2."""
    try:
        return func()
    except C4pError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail("; ".join(f"{p}: {r}" if p else r for p, r in problems_of(exc)))
    raise AssertionError("unreachable")


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
