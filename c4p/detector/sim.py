"""A simulated job at scale: per-step summaries with injected faults and noise, scored.

Why a simulation beside the lab: the lab runs real kernels but tens of ranks; the detector's
statistics, its localization and its cost per step matter at 4,096 and 16,384 ranks, which no
test machine runs. The paths are the real planner's on the bench's fabrics (a shuffled ring
over every GPU: every rank sends to one rank of another host, so paths cross the spines); the
timing model is small and stated here so its assumptions can be argued with:

* a connection's rate is the line rate times the slowest link factor on its path, times a
  lognormal jitter (``sigma``); a lossy link also adds its own heavy jitter;
* a step is compute (per rank, lognormal) then communication: a rank waits from its arrival
  until the last rank has arrived plus the slowest connection's busy time (a ring all-reduce
  finishes no sooner than its slowest hop);
* a hung rank never arrives (no summary of that step from anyone; progress reports show it
  outside while its peers sit inside); a hung connection keeps a transfer posted and never
  completes it, the others stop after it, waiting for its data;
* a link at 80% of its rate is injected too: it is above the detector's ``slow_ratio`` (0.75)
  and is expected to be missed (the table shows where the threshold lies);
* benign phases: the message size changes (every rate moves together), and a re-plan (the real
  planner's, after draining the busiest uplink) moves flows, which run at a third of their
  rate for ``move_s`` while their QPs move (2 s: an assumption, longer than a fault must last
  to be found, ``persist_s``; a re-plan takes a wall time to reach every rank, not steps).

Scoring (:func:`score`): a finding is *true* when its class is the injected one and it opens
after the fault started; *localized* when it names the injected element. Precision per class is
true findings over all findings of that class, over every scenario including the benign ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from c4p.detector.detector import Detector
from c4p.detector.findings import DetectorSettings, Finding, FindingClass
from c4p.detector.paths import PathIndex, pack
from c4p.detector.state import connection_name
from c4p.detector.summary import (
    ConnectionKey,
    ConnectionProgress,
    ConnectionStep,
    ProgressReport,
    RankProgress,
    RankStep,
    StepSummary,
    TelemetryReport,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

JOB, COMM = "sim", "ring"
KINDS = (
    "slow link",
    "lossy link",
    "slow host link",
    "link 20% slow",
    "compute-slow rank",
    "hung rank",
    "hung connection",
    "message size change",
    "re-plan moving flows",
)
CLASS_OF = {
    "slow link": FindingClass.COMM_SLOWDOWN,
    "lossy link": FindingClass.COMM_SLOWDOWN,
    "slow host link": FindingClass.COMM_SLOWDOWN,
    "link 20% slow": FindingClass.COMM_SLOWDOWN,
    "compute-slow rank": FindingClass.COMPUTE_SLOWDOWN,
    "hung rank": FindingClass.NONCOMM_HANG,
    "hung connection": FindingClass.COMM_HANG,
}


@dataclass(frozen=True)
class SimJob:
    """A planned job: per connection its ranks, host and path (rows of ``paths``)."""

    paths: PathIndex
    src: IntArray  # per row of ``paths``
    dst: IntArray
    channel: IntArray
    qp: IntArray
    host_of_rank: tuple[str, ...]
    uplinks: IntArray  # switch-to-switch links carrying at least 4 of the job's flows
    host_links: IntArray  # NIC-to-leaf links the job uses
    replanned: PathIndex | None = None  # the plan after a benign re-plan (a drained uplink)


@dataclass(frozen=True)
class Model:
    line_gbps: float = 100.0
    sigma: float = 0.06  # rate jitter (lognormal)
    compute_ms: float = 120.0
    compute_sigma: float = 0.03
    message_bytes: int = 64 << 20
    slow_factor: float = 0.4
    lossy_factor: float = 0.6
    mild_factor: float = 0.8  # above the detector's 0.75 ratio: the limit, shown as a miss
    lossy_sigma: float = 0.25
    late_factor: float = 0.6  # a compute-slow rank's extra compute, of the median
    steps_before: int = 12
    steps_during: int = 24  # ~3 s: a slowdown must hold for persist_s (1 s) to be found
    progress_s: float = 0.5  # progress reports' period
    hang_s: float = 6.0  # how long a hang is watched
    move_s: float = 2.0  # a re-plan's moved QPs run slow this long (a wall time, not steps)


@dataclass
class Outcome:
    scenario: str
    injected_class: str
    injected_element: str
    findings: list[Finding]
    fault_at_s: float
    detected_at_s: float | None = None
    cpu_s: list[float] = field(default_factory=list)  # the detector's CPU per step
    cpu_progress_s: list[float] = field(default_factory=list)  # ... per round of progress


def _rates(job: SimJob, factor: FloatArray, rng: np.random.Generator, m: Model) -> FloatArray:
    """Per connection: line rate x the slowest link factor on its path x jitter."""
    per = factor[job.paths.indices]
    slowest = np.minimum.reduceat(per, job.paths.indptr[:-1])
    out: FloatArray = m.line_gbps * slowest * rng.lognormal(0.0, m.sigma, len(slowest))
    return out


class Run:
    """One scenario: steps and progress reports fed to a detector, its CPU per step timed."""

    def __init__(self, job: SimJob, m: Model, seed: int, settings: DetectorSettings) -> None:
        self.job, self.m = job, m
        self.rng = np.random.default_rng(seed)
        self.detector = Detector(settings)
        self.detector.set_paths(JOB, COMM, job.paths)
        self.now = 0.0
        self.step = 0
        self.epoch = 1
        self.bytes = m.message_bytes
        self.factor = np.ones(len(job.paths.links))
        self.noisy = np.zeros(len(job.paths.links), dtype=bool)
        self.slow_conn = np.ones(len(job.src))  # per-connection factor (moving QPs)
        self.extra_ms = np.zeros(len(job.host_of_rank))
        self.findings: list[Finding] = []
        self.cpu: list[float] = []
        self.cpu_progress: list[float] = []
        hosts = np.array(job.host_of_rank)
        self.hosts = sorted(set(job.host_of_rank))
        host_no = {h: i for i, h in enumerate(self.hosts)}
        self.rank_host = np.array([host_no[h] for h in hosts], dtype=np.int64)
        self.conn_host = self.rank_host[job.src]
        # one key object per QP, as an agent keeps them (the detector checks identity first)
        self.keys = [
            ConnectionKey(COMM, int(s), int(d), int(c), int(q))
            for s, d, c, q in zip(job.src, job.dst, job.channel, job.qp, strict=True)
        ]

    def _feed(self, report: TelemetryReport) -> None:
        started = time.process_time()
        self.detector.accept(report)
        found = self.detector.evaluate(self.now)
        (self.cpu if report.steps else self.cpu_progress).append(time.process_time() - started)
        self.findings.extend(f for f in found if not f.cleared)

    def run_step(self) -> None:
        """One complete step: every host's summary, judged as one report."""
        m, job = self.m, self.job
        rates = _rates(job, self.factor, self.rng, m)
        if self.noisy.any():
            lossy = np.maximum.reduceat(self.noisy[job.paths.indices], job.paths.indptr[:-1])
            rates = np.where(lossy, rates * self.rng.lognormal(0, m.lossy_sigma, len(rates)), rates)
        rates = rates * self.slow_conn
        per_conn = self.bytes // 8
        busy = (per_conn * 8 / rates).astype(np.int64)
        n = len(job.host_of_rank)
        compute = m.compute_ms * 1e6 * self.rng.lognormal(0, m.compute_sigma, n)
        compute = (compute + self.extra_ms * 1e6).astype(np.int64)
        wait = (compute.max() - compute + busy.max()).astype(np.int64)
        ranks_by_host = [[] for _ in self.hosts]  # type: list[list[RankStep]]
        for r, (c, w) in enumerate(zip(compute.tolist(), wait.tolist(), strict=True)):
            ranks_by_host[self.rank_host[r]].append(RankStep(r, c, w))
        conns_by_host = [[] for _ in self.hosts]  # type: list[list[ConnectionStep]]
        for key, h, b in zip(self.keys, self.conn_host.tolist(), busy.tolist(), strict=True):
            conns_by_host[h].append(ConnectionStep(key, per_conn, b, 4))
        steps = tuple(
            StepSummary(JOB, h, COMM, self.step, self.epoch, "allreduce", self.bytes,
                        tuple(ranks_by_host[i]), tuple(conns_by_host[i]))
            for i, h in enumerate(self.hosts)
        )  # fmt: skip
        self.now += float((compute.max() + busy.max()) / 1e9)
        self._feed(TelemetryReport("sim", steps=steps))
        self.step += 1

    def hang(self, rank: int | None, conn: int | None, seconds: float) -> None:
        """Step ``self.step`` never completes: progress reports every ``progress_s``."""
        m, job = self.m, self.job
        n = len(job.host_of_rank)
        started = self.now
        stops = self.rng.uniform(0.01, 0.2, len(job.src))  # the others stop after the hung one
        t = 0.0
        while t < seconds:
            t += m.progress_s
            self.now = started + t
            reports = []
            for h, host in enumerate(self.hosts):
                mine = np.flatnonzero(self.rank_host == h)
                ranks = tuple(
                    RankProgress(COMM, int(r), self.step - 1, self.step - 1, 0, int(t * 1e9))
                    if r == rank
                    else RankProgress(COMM, int(r), self.step, self.step - 1, int(t * 1e9), 0)
                    for r in mine
                )
                conns: tuple[ConnectionProgress, ...] = ()
                if conn is not None:
                    mine_c = np.flatnonzero(self.conn_host == h)
                    conns = tuple(
                        ConnectionProgress(
                            ConnectionKey(
                                COMM,
                                int(job.src[i]),
                                int(job.dst[i]),
                                int(job.channel[i]),
                                int(job.qp[i]),
                            ),
                            1 << 30,
                            int(max(0.0, t - (0 if i == conn else stops[i])) * 1e9),
                            1 if i == conn else 0,
                        )  # fmt: skip
                        for i in mine_c
                    )
                reports.append(ProgressReport(JOB, host, ranks, conns))
            self._feed(TelemetryReport("sim", progress=tuple(reports)))
            if n and any(f.cls in (FindingClass.COMM_HANG, FindingClass.NONCOMM_HANG)
                         for f in self.findings):  # fmt: skip
                break


