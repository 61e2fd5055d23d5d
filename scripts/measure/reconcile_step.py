"""Measure: CPU seconds of each part of a reconcile step, in process (no gRPC): the fabric file
of ``service_scale.py``, its jobs (2,048-rank rings, 2 QPs a connection, hosts shuffled with
seed 0), one plan step, then a drain of the same link, each part timed by wrapping it.

    .venv/bin/python -P scripts/measure/reconcile_step.py --gpus 131072 --jobs 64
    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python -P scripts/measure/reconcile_step.py ...

Why: the service figures are end to end and noisy on a shared machine; this says where a
step's CPU goes (bindings, predictions, planner, diff, commit) and what the binding cache
reused. ``-P`` keeps the current directory off ``sys.path`` so PYTHONPATH decides the code.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import c4p.controller.reconcile as rc
import southbound.incremental as inc
from c4p.controller import (
    ControllerState,
    FlapSettings,
    Intake,
    IntakeLimits,
    Key,
    KeyKind,
    PlannerSettings,
    Reconciler,
)
from c4p.files import load_fabric
from c4p.store import SqliteStore

FAIL = {131_072: "spine-p086-15--core-0488", 16_384: "spine-p00-00--core-0000"}
SPENT: dict[str, float] = {}


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name] = SPENT.get(name, 0.0) + time.process_time() - started

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=16_384, choices=sorted(FAIL))
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=Path("/work/scratch/svc"))
    args = parser.parse_args()
    inc.bindings_for_paths = timed("synthesised", inc.bindings_for_paths)  # type: ignore[assignment]
    inc.IncrementalBindings.synthesize = timed("bindings", inc.IncrementalBindings.synthesize)  # type: ignore[method-assign]
    inc._merge = timed("reused, assembled", inc._merge)  # type: ignore[assignment]
    for name in ("predict", "diff_bindings", "plan", "derive_workload"):
        setattr(rc, name, timed(name, getattr(rc, name)))
    rc.Reconciler._ecmp_paths = timed("ecmp", rc.Reconciler._ecmp_paths)  # type: ignore[method-assign]
    rc.ControllerState.commit = timed("commit", rc.ControllerState.commit)  # type: ignore[method-assign]
    fabric = load_fabric(args.dir / f"fat-tree-{args.gpus}.json")
    now = [1000.0]
    store = SqliteStore(":memory:")
    state = ControllerState(fabric, store.load(), FlapSettings(), now[0], predicted_ports=True)
    intake = Intake(state, store, IntakeLimits(), lambda: now[0])
    reconciler = Reconciler(state, store, PlannerSettings(budget_s=2.0))
    hosts = [h.name for h in fabric.hosts]
    random.Random(0).shuffle(hosts)
    per = 2048 // len(fabric.hosts[0].nics)
    ring = [{"id": "dp", "version": 1, "pattern": "ring", "qps_per_connection": 2}]
    for j in range(args.jobs):
        done = intake.register({"job_id": f"job-{j:02d}", "hosts": hosts[j * per : (j + 1) * per]})
        intake.submit(f"job-{j:02d}", done.record.incarnation, ring, [])
    link = FAIL[args.gpus]
    for name in ("plan", "drain"):
        keys = (Key(KeyKind.JOB, "measure"),)
        if name == "drain":
            intake.drain(link, "measure")
            now[0] += 1
            keys = (Key(KeyKind.DRAIN, intake.link_id(link)),)
        SPENT.clear()
        started = time.process_time()
        reconciler.step(now[0], keys)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in SPENT.items())
        print(
            f"{name} step: {time.process_time() - started:.2f} CPU s ({parts}); {reconciler._bindings.stats}"
        )


if __name__ == "__main__":
    main()
