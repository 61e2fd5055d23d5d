"""``c4p fabric``: generate fabric files and show what they hold (``discover`` lives beside)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from c4p import report
from c4p.cli.common import JsonOption, console, emit, guarded, parse_sets
from c4p.errors import C4pError
from c4p.files import load_fabric, save_fabric
from topology.analysis import summarize
from topology.generators import GENERATORS, generate, sized_for_gpus
from topology.generators.registry import FabricKind

fabric_app = typer.Typer(help="Generate and inspect fabric files.", no_args_is_help=True)


def keys_help() -> str:
    """Each kind's ``--set`` keys for ``--help`` (required ones marked with ``*``)."""
    lines = []
    for kind, generator in GENERATORS.items():
        keys = [
            f"{name}{'*' if f.is_required() else ''}"
            for name, f in generator.params.model_fields.items()
            if name not in ("hash_profiles", "addresses")
        ]
        lines.append(f"{kind}: {', '.join(keys)}")
    return (
        "Size it with --gpus N, or give the keys marked * with --set KEY=VALUE. "
        "Keys per kind:\n\n" + "\n\n".join(lines)
    )


@fabric_app.command("generate", epilog=keys_help())
def fabric_generate(
    kind: Annotated[FabricKind, typer.Argument(help="The fabric's shape.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Fabric file (.yaml or .json; '-': stdout).")
    ],
    gpus: Annotated[
        int | None,
        typer.Option(min=1, help="Size the fabric for this many GPUs (one NIC each)."),
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", help="A generator parameter, KEY=VALUE (repeatable)."),
    ] = None,
    json_path: JsonOption = None,
) -> None:
    """Generate a leaf-spine, rail-optimized, fat-tree or dual-plane fabric."""

    def body() -> None:
        params = parse_sets(sets or [])
        try:
            fabric = sized_for_gpus(kind, gpus, **params) if gpus else generate(kind, **params)
        except ValidationError as exc:
            missing = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "missing"]
            if gpus is not None or not missing:
                raise
            keys = " ".join(f"--set {k}=N" for k in missing)
            raise C4pError(
                f"fabric {kind.value} needs a size: --gpus N, or {keys} (see --help for every key)"
            ) from None
        save_fabric(fabric, output)
        summary = summarize(fabric)

        def render() -> None:
            if str(output) == "-":  # the fabric went to standard output: nothing else there
                return
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
