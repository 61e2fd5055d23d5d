"""``c4p bench``: a fixed ladder of planning scenarios, each beside its baselines.

Why a ladder in one process: speed and quality only mean something against a yardstick measured
the same way, on the same machine, at the same moment. Every scenario builds a fabric and jobs,
then runs side by side: ECMP as the fabric would do it (median of three QP-number seeds), the
greedy least-loaded heuristic, c4p's planner, and the proven lower bound. The failure scenario
then takes down the busiest used uplink and re-plans incrementally from c4p's plan.

Workloads look like a busy cluster: the fabric is filled with jobs whose hosts are placed
randomly or in fragments (a single ring job in host order barely crosses a rail-optimized
fabric's spines and gives ECMP nothing to collide on, which would flatter it).

Results go to a Markdown table (``docs/benchmarks.md`` by default) and a PNG plot (solve time
against flows; each strategy's max link utilization over the bound).
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from solver.planner import plan
from solver.planning.result import Plan
from solver.workload.flows import Workload
from solver.workload.jobs import CommunicatorSpec, JobsFile, JobSpec
from solver.workload.patterns import derive_workload
from solver.workload.placement import JobsGenParams, generate_jobs
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import Evaluation, evaluate
from topology.generators import generate, sized_for_gpus
from topology.model import Fabric, LinkStatus

ECMP_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Scenario:
    """A fabric, the jobs on it, and whether to fail a link and re-plan."""

    name: str
    fabric: Callable[[], Fabric]
    jobs: JobsGenParams | Callable[[Fabric], JobsFile]
    """Generated jobs (the fabric filled with them), or a function making the jobs file."""
    rates: tuple[float, ...] = ()
    """Per job (cycled): a relative rate for all its flows, for the unequal-rate scenarios."""
    fail_link: bool = False
    budget: float = 10.0
    quick: bool = False


@dataclass(frozen=True)
class Row:
    """One scenario's figures, as they go into the table."""

    scenario: str
    gpus: int
    flows: int
    util_ecmp: float
    util_greedy: float
    util_c4p: float
    bound: float
    gap: float
    status: str
    methods: str
    solve_s: float
    busbw_ecmp: float | None
    busbw_c4p: float | None
    replan_s: float | None = None
    moved: int | None = None
    crossed: int | None = None


def _ring_jobs(hosts: int, placement: str, qps: int, seed: int = 1) -> JobsGenParams:
    return JobsGenParams(
        jobs=1, hosts_per_job=hosts, placement=placement, qps_per_connection=qps, seed=seed
    )


def _fill(fabric: Fabric, params: JobsGenParams) -> JobsFile:
    """As many jobs of ``params.hosts_per_job`` hosts as the fabric holds (``params.jobs`` max
    when it is above 1)."""
    count = len(fabric.hosts) // params.hosts_per_job
    if params.jobs > 1:
        count = min(count, params.jobs)
    return generate_jobs(fabric, params.model_copy(update={"jobs": max(1, count)}))


def permutation_jobs(qps: int, seed: int = 0) -> Callable[[Fabric], JobsFile]:
    """One job over every GPU where each rank sends to one random rank on another host.

    Unstructured heavy traffic (an expert-parallel exchange step, a shuffled ring): every
    leaf's uplinks carry many flows, which is where exact assignment pulls away from greedy.
    """

    def build(fabric: Fabric) -> JobsFile:
        hosts = [h.name for h in fabric.hosts]
        per_host = len(fabric.hosts[0].nics)
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(hosts))
        # Host h's ranks send to host order[(position of h) + 1]: a random cyclic host order,
        # so no rank sends to its own host; NICs are matched by a random rotation per host.
        position = np.empty_like(order)
        position[order] = np.arange(len(order))
        connections = []
        for h in range(len(hosts)):
            peer = int(order[(position[h] + 1) % len(order)])
            shift = int(rng.integers(per_host))
            for nic in range(per_host):
                connections.append(
                    {"src_rank": h * per_host + nic,
                     "dst_rank": peer * per_host + (nic + shift) % per_host}
                )  # fmt: skip
        comm = CommunicatorSpec.model_validate(
            {"id": "exchange", "pattern": "explicit", "qps_per_connection": qps,
             "connections": connections}
        )  # fmt: skip
        return JobsFile(jobs=(JobSpec(id="moe", hosts=tuple(hosts), communicators=(comm,)),))

    return build


