"""Protobuf <-> the controller's types, in one place.

Why a module of pure functions: the wire format (``c4p.v1``) and the domain types (pydantic
specs, held bindings, decision records) evolve separately; every crossing is here, so a new
field is added in two obvious places and nowhere else.

Inbound, messages become plain mappings in the shape of the domain models (``JobSpec``,
``CommunicatorSpec``) *without* judging them: only fields that are present are copied (proto3
``optional`` presence, non-empty lists, enums other than ``*_UNSPECIFIED``), so the pydantic
models report every bad value with its field path and an explicit ``0`` is refused rather than
read as "default". An enum number the schema does not know becomes a string naming it, which
the model then refuses as an unknown choice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from c4p.api.v1 import admin_pb2 as admin
from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.controller.state import IntentState, JobUpdate
from c4p.store.base import (
    ControlMode,
    DecisionRecord,
    DecisionResult,
    HeldBinding,
    JobPredictionRecord,
)
from solver.workload.jobs import RankNic
from southbound.bindings import BindingIssue, IssueKind
from southbound.routes import QpKey
from topology.model import Fabric

MAX_BINDINGS_PER_MESSAGE = 2048
"""A large update is split in parts (``more``) so no message nears gRPC's 4 MiB default."""


def _enum_text(enum: Any, value: int, prefix: str) -> str:
    """``PATTERN_ALL_TO_ALL`` -> ``all-to-all``; an unknown number -> ``<unknown 7>``."""
    try:
        name = str(enum.Name(value))
    except ValueError:
        return f"<unknown {value}>"
    return name.removeprefix(prefix).lower().replace("_", "-")


def _enum_name(text: str, prefix: str) -> str:
    """``all-to-all`` -> ``PATTERN_ALL_TO_ALL`` (protobuf constructors take enum names)."""
    return prefix + text.upper().replace("-", "_")


# -- inbound -------------------------------------------------------------------------------------


def registration(request: fi.RegisterJobRequest) -> dict[str, Any]:
    out: dict[str, Any] = {
        "job_id": request.job_id,
        "tenant": request.tenant,
        "request_id": request.request_id,
    }
    if request.priority:
        out["priority"] = request.priority
    if len(request.hosts):
        out["hosts"] = list(request.hosts)
    if len(request.ranks):
        out["ranks"] = [{"rank": r.rank, "host": r.host, "nic": r.nic} for r in request.ranks]
    if request.control_mode:
        out["control_mode"] = _enum_text(pb.ControlMode, request.control_mode, "CONTROL_MODE_")
    return out


def control_mode_in(value: int) -> ControlMode | None:
    """A request's mode: ``None`` for UNSPECIFIED; an unknown number is a ``ValueError``."""
    if value == pb.CONTROL_MODE_UNSPECIFIED:
        return None
    return ControlMode(_enum_text(pb.ControlMode, value, "CONTROL_MODE_"))


def control_mode(mode: ControlMode) -> str:
    """``ControlMode.SHADOW`` -> ``CONTROL_MODE_SHADOW`` (protobuf constructors take names)."""
    return _enum_name(mode.value, "CONTROL_MODE_")


def _connection(c: pb.ConnectionIntent) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in ("src", "dst"):
        which = c.WhichOneof(side)
        if which is not None:
            out[which] = getattr(c, which)
    if c.HasField("qps"):
        out["qps"] = c.qps
    if c.HasField("rate"):
        out["rate"] = c.rate
    return out


def communicator(c: pb.CommunicatorIntent) -> dict[str, Any]:
    """A communicator intent as ``CommunicatorSpec`` fields plus ``version``."""
    out: dict[str, Any] = {"id": c.id, "version": c.version}
    if c.pattern:
        out["pattern"] = _enum_text(pb.Pattern, c.pattern, "PATTERN_")
    if c.collective:
        out["collective"] = _enum_text(pb.Collective, c.collective, "COLLECTIVE_")
    if len(c.ranks):
        out["ranks"] = list(c.ranks)
    if c.ring:
        out["ring"] = _enum_text(pb.Layout, c.ring, "LAYOUT_")
    for name in ("trees", "rail_only", "channels", "qps_per_connection", "rate"):
        if c.HasField(name):
            out[name] = getattr(c, name)
    if len(c.connections):
        out["connections"] = [_connection(k) for k in c.connections]
    return out


# -- outbound ------------------------------------------------------------------------------------


def timestamp(at: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(at * 1e9))
    return ts


def qp_ref(key: QpKey) -> pb.QpRef:
    return pb.QpRef(communicator=key[1], connection=key[2], qp=key[3])


def binding(h: HeldBinding) -> pb.Binding:
    b = h.binding
    return pb.Binding(
        qp=pb.QpRef(communicator=b.communicator, connection=b.connection, qp=b.qp),
        src_rank=h.src_rank,
        dst_rank=h.dst_rank,
        channel=h.channel,
        src_port=b.src,
        dst_port=b.dst,
        udp_sport=b.sport,
        flow_label=b.flow_label,
        epoch=b.epoch,
        path=list(b.path),
        verified=b.verified,
    )


