"""The intake: every change a client or an operator asks for, validated, then made durable.

Why apart from the gRPC layer: what may be accepted is domain knowledge (a rank must sit on a
cabled NIC no other job holds, a communicator version must not go backwards, a job must not
exceed its flow budget), and it must hold the same for any front end. The gRPC servicers turn
protobuf into the plain inputs here and :class:`~c4p.controller.errors.RequestError` back into
status codes.

Every operation is **all or nothing**: it collects *every* problem of the request (each with the
field path in the API's spelling and the reason) and refuses the whole request if there is one,
so nothing accepted before changes. Checks that depend on other requests (versions, NIC
ownership) are repeated under the state lock right before the write (optimistic concurrency:
two racing submits for one job cannot both win).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from c4p.controller.errors import (
    AlreadyExists,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    PreconditionFailed,
    Problem,
)
from c4p.controller.state import ControllerState, placement_problems, placement_spec
from c4p.controller.submission import MAX_PROBLEMS as MAX_PROBLEMS  # re-exported (service)
from c4p.controller.submission import (
    CommunicatorResult,
    check_submission,
    content_digest,
    located,
)
from c4p.controller.submission import IntakeLimits as IntakeLimits  # re-exported (service)
from c4p.controller.submission import Outcome as Outcome  # re-exported (service)
from c4p.store.base import (
    ControlMode,
    JobRecord,
    LinkOverride,
    ModeSource,
    RollbackRecord,
    Store,
)
from solver.workload.jobs import (
    JobSpec,
    RankNic,
    job_ranks,
)
from topology.errors import TopologyError
from topology.model import LinkStatus


@dataclass(frozen=True)
class Registered:
    record: JobRecord
    ranks: tuple[RankNic, ...]
    epoch: int
    replayed: bool


@dataclass(frozen=True)
class Submitted:
    revision: int
    """The job's intent revision after the request."""
    changed: bool
    communicators: tuple[CommunicatorResult, ...]
    flows: int


