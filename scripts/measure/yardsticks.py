"""The yardsticks of ``c4p plan`` on one fabric and jobs file, phase by phase, in one process.

The ECMP baseline, the problem greedy and c4p share, the greedy baseline, and the evaluation
(max-min fair rates) of ECMP's paths and greedy's: CPU seconds (``time.process_time``, what a
shared machine's load moves least) and wall seconds each, and a digest of every path, rate and
figure, so that two checkouts run on the same files can be compared for identical results:

    .venv/bin/python scripts/measure/yardsticks.py FABRIC JOBS [--fail LINK ...]
    env PYTHONPATH=OTHER_CHECKOUT .venv/bin/python scripts/measure/yardsticks.py FABRIC JOBS

(run it from outside the checkout when using PYTHONPATH: ``python`` puts the script's folder
first on ``sys.path``, not the working directory, so either works for c4p's own packages).
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from c4p.cli.plan import apply_link_changes
from c4p.files import load_fabric, load_model
from solver.planner import flow_weights, plan
from solver.space.problem import build_problem
from solver.workload.jobs import JobsFile
from solver.workload.patterns import derive_workload
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import evaluate

T = TypeVar("T")


def clock(name: str, work: Callable[[], T]) -> T:
    cpu, wall = time.process_time(), time.perf_counter()
    result = work()
    print(
        f"{name}: cpu {time.process_time() - cpu:.2f} s, wall {time.perf_counter() - wall:.2f} s",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fabric", type=Path)
    parser.add_argument("jobs", type=Path)
    parser.add_argument("--fail", action="append", default=[], help="A link down (repeatable).")
    args = parser.parse_args()
    fabric = apply_link_changes(load_fabric(args.fabric), args.fail, [])
    workload = derive_workload(fabric, load_model(JobsFile, args.jobs), str(args.jobs))
    ecmp = clock("ecmp", lambda: ecmp_paths(fabric, workload.flows, seed=0))
    shared = clock("problem", lambda: build_problem(fabric, *flow_weights(workload)))
    greedy = clock(
        "greedy", lambda: plan(fabric, workload, strategy="greedy", seed=0, problem=shared)
    )
    on_ecmp = clock("evaluate ecmp", lambda: evaluate(fabric, workload, ecmp.paths))
    on_greedy = clock("evaluate greedy", lambda: evaluate(fabric, workload, greedy.paths))
    digest = hashlib.sha256()
    for part in (ecmp.paths, greedy.paths, on_ecmp.to_dict(pairs=True),
                 on_greedy.to_dict(pairs=True)):  # fmt: skip
        digest.update(repr(part).encode())
    for rates in (on_ecmp.flow_rates_gbps, on_greedy.flow_rates_gbps):
        digest.update(rates.tobytes())
    print("digest", digest.hexdigest())


if __name__ == "__main__":
    main()
