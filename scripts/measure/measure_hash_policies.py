"""The lab under Linux's multipath hash policies 0, 1 and 3, read from kernel counters.

Per policy (2 leaves x 4 spines x 8 hosts, static routes, IPv4; and policy 1 on an IPv6-only
lab): the spine one cross-leaf 5-tuple took from 8 fresh *connected* sockets and from 8 fresh
*unconnected* ones (``sendto``); then the two ring jobs of ``c4p lab demo`` (2 QPs per
connection) learned by the real prober through ``ProbePlanner`` (a budget of 300 traces), bound,
and every QP's traffic sent: QPs on their planned path by counters, QPs bound at all, and the
probes per learned table entry.

Run (root): .venv/bin/python scripts/measure/measure_hash_policies.py
"""

from __future__ import annotations

from c4p.lab.build import Lab
from c4p.lab.demo import planned_routes, small_fabric, two_jobs
from c4p.lab.hosts import Helpers, NamespaceProber, TwinProber
from c4p.lab.traffic import measure, read_counters
from southbound.bindings import bindings_for_paths
from southbound.pathtable import Outcome, PathTable
from southbound.probeplan import ProbePlanner
from southbound.probing import Prober


def spines(lab: Lab, helpers: Helpers, connected: bool) -> list[str]:
    view = lab.fabric
    src = lab.address(view.hosts[0].nics[0].ports[0].address)
    dst = lab.address(view.hosts[-1].nics[0].ports[0].address)
    spine_of = {lab.ns(s): s[-2:] for s in lab.plan.switches if s.startswith("spine")}
    out = []
    for _ in range(8):
        before = read_counters(lab)
        sent = helpers.send(src, 0xC4C4, dst, 100, connected=connected)
        after = read_counters(lab)
        hit = sorted(
            {
                spine_of[ns]
                for (ns, i), n in after.items()
                if ns in spine_of and n - before.get((ns, i), 0) >= sent
            }
        )
        out.append("+".join(hit) or "-")
    return out


def run(policy: int, family: int) -> None:
    with Lab(small_fabric(), hash_policy=policy, family=family) as lab, Helpers(lab) as helpers:
        print(f"policy {policy}, IPv{family}")
        print("  connected sockets, spine per socket:  ", " ".join(spines(lab, helpers, True)))
        print("  unconnected sendto, spine per socket: ", " ".join(spines(lab, helpers, False)))
        view = lab.fabric
        routes = planned_routes(view, two_jobs(view))
        table = PathTable(view)
        inner = NamespaceProber(helpers)
        prober: Prober = inner if family == 4 else TwinProber(inner)
        report = ProbePlanner(table, prober).cover_routes(routes, budget=300)
        entries, probes = table.confirmation()
        bindings = bindings_for_paths(view, routes, 1, mode="learned", table=table)
        m = measure(lab, helpers, bindings, routes)
        cross = sum(len(r.path) > 2 for r in routes)
        print(
            f"  learned: {m.on_plan}/{len(routes)} QPs on plan by counters ({cross} cross-leaf), "
            f"{len(bindings.bindings)} bound, {len(bindings.fallbacks)} fallback, "
            f"{len(bindings.unbound)} unbound; {report.traces} traces, "
            f"{entries} learned entries, {probes / max(1, entries):.2f} probes per entry, "
            f"{report.outcomes[Outcome.UNSTABLE]} unstable"
        )


if __name__ == "__main__":
    for policy in (0, 1, 3):
        run(policy, 4)
    run(1, 6)
