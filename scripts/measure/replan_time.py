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

With ``--files FABRIC JOBS --link NAME`` the fabric and jobs are read from files (as ``c4p
plan`` reads them) and the named link goes down instead, e.g. issue 31's 131,072-GPU case:

    .venv/bin/python scripts/measure/replan_time.py --files ft131k.json shuf131k.json \\
        --link spine-p086-15--core-0488 --budget 60 --cold

With ``--cold`` the warm-up is left out and only the first re-plan is timed, as a controller
meets it right after a failure; run the command several times for its spread (3-tier 16,384
GPUs, light uplink: 0.29-0.32 s in eight cold runs, a 0.31 s warm median of nine).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from c4p.cli.plan import apply_link_changes
from c4p.figures.failures import KINDS, failures
from c4p.figures.ladder import permutation_jobs
from c4p.files import load_fabric, load_model
from solver.planner import plan
from solver.workload.jobs import JobsFile
from solver.workload.patterns import derive_workload
from topology.generators import sized_for_gpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fabric", choices=("rail-optimized", "fat-tree"))
    parser.add_argument("--gpus", type=int, default=4096)
    parser.add_argument("--failure", choices=[k for k in KINDS if k != "restore"])
    parser.add_argument("--files", nargs=2, type=Path, metavar=("FABRIC", "JOBS"))
    parser.add_argument("--link", help="with --files: the link that goes down ('a--b')")
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cold", action="store_true", help="time only the first re-plan")
    args = parser.parse_args()
    if args.files:
        if not args.link:
            parser.error("--files needs --link")
        fabric = load_fabric(args.files[0])
        jobs = load_model(JobsFile, args.files[1])
        workload = derive_workload(fabric, jobs, str(args.files[1]))
        label = f"{args.files[0].name} {args.link}"
    else:
        if not (args.fabric and args.failure):
            parser.error("give --fabric and --failure, or --files and --link")
        fabric = sized_for_gpus(args.fabric, args.gpus)
        workload = derive_workload(fabric, permutation_jobs(2)(fabric))
        label = f"{args.fabric} {args.gpus} {args.failure}"
    _ = fabric.index.routing
    healthy = plan(fabric, workload, budget=args.budget)
    if args.files:
        snapshot = apply_link_changes(fabric, [args.link], [])
    else:
        snapshot = fabric.with_link_status(failures(fabric, healthy)[args.failure])
    _ = snapshot.index.routing  # as in the controller: the index is built before re-planning
    if not args.cold:
        plan(snapshot, workload, healthy, budget=args.budget)
    walls, cpus = [], []
    for _ in range(1 if args.cold else max(1, args.repeat)):
        wall, cpu = time.perf_counter(), time.process_time()
        again = plan(snapshot, workload, healthy, budget=args.budget)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    methods = sorted({p.method for p in again.parts if p.method != "kept"})
    print(
        f"{label}: re-plan wall {statistics.median(walls):.3f} s,"
        f" cpu {statistics.median(cpus):.3f} s ({'cold, first call' if args.cold else f'median of {len(walls)}'}),"
        f" max utilization {again.objective.max_utilization:.2f} (bound {again.bounds.best:.2f}),"
        f" moved {len(again.moved)} (at least {again.min_moves}), by {', '.join(methods) or 'kept'}"
    )


if __name__ == "__main__":
    main()
