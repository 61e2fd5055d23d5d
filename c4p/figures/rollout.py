"""The rollout report: from the decision log, per interval and per control mode, what c4p did and
what it predicts against ECMP. (``c4p/cli/views.py`` renders the offline CLI's tables; this module
computes the figures of ``c4p report``.)

Why from the decision log: every committed plan records, per planned job, its control mode, its
predicted bus bandwidth as planned and under ECMP (kernel-chosen ports, QP numbers drawn from the
recorded seed), the flows the plan moved, the bindings it pushed (``active``) or would have
pushed (``shadow``) and the links over line rate either way; ``off`` jobs are listed by name. So
the evidence an operator takes to the next rollout tier (C4's observe-only, then a subset, then
everything) is recomputable from the log alone, online through the admin API or offline from a
store file, and two readers of one log get the same table.

Definitions (one row per interval and mode; an interval is ``[k * interval_s, (k+1) *
interval_s)`` in Unix time, so rows line up across sources and runs):

* ``jobs``: distinct jobs that a plan of the interval had in that mode;
* ``busbw_ecmp_gbps`` / ``busbw_c4p_gbps``: mean over those jobs of each job's prediction in the
  *last* plan of the interval that had it in that mode (``off`` jobs have none);
* ``replans``: plans of the interval with at least one job in that mode;
* ``moves``: flows of the mode's jobs whose path a plan of the interval changed;
* ``pushed``: bindings pushed (active) or that would have been pushed (shadow);
* ``failures``: plans of the interval triggered by a link going down or being drained that had
  a job of that mode on the link;
* ``over_ecmp`` / ``over_c4p``: in the last plan of the interval, job-link pairs over line rate
  (a link shared by two jobs of the mode counts twice).

Failed plans change nothing and are left out (the decision log keeps them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from c4p.api.v1 import intents_pb2 as pb
from c4p.store.base import (
    ControlMode,
    DecisionRecord,
    DecisionResult,
    JobPredictionRecord,
)

MODES = (ControlMode.OFF, ControlMode.SHADOW, ControlMode.ACTIVE)


class RolloutRow(BaseModel):
    """One interval and one mode (see the module docstring for each figure)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: float
    end: float
    mode: ControlMode
    jobs: int
    busbw_ecmp_gbps: float | None
    busbw_c4p_gbps: float | None
    replans: int
    moves: int
    pushed: int
    failures: int
    over_ecmp: int
    over_c4p: int

    @property
    def gain(self) -> float | None:
        """Predicted bus bandwidth under c4p over ECMP, minus 1."""
        if not self.busbw_ecmp_gbps or self.busbw_c4p_gbps is None:
            return None
        return self.busbw_c4p_gbps / self.busbw_ecmp_gbps - 1.0


class RolloutReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_s: float
    decisions: int
    """Planned decisions the report read."""
    first_sequence: int
    last_sequence: int
    rows: tuple[RolloutRow, ...]


def is_failure(trigger: str) -> bool:
    """A trigger key of a link that went down or was drained (``link X down``, ``drain X
    drained``: see :class:`c4p.controller.triggers.Key`)."""
    return (trigger.startswith("link ") and trigger.endswith(" down")) or (
        trigger.startswith("drain ") and trigger.endswith(" drained")
    )


@dataclass
class _Cell:
    jobs: set[str] = field(default_factory=set)
    last: dict[str, JobPredictionRecord] = field(default_factory=dict)
    replans: int = 0
    moves: int = 0
    pushed: int = 0
    failures: int = 0
    over_ecmp: int = 0
    over_c4p: int = 0


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rollout(decisions: Iterable[DecisionRecord], interval_s: float) -> RolloutReport:
    """The report of ``decisions`` (any order) in intervals of ``interval_s`` seconds."""
    if not math.isfinite(interval_s) or interval_s <= 0:
        raise ValueError(f"interval_s: must be > 0, got {interval_s}")
    planned = sorted(
        (d for d in decisions if d.result is DecisionResult.PLANNED), key=lambda d: d.sequence
    )
    cells: dict[tuple[int, ControlMode], _Cell] = {}
    for d in planned:
        k = math.floor(d.at / interval_s)
        modes: dict[str, ControlMode] = {j: ControlMode.OFF for j in d.jobs_off}
        modes.update({p.job_id: p.control for p in d.predictions})
        failure = any(is_failure(t) for t in d.triggers)
        on_links = set(d.jobs_on_links)
        by_mode: dict[ControlMode, list[str]] = {}
        for job, mode in modes.items():
            by_mode.setdefault(mode, []).append(job)
        for mode, jobs in by_mode.items():
            cell = cells.setdefault((k, mode), _Cell())
            cell.jobs.update(jobs)
            cell.replans += 1
            cell.failures += int(failure and bool(on_links.intersection(jobs)))
            cell.over_ecmp = cell.over_c4p = 0  # of the last plan only
        for p in d.predictions:
            cell = cells[(k, p.control)]
            cell.last[p.job_id] = p
            cell.moves += p.moved
            cell.pushed += p.bindings_pushed
            cell.over_ecmp += p.links_over_ecmp
            cell.over_c4p += p.links_over_planned
    rows = []
    for (k, mode), cell in sorted(cells.items(), key=lambda kv: (kv[0][0], MODES.index(kv[0][1]))):
        last = list(cell.last.values())
        rows.append(
            RolloutRow(
                start=k * interval_s,
                end=(k + 1) * interval_s,
                mode=mode,
                jobs=len(cell.jobs),
                busbw_ecmp_gbps=_mean([p.ecmp_busbw_gbps for p in last]),
                busbw_c4p_gbps=_mean([p.busbw_gbps for p in last]),
                replans=cell.replans,
                moves=cell.moves,
                pushed=cell.pushed,
                failures=cell.failures,
                over_ecmp=cell.over_ecmp,
                over_c4p=cell.over_c4p,
            )
        )
    return RolloutReport(
        interval_s=interval_s,
        decisions=len(planned),
        first_sequence=planned[0].sequence if planned else 0,
        last_sequence=planned[-1].sequence if planned else 0,
        rows=tuple(rows),
    )


