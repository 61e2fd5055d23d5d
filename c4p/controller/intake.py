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

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import islice
from typing import Any

from pydantic import Field, ValidationError

from c4p.controller.errors import (
    AlreadyExists,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    PreconditionFailed,
    Problem,
)
from c4p.controller.state import ControllerState, placement_problems, placement_spec
from c4p.store.base import (
    CommunicatorRecord,
    ControlMode,
    JobRecord,
    LinkOverride,
    ModeSource,
    RollbackRecord,
    Store,
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
from solver.workload.patterns import derive_workload
from topology.base import Frozen
from topology.errors import TopologyError
from topology.formats import problems_of
from topology.model import LinkStatus


class IntakeLimits(Frozen):
    """What one job and one request may ask for (protects the planner and the store)."""

    max_jobs: int = Field(default=4096, ge=1)
    max_ranks_per_job: int = Field(default=65_536, ge=1)
    max_communicators_per_job: int = Field(default=1024, ge=1)
    max_communicators_per_request: int = Field(default=256, ge=1)
    max_connections_per_communicator: int = Field(default=65_536, ge=1)
    max_flows_per_job: int = Field(default=262_144, ge=1)
    max_jobs_per_tenant: int = Field(default=1024, ge=1, description="Jobs of one tenant.")
    max_flows_per_tenant: int = Field(
        default=1_048_576, ge=1, description="Flows (QPs) of all the jobs of one tenant."
    )


MAX_PROBLEMS = 100
"""Problems collected for one request: enough to fix it, bounded in memory (a request naming a
million bad ranks must not build a million messages)."""


class Outcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    WITHDRAWN = "withdrawn"
    ABSENT = "absent"


@dataclass(frozen=True)
class Registered:
    record: JobRecord
    ranks: tuple[RankNic, ...]
    epoch: int
    replayed: bool


@dataclass(frozen=True)
class CommunicatorResult:
    id: str
    version: int
    outcome: Outcome
    connections: int = 0
    flows: int = 0


@dataclass(frozen=True)
class Submitted:
    revision: int
    """The job's intent revision after the request."""
    changed: bool
    communicators: tuple[CommunicatorResult, ...]
    flows: int


def _digest(data: Any) -> str:
    return hashlib.sha256(repr(data).encode()).hexdigest()


def _located(prefix: str, exc: ValidationError, top: bool = False) -> list[Problem]:
    """Pydantic's problems with ``prefix`` (``top``: a ``JobSpec``, whose ``id`` is the API's
    ``job_id``)."""
    out = []
    for path, reason in problems_of(exc):
        path = "job_id" if top and path == "id" else path
        out.append((f"{prefix}.{path}" if prefix and path else prefix or path, reason))
    return out


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
            raise InvalidRequest(problems + _located("", exc, top=True)) from None
        if problems:
            raise InvalidRequest(problems)
        content: tuple[Any, ...] = (spec.id, tenant, spec.priority, spec.hosts, spec.ranks)
        if control is not None:  # only then: digests of retries from older clients still match
            content += (control.value,)
        digest = _digest(content)
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
            plan = self._check(record, ranks, accepted, communicators, withdraw)
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

    def _check(
        self,
        record: JobRecord,
        ranks: tuple[RankNic, ...],
        accepted: dict[str, CommunicatorRecord],
        communicators: Sequence[Mapping[str, Any]],
        withdraw: Sequence[str],
    ) -> _Checked:
        limits = self.limits
        invalid: list[Problem] = []
        stale: list[Problem] = []
        if not communicators and not withdraw:
            raise InvalidRequest("empty request: give communicators or withdraw", "communicators")
        if len(communicators) > limits.max_communicators_per_request:
            raise LimitExceeded(
                f"{len(communicators)} communicators; at most "
                f"{limits.max_communicators_per_request} per request",
                "communicators",
            )
        nic_rank = {f"{r.host}:{r.nic}": r.rank for r in ranks}
        specs: dict[str, tuple[int, CommunicatorSpec, int, str]] = {}
        for i, raw in enumerate(communicators):
            at = f"communicators[{i}]"
            data = dict(raw)
            version = int(data.pop("version", 0) or 0)
            if version < 1:
                invalid.append((f"{at}.version", "must be >= 1"))
            conns = data.get("connections") or ()
            if len(conns) > limits.max_connections_per_communicator:
                invalid.append(
                    (f"{at}.connections", f"{len(conns)} connections; at most "
                     f"{limits.max_connections_per_communicator}")
                )  # fmt: skip
                continue
            if "connections" in data:
                data["connections"] = [
                    self._resolve_ends(c, nic_rank, f"{at}.connections[{k}]", invalid)
                    for k, c in enumerate(conns)
                ]
            try:
                spec = CommunicatorSpec.model_validate(data)
            except ValidationError as exc:
                invalid.extend(_located(at, exc))
                continue
            if spec.id in specs:
                invalid.append(
                    (f"{at}.id", f"{spec.id!r} is also communicators[{specs[spec.id][0]}]")
                )
                continue
            specs[spec.id] = (i, spec, version, _digest(spec.model_dump_json()))
        for k, comm_id in enumerate(withdraw):
            if comm_id in specs:
                invalid.append((f"withdraw[{k}]", f"{comm_id!r} is also submitted"))
        if invalid:
            raise InvalidRequest(invalid)
        results: list[CommunicatorResult] = []
        upserts: dict[str, tuple[int, CommunicatorSpec, int, str]] = {}
        for comm_id, (i, spec, version, digest) in specs.items():
            old = accepted.get(comm_id)
            if old is not None and version < old.version:
                stale.append(
                    (f"communicators[{i}].version", f"stale: version {version} is older than the "
                     f"accepted version {old.version}")
                )  # fmt: skip
            elif old is not None and version == old.version and digest != old.digest:
                stale.append(
                    (f"communicators[{i}].version", f"version {version} was accepted with "
                     "other content; send a higher version to change it")
                )  # fmt: skip
            elif old is not None and version == old.version:
                results.append(
                    CommunicatorResult(
                        comm_id, version, Outcome.UNCHANGED, old.connections, old.flows
                    )
                )
            else:
                upserts[comm_id] = (i, spec, version, digest)
        if stale:
            raise PreconditionFailed(stale)
        withdrawn = [c for c in dict.fromkeys(withdraw) if c in accepted]
        results += [
            CommunicatorResult(c, accepted[c].version, Outcome.WITHDRAWN) for c in withdrawn
        ]
        results += [
            CommunicatorResult(c, 0, Outcome.ABSENT) for c in dict.fromkeys(withdraw)
            if c not in accepted
        ]  # fmt: skip
        remaining = {c: r for c, r in accepted.items() if c not in withdrawn and c not in upserts}
        if len(remaining) + len(upserts) > limits.max_communicators_per_job:
            raise LimitExceeded(
                f"the job would have {len(remaining) + len(upserts)} communicators; at most "
                f"{limits.max_communicators_per_job}",
                "communicators",
            )
        records = self._derive(record, upserts, accepted)
        flows = sum(r.flows for r in remaining.values()) + sum(r.flows for r in records)
        if flows > limits.max_flows_per_job:
            raise LimitExceeded(
                f"the job would have {flows:,} flows (QPs); at most {limits.max_flows_per_job:,}",
                "communicators",
            )
        for rec in records:
            outcome = Outcome.UPDATED if rec.spec.id in accepted else Outcome.CREATED
            results.append(
                CommunicatorResult(rec.spec.id, rec.version, outcome, rec.connections, rec.flows)
            )
        return _Checked(records, withdrawn, tuple(results), flows)

    @staticmethod
    def _resolve_ends(
        conn: Mapping[str, Any], nic_rank: dict[str, int], at: str, problems: list[Problem]
    ) -> dict[str, Any]:
        out = dict(conn)
        for side in ("src", "dst"):
            nic = out.pop(f"{side}_nic", None)
            if nic is None:
                continue
            if nic not in nic_rank:
                problems.append((f"{at}.{side}_nic", f"NIC {nic!r} holds no rank of this job"))
                out[f"{side}_rank"] = 0
            else:
                out[f"{side}_rank"] = nic_rank[nic]
        return out

    def _derive(
        self,
        record: JobRecord,
        upserts: dict[str, tuple[int, CommunicatorSpec, int, str]],
        accepted: dict[str, CommunicatorRecord],
    ) -> list[CommunicatorRecord]:
        """Check the new communicators against the fabric and count their flows."""
        if not upserts:
            return []
        order = sorted(upserts)
        base = placement_spec(record)
        spec = JobSpec(
            id=base.id,
            priority=base.priority,
            hosts=base.hosts,
            ranks=base.ranks,
            communicators=tuple(upserts[c][1] for c in order),
        )
        jobs = JobsFile(jobs=(spec,))
        found = list(islice(find_job_problems(self.state.fabric, jobs), MAX_PROBLEMS))
        if found:
            problems = []
            for path, reason in found:
                rest = path.removeprefix("jobs[0].communicators[")
                j, _, tail = rest.partition("]")
                where = f"communicators[{upserts[order[int(j)]][0]}]{tail}" if j.isdigit() else path
                problems.append((where, reason))
            raise InvalidRequest(problems)
        try:
            workload = derive_workload(self.state.fabric, jobs)
        except JobError as exc:
            raise LimitExceeded(exc.problems) from None
        connections: dict[str, int] = {}
        flows: dict[str, int] = {}
        for c in workload.connections:
            connections[c.communicator] = connections.get(c.communicator, 0) + 1
        for f in workload.flows:
            flows[f.communicator] = flows.get(f.communicator, 0) + 1
        now = self.clock()
        return [
            CommunicatorRecord(
                spec=upserts[c][1],
                version=upserts[c][2],
                digest=upserts[c][3],
                accepted_at=now,
                connections=connections.get(c, 0),
                flows=flows.get(c, 0),
            )
            for c in order
        ]

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


@dataclass(frozen=True)
class _Checked:
    upserts: list[CommunicatorRecord]
    withdrawn: list[str]
    results: tuple[CommunicatorResult, ...]
    flows: int
