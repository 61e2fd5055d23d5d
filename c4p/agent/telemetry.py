"""The host agent's telemetry: its ranks' REPORT samples folded into per-step summaries.

Why the agent folds and the ranks do not: a rank's report call must cost nanoseconds, so it only
appends raw samples to a ring; a step's summary needs every local rank's arrival and completion
and every transfer of the step, which only the agent sees together. The controller then gets one
:class:`~c4p.detector.summary.StepSummary` per host, communicator and step (per connection: bytes,
busy time, transfers; per rank: compute gap and wait), instead of millions of samples.

Every structure here is bounded (open steps, intervals per connection, connections, finished
steps waiting to be sent): past a bound a sample is dropped and counted, and the count reaches
the controller in the next :class:`~c4p.detector.summary.ProgressReport`. Nothing here waits:
:meth:`TelemetryBook.take` runs in the agent's event loop for each REPORT frame, and
:meth:`TelemetryBook.collect` is called by the controller session at its bounded rate.

Clocks: every time in a report is the rank's ``CLOCK_MONOTONIC``, the same clock as this
process's :func:`time.monotonic_ns` (one host), so "how long since" is meaningful here.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from c4p.agent.wire import STEP_UNKNOWN, Arrive, Complete, Report
from c4p.api.v1 import agent_pb2 as pb
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


@dataclass(frozen=True)
class Limits:
    """The bounds of one agent's telemetry (samples past them are dropped and counted)."""

    linger_ns: int = 200_000_000  # a step closes this long after its last local completion
    max_open_steps: int = 256  # per job, across communicators
    max_intervals: int = 1024  # per connection and step, after merging
    max_connections: int = 65_536  # per job
    max_ranks: int = 4_096  # (communicator, rank) pairs per job
    max_jobs: int = 1_024
    max_finished: int = 4_096  # closed steps waiting for the controller
    progress_every_ns: int = 1_000_000_000
    max_steps_per_report: int = 256
    max_entries_per_report: int = 50_000  # ranks + connections in one message
    # What the agent folds per second at most (a token bucket holding one second): beyond it a
    # REPORT frame is counted and dropped unread, so a flood of samples costs the agent's event
    # loop (which also serves bindings and the controller stream) a bounded share of a core.
    max_samples_per_s: int = 50_000
    forget_after_ns: int = 600_000_000_000  # a job with no sample for this long is forgotten


_Key = tuple[str, int, int, int, int]  # a ConnectionKey's fields


@dataclass
class _Step:
    collective: str = ""
    bytes: int = 0
    plan_epoch: int = 0
    arrived: dict[int, int] = field(default_factory=dict)  # rank -> t
    compute: dict[int, int] = field(default_factory=dict)  # rank -> ns since its last completion
    completed: dict[int, int] = field(default_factory=dict)
    intervals: dict[_Key, list[tuple[int, int]]] = field(default_factory=dict)
    moved: dict[_Key, list[int]] = field(default_factory=dict)  # [bytes, transfers]
    touched_ns: int = 0


@dataclass
class _Rank:
    last_arrived: int = -1
    last_completed: int = -1
    arrived_ns: int = 0
    completed_ns: int = 0


@dataclass
class _Connection:
    bytes_total: int = 0
    last_end_ns: int = 0


@dataclass
class _Job:
    job_id: str
    steps: dict[tuple[str, int], _Step] = field(default_factory=dict)  # insertion = age
    ranks: dict[tuple[str, int], _Rank] = field(default_factory=dict)
    connections: dict[_Key, _Connection] = field(default_factory=dict)
    ring_dropped: dict[int, int] = field(default_factory=dict)  # session -> cumulative
    dropped: int = 0  # since the last progress report
    progress_due_ns: int = 0
    seen_ns: int = 0  # when its last frame came