def scenario(job: SimJob, kind: str, m: Model, seed: int, settings: DetectorSettings) -> Outcome:
    """Run one scenario: healthy steps, then the fault or benign change, then steps under it."""
    run = Run(job, m, seed, settings)
    rng = np.random.default_rng(seed + 1000)
    for _ in range(m.steps_before):
        run.run_step()
    fault_at = run.now
    cls: FindingClass | None = CLASS_OF.get(kind)
    element = ""
    if kind in ("slow link", "lossy link", "slow host link", "link 20% slow"):
        pool = job.host_links if kind == "slow host link" else job.uplinks
        link = int(pool[rng.integers(len(pool))])
        element = job.paths.links[link]
        factors = {"lossy link": m.lossy_factor, "link 20% slow": m.mild_factor}
        run.factor[link] = factors.get(kind, m.slow_factor)
        run.noisy[link] = kind == "lossy link"
    elif kind == "compute-slow rank":
        r = int(rng.integers(len(job.host_of_rank)))
        element = f"rank {r}"
        run.extra_ms[r] = m.late_factor * m.compute_ms
    elif kind == "hung rank":
        r = int(rng.integers(len(job.host_of_rank)))
        element = f"rank {r}"
        run.hang(r, None, m.hang_s)
    elif kind == "hung connection":
        c = int(rng.integers(len(job.src)))
        element = connection_name(COMM, int(job.paths.ids[c]))
        run.hang(None, c, m.hang_s)
    elif kind == "message size change":
        run.bytes = m.message_bytes // 4
    elif kind == "re-plan moving flows" and job.replanned is not None:
        moved = job.replanned.signature != job.paths.signature
        run.detector.set_paths(JOB, COMM, job.replanned)
        run.epoch += 1
        run.slow_conn = np.where(moved, 1 / 3, 1.0)
    if kind not in ("hung rank", "hung connection"):
        for _ in range(m.steps_during):
            if kind == "re-plan moving flows" and run.now - fault_at >= m.move_s:
                run.slow_conn[:] = 1.0
            if kind == "message size change":  # smaller messages: everyone's rate lower
                run.factor[:] = 0.8
            run.run_step()
    out = Outcome(kind, cls.value if cls is not None else "", element, run.findings, fault_at,
                  cpu_s=run.cpu, cpu_progress_s=run.cpu_progress)  # fmt: skip
    hits = [f for f in run.findings if cls is not None and f.cls is cls]
    if hits:
        first = min(hits, key=lambda f: f.step)
        out.detected_at_s = fault_at + _elapsed(run, first, fault_at)
    return out


