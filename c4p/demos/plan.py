"""``make demo``: what c4p sees on an embedded fabric, without any switch.

It generates a rail-optimized fabric, places two training jobs on hosts scattered the way a busy
cluster leaves them free, and predicts, side by side, what ECMP and c4p's plan give them: each
job's slowest connection and bus bandwidth, and the fabric's worst link. Then it says in plain
words what the numbers mean. The fabric, job and plan files are written to ``out/demo/`` so
that every figure can be reproduced with the CLI (the commands are printed at the end).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from c4p.cli import views
from c4p.files import save_fabric, save_model
from solver.planner import plan
from solver.workload.jobs import CommunicatorSpec, JobsFile, JobSpec
from solver.workload.patterns import derive_workload
from solver.workload.placement import place_hosts
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import evaluate
from topology.analysis import summarize
from topology.generators import RailOptimizedParams, rail_optimized

OUT = Path("out/demo")


def main() -> None:
    console = Console(width=110)
    fabric = rail_optimized(
        RailOptimizedParams(name="demo-512", units=4, hosts_per_unit=16, rails=8, spines=16)
    )
    summary = summarize(fabric)
    views.print_summary(console, summary)

    # Two jobs on the hosts a busy cluster had free: random, so rings cross units often.
    ring = CommunicatorSpec(id="dp", pattern="ring", qps_per_connection=2)
    first = place_hosts(fabric, 24, "random", seed=7)
    second = place_hosts(fabric, 16, "random", seed=11, exclude=frozenset(first))
    jobs = JobsFile(
        jobs=(
            JobSpec(id="llm-a", hosts=tuple(first), communicators=(ring,)),
            JobSpec(id="llm-b", hosts=tuple(second), communicators=(ring,)),
        )
    )
    workload = derive_workload(fabric, jobs)
    console.print()
    views.print_jobs(console, jobs, workload.flows)

    ecmp = ecmp_paths(fabric, workload.flows, seed=1)
    unplanned = evaluate(fabric, workload, ecmp.paths)
    planned = plan(fabric, workload, seed=1)
    results = {"ecmp": unplanned, "c4p": evaluate(fabric, workload, planned.paths)}
    console.print()
    views.print_evaluations(console, fabric, results)

    OUT.mkdir(parents=True, exist_ok=True)
    save_fabric(fabric, OUT / "fabric.yaml")
    save_model(jobs, OUT / "jobs.yaml")
    save_model(planned.to_plan_file(), OUT / "plan.json")

    worst = min(unplanned.jobs, key=lambda j: j.busbw_fraction or 0.0)
    after = next(j for j in results["c4p"].jobs if j.job == worst.job)
    console.print()
    console.print("[bold]What this means[/]")
    console.print(
        f"Each job's GPUs exchange data in rings over {len(workload.flows)} long-lived QPs. "
        "With ECMP, every QP's UDP source port comes from a hash of its QP numbers, and each "
        "switch hashes that port onto one of its uplinks: nobody chooses the paths. "
        f"Here {unplanned.links_over_capacity} fabric links are asked to carry more than line "
        f"rate, the busiest {unplanned.max_link_load:g} flows at once. A ring runs at the speed "
        f"of its slowest connection, so job {worst.job} is predicted to reach only "
        f"{100 * (worst.busbw_fraction or 0):.0f}% of its NICs' line rate "
        f"({worst.busbw_gbps or 0:,.0f} of {worst.line_rate_gbps or 0:,.0f} Gb/s bus "
        "bandwidth), although the fabric is non-blocking.",
        highlight=False,
    )
    console.print(
        f"c4p's planner gave every QP a path ({planned.status}, max link utilization "
        f"{planned.objective.max_utilization:.2f} against a proven lower bound of "
        f"{planned.bounds.best:.2f}, in {1000 * planned.seconds:.0f} ms): no link carries more "
        f"than it must, and {worst.job} is predicted at {100 * (after.busbw_fraction or 0):.0f}% "
        "of line rate. Each path is enforced by giving its QP a UDP source port that the "
        "switches' hashes send along it (`c4p plan --bindings`); the live controller below "
        "does that over gRPC.",
        highlight=False,
    )
    console.print()
    console.print(f"Files written to {OUT}/. Reproduce with:", highlight=False)
    console.print(f"  .venv/bin/c4p fabric show {OUT}/fabric.yaml", highlight=False)
    console.print(
        f"  .venv/bin/c4p plan --fabric {OUT}/fabric.yaml --jobs {OUT}/jobs.yaml --seed 1"
        f" -o {OUT}/plan.json",
        highlight=False,
    )
    console.print(
        f"  .venv/bin/c4p evaluate --fabric {OUT}/fabric.yaml --jobs {OUT}/jobs.yaml --seed 1"
        f" --plan {OUT}/plan.json",
        highlight=False,
    )


if __name__ == "__main__":
    main()
