"""How the CLI shows results: rich tables for people, plain dicts for ``--json``.

Why separate from ``cli``: the demo, ``c4p evaluate`` and (later) ``c4p plan`` show the same
figures the same way, and tests check the JSON without parsing tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from solver.planning.result import Plan
from solver.workload.flows import Flow
from solver.workload.jobs import JobsFile
from solver.yardstick.evaluate import Evaluation
from topology.model import Fabric

if TYPE_CHECKING:  # networkx is a tenth of a second to import, and plan never needs it
    from topology.analysis import FabricSummary


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


# -- fabrics --------------------------------------------------------------------------------


def summary_json(summary: FabricSummary) -> dict[str, Any]:
    data = asdict(summary)
    data["nic_speeds_gbps"] = {str(k): v for k, v in summary.nic_speeds_gbps.items()}
    data["bisection_ratio"] = summary.bisection_ratio
    return data


def print_summary(console: Console, summary: FabricSummary) -> None:
    roles = ", ".join(f"{n} {role}" for role, n in summary.switches_by_role.items())
    speeds = ", ".join(f"{n} x {s:g}G" for s, n in sorted(summary.nic_speeds_gbps.items()))
    status = ", ".join(f"{n} {s}" for s, n in sorted(summary.links_by_status.items()))
    console.print(f"[bold]fabric {summary.name}[/]")
    console.print(
        f"  switches: {roles}   planes: {summary.planes}\n"
        f"  hosts: {summary.hosts}   NICs: {summary.nics}   NIC ports: {summary.nic_ports}"
        f" ({speeds})\n"
        f"  links: {summary.links} ({status})"
    )
    table = Table(title="oversubscription per tier (down / up capacity)", title_justify="left")
    table.add_column("tier")
    table.add_column("switches", justify="right")
    table.add_column("min", justify="right")
    table.add_column("max", justify="right")
    for tier in summary.tiers:
        top = tier.oversubscription_max == 0.0
        table.add_row(
            tier.role,
            str(tier.switches),
            "top tier" if top else f"{tier.oversubscription_min:.2f}:1",
            "" if top else f"{tier.oversubscription_max:.2f}:1",
        )
    console.print(table)
    console.print(
        f"  bisection bandwidth: {summary.bisection_gbps / 1000:,.2f} Tb/s"
        f" ({_pct(summary.bisection_ratio)} of half the host bandwidth,"
        f" {summary.host_bandwidth_gbps / 2000:,.2f} Tb/s)"
    )


# -- jobs -----------------------------------------------------------------------------------


def jobs_json(jobs: JobsFile, flows: Sequence[Flow]) -> dict[str, Any]:
    per_job: dict[str, int] = {}
    for flow in flows:
        per_job[flow.job] = per_job.get(flow.job, 0) + 1
    return {
        "jobs": [
            {
                "id": job.id,
                "priority": job.priority,
                "hosts": list(job.hosts or ()),
                "communicators": [c.id for c in job.communicators],
                "flows": per_job.get(job.id, 0),
            }
            for job in jobs.jobs
        ],
        "flows": len(flows),
    }


def print_jobs(console: Console, jobs: JobsFile, flows: Sequence[Flow]) -> None:
    data = jobs_json(jobs, flows)
    table = Table(title=f"{len(jobs.jobs)} job(s), {len(flows)} flows (QPs)", title_justify="left")
    for name in ("job", "hosts", "communicators", "flows"):
        table.add_column(name, justify="left" if name == "job" else "right")
    for job in data["jobs"]:
        table.add_row(job["id"], str(len(job["hosts"])), str(len(job["communicators"])),
                      str(job["flows"]))  # fmt: skip
    console.print(table)


# -- evaluations ----------------------------------------------------------------------------


def evaluation_json(results: Mapping[str, Evaluation]) -> dict[str, Any]:
    return {name: ev.to_dict() for name, ev in results.items()}


def print_evaluations(console: Console, fabric: Fabric, results: Mapping[str, Evaluation]) -> None:
    """One table per job across the named evaluations, then the fabric's worst links."""
    names = list(results)
    first = results[names[0]]
    table = Table(
        title="per job: slowest connection and predicted bus bandwidth (per NIC)",
        title_justify="left",
    )
    table.add_column("job")
    table.add_column("flows", justify="right")
    table.add_column("line Gb/s", justify="right")
    for name in names:
        table.add_column(f"{name} slowest Gb/s", justify="right")
        table.add_column(f"{name} busbw", justify="right")
    rows = {name: {j.job: j for j in ev.jobs} for name, ev in results.items()}
    for job in first.jobs:
        cells = [job.job, str(job.flows), _gbps(job.line_rate_gbps)]
        for name in names:
            result = rows[name][job.job]
            cells += [_gbps(result.slowest_rate_gbps), _pct(result.busbw_fraction)]
        table.add_row(*cells)
    console.print(table)

    fabric_table = Table(title=f"fabric {fabric.name}", title_justify="left")
    fabric_table.add_column("")
    for name in names:
        fabric_table.add_column(name, justify="right")
    fabric_table.add_row(
        "max flows on a link (load)", *[f"{results[n].max_link_load:g}" for n in names]
    )
    fabric_table.add_row(
        "max link utilization", *[f"{results[n].max_link_utilization:.2f}" for n in names]
    )
    fabric_table.add_row(
        "links asked for more than line rate",
        *[str(results[n].links_over_capacity) for n in names],
    )
    fabric_table.add_row("unreachable flows", *[str(len(results[n].unreachable)) for n in names])
    console.print(fabric_table)
    for name in names:
        hot = results[name].hottest[:3]
        if hot and hot[0].utilization > 1.0:
            shown = ", ".join(f"{h.name} ({h.load:g})" for h in hot)
            console.print(f"  {name}: busiest links {shown}", highlight=False)


