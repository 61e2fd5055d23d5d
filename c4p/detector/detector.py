"""The detector: summaries and progress in, findings out (stateful, but no I/O, no clock).

Per job and communicator it keeps a :class:`~c4p.detector.frame.StepWindow`, the baseline
version (plan epoch, collective, message size) of the steps it judges, per connection a streak
of slow steps and a grace deadline, and per rank a streak of late steps. Why versions: a re-plan
or a new message size changes every rate at once; the streaks start over instead of comparing
across the change. Why grace per connection: a connection whose path the controller just
changed may stall while its QP moves (a new source port, a cold path); it is not judged, nor
used as a healthy reference, for ``grace_steps`` steps *and* ``grace_s`` seconds, whichever
ends later: a re-plan reaches every rank through its agent and the rank's next lookup, which
takes about the same wall time however fast the job steps (in the lab, 30 steps a second, a
grace of 5 steps ended before the ranks had moved). Why streaks: one slow step is noise,
``persist_steps`` in a row under one version is a syndrome.

A job restart (the same communicator's steps jump ahead by ``restart_gap_steps`` or start over
from a lower number: a new incarnation) starts a new baseline for the whole communicator, and
every connection and rank of it gets the same grace: a restarted job's first steps (connections
set up, caches cold, ranks starting one after another) say nothing about the fabric.

Time is passed in (``evaluate(now_s)``), so the simulation and the tests replay it exactly.
The hang rules, over progress reports, are :mod:`c4p.detector.hangs`; the state kept between
steps is :mod:`c4p.detector.state`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from c4p.detector import hangs, localize
from c4p.detector.findings import DetectorSettings, ElementKind, Finding, FindingClass
from c4p.detector.frame import StepFrame, join
from c4p.detector.paths import PathIndex
from c4p.detector.rules import busbw_gbps, late_ranks, slow_connections
from c4p.detector.state import CommState, JobState, JobStats, connection_name
from c4p.detector.summary import TelemetryReport

IntArray = npt.NDArray[np.int64]
_POPCOUNT = np.array([bin(i).count("1") for i in range(16)], dtype=np.int64)


class Detector:
    """See the module docstring. Feed :meth:`accept`, call :meth:`evaluate` periodically."""

    def __init__(self, settings: DetectorSettings | None = None) -> None:
        self.settings = settings or DetectorSettings()
        self.jobs: dict[str, JobState] = {}
        self.open: dict[tuple[str, FindingClass, str], Finding] = {}
        self._last_confirmed: dict[tuple[str, FindingClass, str], int] = {}
        self._pending: dict[tuple[str, FindingClass, str], tuple[float, int]] = {}
        """Slowdowns confirmed but not yet for ``persist_s``: (first confirmed at, last tick)."""
        self.steps_judged = 0
        self.stats: dict[str, JobStats] = {}
        """Per job since the last :meth:`take_stats`: what ``c4p report`` shows."""

    # -- input ----------------------------------------------------------------------------------

    def _comm(self, job_id: str, communicator: str) -> CommState:
        job = self.jobs.get(job_id)
        if job is None:
            job = self.jobs[job_id] = JobState()
        comm = job.comms.get(communicator)
        if comm is None:
            comm = job.comms[communicator] = CommState()
        return comm

    def set_paths(self, job_id: str, communicator: str, paths: PathIndex | None) -> None:
        """The plan in force for a communicator (connections whose path changes get grace)."""
        self._comm(job_id, communicator).paths = paths

    def take_stats(self) -> dict[str, JobStats]:
        """The stats gathered since the last call (and start over)."""
        out, self.stats = self.stats, {}
        return out

    def forget(self, job_id: str) -> None:
        """A job ended: drop its state and its open findings."""
        self.jobs.pop(job_id, None)
        for key in [k for k in self.open if k[0] == job_id]:
            del self.open[key]
            self._last_confirmed.pop(key, None)
        for key in [k for k in self._pending if k[0] == job_id]:
            del self._pending[key]

    def accept(self, report: TelemetryReport) -> None:
        last: tuple[str, str, CommState] | None = None
        for summary in report.steps:  # one report: mostly one job and communicator
            if last is None or last[:2] != (summary.job_id, summary.communicator):
                last = (
                    summary.job_id,
                    summary.communicator,
                    self._comm(summary.job_id, summary.communicator),
                )
            last[2].window.add(summary)
        for progress in report.progress:
            self.jobs.setdefault(progress.job_id, JobState()).progress[progress.host] = progress

    # -- evaluation -----------------------------------------------------------------------------

    def evaluate(self, now_s: float) -> list[Finding]:
        """Judge every complete step and the latest progress; the findings opened or cleared
        since the last call."""
        out: list[Finding] = []
        for job_id, job in self.jobs.items():
            if job.first_seen_s is None:
                job.first_seen_s = now_s
            for name, comm in job.comms.items():
                found: list[Finding] = []
                for parts in comm.window.ready():
                    comm.judged_at[parts[0].step] = now_s
                    found.extend(self._judge(comm, join(parts, comm.keys), now_s))
                found.extend(self._hangs(job_id, name, comm, job))
                while len(comm.judged_at) > 256:
                    del comm.judged_at[next(iter(comm.judged_at))]
                out.extend(_timed(f, comm.judged_at, now_s) for f in found)
            out.extend(_timed(f, {}, now_s) for f in self._startup(job_id, job, now_s))
        return out

    def _confirm(self, finding: Finding, tick: int, now_s: float | None = None) -> list[Finding]:
        """Open a finding (or note that an open one still holds). With ``now_s`` (the per-step
        slowdowns), only once the same element has been confirmed for ``persist_s`` seconds
        without a gap of ``clear_steps``: see :class:`DetectorSettings`."""
        key = finding.key
        if key in self.open:
            self._last_confirmed[key] = tick
            return []
        if now_s is not None and self.settings.persist_s > 0:
            since = self._pending.get(key)
            if since is None or tick - since[1] >= self.settings.clear_steps:
                since = (now_s, tick)
            self._pending[key] = (since[0], tick)
            if now_s - since[0] < self.settings.persist_s:
                if len(self._pending) > 4096:  # bounded: forget the stalest
                    del self._pending[min(self._pending, key=lambda k: self._pending[k][1])]
                return []
            del self._pending[key]
        self._last_confirmed[key] = tick
        self.open[key] = finding
        return [finding]

    def _expire(self, job_id: str, communicator: str, step: int) -> list[Finding]:
        """Clear this communicator's step-based findings not confirmed for ``clear_steps``."""
        out = []
        for key, f in list(self.open.items()):
            if f.job_id != job_id or f.communicator != communicator:
                continue
            last = self._last_confirmed.get(key, step)
            hang = f.cls in (FindingClass.COMM_HANG, FindingClass.NONCOMM_HANG)
            if (hang and step > f.step) or (not hang and step - last >= self.settings.clear_steps):
                del self.open[key]
                self._last_confirmed.pop(key, None)
                out.append(_cleared(f, step))
        return out

    def _judge(self, comm: CommState, frame: StepFrame, now_s: float) -> list[Finding]:
        s = self.settings
        self.steps_judged += 1
        restarted = comm.incarnation != comm.window.incarnation or (
            comm.step >= 0 and frame.step > comm.step + s.restart_gap_steps
        )
        if restarted:  # a new incarnation: new baseline, and the whole communicator settles
            comm.incarnation, comm.step = comm.window.incarnation, frame.step
            comm.version = None
            comm.settle_until = (frame.step + s.grace_steps, now_s + s.grace_s)
        comm.step = max(comm.step, frame.step)
        now_ns = int(now_s * 1e9)
        if len(comm.seen_ranks) < len(frame.rank) or frame.step % 64 == 0:  # new ranks: cheap check
            for r, h in zip(frame.rank.tolist(), frame.rank_host.tolist(), strict=True):
                comm.rank_host.setdefault(r, frame.hosts[h])
            comm.seen_ranks.update(comm.rank_host)
        slot = comm.slots(frame.conn)
        if frame.version != comm.version:  # a new baseline: every streak starts over
            comm.version = frame.version
            comm.streak[:] = 0
            comm.history[:] = 0
            comm.late.clear()
        rows = np.full(len(slot), -1, dtype=np.int64)
        if comm.paths is not None:
            rows = comm.paths.rows(frame.conn)
            sig = np.where(rows >= 0, comm.paths.signature[np.maximum(rows, 0)], 0)
            moved = (comm.signature[slot] != 0) & (comm.signature[slot] != sig)
            comm.grace_until[slot[moved]] = frame.step + s.grace_steps
            comm.grace_until_ns[slot[moved]] = now_ns + int(s.grace_s * 1e9)
            comm.signature[slot] = sig
        settling = comm.settle_until[0] > frame.step or comm.settle_until[1] > now_s
        grace = (
            (comm.grace_until[slot] > frame.step)
            | (comm.grace_until_ns[slot] > now_ns)
            | np.full(len(slot), settling)
        )
        out: list[Finding] = []
        slow = slow_connections(frame, grace, s)
        slow_ranks = np.zeros(0, dtype=np.int64)
        if slow is not None:
            streak = np.where(slow.slow, comm.streak[slot] + 1, 0)
            first = np.where(streak == 1, frame.step, comm.first_slow[slot])
            comm.streak[slot], comm.first_slow[slot] = streak, first
            history = ((comm.history[slot] << 1) | slow.slow) & 0xF
            comm.history[slot] = np.where(slow.judged, history, 0)
            confirmed = slow.slow & (streak >= s.persist_steps)
            slow_ranks = np.unique(np.concatenate([frame.src[slow.slow], frame.dst[slow.slow]]))
            if bool(confirmed.any()):
                # localize on the connections slow in most recent steps (a lossy link's flows
                # are not slow every step) against those slow in none of them
                recent = _POPCOUNT[comm.history[slot]]
                bad = confirmed | (slow.judged & (recent >= 2))
                good = slow.judged & (recent == 0)
                f = self._slowdown(comm, frame, slow, confirmed, bad, good, rows, first)
                out.extend(self._confirm(f, frame.step, now_s))
        late = None if settling else late_ranks(frame, slow_ranks, s)
        if len(frame.wait_ns):
            stats = self.stats.setdefault(frame.job_id, JobStats())
            stats.steps += 1
            stats.wait_s += float(np.median(frame.wait_ns)) / 1e9
            comm_ns = float(frame.wait_ns.min())  # the last rank to arrive waits only for data
            stats.busbw_sum += busbw_gbps(frame.collective, frame.bytes, len(frame.rank), comm_ns)
        if late is not None:
            comm.step_ns = (
                late.step_ns if comm.step_ns == 0 else 0.8 * comm.step_ns + 0.2 * late.step_ns
            )
            late_now = set(frame.rank[late.late].tolist())
            for r in list(comm.late):
                if r not in late_now:
                    del comm.late[r]
            for i in np.flatnonzero(late.late).tolist():
                r = int(frame.rank[i])
                n, first_step = comm.late.get(r, (0, frame.step))
                comm.late[r] = (n + 1, first_step)
                if n + 1 >= s.persist_steps:
                    f = Finding(
                        frame.job_id,
                        FindingClass.COMPUTE_SLOWDOWN,
                        ElementKind.RANK,
                        f"rank {r}",
                        min(1.0, (n + 1) / (2 * s.persist_steps) + 0.5),
                        frame.communicator,
                        frame.step,
                        first_step,
                        host=frame.hosts[int(frame.rank_host[i])],
                        evidence=(
                            f"step {frame.step}: compute {frame.compute_ns[i] / 1e6:.1f} ms "
                            f"against a median {late.compute_median / 1e6:.1f} ms; it waited "
                            f"{frame.wait_ns[i] / 1e6:.1f} ms, its peers a median "
                            f"{late.wait_median / 1e6:.1f} ms; late {n + 1} steps in a row",
                        ),
                    )
                    out.extend(self._confirm(f, frame.step, now_s))
        out.extend(self._expire(frame.job_id, frame.communicator, frame.step))
        return out

    def _slowdown(
        self,
        comm: CommState,
        frame: StepFrame,
        slow: object,
        confirmed: npt.NDArray[np.bool_],
        bad: npt.NDArray[np.bool_],
        good: npt.NDArray[np.bool_],
        rows: IntArray,
        first: IntArray,
    ) -> Finding:
        from c4p.detector.rules import SlowConnections

        assert isinstance(slow, SlowConnections)
        s = self.settings
        idx = np.flatnonzero(confirmed)
        order = idx[np.argsort(slow.rates[idx])][: s.max_evidence]
        evidence = [
            f"step {frame.step}: {len(idx)} of {int(slow.judged.sum())} connections below "
            f"{s.slow_ratio:g}x the median {slow.median:.1f} Gbit/s (MAD {slow.mad:.2f}) "
            f"for {s.persist_steps}+ steps"
        ] + [
            f"{connection_name(frame.communicator, int(frame.conn[i]))}: {slow.rates[i]:.1f} Gbit/s"
            for i in order
        ]
        located = localize.NOWHERE
        if comm.paths is not None and bool((rows[idx] >= 0).any()):
            located = localize.tomography(comm.paths, rows[bad], rows[good], s.max_candidates)
        judged = slow.judged
        pattern = localize.rank_pattern(frame.src[judged], frame.dst[judged], bad[judged])
        kind, element, conf = ElementKind.CONNECTION, "", 0.0
        host = ""
        if located.kind:
            kind, element, conf = ElementKind(located.kind), located.element, located.confidence
            evidence.append(
                f"{located.kind} {located.element}: on {located.bad_paths} of {len(idx)} slow "
                f"paths and {located.good_paths} healthy ones"
            )
        if pattern is not None:
            rank, share = pattern
            host = comm.rank_host.get(rank, "")
            evidence.append(f"delay matrix: rank {rank} ({host}) explains {share:.0%} of them")
            if not located.kind:
                kind, element, conf = ElementKind.RANK, f"rank {rank}", share
        if not element:
            element = connection_name(frame.communicator, int(frame.conn[order[0]]))
            conf = 1.0 / len(idx)
        return Finding(
            frame.job_id,
            FindingClass.COMM_SLOWDOWN,
            kind,
            element,
            round(conf, 3),
            frame.communicator,
            frame.step,
            int(first[idx].min()),
            host=host,
            candidates=located.candidates,
            evidence=tuple(evidence[: s.max_evidence + 3]),
        )

    def _hangs(self, job_id: str, name: str, comm: CommState, job: JobState) -> list[Finding]:
        return hangs.hang_findings(self.settings, self._confirm, job_id, name, comm, job)

    def _startup(self, job_id: str, job: JobState, now_s: float) -> list[Finding]:
        """Planned ranks that never reported, once the job has reported for ``startup_s``."""
        assert job.first_seen_s is not None
        if now_s - job.first_seen_s < self.settings.startup_s:
            return []
        out: list[Finding] = []
        for name, comm in job.comms.items():
            if comm.paths is None or not comm.seen_ranks:
                continue
            planned = set((comm.paths.ids >> 40).tolist()) | set(
                ((comm.paths.ids >> 16) & 0xFFFFFF).tolist()
            )
            for r in sorted(planned - comm.seen_ranks)[: self.settings.max_candidates * 4]:
                f = Finding(job_id, FindingClass.STARTUP, ElementKind.RANK, f"rank {r}", 1.0, name,
                            comm.step, comm.step,
                            evidence=(f"rank {r} is in the plan but never reported in "
                                      f"{now_s - job.first_seen_s:.0f} s",))  # fmt: skip
                out.extend(self._confirm(f, comm.step))
        return out


def _timed(f: Finding, judged_at: dict[int, float], now_s: float) -> Finding:
    """Stamp when the syndrome began (its first step was judged; for a hang, the step before
    the one that never ended) and when it was found."""
    started = judged_at.get(f.first_step, judged_at.get(f.first_step - 1, now_s))
    return replace(f, started_s=f.started_s or started, detected_s=now_s)


def _cleared(f: Finding, step: int) -> Finding:
    return Finding(f.job_id, f.cls, f.kind, f.element, f.confidence, f.communicator, step,
                   f.first_step, f.host, f.candidates, f.evidence, cleared=True)  # fmt: skip


def findings_of(
    detector: Detector, reports: Iterable[TelemetryReport], now_s: float
) -> list[Finding]:
    """Feed reports and evaluate once (a convenience for replays)."""
    for r in reports:
        detector.accept(r)
    return detector.evaluate(now_s)
