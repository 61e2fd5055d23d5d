"""``c4p bench``: the scenario ladder (ECMP, greedy, c4p, bound), or the service benchmark."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from c4p.cli.common import JsonOption, console, emit, guarded
from c4p.cli.outputs import check_outputs
from c4p.errors import C4pError
from c4p.files import write_text


def bench_cmd(
    quick: Annotated[bool, typer.Option(help="Only the small scenarios (under a minute).")] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Markdown table (default docs/benchmarks.md; out/bench-quick.md with --quick; "
            "with --only, none unless given).",
        ),
    ] = None,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", help="PNG plot (default beside the table).")
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            help="Run only scenarios whose name contains this text (rows printed; a table "
            "only with -o)."
        ),
    ] = None,
    service: Annotated[
        bool,
        typer.Option(
            help="Instead, measure the controller service over gRPC on loopback: "
            "SubmitIntents to all bindings received for a 1,024-rank job, bindings per second."
        ),
    ] = False,
    failures: Annotated[
        bool,
        typer.Option(
            help="Instead, the failure ladder: failed and drained links on 2- and 3-tier "
            "fabrics, full plans and re-plans (docs/benchmarks-failures.md)."
        ),
    ] = False,
    detect: Annotated[
        bool,
        typer.Option(
            help="Instead, the detector on simulated 4,096- and 16,384-rank jobs with injected "
            "faults: precision, recall, localization, CPU per step (docs/benchmarks-detect.md)."
        ),
    ] = False,
    json_path: JsonOption = None,
) -> None:
    """Run the scenario ladder: ECMP, greedy, c4p and the lower bound side by side."""
    from c4p.figures import ladder as scenario_ladder

    guarded(lambda: check_outputs(("-o", output, None), ("--plot", plot_path, (".png",))))
    if detect:
        guarded(lambda: _detect(quick, output, json_path))
        return
    if failures:
        guarded(lambda: _failure_ladder(quick, output, plot_path, only, json_path))
        return

    if service:
        from c4p.service import bench as service_bench

        result = guarded(service_bench.run)
        for line in result.lines():
            console.print(line, highlight=False)
        return

    def body() -> None:
        ladder = [s for s in scenario_ladder.scenarios() if (s.quick or not quick)]
        if only:
            ladder = [s for s in ladder if only in s.name]
        if not ladder:
            raise C4pError(f"no scenario matches {only!r}")
        table = output or Path("out/bench-quick.md" if quick else "docs/benchmarks.md")
        image = plot_path or table.with_name(table.stem + ".png")
        started = time.perf_counter()

        def progress(row: scenario_ladder.Row) -> None:
            if json_path is None or str(json_path) != "-":
                console.print(
                    f"{row.scenario}: {row.flows:,} flows, max util ECMP {row.util_ecmp:.2f} / "
                    f"greedy {row.util_greedy:.2f} / c4p {row.util_c4p:.2f} / bound "
                    f"{row.bound:.2f}, {row.solve_s:.3f} s"
                    + ("" if row.moved is None else
                       f", re-plan {row.replan_s:.3f} s moved {row.moved}/{row.crossed}"),
                    highlight=False,
                )  # fmt: skip

        rows = scenario_ladder.run(ladder, progress)
        elapsed = time.perf_counter() - started
        command = (
            "c4p bench" + (" --quick" if quick else "") + (f" --only '{only}'" if only else "")
        )
        if only and output is None:
            wrote = partial_note(table)
        else:
            text = scenario_ladder.markdown(rows, command, elapsed).replace(
                "benchmarks.png", image.name
            )
            write_text(table, text)
            try:
                scenario_ladder.plot(rows, image)
                wrote = f"wrote {table}, {image}"
            except ImportError:  # matplotlib is an extra: c4p[plot] (or the dev install)
                wrote = f"wrote {table} (no plot: install c4p[plot] for {image.name})"
        emit(
            json_path,
            scenario_ladder.rows_json(rows),
            lambda: console.print(wrote, highlight=False),
        )

    guarded(body)


def _failure_ladder(
    quick: bool, output: Path | None, plot_path: Path | None, only: str | None, json_path: Any
) -> None:
    from c4p.figures import failures as failure_ladder

    table = output or Path(
        "out/bench-failures-quick.md" if quick else "docs/benchmarks-failures.md"
    )
    image = plot_path or table.with_name(table.stem + ".png")
    started = time.perf_counter()

    def progress(row: failure_ladder.FailureRow) -> None:
        if json_path is None or str(json_path) != "-":
            console.print(
                f"{row.fabric}, {row.failure}: ECMP {row.util_ecmp:.2f} / greedy "
                f"{row.util_greedy:.2f} / c4p {row.util_c4p:.2f} ({row.status}) / bound "
                f"{row.bound:.2f} in {row.plan_s:.3f} s; re-plan {row.util_replan:.2f} in "
                f"{row.replan_s:.3f} s, moved {row.moved} "
                f"({'fewest' if row.minimum_proven else 'at least'} {row.min_moves})",
                highlight=False,
            )

    rows = failure_ladder.run(quick, only, progress)
    if not rows:
        raise C4pError(f"no fabric of the failure ladder matches {only!r}")
    elapsed = time.perf_counter() - started
    command = (
        "c4p bench --failures"
        + (" --quick" if quick else "")
        + (f" --only '{only}'" if only else "")
    )
    if only and output is None:
        wrote = partial_note(table)
    else:
        text = failure_ladder.markdown(rows, command, elapsed)
        write_text(table, text.replace("benchmarks-failures.png", image.name))
        failure_ladder.plot(rows, image)
        wrote = f"wrote {table}, {image}"
    emit(
        json_path,
        failure_ladder.rows_json(rows),
        lambda: console.print(wrote, highlight=False),
    )


def partial_note(table: Path) -> str:
    """What ``--only`` without ``-o`` says instead of writing the ladder's table.

    Why: the default tables (``docs/benchmarks.md``, ...) are the project's record of the whole
    ladder; one scenario re-run to check a change replaced them with a one-row table. A part
    of the ladder is written only where ``-o`` says."""
    return f"not writing {table}: --only ran part of the ladder (give -o FILE to keep its table)"


def _detect(quick: bool, output: Path | None, json_path: Any) -> None:
    from c4p.detector.sim import Outcome
    from c4p.figures import detect as detect_ladder

    table = output or Path("out/bench-detect-quick.md" if quick else "docs/benchmarks-detect.md")
    started = time.perf_counter()

    def progress(o: Outcome) -> None:
        if json_path is None or str(json_path) != "-":
            found = ", ".join(f"{f.cls.value} {f.element} ({f.confidence:.2f})" for f in o.findings)
            console.print(
                f"{o.scenario}: injected {o.injected_element or '-'}; found {found or 'nothing'}",
                highlight=False,
            )

    rows = detect_ladder.run(quick, trials=detect_ladder.TRIALS, progress=progress)
    command = "c4p bench --detect" + (" --quick" if quick else "")
    write_text(table, detect_ladder.markdown(rows, command, time.perf_counter() - started))
    emit(json_path, detect_ladder.rows_json(rows), lambda: console.print(f"wrote {table}"))