def _posted(job: _Job) -> dict[_Key, int]:
    """Per connection, the transfers its sender started in a call still open here that it has
    not completed: libc4p reports completed transfers only, but a ring sends a round on every
    QP of a rank pair together, so within an open step a QP with fewer completed transfers than
    its siblings (same communicator, ranks and channel) has that many in flight. Why it
    matters: in a hang every QP is idle, the one that stopped it only a little longer; "posted
    and never completed" names it (the detector's ``hung_connections``), where the downstream
    QPs that merely wait have nothing started. A pair whose QPs all stopped shows nothing here
    (no sibling started more), and idle time decides as before."""
    out: dict[_Key, int] = {}
    for step in job.steps.values():
        if not step.arrived or set(step.arrived) <= set(step.completed):
            continue  # not a call a local rank is inside of
        most: dict[tuple[str, int, int, int], int] = {}
        for key, moved in step.moved.items():
            pair = (key[0], key[1], key[2], key[3])
            most[pair] = max(most.get(pair, 0), moved[1])
        if not most:
            continue
        for key in job.connections:
            want = most.get((key[0], key[1], key[2], key[3]), 0)
            done = step.moved.get(key)
            behind = want - (done[1] if done is not None else 0)
            if behind > 0:
                out[key] = out.get(key, 0) + behind
    return out


