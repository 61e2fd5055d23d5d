"""Real probing in the Linux lab: probes and time to learn tables, and loss with/without pacing.

(a) Full tables: every cross-leaf NIC pair of a 2 leaves x 4 spines x 4 hosts lab, all 4 paths
    per pair (``ProbePlanner.cover``), at the default pacing (200 answers/s per switch): probes
    per NIC pair (= per key; Linux hashes the addresses) and per leaf pair, seconds.
(b) Two planned ring jobs, only their planned paths (``cover_routes``): probes per job.
(c) Loss: 400 single-TTL probes from one host through the spines, unpaced (one burst) and paced,
    one round each, against the kernel's default ICMP limit (1000/s, burst 50 per namespace)
    and a hardware-like one (100/s, burst 10).

Needs root. Run: .venv/bin/python scripts/measure/measure_lab_probing.py
"""

import time

from c4p.lab.build import Lab
from c4p.lab.demo import planned_routes, small_fabric, two_jobs
from c4p.lab.hosts import Helpers, NamespaceProber
from southbound.pathtable import PathTable
from southbound.probeplan import ProbePlanner
from southbound.probing import Probe

fabric = small_fabric(2, 4, 4)
with Lab(fabric) as lab, Helpers(lab) as helpers:
    view = lab.fabric
    index = view.index
    ports = [p for _, _, p in view.nic_ports()]
    leaf = {p.address: index.leaf_of(index.node_of_address[p.address]) for p in ports}
    pairs = [
        (index.node_of_address[a.address], index.node_of_address[b.address])
        for a in ports
        for b in ports
        if leaf[a.address] != leaf[b.address]
    ]
    prober = NamespaceProber(helpers)
    # Start every host's helper first (a Python start each), so that only probing is timed.
    prober.trace_many(
        [Probe(p.address, ports[-1 - i].address, 40000, 2, 2) for i, p in enumerate(ports[:8])]
    )
    prober.stats = type(prober.stats)()
    table = PathTable(view)
    t = time.perf_counter()
    report = ProbePlanner(table, prober).cover(pairs)
    seconds = time.perf_counter() - t
    print(
        f"(a) full tables: {len(pairs)} NIC pairs (2 leaf pairs), {report.traces} probes "
        f"= {report.traces / len(pairs):.2f} per NIC pair, {report.traces / 2:.0f} per leaf pair, "
        f"{report.rounds} rounds, {seconds:.2f} s, complete={report.complete}, "
        f"lost={prober.stats.lost}"
    )
    print(f"    prober stats: {prober.stats}")
    routes = planned_routes(view, two_jobs(view))
    table = PathTable(view)
    planner = ProbePlanner(table, prober)
    for job in sorted({r.job for r in routes}):
        mine = [r for r in routes if r.job == job]
        t = time.perf_counter()
        rep = planner.cover_routes(mine)
        print(
            f"(b) {job}: {len(mine)} QPs, {rep.traces} probes for its planned paths, "
            f"{time.perf_counter() - t:.2f} s"
        )

for limit in (None, (100, 10)):
    with Lab(fabric, icmp_limit=limit) as lab, Helpers(lab) as helpers:
        view = lab.fabric
        src = view.hosts[0].nics[0].ports[0].address
        dst = view.hosts[-1].nics[0].ports[0].address
        probes = [Probe(src, dst, 49152 + k, 2, 2) for k in range(400)]
        NamespaceProber(helpers).trace_many(probes[:1])  # start the helper first
        name = "kernel default 1000/s burst 50" if limit is None else "hardware-like 100/s burst 10"
        for label, rate, burst in (
            ("unpaced", None, 20.0),
            ("paced default", 200.0, 20.0),
            ("paced 50/s", 50.0, 5.0),
        ):
            prober = NamespaceProber(helpers, rate=rate, burst=burst, rounds=1)
            t = time.perf_counter()
            prober.trace_many(probes)
            print(
                f"(c) {name}, {label}: {prober.stats.first_round_lost}/{len(probes)} answers "
                f"lost, {time.perf_counter() - t:.2f} s"
            )
