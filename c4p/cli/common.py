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

import gc
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console

from c4p.cli.outputs import check_outputs
from c4p.cli.process import ClosedPipe
from c4p.files import write_json
from topology.errors import C4pError  # the root (c4p.errors re-exports it with the store's)
from topology.formats import problems_of

T = TypeVar("T")


class _Console(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more to write, also not from a later print
        raise ClosedPipe


console: Console = _Console()


def _json_output(value: Path | None) -> Path | None:
    """``--json``'s folder must exist: checked while the command line is read, before any
    work (see :mod:`c4p.cli.outputs`)."""
    if value is not None:
        try:
            check_outputs(("--json", value, None))
        except C4pError as exc:
            raise typer.BadParameter(
                str(exc).removeprefix("--json "), param_hint="--json"
            ) from None
    return value


JsonOption = Annotated[
    Path | None,
    typer.Option(
        "--json",
        help="Also write the figures as JSON to this file ('-': stdout only).",
        callback=_json_output,
    ),
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
    except BrokenPipeError:  # standard output's reader left: not the user's error (c4p.cli.run)
        raise ClosedPipe from None
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


PROGRESS_AFTER_S = 2.0
"""A phase says what it is doing once it has run this long (``C4P_PROGRESS_AFTER`` overrides:
``0`` makes every phase speak at once, as the tests do)."""

PROGRESS_EVERY_S = 10.0
"""Then at most one line per this many seconds, so a log of a long run stays readable."""

_quiet = False


def _set_quiet(value: bool) -> bool:
    global _quiet
    _quiet = value
    return value


QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        callback=_set_quiet,
        help="No progress lines on standard error (phases over 2 s say what they are doing).",
    ),
]


@contextmanager
def progress(description: str) -> Iterator[None]:
    """Say on standard error what long work is doing: ``c4p: <description>... 12 s``.

    Why lines and not a spinner: a 131,072-GPU fabric takes 18-94 s per command, usually run
    from a script or CI log, where a spinner shows nothing (it was drawn only on terminals).
    Nothing for a phase shorter than :data:`PROGRESS_AFTER_S` (most runs stay silent), at most
    a line per :data:`PROGRESS_EVERY_S`, a closing line with the phase's time if it spoke, never
    on standard output (which may carry the file itself, ``-o -``), none with ``--quiet``."""
    if _quiet:
        yield
        return
    try:
        after = max(0.0, float(os.environ.get("C4P_PROGRESS_AFTER", PROGRESS_AFTER_S)))
    except ValueError:
        after = PROGRESS_AFTER_S
    start = time.monotonic()
    done = threading.Event()
    spoke = threading.Event()

    def say(text: str) -> None:
        try:
            print(f"c4p: {text}", file=sys.stderr, flush=True)
            spoke.set()
        except (OSError, ValueError):  # standard error closed: progress is optional
            pass

    def watch() -> None:
        wait = after or PROGRESS_EVERY_S  # with 0 the first line is said at once, below
        while not done.wait(wait):
            say(f"{description}... {time.monotonic() - start:.0f} s")
            wait = PROGRESS_EVERY_S

    if after == 0:
        say(f"{description}...")
    watcher = threading.Thread(target=watch, name="c4p-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        if spoke.is_set():
            say(f"{description}: done in {time.monotonic() - start:.1f} s")


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


class Timings:
    """Seconds per phase of one command (``--timings``), for the end-to-end benchmark.

    Why in the command itself: a profile of the whole process is what a user waits for, and
    only the command knows where loading ends and planning starts. ``imports`` is the time
    from the first ``c4p.cli`` import to the command body (what lazy imports save).
    """

    def __init__(self) -> None:
        from c4p.cli.process import STARTED

        self.seconds: dict[str, float] = {"imports": time.perf_counter() - STARTED}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def line(self) -> str:
        parts = ", ".join(f"{name} {seconds:.3f}" for name, seconds in self.seconds.items())
        return f"timings (s): {parts}; total {sum(self.seconds.values()):.3f}"


@contextmanager
def bulk_allocation() -> Iterator[None]:
    """Run a one-shot command that builds large, long-lived data with the cycle collector off.

    Why: loading a 16k-GPU fabric makes some 100,000 objects that all live to the end of the
    command; CPython's collector, triggered by every 700 new objects, walks the whole growing
    heap again and again, which cost 0.3 s of a 0.5 s fabric validation (measured with
    ``time.process_time``). What it would find is little and lives to the end anyway (a
    fabric and its cached index refer to each other); reference counting still frees everything
    else at once, and the collector is back on afterwards if it was on before.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