def scenarios() -> list[Scenario]:
    """The ladder. ``quick`` ones make ``c4p bench --quick`` (well under a minute)."""

    def rail(gpus: int) -> Callable[[], Fabric]:
        if gpus == 128:  # four units of four hosts, so that rings must cross the spines
            return lambda: generate(
                "rail-optimized", units=4, hosts_per_unit=4, rails=8, spines=4, name="rail-128"
            )
        return lambda: sized_for_gpus("rail-optimized", gpus)

    def fat(gpus: int) -> Callable[[], Fabric]:
        return lambda: sized_for_gpus("fat-tree", gpus)

    out = [
        Scenario("2-tier rings, 128 GPUs, 1 QP", rail(128), _ring_jobs(4, "random", 1), quick=True),
        Scenario(
            "2-tier rings, 512 GPUs, 2 QPs", rail(512), _ring_jobs(8, "random", 2), quick=True
        ),
        Scenario(
            "2-tier rings, 2,048 GPUs, 2 QPs", rail(2048), _ring_jobs(16, "random", 2), quick=True
        ),
        Scenario("2-tier rings, 8,192 GPUs, 4 QPs", rail(8192), _ring_jobs(16, "random", 4)),
        Scenario("2-tier rings, 16,384 GPUs, 2 QPs", rail(16384), _ring_jobs(16, "random", 2)),
        Scenario(
            "2-tier permutation, 2,048 GPUs, 2 QPs", rail(2048), permutation_jobs(2), quick=True
        ),
        Scenario("2-tier permutation, 16,384 GPUs, 2 QPs", rail(16384), permutation_jobs(2)),
        Scenario("3-tier permutation, 4,096 GPUs, 2 QPs", fat(4096), permutation_jobs(2)),
        Scenario(
            "2-tier all-to-all (rail-only), 512 GPUs",
            rail(512),
            JobsGenParams(jobs=1, hosts_per_job=64, pattern="all-to-all", rail_only=True),
            quick=True,
        ),
        Scenario(
            "2-tier all-to-all (full), 128 GPUs",
            rail(128),
            JobsGenParams(jobs=1, hosts_per_job=16, pattern="all-to-all"),
        ),
        Scenario(
            "3-tier rings, 1,024 GPUs, 2 QPs", fat(1024), _ring_jobs(16, "random", 2), quick=True
        ),
        Scenario("3-tier rings, 4,096 GPUs, 2 QPs", fat(4096), _ring_jobs(16, "random", 2)),
        Scenario("3-tier rings, 8,192 GPUs, 2 QPs", fat(8192), _ring_jobs(16, "random", 2)),
        Scenario(
            "2-tier 16 jobs fragmented, 2,048 GPUs",
            rail(2048),
            JobsGenParams(jobs=16, hosts_per_job=16, placement="fragmented", channels=2, seed=3),
            quick=True,
        ),
        Scenario(
            "2-tier unequal rates, 2,048 GPUs",
            rail(2048),
            _ring_jobs(32, "random", 2, seed=5),
            rates=(1.0, 2.0, 0.5, 1.5),
            quick=True,
        ),
        Scenario(
            "3-tier unequal rates, 4,096 GPUs",
            fat(4096),
            _ring_jobs(32, "random", 2, seed=5),
            rates=(1.0, 2.0, 0.5, 1.5),
        ),
        Scenario(
            "2-tier link failure + re-plan, 2,048 GPUs",
            rail(2048),
            _ring_jobs(16, "random", 2),
            fail_link=True,
            quick=True,
        ),
        Scenario(
            "2-tier link failure + re-plan, 4,096 GPUs",
            rail(4096),
            _ring_jobs(16, "random", 2),
            fail_link=True,
        ),
        Scenario(
            "3-tier link failure + re-plan, 4,096 GPUs",
            fat(4096),
            _ring_jobs(16, "random", 2),
            fail_link=True,
        ),
    ]
    return out


