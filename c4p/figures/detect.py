"""``c4p bench --detect``: the detector on simulated 4,096- and 16,384-rank jobs.

Why here and not in the detector package: it plans (the real planner, on the bench's fabrics),
which the detector must never do; :mod:`c4p.detector.sim` is the generator and the scorer.
Writes ``docs/benchmarks-detect.md``: precision, recall, localization and latency per class,
false positives on the benign phases, and the detector's CPU per step.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from c4p.detector.paths import PathIndex, build
from c4p.detector.sim import Outcome, Score, SimJob, benign_false_positives, score, suite
from c4p.detector.summary import ConnectionKey
from c4p.figures.ladder import permutation_jobs
from solver.planner import plan
from solver.planning.result import Plan
from solver.workload.flows import Workload
from solver.workload.patterns import derive_workload
from topology.generators import sized_for_gpus
from topology.model import Fabric, LinkStatus

TRIALS = 4
"""Runs of every scenario kind per fabric, each with its own seed (and so its own element)."""


def _index(fabric: Fabric, workload: Workload, result: Plan, comm: str) -> PathIndex:
    index = fabric.index
    ends = index.res_src.reshape(-1, 2)
    switch_ends = np.where(ends < index.num_switches, ends, -1).astype(np.int64)
    items = []
    for flow, path in zip(result.flows, result.paths, strict=True):
        c = workload.connections[flow.connection]
        key = ConnectionKey(comm, c.src_rank, c.dst_rank, c.channel, flow.qp)
        items.append((key, [res // 2 for res in path]))
    return build(items, [link.id for link in fabric.links], switch_ends,
                 [s.name for s in fabric.switches])  # fmt: skip


def build_job(fabric: Fabric, qps: int = 2, budget: float = 10.0) -> SimJob:
    """A shuffled ring over every GPU of ``fabric``, planned; and its re-plan after its busiest
    uplink is drained (the benign re-plan)."""
    from c4p.detector.sim import COMM

    workload = derive_workload(fabric, permutation_jobs(qps)(fabric))
    healthy = plan(fabric, workload, budget=budget)
    paths = _index(fabric, workload, healthy, COMM)
    n_ranks = 1 + max(max(c.src_rank, c.dst_rank) for c in workload.connections)
    host_of = [""] * n_ranks
    for c in workload.connections:
        host_of[c.src_rank], host_of[c.dst_rank] = c.src_host, c.dst_host
    loads = paths.link_counts(np.arange(len(paths.ids), dtype=np.int64))
    inner = (paths.link_switches >= 0).all(axis=1)
    uplinks = np.flatnonzero(inner & (loads >= 4))
    host_links = np.flatnonzero(~inner & (loads > 0))
    busiest = int(uplinks[np.argmax(loads[uplinks])])
    drained = fabric.with_link_status({busiest: LinkStatus.DRAINED})
    again = plan(drained, workload, healthy, budget=budget)
    replanned = _index(drained, workload, again, COMM)
    order = np.searchsorted(paths.ids, paths.ids)  # rows are sorted packed ids
    src, dst = paths.ids >> 40, (paths.ids >> 16) & 0xFFFFFF
    channel, qp = (paths.ids >> 8) & 0xFF, paths.ids & 0xFF
    return SimJob(paths, src[order], dst[order], channel[order], qp[order], tuple(host_of),
                  uplinks, host_links, replanned)  # fmt: skip


@dataclass(frozen=True)
class DetectRow:
    fabric: str
    ranks: int
    connections: int
    scores: tuple[Score, ...]
    benign_fp: int
    benign_runs: int
    cpu_ms_p50: float
    cpu_ms_p99: float
    cpu_ms_max: float
    progress_ms_p50: float
    progress_ms_p99: float
    plan_s: float
    first_step_ms: float = 0.0  # the first step of a run: sizes the per-connection arrays
    kinds: tuple[tuple[str, int, int, int, int], ...] = ()
    """Per scenario kind: runs, runs with a finding of the injected class, of them naming the
    injected element, and findings of any other class (false positives)."""


def _kinds(outcomes: Sequence[Outcome]) -> tuple[tuple[str, int, int, int, int], ...]:
    out = []
    for kind in dict.fromkeys(o.scenario for o in outcomes):
        mine = [o for o in outcomes if o.scenario == kind]
        right = [[f for f in o.findings if f.cls.value == o.injected_class] for o in mine]
        found = sum(1 for r in right if r)
        named = sum(
            1
            for o, r in zip(mine, right, strict=True)
            if any(f.element == o.injected_element for f in r)
        )
        wrong = sum(1 for o in mine for f in o.findings if f.cls.value != o.injected_class)
        out.append((kind, len(mine), found, named, wrong))
    return tuple(out)


def run_fabric(
    name: str, fabric: Fabric, trials: int, progress: Callable[[Outcome], None] | None = None
) -> DetectRow:
    started = time.perf_counter()
    job = build_job(fabric)
    plan_s = time.perf_counter() - started
    outcomes = suite(job, trials, progress=progress)
    # steady-state steps (the first step of a run sizes its arrays)
    cpu = np.array([c for o in outcomes for c in o.cpu_s[1:]]) * 1e3
    progress_cpu = np.array([c for o in outcomes for c in o.cpu_progress_s]) * 1e3
    return DetectRow(
        name,
        len(job.host_of_rank),
        len(job.src),
        tuple(score(outcomes)),
        benign_false_positives(outcomes),
        sum(1 for o in outcomes if not o.injected_class),
        float(np.percentile(cpu, 50)),
        float(np.percentile(cpu, 99)),
        float(cpu.max()),
        float(np.percentile(progress_cpu, 50)),
        float(np.percentile(progress_cpu, 99)),
        plan_s,
        float(np.median([o.cpu_s[0] for o in outcomes if o.cpu_s])) * 1e3,
        _kinds(outcomes),
    )


def run(
    quick: bool, trials: int, progress: Callable[[Outcome], None] | None = None
) -> list[DetectRow]:
    """2-tier rail-optimized and 3-tier fat-tree fabrics of 4,096 and 16,384 GPUs (4,096 only
    with ``quick``)."""
    sizes = (4096,) if quick else (4096, 16384)
    return [
        run_fabric(f"{label} {gpus:,} GPUs", sized_for_gpus(kind, gpus), trials, progress)
        for kind, label in (("rail-optimized", "2-tier"), ("fat-tree", "3-tier"))
        for gpus in sizes
    ]


def _f(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(rows: Sequence[DetectRow], command: str, seconds: float) -> str:
    lines = [
        "# Detector benchmark (simulated)",
        "",
        f"Reproduce: `{command}` ({seconds:.0f} s on {platform.machine()}, Python "
        f"{platform.python_version()}). The jobs are shuffled rings over every GPU, planned by "
        "the real planner; the timing model, the faults and the scoring are described in "
        "`c4p/detector/sim.py`. Precision counts every finding of a class in every scenario "
        "(benign phases included); localization is the share of detected faults whose finding "
        "names the injected link, rank or connection; latency is from the fault's start (a step "
        "takes about 0.13 s here: a slowdown is confirmed after 3 steps and once its element "
        "held for `persist_s`, 1 s; a hang after 2 s).",
        "",
        "| fabric | class | injected | recall | precision | localization | in candidates | "
        "latency (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for s in r.scores:
            lines.append(
                f"| {r.fabric} | {s.cls} | {s.injected} | {_f(s.recall)} | {_f(s.precision)} | "
                f"{_f(s.localization)} | {_f(s.in_candidates)} | {_f(s.latency_s, '.1f')} |"
            )
    lines += [
        "",
        "Per scenario kind (runs; runs with a finding of the injected class; of them, naming the "
        "injected element; findings of another class):",
        "",
        "| fabric | scenario | runs | found | named | other findings |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        for kind, runs, found, named, wrong in r.kinds:
            benign = kind in ("message size change", "re-plan moving flows")
            lines.append(
                f"| {r.fabric} | {kind} | {runs} | {'-' if benign else found} | "
                f"{'-' if benign else named} | {wrong} |"
            )
    lines += [
        "",
        "| fabric | ranks | connections | benign runs | false positives | CPU/step p50 (ms) | "
        "p99 | max | first step (ms) | CPU/progress round p50 (ms) | p99 | plan (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.fabric} | {r.ranks:,} | {r.connections:,} | {r.benign_runs} | {r.benign_fp} | "
            f"{r.cpu_ms_p50:.1f} | {r.cpu_ms_p99:.1f} | {r.cpu_ms_max:.1f} | "
            f"{r.first_step_ms:.1f} | "
            f"{r.progress_ms_p50:.1f} | {r.progress_ms_p99:.1f} | {r.plan_s:.1f} |"
        )
    lines += [
        "",
        "CPU per step is the detector's own (joining every host's summary of a step, the rules, "
        "localization), measured with `time.process_time`, one step of one communicator per "
        "call, the first step of each run (which sizes its arrays) shown apart; the target is "
        "< 50 ms at 16,384 ranks. A progress round is every host's heartbeat (each rank's and "
        "each QP's progress) judged for hangs. Measured on a shared 2-core machine: the tails "
        "include other processes' interference.",
        "",
    ]
    return "\n".join(lines)


def rows_json(rows: Sequence[DetectRow]) -> list[dict[str, object]]:
    out = []
    for r in rows:
        out.append(
            {
                "fabric": r.fabric,
                "ranks": r.ranks,
                "connections": r.connections,
                "benign_false_positives": r.benign_fp,
                "cpu_ms_p50": r.cpu_ms_p50,
                "cpu_ms_p99": r.cpu_ms_p99,
                "progress_ms_p50": r.progress_ms_p50,
                "progress_ms_p99": r.progress_ms_p99,
                "classes": [
                    {"class": s.cls, "injected": s.injected, "recall": s.recall,
                     "precision": s.precision, "localization": s.localization,
                     "in_candidates": s.in_candidates,
                     "latency_s": s.latency_s}
                    for s in r.scores
                ],
            }
        )  # fmt: skip
    return out
