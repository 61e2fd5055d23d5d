"""``c4p fabric``: generate fabric files and show what they hold (``discover`` lives beside)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from c4p.cli import views
from c4p.cli.common import JsonOption, QuietOption, console, emit, guarded, parse_sets, progress
from c4p.cli.outputs import DATA_SUFFIXES, check_outputs
from c4p.errors import C4pError
from c4p.files import load_fabric, save_fabric
from topology.analysis import summarize
from topology.generators import GENERATORS, generate, sized_for_gpus
from topology.generators.registry import FabricKind
from topology.model import Fabric
from topology.reach import cut_off

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
    quiet: QuietOption = False,
) -> None:
    """Generate a leaf-spine, rail-optimized, fat-tree or dual-plane fabric."""

    def body() -> None:
        check_outputs(("-o", output, DATA_SUFFIXES), ("--json", json_path, None))
        params = parse_sets(sets or [])
        try:
            with progress(f"generating a {kind.value} fabric"):
                fabric = sized_for_gpus(kind, gpus, **params) if gpus else generate(kind, **params)
        except ValidationError as exc:
            missing = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "missing"]
            if gpus is not None or not missing:
                raise
            keys = " ".join(f"--set {k}=N" for k in missing)
            raise C4pError(
                f"fabric {kind.value} needs a size: --gpus N, or {keys} (see --help for every key)"
            ) from None
        if gpus is not None:
            _say_size(fabric, gpus, sets or [])
        with progress(f"writing {output}"):
            save_fabric(fabric, output)
        with progress("summarizing"):
            summary = summarize(fabric)

        def render() -> None:
            if str(output) == "-":  # the fabric went to standard output: nothing else there
                return
            views.print_summary(console, summary)
            console.print(f"wrote {output}")

        emit(json_path, views.summary_json(summary), render)

    guarded(body)


def _say_size(fabric: Fabric, gpus: int, sets: list[str]) -> None:
    """One line on standard error when the fabric has other than ``--gpus`` GPUs, and why:
    a ``--set`` changed the shape sized for ``--gpus``, or the shape comes in whole units."""
    built = sum(len(h.nics) for h in fabric.hosts)
    if built == gpus:
        return
    shape = fabric.description.split(";")[0]
    why = (
        f"{' '.join(f'--set {s}' for s in sets)} changed the shape sized for it"
        if sets
        else "the shape comes in whole hosts and units, rounded up"
    )
    Console(stderr=True).print(
        f"note: built {built:,} GPUs for --gpus {gpus:,}: {why} ({shape})",
        highlight=False,
        soft_wrap=True,
    )


@fabric_app.command("show")
def fabric_show(
    path: Annotated[Path, typer.Argument(help="Fabric file.")],
    json_path: JsonOption = None,
    quiet: QuietOption = False,
) -> None:
    """Counts, oversubscription per tier and bisection bandwidth of a fabric file.

    Exit 1 (a finding) when NIC ports or leaves cannot reach the rest of the fabric over its
    usable links (a cable down, a leaf without uplinks): they are named on standard error."""

    def body() -> int:
        with progress(f"loading {path}"):
            fabric = load_fabric(path)
        with progress("summarizing"):
            summary = summarize(fabric)
            alone = cut_off(fabric)
        data = views.summary_json(summary)
        data["isolated_nic_ports"] = len(alone.nic_ports)
        data["isolated_leaves"] = list(alone.leaves)
        emit(json_path, data, lambda: views.print_summary(console, summary))
        if alone:
            err = Console(stderr=True)
            for what, names in (("NIC ports", alone.nic_ports), ("leaves", alone.leaves)):
                if names:
                    err.print(
                        f"warning: {len(names):,} {what} cannot reach the rest of the fabric "
                        f"over usable links: {_some(names)}",
                        highlight=False,
                        soft_wrap=True,
                    )
        return 1 if alone else 0

    code = guarded(body)
    if code:
        raise typer.Exit(code=code)


def _some(names: tuple[str, ...], shown: int = 8) -> str:
    """A bounded list: the first ``shown`` names and how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more:,} more" if more > 0 else "")