_ISSUE_KIND = {
    IssueKind.FALLBACK: pb.BindingIssue.KIND_FALLBACK,
    IssueKind.UNBOUND: pb.BindingIssue.KIND_UNBOUND,
    IssueKind.MISMATCH: pb.BindingIssue.KIND_MISMATCH,
    IssueKind.BLACK_HOLE: pb.BindingIssue.KIND_BLACK_HOLE,
    IssueKind.PREDICTED: pb.BindingIssue.KIND_PREDICTED,
    IssueKind.UNSTABLE: pb.BindingIssue.KIND_UNSTABLE,
    IssueKind.DEVIATION: pb.BindingIssue.KIND_DEVIATION,
}


def issue(i: BindingIssue) -> pb.BindingIssue:
    return pb.BindingIssue(
        qp=pb.QpRef(communicator=i.communicator, connection=i.connection, qp=i.qp),
        kind=_ISSUE_KIND[i.kind],
        reason=i.reason,
    )


def intent_state(state: IntentState) -> str:
    """The enum's name (protobuf constructors take names): ``INTENT_STATE_INSTALLED``."""
    return "INTENT_STATE_" + state.name


def updates(update: JobUpdate, chunk: int = MAX_BINDINGS_PER_MESSAGE) -> Iterator[fi.BindingUpdate]:
    """A job update as one or more messages of one epoch (``more`` on all but the last)."""
    kind = fi.BindingUpdate.KIND_FULL if update.full else fi.BindingUpdate.KIND_DELTA
    bindings = update.bindings
    removed = update.removed
    parts = max(1, -(-len(bindings) // chunk), -(-len(removed) // chunk))
    for k in range(parts):
        last = k == parts - 1
        yield fi.BindingUpdate(
            epoch=update.epoch,
            kind=kind,
            bindings=[binding(h) for h in bindings[k * chunk : (k + 1) * chunk]],
            removed=[qp_ref(q) for q in removed[k * chunk : (k + 1) * chunk]],
            more=not last,
            intent_revision=update.intent_revision,
            state=intent_state(update.state),
            issues=[issue(i) for i in update.issues] if last else [],
            reason=update.reason,
            control_mode=control_mode(update.control),
        )


def resolved_ranks(fabric: Fabric, ranks: Sequence[RankNic]) -> list[pb.ResolvedRank]:
    index = fabric.index
    out = []
    for r in ranks:
        ports = []
        for name in r.ports:
            info = index.port(name).port
            ports.append(
                pb.NicPort(
                    name=name,
                    address=str(info.address),
                    gid="" if info.gid is None else str(info.gid),
                )
            )
        out.append(pb.ResolvedRank(rank=r.rank, host=r.host, nic=r.nic, rail=r.rail, ports=ports))
    return out


def prediction(p: JobPredictionRecord) -> pb.JobPrediction:
    return pb.JobPrediction(
        job_id=p.job_id,
        busbw_gbps=p.busbw_gbps,
        line_rate_gbps=p.line_rate_gbps,
        busbw_fraction=p.busbw_fraction,
        slowest_communicator=p.slowest_communicator,
        control_mode=control_mode(p.control),
        ecmp_busbw_gbps=p.ecmp_busbw_gbps,
        moved=p.moved,
        bindings_pushed=p.bindings_pushed,
        links_over_ecmp=p.links_over_ecmp,
        links_over_planned=p.links_over_planned,
    )


_RESULT = {
    DecisionResult.PLANNED: pb.Decision.RESULT_PLANNED,
    DecisionResult.FAILED: pb.Decision.RESULT_FAILED,
}


def decision(d: DecisionRecord) -> pb.Decision:
    return pb.Decision(
        sequence=d.sequence,
        epoch=d.epoch,
        at=timestamp(d.at),
        reason=d.reason,
        triggers=list(d.triggers),
        result=_RESULT[d.result],
        error=d.error,
        strategy=d.strategy,
        status=d.status,
        flows=d.flows,
        moved=d.moved,
        max_utilization=d.max_utilization,
        links_at_max=d.links_at_max,
        bound=d.bound,
        gap=d.gap,
        solve_seconds=d.solve_seconds,
        bindings_added=d.bindings_added,
        bindings_changed=d.bindings_changed,
        bindings_removed=d.bindings_removed,
        jobs_changed=list(d.jobs_changed),
        jobs_on_links=list(d.jobs_on_links),
        predictions=[prediction(p) for p in d.predictions],
        fallbacks=d.fallbacks,
        unbound=d.unbound,
        ports_mode=d.ports_mode,
        bindings_verified=d.bindings_verified,
        probe_findings=list(d.probe_findings),
        links_over_ecmp=d.links_over_ecmp,
        links_over_planned=d.links_over_planned,
        jobs_off=list(d.jobs_off),
        ecmp_seed=d.ecmp_seed,
    )


def plan_summary(epoch: int, d: DecisionRecord | None) -> admin.PlanSummary:
    if d is None:
        return admin.PlanSummary(epoch=epoch)
    return admin.PlanSummary(
        epoch=epoch,
        decision=decision(d),
        combinatorial_bound=d.combinatorial_bound,
        lp_bound=d.lp_bound or 0.0,
        solver_bound=d.solver_bound or 0.0,
        unreachable=d.unreachable,
        hottest_links=list(d.hottest),
    )


def pattern_name(text: str) -> str:
    return _enum_name(text, "PATTERN_")


def collective_name(text: str) -> str:
    return _enum_name(text, "COLLECTIVE_")
