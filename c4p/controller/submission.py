"""Checking a submission of communicators: every problem of the request with its field path,
or the records to write (each communicator's flows counted on the fabric).

Why apart from :mod:`c4p.controller.intake`: the intake orders the operations (read under the
lock, check outside it, write under it if nothing changed meanwhile); what makes a submission
acceptable (versions that do not go backwards, ends on the job's own NICs, connections and
flows within the limits, a workload the fabric can carry) is a pure function of the request,
the job's accepted communicators and the fabric, and reads best on its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import islice
from typing import Any

from pydantic import Field, ValidationError

from c4p.controller.errors import InvalidRequest, LimitExceeded, PreconditionFailed, Problem
from c4p.controller.intents import placement_spec
from c4p.store.base import CommunicatorRecord, JobRecord
from solver.errors import JobError
from solver.workload.jobs import CommunicatorSpec, JobsFile, JobSpec, RankNic, find_job_problems
from solver.workload.patterns import derive_workload
from topology.base import Frozen
from topology.formats import problems_of
from topology.model import Fabric


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
class CommunicatorResult:
    id: str
    version: int
    outcome: Outcome
    connections: int = 0
    flows: int = 0


def content_digest(data: Any) -> str:
    return hashlib.sha256(repr(data).encode()).hexdigest()


def located(prefix: str, exc: ValidationError, top: bool = False) -> list[Problem]:
    """Pydantic's problems with ``prefix`` (``top``: a ``JobSpec``, whose ``id`` is the API's
    ``job_id``)."""
    out = []
    for path, reason in problems_of(exc):
        path = "job_id" if top and path == "id" else path
        out.append((f"{prefix}.{path}" if prefix and path else prefix or path, reason))
    return out


@dataclass(frozen=True)
class Checked:
    """A submission that passed every check: what to write."""

    upserts: list[CommunicatorRecord]
    withdrawn: list[str]
    results: tuple[CommunicatorResult, ...]
    flows: int


def check_submission(
    limits: IntakeLimits,
    fabric: Fabric,
    clock: Callable[[], float],
    record: JobRecord,
    ranks: tuple[RankNic, ...],
    accepted: dict[str, CommunicatorRecord],
    communicators: Sequence[Mapping[str, Any]],
    withdraw: Sequence[str],
) -> Checked:
    """Every problem of a submission (communicators to add or replace, ids to withdraw)
    against the job's accepted communicators, or what to write: all or nothing."""
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
                resolve_ends(c, nic_rank, f"{at}.connections[{k}]", invalid)
                for k, c in enumerate(conns)
            ]
        try:
            spec = CommunicatorSpec.model_validate(data)
        except ValidationError as exc:
            invalid.extend(located(at, exc))
            continue
        if spec.id in specs:
            invalid.append((f"{at}.id", f"{spec.id!r} is also communicators[{specs[spec.id][0]}]"))
            continue
        specs[spec.id] = (i, spec, version, content_digest(spec.model_dump_json()))
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
                CommunicatorResult(comm_id, version, Outcome.UNCHANGED, old.connections, old.flows)
            )
        else:
            upserts[comm_id] = (i, spec, version, digest)
    if stale:
        raise PreconditionFailed(stale)
    withdrawn = [c for c in dict.fromkeys(withdraw) if c in accepted]
    results += [CommunicatorResult(c, accepted[c].version, Outcome.WITHDRAWN) for c in withdrawn]
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
    records = derive_records(fabric, clock, record, upserts)
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
    return Checked(records, withdrawn, tuple(results), flows)


def resolve_ends(
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


def derive_records(
    fabric: Fabric,
    clock: Callable[[], float],
    record: JobRecord,
    upserts: dict[str, tuple[int, CommunicatorSpec, int, str]],
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
    found = list(islice(find_job_problems(fabric, jobs), MAX_PROBLEMS))
    if found:
        problems = []
        for path, reason in found:
            rest = path.removeprefix("jobs[0].communicators[")
            j, _, tail = rest.partition("]")
            where = f"communicators[{upserts[order[int(j)]][0]}]{tail}" if j.isdigit() else path
            problems.append((where, reason))
        raise InvalidRequest(problems)
    try:
        workload = derive_workload(fabric, jobs)
    except JobError as exc:
        raise LimitExceeded(exc.problems) from None
    connections: dict[str, int] = {}
    flows: dict[str, int] = {}
    for c in workload.connections:
        connections[c.communicator] = connections.get(c.communicator, 0) + 1
    for f in workload.flows:
        flows[f.communicator] = flows.get(f.communicator, 0) + 1
    now = clock()
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
