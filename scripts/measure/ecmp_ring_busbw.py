"""ECMP-predicted busbw of one 2,048-GPU rail ring job, by placement and QPs (seeds 0-9).

Run: .venv/bin/python scripts/measure/ecmp_ring_busbw.py
"""

import statistics

from solver.workload.patterns import derive_workload
from solver.workload.placement import JobsGenParams, generate_jobs
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import evaluate
from topology.generators import sized_for_gpus

for fabric_gpus in (2048, 8192):
    f = sized_for_gpus("rail-optimized", fabric_gpus)
    for placement in ("contiguous", "random", "fragmented"):
        if fabric_gpus == 2048 and placement != "contiguous":
            continue
        for qps in (1, 2):
            vals = []
            loads = []
            for seed in range(10):
                jobs = generate_jobs(
                    f,
                    JobsGenParams(
                        jobs=1,
                        hosts_per_job=256,
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
                f"fabric {fabric_gpus} GPUs, {placement:10s} qps={qps}: busbw median {statistics.median(vals):.3f} min {min(vals):.3f} max {max(vals):.3f}; max link load {min(loads):g}-{max(loads):g}"
            )
