"""Time source-port synthesis for 32k flows: 16,384-GPU rail-optimized fabric, one ring job over
every GPU (rail rings), 2 QPs per connection, paths round-robin over equal-cost paths.

Run: .venv/bin/python scripts/measure/measure_synthesis.py
"""

import sys
import time

from solver import JobsGenParams, flows_for_jobs, generate_jobs
from southbound import (
    PredictedPorts,
    bindings_for_paths,
    round_robin_paths,
    routes_from_flows,
    verify,
)
from southbound.ports import PortRequest
from southbound.routes import middle_of
from topology.generators import fat_tree, fat_tree_for_gpus, rail_optimized, rail_optimized_for_gpus


def run(name, fabric, placement):
    t = time.perf_counter()
    # contiguous: one job over every host (rail rings stay under their leaf but at unit edges);
    # fragmented: 64 jobs of 32 hosts scattered over the units (nearly every hop crosses spines).
    count = 1 if placement == "contiguous" else 64
    jobs = generate_jobs(
        fabric,
        JobsGenParams(
            jobs=count,
            hosts_per_job=len(fabric.hosts) // count,
            placement=placement,
            run=1,
            qps_per_connection=2,
        ),
    )
    flows = flows_for_jobs(fabric, jobs)
    paths = round_robin_paths(fabric, [(f.src, f.dst) for f in flows])
    routes = routes_from_flows(flows, paths)
    prep = time.perf_counter() - t
    index = fabric.index
    cross = sum(1 for p in paths if len(p) > 2)
    # 1. the search itself (every flow its own request, no dedupe)
    t = time.perf_counter()
    source = PredictedPorts(fabric)
    init = time.perf_counter() - t
    reqs = [
        PortRequest(index.node(f.src), index.node(f.dst), middle_of(p))
        for f, p in zip(flows, paths, strict=True)
    ]
    t = time.perf_counter()
    found = source.find(reqs)
    search = time.perf_counter() - t
    assert all(found)
    # 2. end to end: bindings (validated pydantic objects) for every flow
    t = time.perf_counter()
    bs = bindings_for_paths(fabric, routes, epoch=1, source=PredictedPorts(fabric))
    total = time.perf_counter() - t
    t = time.perf_counter()
    report = verify(fabric, bs, routes)
    check = time.perf_counter() - t
    print(
        f"{name} [{placement}]: {len(flows)} flows ({cross} cross-leaf), prep {prep:.2f}s; "
        f"PredictedPorts init {init * 1e3:.0f} ms, search {search:.2f}s; "
        f"bindings_for_paths end-to-end {total:.2f}s; verify {check:.2f}s "
        f"-> ok={report.ok} as_planned={report.as_planned} fallbacks={report.fallbacks}"
    )


rail = rail_optimized(rail_optimized_for_gpus(16384))
for placement in ("contiguous", "fragmented"):
    run("rail-optimized 16384 GPUs", rail, placement)
if "--fat" in sys.argv:
    ft = fat_tree(fat_tree_for_gpus(16384))
    run("fat-tree 16384 GPUs", ft, "fragmented")
