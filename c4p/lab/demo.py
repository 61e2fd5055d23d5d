"""``c4p lab demo``: plans realized on a real Linux fabric, measured by kernel counters.

The steps (each a function, so that the probing and binding steps can later be switched to
``c4p serve`` + host agents without touching the rest):

1. lab up (static or BGP routing);
2. two jobs, planned by :func:`solver.plan`;
3. **learned**: probe the planned paths from the host namespaces (the real prober), bind from
   the learned table, send every QP's traffic, read which links it crossed;
4. **failure**: ``ip link set ... down`` on the most used spine link, invalidate the table,
   re-plan, re-probe what changed, bind again, traffic again, measure again;
5. **predicted**: bind the same plan from the hash model (what c4p did before probing) and
   measure: the mismatches are what probing is for.

Per phase: QPs, QPs on their planned path (by counters), the most QPs on one link planned and
measured, probes sent and lost, and seconds taken.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from c4p.lab.build import Lab, Routing
from c4p.lab.hosts import Helpers, NamespaceProber
from c4p.lab.traffic import Measurement, measure
from solver import JobsGenParams, flows_for_jobs, generate_jobs, plan
from solver.flows import Flow
from southbound.bindings import BindingSet, bindings_for_paths
from southbound.pathtable import PathTable
from southbound.probeplan import ProbePlanner, ProbeReport
from southbound.routes import QpRoute, routes_from_flows
from topology.generators import LeafSpineParams, leaf_spine
from topology.model import Fabric, LinkStatus


def small_fabric(leaves: int = 2, spines: int = 4, hosts_per_leaf: int = 4) -> Fabric:
    """The demo's default fabric: small enough for a laptop, wide enough to hash."""
    return leaf_spine(LeafSpineParams(leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf))


def two_jobs(fabric: Fabric, qps: int = 2) -> list[Flow]:
    """Two ring jobs scattered over the hosts (most rings cross the spines)."""
    params = JobsGenParams(
        jobs=2,
        hosts_per_job=len(fabric.hosts) // 2,
        placement="fragmented",
        run=1,
        qps_per_connection=qps,
    )
    return flows_for_jobs(fabric, generate_jobs(fabric, params))


def planned_routes(fabric: Fabric, flows: Sequence[Flow], budget: float = 2.0) -> list[QpRoute]:
    result = plan(fabric, flows, budget=budget)
    return routes_from_flows(result.flows, result.paths)


@dataclass
class Phase:
    """One phase of the demo, as the JSON reports it."""

    name: str
    qps: int
    on_planned_path: int
    max_link_qps_planned: int
    max_link_qps_measured: int
    probes_sent: int
    probe_packets: int
    probes_lost: int
    seconds: float
    notes: dict[str, Any] = field(default_factory=dict)


def learn(
    planner: ProbePlanner, prober: NamespaceProber, routes: Sequence[QpRoute]
) -> tuple[ProbeReport, int]:
    """Probe the planned paths of ``routes``; the report and the packets lost meanwhile."""
    lost = prober.stats.lost
    report = planner.cover_routes(routes)
    return report, prober.stats.lost - lost


def per_qp_and_link(lab: Lab, measured: Measurement) -> dict[str, Any]:
    """Planned vs measured per QP (the links it crossed) and per switch link (QPs on it)."""
    name = lab.fabric.index.resource_name
    return {
        "per_qp": [
            {
                "qp": q.id,
                "sport": q.sport,
                "on_plan": q.on_plan,
                "planned": [name(r) for r in q.planned],
                "measured": [name(r) for r in q.measured],
            }
            for q in measured.qps
        ],
        "per_link": {
            k: {"planned": p, "measured": m} for k, (p, m) in measured.switch_links(lab).items()
        },
    }


def phase(
    name: str,
    measured: Measurement,
    report: ProbeReport | None,
    lost: int,
    seconds: float,
    **notes: Any,
) -> Phase:
    return Phase(
        name=name,
        qps=len(measured.qps),
        on_planned_path=measured.on_plan,
        max_link_qps_planned=measured.max_planned,
        max_link_qps_measured=measured.max_measured,
        probes_sent=report.traces if report else 0,
        probe_packets=report.packets if report else 0,
        probes_lost=lost,
        seconds=round(seconds, 3),
        notes=notes,
    )


