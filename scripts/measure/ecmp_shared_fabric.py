"""ECMP-predicted busbw when several ring jobs share a 2,048-GPU rail-optimized fabric.

Run: .venv/bin/python scripts/measure/ecmp_shared_fabric.py
"""

import statistics

from solver.workload.patterns import derive_workload
from solver.workload.placement import JobsGenParams, generate_jobs
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import evaluate
from topology.generators import sized_for_gpus

f = sized_for_gpus("rail-optimized", 2048)
for jobs_n, hosts, placement, qps in (
    (8, 32, "random", 1),
    (8, 32, "random", 2),
    (16, 16, "fragmented", 1),
    (16, 16, "fragmented", 2),
):
    vals, loads = [], []
    for seed in range(10):
        jobs = generate_jobs(
            f,
            JobsGenParams(
                jobs=jobs_n,
                hosts_per_job=hosts,
                placement=placement,
                qps_per_connection=qps,
                seed=seed,
            ),
        )
        w = derive_workload(f, jobs)
        ev = evaluate(f, w, ecmp_paths(f, w.flows, seed=seed).paths)
        vals.append(ev.min_busbw_fraction)
        loads.append(ev.max_link_load)
    print(
        f"{jobs_n} jobs x {hosts * 8} GPUs {placement:10s} qps={qps}: worst-job busbw median {statistics.median(vals):.3f} (min {min(vals):.3f}, max {max(vals):.3f}); max link load {min(loads):g}-{max(loads):g}"
    )
