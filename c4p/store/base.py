"""The store: what the controller keeps durably (the records) and the interface it needs.

What is kept: jobs, their intents, the bindings in force, tombstones of withdrawn bindings,
operator link overrides, and the decision log. No plan blob: the bindings in force *are* the plan
the data plane carries (each names its path), so the previous plan for an incremental re-plan
after a restart is rebuilt from them; a second copy of every path per epoch would double the
writes and could disagree with the bindings. Every record is a frozen pydantic model with
``extra="forbid"``, so a row that does not parse is refused loudly rather than half-read.

Why an interface (:class:`Store`): the embedded SQLite store (:mod:`c4p.store.sqlite`) serves one
controller; a replicated store (etcd, a SQL cluster) can replace it for a highly available pair
without touching the controller, as long as it keeps the two promises every method makes:

* **atomic**: a method's writes land together or not at all, so a crash between two writes of
  one request can never leave a job half-registered or an epoch half-committed;
* **durable before return**: when a method returns, a ``kill -9`` (and, with ``synchronous:
  full``, a power cut) cannot lose what it wrote. The API answers a client only after that, so
  an acknowledged intent survives any crash.

The controller is the only writer and holds its own lock around each write and the matching
in-memory change, so implementations need not order concurrent writers beyond being
thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from pydantic import Field

from solver.workload.jobs import CommunicatorSpec, RankSpec
from southbound.bindings import Binding
from southbound.routes import QpKey
from topology.base import Frozen
from topology.errors import C4pError
from topology.model import LinkStatus, Name


class ControlMode(StrEnum):
    """Who steers a job's QPs (see :mod:`c4p.controller.modes`)."""

    OFF = "off"
    SHADOW = "shadow"
    ACTIVE = "active"


class ModeSource(StrEnum):
    """Why a job has its control mode (shown to operators)."""

    ROLLBACK = "rollback"
    JOB = "job"  # pinned at registration
    OPERATOR = "operator"  # set through AdminService.SetControlMode
    TENANT = "tenant"
    CANARY = "canary"
    DEFAULT = "default"


class JobRecord(Frozen):
    """A registered job: placement, identity (incarnation) and its intent revision."""

    job_id: Name
    tenant: str = Field(default="", max_length=64)
    priority: int = Field(default=1, gt=0)
    hosts: tuple[Name, ...] | None = None
    ranks: tuple[RankSpec, ...] | None = None
    incarnation: int = Field(ge=1)
    """Unique over the store's life: a job id registered again gets a new one, so tokens and
    resume epochs of the earlier job never apply to it."""
    request_id: str = Field(default="", max_length=128)
    digest: str
    """Hash of the registration content: a retry with the same request id and digest is the
    same registration (and gets the same token)."""
    registered_at: float
    registered_epoch: int = Field(ge=0)
    revision: int = Field(default=0, ge=0)
    """Bumped by every accepted change of the job's intents."""
    control: ControlMode | None = None
    """The job's pinned control mode; ``None`` follows the rollout policy of the config."""
    control_by: ModeSource = ModeSource.JOB
    """Who pinned it: the job at registration, or an operator later."""
    registered_by: str = Field(default="", max_length=80)
    """The credential that registered the job (a fingerprint, never the credential): only it
    gets the token back from a replayed registration ("": a store of an older c4p, no one)."""


class CommunicatorRecord(Frozen):
    """One accepted communicator intent, at its version."""

    spec: CommunicatorSpec
    version: int = Field(ge=1)
    digest: str
    accepted_at: float
    connections: int = Field(ge=0)
    flows: int = Field(ge=0)


class HeldBinding(Frozen):
    """A binding in force, with the rank pair and channel a plugin matches it by.

    ``binding.epoch`` is the epoch that *set* this binding (not the current epoch): a stream
    resuming from epoch ``e`` needs exactly the bindings set after ``e``.
    """

    binding: Binding
    src_rank: int = Field(ge=0)
    dst_rank: int = Field(ge=0)
    channel: int = Field(ge=0)

    @property
    def key(self) -> QpKey:
        return self.binding.key


class LinkOverride(Frozen):
    """An operator's drain of a link (the planner must not use it until restored)."""

    link_id: str
    status: LinkStatus = LinkStatus.DRAINED
    reason: str = Field(default="", max_length=256)
    at: float


class DecisionResult(StrEnum):
    PLANNED = "planned"
    FAILED = "failed"


class JobPredictionRecord(Frozen):
    job_id: str
    busbw_gbps: float
    line_rate_gbps: float
    busbw_fraction: float
    slowest_communicator: str = ""
    control: ControlMode = ControlMode.ACTIVE
    """The job's control mode at this plan."""
    ecmp_busbw_gbps: float = 0.0
    """Its bus bandwidth if every planned job ran on kernel-chosen ports (ECMP)."""
    moved: int = Field(default=0, ge=0)
    """Its flows whose path this plan changed."""
    bindings_pushed: int = Field(default=0, ge=0)
    """QPs whose binding was pushed (active) or would have been (shadow) at this plan."""
    links_over_ecmp: int = Field(default=0, ge=0)
    links_over_planned: int = Field(default=0, ge=0)
    """Links the job crosses that are over line rate under ECMP / as planned."""


class RollbackRecord(Frozen):
    """An operator's rollback of every job to ``off`` (in force until cleared)."""

    reason: str = Field(default="", max_length=256)
    at: float