def _elapsed(run: Run, f: Finding, fault_at: float) -> float:
    """Fault start to detection, from the step that confirmed it (steps run at a steady
    rate) or, for hangs, the progress report that showed it (the run ended there)."""
    if f.cls in (FindingClass.COMM_HANG, FindingClass.NONCOMM_HANG):
        return run.now - fault_at
    per_step = fault_at / max(1, run.m.steps_before)
    return (f.step - run.m.steps_before + 1) * per_step


@dataclass(frozen=True)
class Score:
    cls: str
    injected: int
    detected: int
    findings: int
    true_findings: int
    localized: int
    candidate: int  # detected faults whose element is the finding's or among its candidates
    latency_s: float | None

    @property
    def recall(self) -> float | None:
        return self.detected / self.injected if self.injected else None

    @property
    def precision(self) -> float | None:
        return self.true_findings / self.findings if self.findings else None

    @property
    def localization(self) -> float | None:
        return self.localized / self.detected if self.detected else None

    @property
    def in_candidates(self) -> float | None:
        return self.candidate / self.detected if self.detected else None


def score(outcomes: Sequence[Outcome]) -> list[Score]:
    """Per finding class: recall, precision, localization and median latency (see module)."""
    out = []
    for cls in FindingClass:
        if cls is FindingClass.STARTUP:
            continue
        injected = [o for o in outcomes if o.injected_class == cls.value]
        detected = localized = candidate = true = total = 0
        latencies = []
        for o in outcomes:
            mine = [f for f in o.findings if f.cls is cls]
            total += len(mine)
            right = [f for f in mine if o.injected_class == cls.value]
            true += len(right)
            if o.injected_class == cls.value and right:
                detected += 1
                if o.detected_at_s is not None:
                    latencies.append(o.detected_at_s - o.fault_at_s)
                if any(f.element == o.injected_element for f in right):
                    localized += 1
                if any(o.injected_element in (f.element, *(c for c, _ in f.candidates))
                       for f in right):  # fmt: skip
                    candidate += 1
        lat = float(np.median(latencies)) if latencies else None
        out.append(
            Score(cls.value, len(injected), detected, total, true, localized, candidate, lat)
        )
    return out


def benign_false_positives(outcomes: Sequence[Outcome]) -> int:
    return sum(len(o.findings) for o in outcomes if not o.injected_class)


def suite(
    job: SimJob,
    trials: int,
    m: Model | None = None,
    settings: DetectorSettings | None = None,
    progress: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every kind of :data:`KINDS`, ``trials`` times each with its own seed."""
    m, settings = m or Model(), settings or DetectorSettings()
    outcomes = []
    for t in range(trials):
        for k, kind in enumerate(KINDS):
            o = scenario(job, kind, m, seed=100 * t + k, settings=settings)
            outcomes.append(o)
            if progress is not None:
                progress(o)
    return outcomes


__all__ = ["KINDS", "Model", "Outcome", "Score", "SimJob", "pack", "scenario", "score", "suite"]