def busiest_spine_link(fabric: Fabric, routes: Sequence[QpRoute]) -> int:
    """The switch-to-switch link the most planned paths cross."""
    counts: dict[int, int] = {}
    index = fabric.index
    for r in routes:
        for res in r.path:
            if int(index.res_src[res]) < index.num_switches > int(index.res_dst[res]):
                counts[res // 2] = counts.get(res // 2, 0) + 1
    return max(sorted(counts), key=counts.__getitem__)


def run_demo(
    fabric: Fabric | None = None,
    *,
    routing: Routing = "static",
    privilege: str = "auto",
    rate: float | None = None,
) -> dict[str, Any]:
    """Run every phase (see the module docstring) and return the JSON-able result."""
    from southbound.pacing import DEFAULT_RATE

    phases: list[Phase] = []
    started = time.monotonic()
    with (
        Lab(fabric or small_fabric(2, 4, 8), routing=routing) as lab,
        Helpers(lab, privilege) as hosts,
    ):
        built = time.monotonic() - started
        t0 = time.monotonic()
        hosts.start_all()
        helpers_seconds = time.monotonic() - t0
        view = lab.fabric
        flows = two_jobs(view)
        routes = planned_routes(view, flows)
        prober = NamespaceProber(hosts, rate=rate or DEFAULT_RATE)
        table = PathTable(view)
        planner = ProbePlanner(table, prober)

        # Learned: per job, so that the probes each job costs are seen.
        t0 = time.monotonic()
        per_job: dict[str, int] = {}
        total = ProbeReport()
        lost = 0
        for job in sorted({r.job for r in routes}):
            report, job_lost = learn(planner, prober, [r for r in routes if r.job == job])
            per_job[job] = report.traces
            total.add(report)
            lost += job_lost
        learn_seconds = time.monotonic() - t0
        learned = bindings_for_paths(view, routes, 1, mode="learned", table=table)
        t1 = time.monotonic()
        measured = measure(lab, hosts, learned, routes)
        measure_seconds = time.monotonic() - t1
        keys = len({table.key_of(view.index.node(r.src), view.index.node(r.dst)) for r in routes})
        phases.append(
            phase(
                "learned",
                measured,
                total,
                lost,
                time.monotonic() - t0,
                probes_per_job=per_job,
                table_keys=keys,
                learn_seconds=round(learn_seconds, 3),
                traffic_seconds=round(measure_seconds, 3),
                privilege=prober.privilege,
                complete=total.complete,
                **per_qp_and_link(lab, measured),
            )
        )

        # A used spine link fails: event, re-probe, re-plan, new bindings.
        t0 = time.monotonic()
        link = busiest_spine_link(view, routes)
        lab.set_link(link, up=False)
        lab.wait_routes()
        after = view.with_link_status({link: LinkStatus.DOWN})
        invalidation = table.invalidate(after)
        lost_before = prober.stats.lost
        replanned = planned_routes(after, flows)
        report = planner.reprobe(invalidation)
        report.add(planner.cover_routes(replanned))
        rebound = bindings_for_paths(
            after, replanned, 2, mode="learned", table=table, previous=learned
        )
        measured = measure(lab, hosts, rebound, replanned)
        phases.append(
            phase(
                "link-failure",
                measured,
                report,
                prober.stats.lost - lost_before,
                time.monotonic() - t0,
                failed_link=view.links[link].id,
                stale_entries=len(invalidation.stale),
                black_holes=len(report.black_holes),
                **per_qp_and_link(lab, measured),
            )
        )

        # Predicted: the hash model's ports for the same plan.
        t0 = time.monotonic()
        predicted = bindings_for_paths(after, replanned, 3, mode="predicted")
        measured = measure(lab, hosts, predicted, replanned)
        phases.append(
            phase(
                "predicted",
                measured,
                None,
                0,
                time.monotonic() - t0,
                mismatches=len(measured.qps) - measured.on_plan,
                **per_qp_and_link(lab, measured),
            )
        )
    return {
        "routing": routing,
        "fabric": view.name,
        "lab_up_seconds": round(built, 3),
        "helpers_start_seconds": round(helpers_seconds, 3),
        "phases": [asdict(p) for p in phases],
    }


def render(result: dict[str, Any]) -> list[list[str]]:
    """Rows for a table: phase, QPs on plan, max link planned/measured, probes, lost, s."""
    rows = []
    for p in result["phases"]:
        rows.append(
            [
                p["name"],
                f"{p['on_planned_path']}/{p['qps']}",
                f"{p['max_link_qps_planned']}/{p['max_link_qps_measured']}",
                str(p["probes_sent"]),
                str(p["probes_lost"]),
                f"{p['seconds']:.1f}",
            ]
        )
    return rows


__all__ = ["BindingSet", "Phase", "render", "run_demo", "small_fabric", "two_jobs"]
