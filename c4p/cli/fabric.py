"""``c4p fabric``: generate fabric files and show what they hold (``discover`` lives beside)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from c4p import report
from c4p.cli.common import JsonOption, console, emit, guarded, parse_sets
from c4p.errors import C4pError
from c4p.files import load_fabric, save_fabric
from topology.analysis import summarize
from topology.generators import GENERATORS, generate, sized_for_gpus

fabric_app = typer.Typer(help="Generate and inspect fabric files.", no_args_is_help=True)


@fabric_app.command("generate")
def fabric_generate(
    kind: Annotated[str, typer.Argument(help=f"One of: {', '.join(GENERATORS)}.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Fabric file (.yaml or .json).")],
    gpus: Annotated[
        int | None, typer.Option(help="Size the fabric for this many GPUs (one NIC each).")
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", help="A generator parameter, KEY=VALUE (repeatable)."),
    ] = None,
    json_path: JsonOption = None,
) -> None:
    """Generate a leaf-spine, rail-optimized, fat-tree or dual-plane fabric."""

    def body() -> None:
        if kind not in GENERATORS:
            raise C4pError(f"unknown fabric kind {kind!r}; choose one of {', '.join(GENERATORS)}")
        params = parse_sets(sets or [])
        fabric = sized_for_gpus(kind, gpus, **params) if gpus else generate(kind, **params)
        save_fabric(fabric, output)
        summary = summarize(fabric)

        def render() -> None:
            report.print_summary(console, summary)
            console.print(f"wrote {output}")

        emit(json_path, report.summary_json(summary), render)

    guarded(body)


@fabric_app.command("show")
def fabric_show(
    path: Annotated[Path, typer.Argument(help="Fabric file.")],
    json_path: JsonOption = None,
) -> None:
    """Counts, oversubscription per tier and bisection bandwidth of a fabric file."""

    def body() -> None:
        summary = summarize(load_fabric(path))
        emit(
            json_path, report.summary_json(summary), lambda: report.print_summary(console, summary)
        )

    guarded(body)
