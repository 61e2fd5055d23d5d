"""The proof at 4,096 GPUs on every generated fabric kind, predicted and learned, and after a
link failure (invalidate, re-probe exactly the stale entries, re-derive bindings).

Workload: 8 ring jobs of 64 hosts (512 GPUs) each, placed fragmented (run 1) so that nearly
every ring hop crosses the spines (and cores), 2 QPs per connection; on dual-plane the flows are
dual-port balanced first (southbound.balance). Paths: round-robin over the equal-cost paths.
Predicted: ports from the fabric's own hash model, verified in that fabric.
Learned: the table is given the topology with *default* hashes; the prober and verification use
a fabric whose hashes are different (secret) -- predicted ports would be wrong there.

Run: .venv/bin/python scripts/measure/proof_4096.py [gpus]
"""

import sys
import time

from solver import JobsGenParams, flows_for_jobs, generate_jobs
from southbound import (
    ModeledProber,
    PathTable,
    ProbePlanner,
    QpRoute,
    bindings_for_paths,
    diff_bindings,
    rebalanced,
    round_robin_paths,
    routes_from_flows,
    verify,
)
from topology.generators import HashProfiles, sized_for_gpus
from topology.model import HashProfile, LinkStatus

GPUS = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
SECRET = HashProfiles(
    leaf=HashProfile(algorithm="crc32-hi", seed=0x5EC2E7),
    spine=HashProfile(algorithm="crc16-ccitt", seed=991),
    core=HashProfile(algorithm="xor-fold", seed=0xBEEF),
)


def replan(fabric, routes):
    index = fabric.index
    fresh = round_robin_paths(fabric, [(r.src, r.dst) for r in routes])
    out = []
    for r, alt in zip(routes, fresh, strict=True):
        keep = r.path and index.routing.is_equal_cost_path(
            index.node(r.src), index.node(r.dst), r.path
        )
        out.append(
            QpRoute(
                r.job,
                r.communicator,
                r.connection,
                r.qp,
                r.src,
                r.dst,
                r.path if keep else alt,
                r.rate,
            )
        )
    return out


def line(tag, report, extra=""):
    print(
        f"  {tag:<34} QPs {report.checked:>6}  realized==bound {report.realized_as_bound:>6}  "
        f"bound==planned {report.bound_as_planned:>6}  links differing {report.differing_links}  "
        f"-> {'AS PLANNED' if report.as_planned else 'ok' if report.ok else 'FAILED'} {extra}"
    )
    return report.as_planned


all_ok = True
for kind in ("leaf-spine", "rail-optimized", "fat-tree", "dual-plane"):
    t0 = time.perf_counter()
    public = sized_for_gpus(kind, GPUS)
    truth = sized_for_gpus(kind, GPUS, hash_profiles=SECRET)
    hosts = len(public.hosts)
    jobs = generate_jobs(
        public,
        JobsGenParams(
            jobs=8, hosts_per_job=hosts // 8, placement="fragmented", run=1, qps_per_connection=2
        ),
    )
    flows = flows_for_jobs(public, jobs)
    if kind == "dual-plane":
        flows = rebalanced(public, flows)
    routes = routes_from_flows(flows, round_robin_paths(public, [(f.src, f.dst) for f in flows]))
    index = public.index
    cross = sum(len(r.path) > 2 for r in routes)
    print(
        f"{public.name}: {public.description}\n  {len(routes)} QPs ({cross} cross-leaf), setup {time.perf_counter() - t0:.1f}s"
    )
    t = time.perf_counter()
    predicted = bindings_for_paths(public, routes, epoch=1)
    dt = time.perf_counter() - t
    all_ok &= line("predicted (own hashes)", verify(public, predicted, routes), f"[{dt:.2f}s]")
    wrong = verify(truth, predicted, routes)
    print(
        f"  {'predicted, secret-hash fabric':<34} realized==bound {wrong.realized_as_bound}/{wrong.checked} (expected to fail: model is wrong)"
    )
    table = PathTable(public)
    prober = ModeledProber(truth)
    planner = ProbePlanner(table, prober)
    pairs = [(index.node(r.src), index.node(r.dst)) for r in routes]
    t = time.perf_counter()
    probes = planner.cover(pairs)
    dt = time.perf_counter() - t
    learned = bindings_for_paths(public, routes, epoch=1, mode="learned", table=table)
    targeted_table = PathTable(public)
    targeted = ProbePlanner(targeted_table, ModeledProber(truth)).cover_routes(routes)
    tb = bindings_for_paths(public, routes, epoch=1, mode="learned", table=targeted_table)
    all_ok &= line(
        "learned, planned paths only",
        verify(truth, tb, routes),
        f"[{targeted.traces} probes, {targeted.packets} packets]",
    )
    all_ok &= line(
        "learned (secret hashes)",
        verify(truth, learned, routes),
        f"[{probes.traces} probes, {probes.packets} packets, {dt:.1f}s]",
    )
    # Fail the busiest switch-to-switch link.
    counts = {}
    for r in routes:
        for res in r.path[1:-1]:
            counts[res // 2] = counts.get(res // 2, 0) + 1
    link = max(sorted(counts), key=counts.__getitem__)
    view, real = (f.with_link_status({link: LinkStatus.DOWN}) for f in (public, truth))
    prober.set_fabric(real)
    stale_before = verify(real, learned)
    t = time.perf_counter()
    inv = table.invalidate(view)
    rep = planner.reprobe(inv)
    replanned = replan(view, routes)
    again = bindings_for_paths(
        view, replanned, epoch=2, mode="learned", table=table, previous=learned
    )
    dt = time.perf_counter() - t
    diff = diff_bindings(learned, again)
    entries = sum(len(table.entries(k)) for k in table.known_keys())
    print(
        f"  link {public.links[link].id} down ({counts[link]} planned QPs on it): old bindings wrong for "
        f"{len(stale_before.mismatches)} QPs; {len(inv.changed_groups)} groups changed, "
        f"{len(inv.stale)}/{entries} entries stale, {rep.reprobed} re-probed ({rep.moved} moved, "
        f"{rep.settled} settled), {rep.traces} probes incl. coverage; push {len(diff.to_push)} "
        f"changed bindings, {diff.unchanged} unchanged [{dt:.2f}s]"
    )
    all_ok &= line("learned after failure", verify(real, again, replanned))
    predicted2 = bindings_for_paths(view, replanned, epoch=2, previous=predicted)
    d2 = diff_bindings(predicted, predicted2)
    all_ok &= line(
        "predicted after failure", verify(view, predicted2, replanned), f"[push {len(d2.to_push)}]"
    )
print("PROOF HOLDS" if all_ok else "PROOF FAILED")