# -- plans ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanComparison:
    """One planning run beside its baselines, all on the same snapshot and flows."""

    ecmp: Evaluation
    greedy: Plan
    c4p: Plan
    c4p_eval: Evaluation


def plan_json(comparison: PlanComparison) -> dict[str, Any]:
    c4p, ecmp = comparison.c4p, comparison.ecmp
    out: dict[str, Any] = {
        "plan": c4p.summary(),
        "units": UNITS,
        "max_link_utilization": {
            "ecmp": ecmp.max_link_utilization,
            "greedy": comparison.greedy.rate_utilization,
            "c4p": comparison.c4p_eval.max_link_utilization,
            "lower_bound": c4p.rate_bound,
        },
        "jobs": [
            {
                "job": e.job,
                "ecmp_busbw_fraction": e.busbw_fraction,
                "c4p_busbw_fraction": p.busbw_fraction,
                "ecmp_slowest_gbps": e.slowest_rate_gbps,
                "c4p_slowest_gbps": p.slowest_rate_gbps,
            }
            for e, p in zip(ecmp.jobs, comparison.c4p_eval.jobs, strict=True)
        ],
        "moved": list(c4p.moved),
        "min_moves": c4p.min_moves,
    }
    if c4p.weighted:
        out["priority_weighted_utilization"] = {
            "units": WEIGHTED_UNITS,
            "greedy": comparison.greedy.objective.max_utilization,
            "c4p": c4p.objective.max_utilization,
            "lower_bound": c4p.bounds.best,
        }
    return out


UNITS = (
    "max_link_utilization: load of the busiest switch-to-switch link over its capacity, in NIC "
    "line rates (1.00 = one full-rate flow), the same as `c4p evaluate`"
)
WEIGHTED_UNITS = (
    "the planner's objective with job priorities: load counted as rate x priority, over "
    "capacity (what c4p minimizes; its bounds are in these units)"
)


def print_plan(
    console: Console, fabric: Fabric, comparison: PlanComparison, replanned: bool
) -> None:
    """Per job ECMP vs planned busbw, then the fabric's worst link under each strategy."""
    c4p = comparison.c4p
    table = Table(title="per job: predicted bus bandwidth (per NIC)", title_justify="left")
    for name in ("job", "flows", "ecmp busbw", "c4p busbw", "c4p slowest Gb/s"):
        table.add_column(name, justify="left" if name == "job" else "right")
    for e, p in zip(comparison.ecmp.jobs, comparison.c4p_eval.jobs, strict=True):
        table.add_row(
            e.job,
            str(e.flows),
            _pct(e.busbw_fraction),
            _pct(p.busbw_fraction),
            _gbps(p.slowest_rate_gbps),
        )
    console.print(table)
    links = Table(title=f"fabric {fabric.name}: busiest link", title_justify="left")
    links.add_column("")
    for name in ("ecmp", "greedy", "c4p", "lower bound"):
        links.add_column(name, justify="right")
    links.add_row(
        "max link utilization (NIC line rates)",
        f"{comparison.ecmp.max_link_utilization:.2f}",
        f"{comparison.greedy.rate_utilization:.2f}",
        f"{comparison.c4p_eval.max_link_utilization:.2f}",
        f"{c4p.rate_bound:.2f}",
    )
    if c4p.weighted:
        links.add_row(
            "priority-weighted (rate x priority)",
            "-",
            f"{comparison.greedy.objective.max_utilization:.2f}",
            f"{c4p.objective.max_utilization:.2f}",
            f"{c4p.bounds.best:.2f}",
        )
    console.print(links)
    methods = ", ".join(sorted({p.method for p in c4p.parts})) or "-"
    lost = len(c4p.unreachable)
    # "optimal" alone would claim every flow: with unroutable ones it is said of the rest
    status = f"{len(c4p.flows) - lost} routed, {c4p.status}" if lost else c4p.status
    console.print(
        f"  c4p: {status} (gap to bound {100 * c4p.gap:.1f}%), {len(c4p.flows)} flows in "
        f"{len(c4p.parts)} independent part(s) by {methods}, solved in {c4p.seconds:.3f} s",
        highlight=False,
    )
    if replanned:
        least = "" if c4p.min_moves is None else f" (at least {c4p.min_moves} needed)"
        console.print(
            f"  flows moved from the previous plan: {len(c4p.moved)}{least}", highlight=False
        )
    if c4p.unreachable:
        console.print(f"  unreachable flows: {lost}", highlight=False)