def _with_rates(jobs: JobsFile, rates: Sequence[float]) -> JobsFile:
    if not rates:
        return jobs
    changed = []
    for i, job in enumerate(jobs.jobs):
        rate = rates[i % len(rates)]
        comms = tuple(c.model_copy(update={"rate": rate}) for c in job.communicators)
        changed.append(job.model_copy(update={"communicators": comms}))
    return JobsFile(jobs=tuple(changed))


def _busiest_used_uplink(fabric: Fabric, result: Plan) -> int:
    """The link number of the most loaded leaf-to-spine link c4p's plan uses."""
    index = fabric.index
    counts: dict[int, float] = {}
    for flow, path in zip(result.flows, result.paths, strict=True):
        for res in path[1:-1]:
            if index.tier[index.res_src[res]] == 1:
                counts[res // 2] = counts.get(res // 2, 0.0) + flow.rate
    if not counts:
        raise ValueError("no flow crosses a leaf uplink; nothing to fail")
    return max(sorted(counts), key=lambda link: counts[link])


def _ecmp(fabric: Fabric, workload: Workload) -> tuple[float, float | None]:
    """Median over seeds of ECMP's max utilization and worst-job busbw fraction."""
    utils, busbws = [], []
    for seed in ECMP_SEEDS:
        ev = evaluate(fabric, workload, ecmp_paths(fabric, workload.flows, seed=seed).paths)
        utils.append(ev.max_link_utilization)
        if ev.min_busbw_fraction is not None:
            busbws.append(ev.min_busbw_fraction)
    return statistics.median(utils), statistics.median(busbws) if busbws else None


def run_scenario(scenario: Scenario, seed: int = 0) -> Row:
    fabric = scenario.fabric()
    _ = fabric.index.routing  # built once, outside every timed region, like a live controller
    made = (
        _fill(fabric, scenario.jobs)
        if isinstance(scenario.jobs, JobsGenParams)
        else scenario.jobs(fabric)
    )
    jobs = _with_rates(made, scenario.rates)
    workload = derive_workload(fabric, jobs)
    util_ecmp, busbw_ecmp = _ecmp(fabric, workload)
    greedy = plan(fabric, workload, strategy="greedy", seed=seed)
    result = plan(fabric, workload, budget=scenario.budget, seed=seed)
    planned: Evaluation = evaluate(fabric, workload, result.paths)
    row = Row(
        scenario=scenario.name,
        gpus=len(fabric.index.ports),
        flows=len(workload.flows),
        util_ecmp=util_ecmp,
        util_greedy=greedy.objective.max_utilization,
        util_c4p=result.objective.max_utilization,
        bound=result.bounds.best,
        gap=result.gap,
        status=result.status,
        methods="+".join(sorted({p.method for p in result.parts})),
        solve_s=result.seconds,
        busbw_ecmp=busbw_ecmp,
        busbw_c4p=planned.min_busbw_fraction,
    )
    if not scenario.fail_link:
        return row
    link = _busiest_used_uplink(fabric, result)
    crossed = sum(1 for path in result.paths if 2 * link in path or 2 * link + 1 in path)
    failed = fabric.with_link_status({link: LinkStatus.DOWN})
    _ = failed.index.routing  # a live controller has its new snapshot's index before planning
    started = time.perf_counter()
    again = plan(failed, workload, result, budget=scenario.budget, seed=seed)
    elapsed = time.perf_counter() - started
    return replace(row, replan_s=elapsed, moved=len(again.moved), crossed=crossed)


def run(
    ladder: Sequence[Scenario], progress: Callable[[Row], None] | None = None, seed: int = 0
) -> list[Row]:
    rows = []
    for scenario in ladder:
        row = run_scenario(scenario, seed)
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def markdown(rows: Sequence[Row], command: str, seconds: float) -> str:
    head = (
        "| scenario | GPUs | flows | max util ECMP | greedy | c4p | bound | gap | c4p how "
        "| solve s | busbw ECMP | busbw c4p | re-plan s | moved / crossed failed link |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        replan = "-" if r.replan_s is None else f"{r.replan_s:.3f}"
        moved = "-" if r.moved is None else f"{r.moved} / {r.crossed}"
        lines.append(
            f"| {r.scenario} | {r.gpus:,} | {r.flows:,} | {r.util_ecmp:.2f} | {r.util_greedy:.2f}"
            f" | {r.util_c4p:.2f} | {r.bound:.2f} | {100 * r.gap:.1f}% | {r.methods} ({r.status})"
            f" | {r.solve_s:.3f} | {_pct(r.busbw_ecmp)} | {_pct(r.busbw_c4p)} | {replan}"
            f" | {moved} |"
        )
    machine = f"{platform.machine()}, Python {platform.python_version()}, {_cpus()} CPUs"
    return (
        "# Benchmarks\n\n"
        f"Produced by `{command}` in {seconds:.0f} s on {machine}, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}. Regenerate with the same command; the "
        "method is in `c4p/figures/ladder.py`'s docstring.\n\n"
        "Columns: *max util* is the busiest switch-to-switch link's load over its capacity, in "
        "NIC line rates (1.00 = one full-rate flow, 2.00 = two flows share it); ECMP is the "
        f"median over QP-number seeds {list(ECMP_SEEDS)}; *bound* is the best proven lower "
        "bound and *gap* c4p's distance to it. *solve s* is c4p's `plan()` wall time (fabric "
        "index built beforehand, as in the running controller). *busbw* is the worst job's "
        "predicted bus bandwidth per NIC, as a fraction of line rate (max-min fair rates); "
        "all-to-all can pass 100% because same-host peers exchange over NVLink, not the NIC. "
        "*re-plan s* is the incremental re-plan after the busiest used uplink fails; *moved / "
        "crossed* compares the flows it moved with those that crossed the failed link.\n\n"
        + head
        + "\n".join(lines)
        + "\n\n![solve time and quality](benchmarks.png)\n\n"
        "Failed and drained links, full plans and re-plans on 4,096 and 16,384 GPUs: the "
        "failure ladder, [benchmarks-failures.md](benchmarks-failures.md) "
        "(`c4p bench --failures`).\n\n"
        "The whole `c4p plan` command (imports, loading, validation, baselines, writing) per "
        "phase: [benchmarks-plan.md](benchmarks-plan.md) (`scripts/measure/plan_phases.py`).\n\n"
        "The stores (SQLite, 3-member etcd) writing a 1,024-rank job's re-plans, and an etcd "
        "failover: [benchmarks-store.md](benchmarks-store.md) "
        "(`scripts/measure/store_throughput.py`, `scripts/measure/ha_failover.py`).\n"
    )


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def plot(rows: Sequence[Row], path: Path) -> None:
    """Solve time against flows, and each strategy's max utilization over the bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    left.scatter([r.flows for r in rows], [max(r.solve_s, 1e-4) for r in rows], color="tab:green")
    for r in rows:
        left.annotate(r.scenario.split(",")[0], (r.flows, max(r.solve_s, 1e-4)), fontsize=6)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("flows (QPs)")
    left.set_ylabel("c4p solve seconds")
    left.set_title("solve time vs flows")
    xs = range(len(rows))
    width = 0.27
    for k, (label, attr, colour) in enumerate(
        (("ECMP", "util_ecmp", "tab:red"), ("greedy", "util_greedy", "tab:orange"),
         ("c4p", "util_c4p", "tab:green"))
    ):  # fmt: skip
        ratios = [getattr(r, attr) / r.bound if r.bound else 1.0 for r in rows]
        right.bar([x + (k - 1) * width for x in xs], ratios, width, label=label, color=colour)
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set_xticks(list(xs))
    right.set_xticklabels([str(i + 1) for i in xs])
    right.set_xlabel("scenario (row of the table)")
    right.set_ylabel("max link utilization / lower bound")
    right.set_title("quality vs bound (1.0 = optimal)")
    right.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rows_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
