"""Probes needed to learn the sport -> path tables of a 2,048-GPU rail-optimized fabric.

(a) the NIC pairs of one 2,048-GPU ring job (rail rings, 1 and 2 QPs make the same pairs), per NIC
    pair (the default hashes include the addresses), contiguous placement, and a fragmented one
    (16 jobs x 16 hosts scattered over the units, so nearly every ring hop crosses the spines);
(b) all ordered leaf pairs, per leaf pair, on the same fabric with hashes that ignore the
    addresses (fields protocol, ports), after detect_scope has found that out.
Each learned table is then used to bind the job and verified in the prober's (hidden) fabric.

Run: .venv/bin/python scripts/measure/measure_probes.py
"""

import time

from solver import JobsGenParams, flows_for_jobs, generate_jobs
from southbound import (
    ConfidenceRule,
    ModeledProber,
    PathTable,
    ProbePlanner,
    Scope,
    bindings_for_paths,
    detect_scope,
    round_robin_paths,
    routes_from_flows,
    verify,
)
from topology.generators import HashProfiles, rail_optimized, rail_optimized_for_gpus
from topology.model import HashProfile


def learn(fabric, flows, label, scope=Scope.PAIR, keys=None, rule=None, loss=0.0):
    index = fabric.index
    prober = ModeledProber(fabric, loss=loss, seed=1)  # the table only ever sees the topology
    table = PathTable(fabric.model_copy(), scope, rule)
    planner = ProbePlanner(table, prober)
    t = time.perf_counter()
    if keys is None:
        pairs = sorted({(index.node(f.src), index.node(f.dst)) for f in flows})
        report = planner.cover(pairs)
    else:
        report = planner.cover(keys=keys)
    dt = time.perf_counter() - t
    learnt = report.keys - report.trivial - len(report.unreachable)
    print(
        f"{label}: {report.keys} keys ({report.trivial} on one leaf, {learnt} to learn): "
        f"{report.traces} probes = {report.packets} packets in {report.rounds} rounds "
        f"({report.traces / max(learnt, 1):.1f} probes per key), complete={report.complete}, "
        f"{dt:.1f}s"
    )
    if flows:
        routes = routes_from_flows(
            flows, round_robin_paths(fabric, [(f.src, f.dst) for f in flows])
        )
        bs = bindings_for_paths(fabric, routes, 1, mode="learned", table=table)
        v = verify(fabric, bs, routes)
        print(
            f"   bound {len(bs.bindings)} QPs from the table: ok={v.ok} as_planned={v.as_planned}"
        )
    return report


fabric = rail_optimized(rail_optimized_for_gpus(2048))
print(fabric.description)
ring = flows_for_jobs(
    fabric, generate_jobs(fabric, JobsGenParams(jobs=1, hosts_per_job=256, qps_per_connection=2))
)
learn(fabric, ring, "(a) one 2,048-GPU ring job, contiguous, per NIC pair")
learn(fabric, ring, "(a2) same, confidence 2 probes/port, 2 ports/path", rule=ConfidenceRule(2, 2))
learn(fabric, ring, "(a3) same, 10% of ICMP answers lost", loss=0.1)
routes = routes_from_flows(ring, round_robin_paths(fabric, [(f.src, f.dst) for f in ring]))
t4 = PathTable(fabric)
r4 = ProbePlanner(t4, ModeledProber(fabric)).cover_routes(routes)
v4 = verify(fabric, bindings_for_paths(fabric, routes, 1, mode="learned", table=t4), routes)
print(
    f"(a4) same ring, only its planned paths (2 QPs/connection): {r4.traces} probes = {r4.packets} packets "
    f"in {r4.rounds} rounds; bound+verified as planned: {v4.as_planned}"
)
frag = flows_for_jobs(
    fabric,
    generate_jobs(
        fabric,
        JobsGenParams(
            jobs=16, hosts_per_job=16, placement="fragmented", run=1, qps_per_connection=2
        ),
    ),
)
learn(fabric, frag, "(a') 16 ring jobs of 128 GPUs, fragmented, per NIC pair")

blind = HashProfiles(
    leaf=HashProfile(algorithm="crc16-bisync", seed=1, fields=("protocol", "src-port", "dst-port")),
    spine=HashProfile(algorithm="crc32-lo", seed=2, fields=("protocol", "src-port", "dst-port")),
)
fabric2 = rail_optimized(rail_optimized_for_gpus(2048, hash_profiles=blind))
ev = detect_scope(fabric2, ModeledProber(fabric2))
ev0 = detect_scope(fabric, ModeledProber(fabric))
print(
    f"detect_scope: default hashes -> {ev0.scope} ({ev0.disagreements} disagreements in {ev0.traces} probes); "
    f"address-blind hashes -> {ev.scope} ({ev.disagreements} in {ev.traces} probes)"
)
table = PathTable(fabric2, Scope.LEAF_PAIR)
keys = table.leaf_pair_keys()
learn(
    fabric2, ring, "(b) all leaf pairs, per leaf pair (address-blind hashes)", Scope.LEAF_PAIR, keys
)
