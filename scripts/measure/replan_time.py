"""Re-plan time of one failure-ladder row, median of repeated ``plan()`` calls, in-process.

Why beside ``c4p bench --failures``: the ladder times each re-plan once, and on a shared
2-core machine one run of the same code varies by up to 50%. This repeats the re-plan (after
one warm-up call that pays for imports and caches) and prints the median wall and CPU
seconds and the flows moved. To compare two versions, run it with each checkout first on
the path, alternating:

    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python scripts/measure/replan_time.py \\
        --fabric fat-tree --gpus 4096 --failure "uplink (light)" --repeat 7

The inputs are the ladder's: ``sized_for_gpus`` fabric, a shuffled ring of two QPs per GPU
(``c4p.figures.ladder.permutation_jobs(2)``), the healthy plan, and the failure chosen from its loads
(``c4p.figures.failures.failures``).

With ``--cold`` the warm-up is left out and only the first re-plan is timed, as a controller
meets it right after a failure; run the command several times for its spread (3-tier 16,384
GPUs, light uplink: 0.29-0.32 s in eight cold runs, a 0.31 s warm median of nine).
"""

from __future__ import annotations

import argparse
import statistics
import time

from c4p.figures.failures import KINDS, failures
from c4p.figures.ladder import permutation_jobs
from solver.planner import plan
from solver.workload.patterns import derive_workload
from topology.generators import sized_for_gpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fabric", choices=("rail-optimized", "fat-tree"), required=True)
    parser.add_argument("--gpus", type=int, default=4096)
    parser.add_argument("--failure", choices=[k for k in KINDS if k != "restore"], required=True)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cold", action="store_true", help="time only the first re-plan")
    args = parser.parse_args()
    fabric = sized_for_gpus(args.fabric, args.gpus)
    _ = fabric.index.routing
    workload = derive_workload(fabric, permutation_jobs(2)(fabric))
    healthy = plan(fabric, workload, budget=10)
    snapshot = fabric.with_link_status(failures(fabric, healthy)[args.failure])
    _ = snapshot.index.routing  # as in the controller: the index is built before re-planning
    if not args.cold:
        plan(snapshot, workload, healthy, budget=10)
    walls, cpus, moved = [], [], 0
    for _ in range(1 if args.cold else max(1, args.repeat)):
        wall, cpu = time.perf_counter(), time.process_time()
        again = plan(snapshot, workload, healthy, budget=10)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        moved = len(again.moved)
    print(
        f"{args.fabric} {args.gpus} {args.failure}: re-plan wall {statistics.median(walls):.3f} s,"
        f" cpu {statistics.median(cpus):.3f} s ({'cold, first call' if args.cold else f'median of {len(walls)}'}), moved {moved}"
    )


if __name__ == "__main__":
    main()
