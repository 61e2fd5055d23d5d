"""A job as the controller holds it (its intents, their state, where its ranks are placed),
and what a reconcile step reads (:class:`PlanInputs`), writes (:class:`StepDraft`) and a
job's stream is sent (:class:`JobUpdate`).

Why apart from :mod:`c4p.controller.state`: these are values, copied out of the live state or
into it under its lock; the reconcile step, the bindings' diff and the service's conversions
read them without the state object itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from c4p.controller.rewire import Rewiring
from c4p.store.base import (
    CommunicatorRecord,
    ControlMode,
    DecisionRecord,
    HeldBinding,
    JobPredictionRecord,
    JobRecord,
)
from solver.errors import JobError
from solver.workload.jobs import (
    CommunicatorSpec,
    JobsFile,
    JobSpec,
    RankNic,
    find_job_problems,
    job_ranks,
)
from southbound.bindings import BindingIssue
from southbound.routes import QpKey
from topology.model import Fabric, LinkStatus

PLACEMENT_ONLY = (CommunicatorSpec(id="placement-check"),)
"""A stand-in communicator: ``JobSpec`` needs one, placement checks do not look at it."""


class IntentState(StrEnum):
    """Where a job's intents stand (ONOS: INSTALL_REQ -> INSTALLED / FAILED -> WITHDRAWN)."""

    REGISTERED = "registered"
    INSTALL_REQ = "install-req"
    INSTALLED = "installed"
    DEGRADED = "degraded"
    FAILED = "failed"
    WITHDRAWN = "withdrawn"
    BOUND_UNVERIFIED = "bound-unverified"
    """Every QP bound as planned, but not every binding was seen on its path by a probe (and
    the operator did not choose predicted ports): the hash model is not the network."""


def placement_spec(record: JobRecord) -> JobSpec:
    return JobSpec(
        id=record.job_id,
        priority=record.priority,
        hosts=record.hosts,
        ranks=record.ranks,
        communicators=PLACEMENT_ONLY,
    )


def placement_problems(fabric: Fabric, record: JobRecord) -> list[tuple[str, str]]:
    """Placement problems with API field paths (``hosts[3]``, ``ranks[0].nic``)."""
    found = find_job_problems(fabric, JobsFile(jobs=(placement_spec(record),)))
    return [(path.removeprefix("jobs[0]").lstrip("."), reason) for path, reason in found]


def placed(fabric: Fabric, record: JobRecord) -> tuple[tuple[RankNic, ...], str]:
    """The job's ranks on ``fabric``, or ``()`` and why they do not fit (a NIC gone or not
    cabled after a wiring change): such a job is not planned, its bindings stay in force."""
    found = placement_problems(fabric, record)
    if found:
        return (), "; ".join(f"{path}: {reason}" for path, reason in found[:3])
    try:
        return job_ranks(fabric, placement_spec(record)), ""
    except JobError as exc:
        return (), str(exc)


@dataclass
class JobEntry:
    """One registered job as the controller holds it."""

    record: JobRecord
    ranks: tuple[RankNic, ...]
    communicators: dict[str, CommunicatorRecord] = field(default_factory=dict)
    planned_revision: int = 0
    failed: bool = False
    issues: tuple[BindingIssue, ...] = ()
    prediction: JobPredictionRecord | None = None
    event_epoch: int = 0
    """The last epoch that changed anything this job's streams show."""
    reason: str = ""
    control: ControlMode = ControlMode.ACTIVE
    """The control mode of the last committed plan (what the job's streams show)."""
    verified: int = 0
    """QPs whose binding (in force, or planned for a shadow job) a probe saw on its path."""
    unverified: int = 0
    """QPs bound on the hash model's or the table's word only."""
    predicted: bool = False
    """The operator chose predicted ports (``ports.mode: predicted``): the model's word is
    what was asked for, so an unverified binding still counts as installed."""

    @property
    def state(self) -> IntentState:
        """Honest states: ``INSTALLED`` means every QP bound as planned *and* either seen on
        its path by a probe or bound in the predicted mode the operator chose; bound but not
        all seen is ``BOUND_UNVERIFIED`` (a lab once showed 27 of 32 predicted ports off plan
        under a job that said installed)."""
        if self.failed:
            return IntentState.FAILED
        if not self.communicators:
            return IntentState.REGISTERED
        if self.planned_revision < self.record.revision:
            return IntentState.INSTALL_REQ
        if self.issues:
            return IntentState.DEGRADED
        if self.unverified and not self.predicted:
            return IntentState.BOUND_UNVERIFIED
        return IntentState.INSTALLED

    @property
    def flows(self) -> int:
        return sum(c.flows for c in self.communicators.values())

    def spec(self) -> JobSpec | None:
        """The job with its communicators (by id), or ``None`` while it has none."""
        if not self.communicators:
            return None
        return JobSpec(
            id=self.record.job_id,
            priority=self.record.priority,
            hosts=self.record.hosts,
            ranks=self.record.ranks,
            communicators=tuple(self.communicators[c].spec for c in sorted(self.communicators)),
        )


@dataclass(frozen=True)
class JobInput:
    job_id: str
    incarnation: int
    revision: int
    spec: JobSpec | None
    mode: ControlMode = ControlMode.ACTIVE


@dataclass(frozen=True)
class PlanInputs:
    """A consistent copy of what a reconcile step plans from."""

    epoch: int
    fingerprint: str
    last_fingerprint: str
    revision: int
    link_status: dict[int, LinkStatus]
    jobs: tuple[JobInput, ...]
    held: dict[str, dict[QpKey, HeldBinding]]
    shadow: dict[str, dict[QpKey, HeldBinding]] = field(default_factory=dict)
    rewiring: Rewiring | None = None
    """Set on the step that swapped a new fabric snapshot in (see :meth:`swap_fabric`)."""
    unplaced: dict[str, str] = field(default_factory=dict)
    """Jobs whose NICs the fabric in force lacks (after a swap): left out, bindings kept."""
    forwarding: dict[int, LinkStatus] | None = None
    """The links the *switches* do not forward over (observed down or drained on the switch),
    without operator drains or hold-downs: what the hash model forwards with. ``None``: as
    ``link_status``. See :meth:`ControllerState.forwarding_links`."""


@dataclass(frozen=True)
class JobUpdate:
    """What a stream sends: a full set or the differences since an epoch."""

    job_id: str
    epoch: int
    full: bool
    bindings: tuple[HeldBinding, ...]
    removed: tuple[QpKey, ...]
    intent_revision: int
    state: IntentState
    issues: tuple[BindingIssue, ...]
    reason: str
    control: ControlMode = ControlMode.ACTIVE

    @property
    def empty(self) -> bool:
        return not (self.full or self.bindings or self.removed)


@dataclass(frozen=True)
class StepDraft:
    """A planned step before its commit: per job, what to write (see :meth:`commit`)."""

    inputs: PlanInputs
    decision: DecisionRecord
    upserts: dict[str, list[HeldBinding]]
    removals: dict[str, list[QpKey]]
    issues: dict[str, tuple[BindingIssue, ...]]
    predictions: dict[str, JobPredictionRecord]
    shadow: dict[str, dict[QpKey, HeldBinding]] = field(default_factory=dict)
    """Per shadow job: its whole binding set as planned (never pushed)."""
