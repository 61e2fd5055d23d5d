"""The response by tier: what a finding leads to, under the job's control mode.

C4's conservative escalation, and c4p's limits: c4p steers paths, so the one thing it does on
its own is to stop using a suspect *link* (drained through the same damped tracker as an
operator's drain, the affected jobs re-planned); a suspect *rank* or host is reported (an event
on ``WatchEvents`` and an optional webhook) for the scheduler to isolate and restart, because
c4p never kills jobs. Per job, the control mode decides:

* ``off``: the finding is dropped (the job asked not to be steered; nor watched);
* ``shadow``: the event says what would be done (``acted`` false), nothing is done;
* ``active``: the drain happens; reports go to the webhook as well.

A *host* link (a NIC to its leaf) is never drained on the detector's word: a host has one or a
few such links, so draining one can leave the job's ranks on that host with no path at all (the
job unplannable until an operator restores it), which is the scheduler's call, not the path
controller's. A suspect host link is reported like a rank, naming the host and its NIC port, with
the evidence.

Every action is reversible (``c4p admin restore LINK``; the drain's hold-down and damping
apply) and recorded: the event carries the evidence, and the drain's reason names the event,
so the decision log's trigger leads back to the samples. Pure: the service does the I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import Field, field_validator

from c4p.detector.findings import ElementKind, Finding, FindingClass
from c4p.store.base import ControlMode
from topology.base import Frozen


class DetectorConfig(Frozen):
    """``detector:`` in the serve config."""

    enabled: bool = Field(default=True, description="Judge the agents' telemetry.")
    webhook_url: str = Field(default="", description="POST acted events here as JSON.")
    webhook_retries: int = Field(default=3, ge=0, le=10)
    webhook_timeout_s: float = Field(default=2.0, gt=0, le=30)
    stats_s: float = Field(default=60.0, gt=0, description="Per-job stats event period.")

    @field_validator("webhook_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r}: an http:// or https:// URL")
        return value


DRAIN_CONFIDENCE = 0.5
"""A link is drained only when it explains the slow paths at least this well (below: several
links explain them as well, and draining one at random is not conservative)."""


class Action(StrEnum):
    DRAIN = "drain"  # stop using a link (reversible: restore)
    REPORT = "report"  # tell the scheduler (event, webhook)
    NONE = "none"  # a cleared finding, or stats


class EventKind(StrEnum):
    FINDING = "finding"
    CLEARED = "cleared"
    STATS = "stats"


@dataclass(frozen=True)
class Event:
    """What ``WatchEvents`` streams and the webhook posts (see the module docstring)."""

    sequence: int
    at: float  # unix time
    kind: EventKind
    job_id: str
    mode: str = ""
    action: Action = Action.NONE
    acted: bool = False
    detail: str = ""
    finding: Finding | None = None
    latency_s: float = 0.0  # syndrome start -> detection
    steps: int = 0  # STATS: steps judged in the interval
    wait_s: float = 0.0  # STATS: the steps' median collective wait, summed
    busbw_gbps: float = 0.0  # STATS: mean bus bandwidth of the steps
    interval_s: float = 0.0
    truth: str = ""  # "tp" / "fp" where a replay knows (a simulation, the lab); else ""


def decide(
    finding: Finding, mode: ControlMode, host_end: str = ""
) -> tuple[Action, bool, str] | None:
    """The action for a finding under a mode: (action, acted, detail); ``None``: ignore.

    ``host_end``: for a finding that names a link, the link's host end (``host:port``) when it
    is a host link, which is reported and never drained (see the module docstring)."""
    if mode is ControlMode.OFF:
        return None
    if finding.cleared:
        return Action.NONE, False, "syndrome gone"
    active = mode is ControlMode.ACTIVE
    verb = "reported" if active else "would report"
    if finding.kind is ElementKind.LINK and host_end:
        host, _, port = host_end.partition(":")
        return (
            Action.REPORT,
            active,
            f"{verb} host link {finding.element} (host {host}, NIC port {port}) for the "
            "scheduler to isolate; "
            "host links are never drained automatically",
        )
    drainable = (
        finding.kind is ElementKind.LINK
        and finding.cls in (FindingClass.COMM_SLOWDOWN, FindingClass.COMM_HANG)
        and finding.confidence >= DRAIN_CONFIDENCE
    )
    if drainable:
        verb = "drained" if active else "would drain"
        return Action.DRAIN, active, f"{verb} {finding.element}; undo: c4p admin restore"
    what = finding.element + (f" on {finding.host}" if finding.host else "")
    return Action.REPORT, active, f"{verb} {what} for the scheduler to isolate"


def drain_reason(event: Event) -> str:
    """The drain's reason (stored with it, shown by ``c4p admin fabric``): the event's number
    leads to the evidence."""
    f = event.finding
    assert f is not None
    return (f"c4p detector event {event.sequence}: {f.cls.value} in job {f.job_id}, "
            f"confidence {f.confidence:.2f}")[:256]  # fmt: skip


@dataclass
class EventLog:
    """The last ``keep`` events, numbered from 1 (a watcher resumes after a number)."""

    keep: int = 10_000
    events: deque[Event] = field(default_factory=deque)
    last: int = 0

    def next_sequence(self) -> int:
        return self.last + 1

    def add(self, event: Event) -> Event:
        self.last = event.sequence
        self.events.append(event)
        while len(self.events) > self.keep:
            self.events.popleft()
        return event

    def after(self, sequence: int, job_id: str = "") -> list[Event]:
        return [
            e for e in self.events if e.sequence > sequence and (not job_id or e.job_id == job_id)
        ]