# -- the admin API's decisions ------------------------------------------------------------------

_MODE = {
    pb.CONTROL_MODE_OFF: ControlMode.OFF,
    pb.CONTROL_MODE_SHADOW: ControlMode.SHADOW,
    pb.CONTROL_MODE_ACTIVE: ControlMode.ACTIVE,
    pb.CONTROL_MODE_UNSPECIFIED: ControlMode.ACTIVE,  # a server from before control modes
}


def from_pb(d: pb.Decision) -> DecisionRecord:
    """A decision as ``GetDecisionLog`` sends it, with the fields the report reads."""
    return DecisionRecord(
        sequence=max(1, d.sequence),
        epoch=d.epoch,
        at=d.at.ToNanoseconds() / 1e9,
        reason=d.reason,
        triggers=tuple(d.triggers),
        result=DecisionResult.FAILED
        if d.result == pb.Decision.RESULT_FAILED
        else DecisionResult.PLANNED,
        flows=d.flows,
        moved=d.moved,
        jobs_on_links=tuple(d.jobs_on_links),
        jobs_off=tuple(d.jobs_off),
        links_over_ecmp=d.links_over_ecmp,
        links_over_planned=d.links_over_planned,
        ecmp_seed=d.ecmp_seed,
        predictions=tuple(
            JobPredictionRecord(
                job_id=p.job_id,
                busbw_gbps=p.busbw_gbps,
                line_rate_gbps=p.line_rate_gbps,
                busbw_fraction=p.busbw_fraction,
                slowest_communicator=p.slowest_communicator,
                control=_MODE.get(p.control_mode, ControlMode.ACTIVE),
                ecmp_busbw_gbps=p.ecmp_busbw_gbps,
                moved=p.moved,
                bindings_pushed=p.bindings_pushed,
                links_over_ecmp=p.links_over_ecmp,
                links_over_planned=p.links_over_planned,
            )
            for p in d.predictions
        ),
    )


# -- the plot --------------------------------------------------------------------------------------

_COLOURS = {ControlMode.OFF: "tab:gray", ControlMode.SHADOW: "tab:orange"}


def plot(report: RolloutReport, path: Path) -> None:
    """Predicted bus bandwidth (ECMP dashed, c4p solid) and jobs per mode over time, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    origin = report.rows[0].start if report.rows else 0.0
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    for mode in MODES:
        rows = [r for r in report.rows if r.mode is mode]
        if not rows:
            continue
        colour = _COLOURS.get(mode, "tab:blue")
        t = [(r.start + r.end) / 2 - origin for r in rows]
        bottom.plot(t, [r.jobs for r in rows], marker="o", color=colour, label=mode.value)
        shown = [(x, r) for x, r in zip(t, rows, strict=True) if r.busbw_c4p_gbps is not None]
        if shown:
            xs = [x for x, _ in shown]
            c4p = [r.busbw_c4p_gbps for _, r in shown]
            ecmp = [r.busbw_ecmp_gbps for _, r in shown]
            top.plot(xs, c4p, marker="o", color=colour, label=f"{mode.value}: c4p")
            top.plot(xs, ecmp, marker="x", ls="--", color=colour, label=f"{mode.value}: ECMP")
    top.set_ylabel("predicted busbw per job (Gb/s)")
    top.legend(fontsize="small")
    top.grid(alpha=0.3)
    bottom.set_ylabel("jobs")
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel(f"seconds since the first interval (intervals of {report.interval_s:g} s)")
    bottom.legend(fontsize="small")
    bottom.grid(alpha=0.3)
    figure.suptitle("c4p rollout: predicted bus bandwidth by control mode")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