def busy_ns(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of ``[start, end)`` intervals."""
    total, reach = 0, -1
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class TelemetryBook:
    """Per-job accumulation of this host's ranks' reports (see the module docstring)."""

    def __init__(
        self,
        host: str,
        limits: Limits | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.host = host
        self.limits = limits or Limits()
        self.clock = clock
        self.jobs: dict[str, _Job] = {}
        self.finished: deque[StepSummary] = deque()
        self._tokens = float(self.limits.max_samples_per_s)
        self._filled_ns = clock()
        self.samples = 0  # taken from ranks
        self.dropped = 0  # by the agent (over a bound), since it started
        self.ring_dropped = 0  # reported by the ranks' rings, since the agent started

    # -- taking samples ----------------------------------------------------------------------

    def admit(self, job_id: str, samples: int) -> bool:
        """Whether a frame of ``samples`` fits the budget now; if not, it is counted as dropped
        (for the job's next progress report) and the caller drops it unread."""
        now = self.clock()
        rate = self.limits.max_samples_per_s
        self._tokens = min(float(rate), self._tokens + (now - self._filled_ns) * rate / 1e9)
        self._filled_ns = now
        if samples <= self._tokens:
            self._tokens -= samples
            return True
        self.dropped += samples
        job = self.jobs.get(job_id)
        if job is not None:
            job.dropped += samples
        return False

    def take(self, job_id: str, plan_epoch: int, session: int, report: Report) -> None:
        """Fold one REPORT frame of one rank session (``session``: the agent's id for it)."""
        job = self.jobs.get(job_id)
        if job is None:
            if len(self.jobs) >= self.limits.max_jobs:
                self.dropped += (
                    len(report.transfers) + len(report.arrivals) + len(report.completions)
                )
                return
            job = self.jobs[job_id] = _Job(
                job_id, progress_due_ns=self.clock(), seen_ns=self.clock()
            )
        before = job.ring_dropped.get(session, 0)
        if report.dropped > before:
            job.dropped += report.dropped - before
            self.ring_dropped += report.dropped - before
            job.ring_dropped[session] = report.dropped
        now = self.clock()
        job.seen_ns = now
        # Arrivals and completions in time order: a rank's compute gap is measured from its
        # previous completion (the frame lists them by kind, not by time).
        events: list[Arrive | Complete] = [*report.arrivals, *report.completions]
        events.sort(key=lambda e: (e.t_ns, isinstance(e, Complete)))
        for event in events:
            self.samples += 1
            rank = self._rank(job, event.communicator, event.rank)
            step = self._step(job, event.communicator, event.step, plan_epoch, now)
            if rank is None or step is None:
                continue
            step.touched_ns = now
            if isinstance(event, Arrive):
                step.collective = event.collective
                step.bytes = event.bytes
                step.arrived[event.rank] = event.t_ns
                gap = event.t_ns - rank.completed_ns if rank.last_completed >= 0 else 0
                step.compute[event.rank] = max(gap, 0)
                rank.last_arrived = max(rank.last_arrived, event.step)
                rank.arrived_ns = event.t_ns
            else:
                step.completed[event.rank] = event.t_ns
                rank.last_completed = max(rank.last_completed, event.step)
                rank.completed_ns = event.t_ns
        # The transfers, with the lookups hoisted: thousands per frame. Connections are keyed by
        # plain tuples here (a dataclass's generated hash is several times slower).
        last_id: tuple[str, int] | None = None
        current: _Step | None = None
        for t in report.transfers:
            number = t.step
            if number == STEP_UNKNOWN:  # attribute by time: the src rank's latest call
                known = job.ranks.get((t.communicator, t.src_rank))
                if known is None or known.last_arrived < 0:
                    job.dropped += 1
                    self.dropped += 1
                    continue
                number = known.last_arrived
            key = t[:5]
            conn = job.connections.get(key)
            if conn is None:
                if len(job.connections) >= self.limits.max_connections:
                    job.dropped += 1
                    self.dropped += 1
                    continue
                conn = job.connections[key] = _Connection()
            conn.bytes_total += t.bytes
            if t.end_ns > conn.last_end_ns:
                conn.last_end_ns = t.end_ns
            if (t.communicator, number) != last_id:
                last_id = (t.communicator, number)
                current = self._step(job, t.communicator, number, plan_epoch, now)
                if current is not None:
                    current.touched_ns = now
            if current is None:
                continue
            spans = current.intervals.get(key)
            if spans is None:
                spans = current.intervals[key] = []
                current.moved[key] = [0, 0]
            spans.append((t.start_ns, t.end_ns))
            if len(spans) > self.limits.max_intervals:
                spans[:] = _merged(spans)
                if len(spans) > self.limits.max_intervals:
                    spans.pop()
                    job.dropped += 1
                    self.dropped += 1
                    continue
            moved = current.moved[key]
            moved[0] += t.bytes
            moved[1] += 1
        self.samples += len(report.transfers)

    def _rank(self, job: _Job, comm: str, number: int) -> _Rank | None:
        rank = job.ranks.get((comm, number))
        if rank is None:
            if len(job.ranks) >= self.limits.max_ranks:
                job.dropped += 1
                self.dropped += 1
                return None
            rank = job.ranks[(comm, number)] = _Rank()
        return rank

    def _step(self, job: _Job, comm: str, number: int, epoch: int, now: int) -> _Step | None:
        step = job.steps.get((comm, number))
        if step is not None:
            return step
        if len(job.steps) >= self.limits.max_open_steps:  # evict the oldest open step
            (old_comm, old_number), old = next(iter(job.steps.items()))
            del job.steps[(old_comm, old_number)]
            if old.arrived and set(old.arrived) <= set(old.completed):
                self._finish(job, old_comm, old_number, old)
            else:  # never completed here: its samples go, the progress report shows the hang
                job.dropped += 1
                self.dropped += 1
        step = job.steps[(comm, number)] = _Step(plan_epoch=epoch, touched_ns=now)
        return step

    # -- closing steps and reporting ---------------------------------------------------------

    def _finish(self, job: _Job, comm: str, number: int, step: _Step) -> None:
        if len(self.finished) >= self.limits.max_finished:
            job.dropped += 1
            self.dropped += 1
            return
        ranks = tuple(
            RankStep(rank, step.compute.get(rank, 0), max(step.completed[rank] - t, 0))
            for rank, t in sorted(step.arrived.items())
            if rank in step.completed
        )
        connections = tuple(
            ConnectionStep(ConnectionKey(*key), moved[0], busy_ns(step.intervals[key]), moved[1])
            for key, moved in sorted(step.moved.items())
        )
        self.finished.append(
            StepSummary(
                job_id=job.job_id,
                host=self.host,
                communicator=comm,
                step=number,
                plan_epoch=step.plan_epoch,
                collective=step.collective,
                bytes=step.bytes,
                ranks=ranks,
                connections=connections,
            )
        )

    def close_steps(self, now: int | None = None) -> None:
        """Close every step whose local ranks all completed at least ``linger_ns`` ago."""
        now = self.clock() if now is None else now
        for job in self.jobs.values():
            for (comm, number), step in list(job.steps.items()):
                done = step.arrived and set(step.arrived) <= set(step.completed)
                if done and now - step.touched_ns >= self.limits.linger_ns:
                    del job.steps[(comm, number)]
                    self._finish(job, comm, number, step)

    def _progress(self, job_id: str, job: _Job, now: int) -> ProgressReport:
        ranks = []
        for (comm, number), r in sorted(job.ranks.items()):
            inside = r.last_arrived > r.last_completed
            ranks.append(
                RankProgress(
                    communicator=comm,
                    rank=number,
                    last_arrived=r.last_arrived,
                    last_completed=r.last_completed,
                    inside_ns=max(now - r.arrived_ns, 0) if inside else 0,
                    idle_ns=max(now - r.completed_ns, 0)
                    if not inside and r.last_completed >= 0
                    else 0,
                )
            )
        posted = _posted(job)
        connections = tuple(
            ConnectionProgress(
                ConnectionKey(*key),
                c.bytes_total,
                max(now - c.last_end_ns, 0),
                posted.get(key, 0),
            )
            for key, c in sorted(job.connections.items())
        )
        dropped, job.dropped = job.dropped, 0
        return ProgressReport(job_id, self.host, tuple(ranks), connections, dropped)

    def collect(self, now: int | None = None) -> TelemetryReport | None:
        """What to send now: closed steps (at most ``max_steps_per_report``) and the progress
        of every job whose period is due, within ``max_entries_per_report`` ranks and
        connections (one gRPC message stays well under its 4 MiB limit; what does not fit goes
        in the next one); ``None`` when there is nothing."""
        now = self.clock() if now is None else now
        forget, budget = self.limits.forget_after_ns, self.limits.max_entries_per_report
        self.close_steps(now)
        steps: list[StepSummary] = []
        entries = 0
        while self.finished and len(steps) < self.limits.max_steps_per_report:
            size = len(self.finished[0].ranks) + len(self.finished[0].connections)
            if steps and entries + size > budget:
                break
            entries += size
            steps.append(self.finished.popleft())
        progress: list[ProgressReport] = []
        for job_id in [j for j, job in self.jobs.items() if now - job.seen_ns > forget]:
            del self.jobs[job_id]  # its ranks are gone (a job that ended): bounded memory
        for job_id, job in self.jobs.items():
            size = len(job.ranks) + len(job.connections)
            if now >= job.progress_due_ns and (entries + size <= budget or not steps + progress):
                job.progress_due_ns = now + self.limits.progress_every_ns
                progress.append(self._progress(job_id, job, now))
                entries += size
        if not steps and not progress:
            return None
        return TelemetryReport(self.host, tuple(steps), tuple(progress))

    def forget(self, job_id: str) -> None:
        """Drop a job's state (its ranks are gone)."""
        self.jobs.pop(job_id, None)


# -- to the controller --------------------------------------------------------------------------


def _key_pb(key: ConnectionKey) -> pb.TelemetryConnectionKey:
    return pb.TelemetryConnectionKey(
        communicator=key.communicator,
        src_rank=key.src_rank,
        dst_rank=key.dst_rank,
        channel=key.channel,
        qp=key.qp,
    )


def report_pb(report: TelemetryReport) -> pb.TelemetryReport:
    """The ``c4p.v1`` message of a report (the controller checks it field by field)."""
    return pb.TelemetryReport(
        host=report.host,
        steps=[
            pb.TelemetryStepSummary(
                job_id=s.job_id,
                host=s.host,
                communicator=s.communicator,
                step=s.step,
                plan_epoch=s.plan_epoch,
                collective=s.collective,
                bytes=s.bytes,
                ranks=[
                    pb.TelemetryRankStep(rank=r.rank, compute_ns=r.compute_ns, wait_ns=r.wait_ns)
                    for r in s.ranks
                ],
                connections=[
                    pb.TelemetryConnectionStep(
                        key=_key_pb(c.key), bytes=c.bytes, busy_ns=c.busy_ns, transfers=c.transfers
                    )
                    for c in s.connections
                ],
            )
            for s in report.steps
        ],
        progress=[
            pb.TelemetryProgress(
                job_id=p.job_id,
                host=p.host,
                ranks=[
                    pb.TelemetryRankProgress(
                        communicator=r.communicator,
                        rank=r.rank,
                        last_arrived=r.last_arrived,
                        last_completed=r.last_completed,
                        inside_ns=r.inside_ns,
                        idle_ns=r.idle_ns,
                    )
                    for r in p.ranks
                ],
                connections=[
                    pb.TelemetryConnectionProgress(
                        key=_key_pb(c.key),
                        bytes_total=c.bytes_total,
                        idle_ns=c.idle_ns,
                        posted=c.posted,
                    )
                    for c in p.connections
                ],
                dropped=p.dropped,
            )
            for p in report.progress
        ],
    )