class Intake:
    """Validates and applies requests against one state and store."""

    def __init__(
        self,
        state: ControllerState,
        store: Store,
        limits: IntakeLimits,
        clock: Callable[[], float],
    ) -> None:
        self.state = state
        self.store = store
        self.limits = limits
        self.clock = clock

    # -- sizes, judged before anything is expanded ---------------------------------------------

    def admit_registration(self, hosts: int, ranks: int) -> None:
        """Refuse a registration whose lists are too long before they are copied or checked
        (the counts come straight from the message)."""
        fabric_hosts = len(self.state.fabric.hosts)
        if hosts > fabric_hosts:
            raise InvalidRequest(f"{hosts} hosts; the fabric has {fabric_hosts}", "hosts")
        if ranks > self.limits.max_ranks_per_job:
            raise LimitExceeded(
                f"{ranks} ranks; at most {self.limits.max_ranks_per_job} per job", "ranks"
            )

    def admit_submission(
        self,
        job_id: str,
        communicators: Sequence[tuple[int, int]],
        withdraw: int,
    ) -> None:
        """Refuse a submission whose lists are too long before they are copied or checked:
        ``communicators`` holds each one's (ranks, connections) counts from the message."""
        limits = self.limits
        if len(communicators) > limits.max_communicators_per_request:
            raise LimitExceeded(
                f"{len(communicators)} communicators; at most "
                f"{limits.max_communicators_per_request} per request",
                "communicators",
            )
        if withdraw > limits.max_communicators_per_job:
            raise LimitExceeded(
                f"{withdraw} ids; a job has at most {limits.max_communicators_per_job}", "withdraw"
            )
        with self.state.lock:
            entry = self.state.jobs.get(job_id)
            size = len(entry.ranks) if entry is not None else 0
        problems: list[Problem] = []
        for i, (ranks, connections) in enumerate(communicators):
            if ranks > size:
                problems.append((f"communicators[{i}].ranks", f"{ranks} ranks; the job has {size}"))
            if connections > limits.max_connections_per_communicator:
                problems.append(
                    (f"communicators[{i}].connections", f"{connections} connections; at most "
                     f"{limits.max_connections_per_communicator}")
                )  # fmt: skip
            if len(problems) >= MAX_PROBLEMS:
                break
        if problems:
            raise InvalidRequest(problems)

    # -- jobs ------------------------------------------------------------------------------------

    def register(self, fields: Mapping[str, Any], credential: str = "") -> Registered:
        """Register a job from ``job_id, tenant, priority, hosts | ranks, request_id`` and an
        optional ``control_mode`` (off, shadow, active; absent: the rollout policy).

        ``credential`` names who registers: a replay (same request id and content) is answered
        with the job (and so its token) only for the credential that registered it; anyone
        else gets ALREADY_EXISTS, exactly like a different registration (issue 33: a replay
        must not hand one job's token to another caller). "" matches no one."""
        problems: list[Problem] = []
        tenant, request_id = str(fields.get("tenant", "")), str(fields.get("request_id", ""))
        control: ControlMode | None = None
        raw_mode = fields.get("control_mode")
        if raw_mode is not None:
            try:
                control = ControlMode(raw_mode)
            except ValueError:
                choices = ", ".join(m.value for m in ControlMode)
                problems.append(("control_mode", f"{raw_mode!r} is not one of {choices}"))
        if len(tenant) > 64:
            problems.append(("tenant", f"at most 64 characters, got {len(tenant)}"))
        if len(request_id) > 128:
            problems.append(("request_id", f"at most 128 characters, got {len(request_id)}"))
        try:
            spec = JobSpec.model_validate(
                {
                    "id": fields.get("job_id", ""),
                    "priority": fields.get("priority", 1),
                    "hosts": fields.get("hosts"),
                    "ranks": fields.get("ranks"),
                    "communicators": [{"id": "placement-check"}],
                }
            )
        except ValidationError as exc:
            raise InvalidRequest(problems + located("", exc, top=True)) from None
        if problems:
            raise InvalidRequest(problems)
        content: tuple[Any, ...] = (spec.id, tenant, spec.priority, spec.hosts, spec.ranks)
        if control is not None:  # only then: digests of retries from older clients still match
            content += (control.value,)
        digest = content_digest(content)
        fabric = self.state.fabric
        with self.state.lock:
            existing = self.state.jobs.get(spec.id)
            if existing is not None:
                same = existing.record.digest == digest and request_id and credential
                mine = existing.record.registered_by == credential
                if same and mine and existing.record.request_id == request_id:
                    return Registered(existing.record, existing.ranks, self.state.epoch, True)
                raise AlreadyExists(f"job {spec.id!r} is already registered", "job_id")
            if len(self.state.jobs) >= self.limits.max_jobs:
                raise LimitExceeded(f"the controller holds {self.limits.max_jobs} jobs", "job_id")
            same_tenant = sum(1 for e in self.state.jobs.values() if e.record.tenant == tenant)
            if same_tenant >= self.limits.max_jobs_per_tenant:
                raise LimitExceeded(
                    f"tenant {tenant!r} holds {same_tenant} jobs; at most "
                    f"{self.limits.max_jobs_per_tenant}",
                    "tenant",
                )
            record = JobRecord(
                job_id=spec.id,
                tenant=tenant,
                priority=spec.priority,
                hosts=spec.hosts,
                ranks=spec.ranks,
                incarnation=self.state.incarnation + 1,
                request_id=request_id,
                digest=digest,
                registered_at=self.clock(),
                registered_epoch=self.state.epoch,
                control=control,
                registered_by=credential,
            )
            found = placement_problems(fabric, record)
            if found:
                raise InvalidRequest(found)
            ranks = job_ranks(fabric, placement_spec(record))
            if len(ranks) > self.limits.max_ranks_per_job:
                raise LimitExceeded(
                    f"{len(ranks)} ranks; at most {self.limits.max_ranks_per_job} per job",
                    "hosts" if spec.hosts is not None else "ranks",
                )
            owned = {(r.host, r.nic) for e in self.state.jobs.values() for r in e.ranks}
            taken = [
                (r.where.replace(f"job {spec.id!r}.", ""), f"NIC {r.host}:{r.nic} holds a rank "
                 "of another job")
                for r in ranks
                if (r.host, r.nic) in owned
            ]  # fmt: skip
            if taken:
                raise PreconditionFailed(taken)
            self.state.register(self.store, record, ranks)
            return Registered(record, ranks, self.state.epoch, False)

    def release(self, job_id: str, incarnation: int) -> int:
        """Drop the job; the epoch in force is returned."""
        with self.state.lock:
            entry = self.state.jobs.get(job_id)
            if entry is not None and entry.record.incarnation == incarnation:
                self.state.release(self.store, job_id)
            return self.state.epoch

    # -- intents ---------------------------------------------------------------------------------

    def submit(
        self,
        job_id: str,
        incarnation: int,
        communicators: Sequence[Mapping[str, Any]],
        withdraw: Sequence[str],
    ) -> Submitted:
        """Add, replace or withdraw communicators (dicts in ``CommunicatorSpec`` shape plus
        ``version``; a connection end may be ``src_nic``/``dst_nic`` "host:nic")."""
        for _ in range(8):  # optimistic: retried if another submit for the job won meanwhile
            with self.state.lock:
                entry = self.state.jobs.get(job_id)
                if entry is None or entry.record.incarnation != incarnation:
                    raise NotFound(f"job {job_id!r} is not registered", "job_id")
                record, ranks = entry.record, entry.ranks
                accepted = dict(entry.communicators)
            plan = check_submission(
                self.limits,
                self.state.fabric,
                self.clock,
                record,
                ranks,
                accepted,
                communicators,
                withdraw,
            )
            with self.state.lock:
                entry = self.state.jobs.get(job_id)
                if entry is None or entry.record != record:
                    continue
                if not plan.upserts and not plan.withdrawn:
                    return Submitted(record.revision, False, plan.results, plan.flows)
                self._tenant_flows(record, plan.flows)
                new = record.model_copy(update={"revision": record.revision + 1})
                self.state.put_intents(self.store, new, plan.upserts, plan.withdrawn)
                return Submitted(new.revision, True, plan.results, plan.flows)
        raise PreconditionFailed(f"job {job_id!r} changed concurrently; retry", "job_id")

    def _tenant_flows(self, record: JobRecord, flows: int) -> None:
        """Refuse a submission that would take the job's tenant over its flows (under the
        state lock, so racing submissions of one tenant cannot both pass)."""
        others = sum(
            e.flows
            for j, e in self.state.jobs.items()
            if e.record.tenant == record.tenant and j != record.job_id
        )
        limit = self.limits.max_flows_per_tenant
        if others + flows > limit:
            raise LimitExceeded(
                f"tenant {record.tenant!r} would have {others + flows:,} flows; at most {limit:,}",
                "communicators",
            )

    # -- control modes ---------------------------------------------------------------------------

    def set_control(self, job_id: str, mode: ControlMode | None) -> tuple[bool, int]:
        """An operator pins a job's mode (``None``: back to the policy); returns whether that
        changed the pin and the revision to wait for."""
        if not job_id:
            raise InvalidRequest("name a job", "job_id")
        with self.state.lock:
            entry = self.state.jobs.get(job_id)
            if entry is None:
                raise NotFound(f"job {job_id!r} is not registered", "job_id")
            by = ModeSource.OPERATOR if mode is not None else ModeSource.JOB
            record = entry.record
            if record.control is mode and (mode is None or record.control_by is by):
                return False, self.state.revision
            new = record.model_copy(update={"control": mode, "control_by": by})
            return True, self.state.set_control(self.store, new)

    def rollback(self, engage: bool, reason: str) -> tuple[bool, int]:
        """Engage (or clear) the rollback of every job to ``off``; durable."""
        if len(reason) > 256:
            raise InvalidRequest(f"at most 256 characters, got {len(reason)}", "reason")
        with self.state.lock:
            if (self.state.rollback is not None) is engage:
                return False, self.state.revision
            record = RollbackRecord(reason=reason, at=self.clock()) if engage else None
            return True, self.state.set_rollback(self.store, record)

    # -- links -----------------------------------------------------------------------------------

    def link_id(self, link: str, field: str = "link") -> str:
        """The canonical id ``a--b`` of a link named any way the fabric accepts."""
        if not link or len(link) > 512:
            raise InvalidRequest("name a link: 'a--b' or one end 'device:interface'", field)
        try:
            return self.state.fabric.links[self.state.fabric.index.link_number(link)].id
        except TopologyError as exc:
            raise NotFound(str(exc), field) from None

    def drain(self, link: str, reason: str) -> tuple[str, bool, int]:
        """Drain a link; returns its id, whether that changed anything, and the revision."""
        if len(reason) > 256:
            raise InvalidRequest(f"at most 256 characters, got {len(reason)}", "reason")
        link_id = self.link_id(link)
        with self.state.lock:
            if link_id in self.state.overrides:
                return link_id, False, self.state.revision
            override = LinkOverride(
                link_id=link_id, status=LinkStatus.DRAINED, reason=reason, at=self.clock()
            )
            return (
                link_id,
                True,
                self.state.set_override(self.store, override, link_id, self.clock()),
            )

    def restore(self, link: str) -> tuple[str, bool, int]:
        link_id = self.link_id(link)
        with self.state.lock:
            if link_id not in self.state.overrides:
                return link_id, False, self.state.revision
            return link_id, True, self.state.set_override(self.store, None, link_id, self.clock())
