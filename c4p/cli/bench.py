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
    scale: Annotated[
        bool,
        typer.Option(
            help="Instead, the scale ladder 4,096 -> 131,072 GPUs (3-tier, 2-tier; healthy, one "
            "link down): generate, load, plan, re-plan, evaluate seconds, peak memory, c4p / "
            "bound, moved / bound (docs/benchmarks-scale-ladder.md); one process per rung."
        ),
    ] = False,
    max_gpus: Annotated[
        int | None,
        typer.Option(
            "--max-gpus",
            min=4096,
            help="With --scale: only the rungs up to this many GPUs (default table then "
            "out/bench-scale-N.md).",
        ),
    ] = None,
    work_dir: Annotated[
        Path | None,
        typer.Option(
            help="With --scale: keep the generated fabric and jobs files here (default: a "
            "temporary folder, removed after)."
        ),
    ] = None,
    json_path: JsonOption = None,
) -> None:
    """Run the scenario ladder: ECMP, greedy, c4p and the lower bound side by side."""
    from c4p.figures import ladder as scenario_ladder

    guarded(lambda: check_outputs(("-o", output, None), ("--plot", plot_path, (".png",))))
    if detect:
        guarded(lambda: _detect(quick, output, json_path))
        return
    if scale:
        guarded(lambda: _scale_ladder(max_gpus, work_dir, output, plot_path, json_path))
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


def _scale_ladder(
    max_gpus: int | None,
    work_dir: Path | None,
    output: Path | None,
    plot_path: Path | None,
    json_path: Any,
) -> None:
    import tempfile

    from c4p.figures import scale as scale_ladder

    full = max_gpus is None or max_gpus >= scale_ladder.RUNGS[-1]
    table = output or Path(
        "docs/benchmarks-scale-ladder.md" if full else f"out/bench-scale-{max_gpus}.md"
    )
    image = plot_path or table.with_name(table.stem + ".png")
    started = time.perf_counter()

    def progress(row: scale_ladder.ScaleRow) -> None:
        if json_path is None or str(json_path) != "-":
            again = "" if row.replan_s is None else f", re-plan {row.replan_s:.2f} s"
            moves = "" if row.moved is None else f", moved {row.moved} (bound {row.min_moves})"
            console.print(
                f"{row.fabric} {row.gpus:,} {row.case}: load {row.load_s:.2f} s, plan "
                f"{row.plan_s:.2f} s{again}, evaluate {row.evaluate_s:.2f} s, peak "
                f"{row.peak_mb:,.0f} MB, c4p {row.util_c4p:.2f} / bound {row.bound:.2f}{moves}",
                highlight=False,
            )

    with tempfile.TemporaryDirectory(prefix="c4p-scale-") as scratch:
        rows = scale_ladder.run(work_dir or Path(scratch), max_gpus, progress)
    command = "c4p bench --scale" + ("" if max_gpus is None else f" --max-gpus {max_gpus}")
    text = scale_ladder.markdown(rows, command, time.perf_counter() - started)
    text += f"\n![seconds per step and memory]({image.name})\n"
    write_text(table, "# Scale ladder\n\n" + text)
    try:
        scale_ladder.plot(rows, image)
        wrote = f"wrote {table}, {image}"
    except ImportError:  # matplotlib is an extra: c4p[plot] (or the dev install)
        wrote = f"wrote {table} (no plot: install c4p[plot] for {image.name})"
    emit(json_path, scale_ladder.rows_json(rows), lambda: console.print(wrote, highlight=False))


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
