"""Where each second of one ``c4p plan`` goes: CPU and wall seconds per step, in one process.

``c4p plan --timings`` gives wall seconds per phase; on a shared machine wall time is mostly
the other users' load. This runs the same command (``c4p plan ARGS...``, the real command body)
with the functions it calls wrapped to add up CPU seconds (``time.process_time``) and wall
seconds each, finer than its phases: the fabric's validation (pydantic and the fabric index it
builds) apart from the jobs' and the workload's derivation, the shared problem apart from the
greedy placement, the plan's JSON text apart from writing it.

    .venv/bin/python scripts/measure/plan_seconds.py --fabric F --jobs J -o plan.json [...]

Steps not listed (argument checks, the report's tables, the interpreter's start) fall in
``other``; ``imports`` is the import of ``c4p.cli.plan`` and what it imports.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import time
from collections.abc import Callable
from typing import Any

STEPS: dict[str, list[float]] = {}


def _wrap(module: Any, name: str, label: Callable[..., str]) -> None:
    inner = getattr(module, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seen = STEPS.setdefault(label(*args, **kwargs), [0.0, 0.0])
            seen[0] += time.process_time() - cpu
            seen[1] += time.perf_counter() - wall

    setattr(module, name, timed)


def main() -> None:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    from c4p.cli import _one_blas_thread, build_app, run

    _one_blas_thread()  # as c4p's own entry point runs a one-shot command
    gc.disable()
    app = build_app("plan")
    import c4p.cli.plan as cmd

    STEPS["imports"] = [time.process_time() - cpu0, time.perf_counter() - wall0]
    _wrap(cmd, "load_data", lambda path: f"read + parse {path.suffix}")
    _wrap(cmd, "model_from_data", lambda cls, data, path: f"validate {cls.__name__}")
    _wrap(cmd, "derive_workload", lambda *a, **k: "derive the workload")
    _wrap(cmd, "balance_workload", lambda *a, **k: "balance")
    _wrap(cmd, "ecmp_paths", lambda *a, **k: "ECMP baseline")
    _wrap(cmd, "build_problem", lambda *a, **k: "the shared problem")
    _wrap(cmd, "plan", lambda *a, strategy="auto", **k: f"plan ({strategy})")
    _wrap(cmd, "plan_json_text", lambda *a, **k: "plan JSON text")
    _wrap(cmd, "write_text", lambda *a, **k: "write the plan file")
    _wrap(cmd, "evaluate", lambda *a, **k: "evaluate (ECMP, c4p)")
    _wrap(cmd.views, "plan_json", lambda *a, **k: "figures")
    _wrap(cmd, "emit", lambda *a, **k: "report")
    code = run(app, ["plan", *sys.argv[1:]])
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    listed = [0.0, 0.0]
    print(f"{'step':<28} {'CPU s':>7} {'wall s':>7}", file=sys.stderr)
    for name, (c, w) in STEPS.items():
        listed[0] += c
        listed[1] += w
        print(f"{name:<28} {c:7.2f} {w:7.2f}", file=sys.stderr)
    print(f"{'other':<28} {cpu - listed[0]:7.2f} {wall - listed[1]:7.2f}", file=sys.stderr)
    print(f"{'total':<28} {cpu:7.2f} {wall:7.2f}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as c4p ends a one-shot command: no teardown of the heap object by object


if __name__ == "__main__":
    main()