class DecisionRecord(Frozen):
    """One entry of the decision log: why a plan was made, what it did, how good it is."""

    sequence: int = Field(ge=1)
    epoch: int = Field(ge=0)
    at: float
    reason: str
    triggers: tuple[str, ...] = ()
    result: DecisionResult
    error: str = ""
    strategy: str = ""
    status: str = ""
    flows: int = 0
    moved: int = 0
    max_utilization: float = 0.0
    links_at_max: int = 0
    bound: float = 0.0
    combinatorial_bound: float = 0.0
    lp_bound: float | None = None
    solver_bound: float | None = None
    gap: float = 0.0
    solve_seconds: float = 0.0
    bindings_added: int = 0
    bindings_changed: int = 0
    bindings_removed: int = 0
    fallbacks: int = 0
    unbound: int = 0
    unreachable: int = 0
    jobs_changed: tuple[str, ...] = ()
    jobs_on_links: tuple[str, ...] = ()
    predictions: tuple[JobPredictionRecord, ...] = ()
    hottest: tuple[str, ...] = ()
    links_over_ecmp: int = 0
    links_over_planned: int = 0
    """Links over line rate if every planned job ran on ECMP / as planned."""
    ecmp_seed: int = 0
    """Seed of the QP numbers the ECMP prediction draws (``solver.yardstick.ecmp.ecmp_paths``)."""
    jobs_off: tuple[str, ...] = ()
    """Jobs in control mode ``off`` at this plan (not planned, so without a prediction)."""
    covers_revision: int = Field(default=0, ge=0)
    """The controller's mutation counter this decision saw: a caller that changed something at
    revision ``r`` knows its change is in force once a decision covers ``r``."""
    fingerprint: str = ""
    """Hash of the planning inputs (jobs' intent revisions, effective link states)."""
    job_revisions: dict[str, int] = Field(default_factory=dict)
    """Per job: the intent revision this plan covers."""
    ports_mode: str = ""
    """Where the ports came from: ``predicted``, ``learned`` or ``verified``."""
    bindings_verified: int = 0
    """Bindings whose port a probe showed on its path."""
    probe_findings: tuple[str, ...] = ()
    """What probes showed against the plan (mismatches, black holes), each reported once."""


@dataclass(frozen=True)
class EpochCommit:
    """Everything one reconcile step writes, in one transaction."""

    decision: DecisionRecord
    upserts: tuple[HeldBinding, ...] = ()
    removals: tuple[QpKey, ...] = ()
    """QPs withdrawn at ``decision.epoch``; each leaves a tombstone."""
    compacted_epoch: int = 0
    """Tombstones at or below this epoch are pruned (a resume from before it gets a full set)."""


@dataclass
class StoredState:
    """Everything :meth:`Store.load` reads back at start-up."""

    epoch: int = 0
    fingerprint: str = ""
    compacted_epoch: int = 0
    incarnation: int = 0
    decision_sequence: int = 0
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    intents: dict[str, dict[str, CommunicatorRecord]] = field(default_factory=dict)
    bindings: dict[str, dict[QpKey, HeldBinding]] = field(default_factory=dict)
    tombstones: dict[str, dict[QpKey, int]] = field(default_factory=dict)
    overrides: dict[str, LinkOverride] = field(default_factory=dict)
    last_decision: DecisionRecord | None = None
    last_planned: DecisionRecord | None = None
    """The newest decision that committed an epoch (its job revisions are the ones planned)."""
    rollback: RollbackRecord | None = None
    """An operator's rollback of every job, if one is in force."""


class StoreError(C4pError):
    """The store cannot be opened or written (disk full, corrupt file, wrong schema).

    Terminal for the request that hit it; the controller reports ``UNAVAILABLE`` and keeps the
    state it had (fail-static).
    """

    retryable = True


class Store(Protocol):
    """Durable state of one controller (see the module docstring for the promises)."""

    def load(self) -> StoredState:
        """Everything needed to resume: jobs, intents, bindings, tombstones, overrides."""
        ...

    def token_secret(self) -> bytes:
        """The key job tokens are derived from; made once, kept for the store's life."""
        ...

    def register_job(self, job: JobRecord, incarnation: int) -> None:
        """Add a job and advance the incarnation counter to ``incarnation``."""
        ...

    def put_intents(
        self,
        job: JobRecord,
        upserts: Sequence[CommunicatorRecord],
        withdrawn: Sequence[str],
    ) -> None:
        """Replace the job record (new revision) and add, replace or drop communicators."""
        ...

    def put_job(self, job: JobRecord) -> None:
        """Replace a registered job's record, intents untouched (its control mode changed).

        Added with control modes; an implementation writes the record as ``register_job`` does.
        """
        ...

    def set_rollback(self, rollback: RollbackRecord | None) -> None:
        """Engage (a record) or clear (``None``) the rollback of every job; :meth:`load` returns
        it in ``StoredState.rollback``. Added with control modes; one small value."""
        ...

    def release_job(self, job_id: str) -> None:
        """Drop a job with its intents, bindings and tombstones (nobody can resume it)."""
        ...

    def set_link_override(self, override: LinkOverride) -> None: ...

    def clear_link_override(self, link_id: str) -> None: ...

    def commit_epoch(self, commit: EpochCommit) -> None:
        """One reconcile step: the decision, binding changes, tombstones, the new epoch."""
        ...

    def log_decision(self, decision: DecisionRecord) -> None:
        """A decision that committed no epoch (a failed plan)."""
        ...

    def decisions(self, limit: int, before_sequence: int = 0) -> list[DecisionRecord]:
        """The newest ``limit`` decisions (older than ``before_sequence`` when it is not 0)."""
        ...

    def close(self) -> None: ...
