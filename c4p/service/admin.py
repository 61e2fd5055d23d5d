"""AdminService: what an operator (or an external fault detector) sees and does.

Why the waits: an operator who drains a suspect link wants to know when traffic is off it.
With ``wait``, DrainLink/RestoreLink/Replan answer once a reconcile step has seen the change, with
that step's decision (epoch, flows moved, bound, gap); without it they answer at once and the
decision log tells the rest. SetControlMode and RollbackAll (control modes, see
:mod:`c4p.controller.modes`) wait the same way. Reads (fabric, jobs, plan, log) never block the
reconcile loop for longer than a copy under the state lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from c4p.api.v1 import admin_pb2 as admin
from c4p.api.v1 import intents_pb2 as pb
from c4p.controller.errors import InvalidRequest, Unavailable
from c4p.controller.intake import Intake
from c4p.controller.loop import ControllerLoop
from c4p.controller.state import ControllerState, IntentState
from c4p.controller.triggers import Key, KeyKind
from c4p.service import convert
from c4p.service.detection import DetectionService, event_pb
from c4p.service.flow_intent import StreamHub
from c4p.service.rpc import Call, Endpoint, Scope
from c4p.store.base import (
    CommunicatorRecord,
    ControlMode,
    DecisionRecord,
    DecisionResult,
    JobPredictionRecord,
    ModeSource,
    Store,
    StoreError,
)
from c4p.store.sqlite import SqliteStore
from topology.model import LinkStatus

log = logging.getLogger("c4p.service")

SERVICE = "c4p.v1.AdminService"
MAX_LOG = 1000
ANSWER_MARGIN_S = 0.5
"""A call that waits for a plan answers this long before the caller's deadline."""
MAX_WAIT_S = 600.0
"""The longest a call waits for a plan, whatever the caller's deadline."""


class AdminServicer:
    """The methods of ``c4p.v1.AdminService``."""

    def __init__(
        self,
        intake: Intake,
        state: ControllerState,
        store: Store,
        loop: ControllerLoop,
        hub: StreamHub,
        wait_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.intake = intake
        self.state = state
        self.store = store
        self.loop = loop
        self.hub = hub
        self.wait_s = wait_s
        self.clock = clock
        self.detection: DetectionService | None = None
        """The detector's events (set by the runtime; ``None``: WatchEvents is unavailable)."""

    def endpoints(self) -> list[Endpoint]:
        return [
            Endpoint("GetFabric", admin.GetFabricRequest, Scope.ADMIN, unary=self.fabric),
            Endpoint("ListJobs", admin.ListJobsRequest, Scope.ADMIN, unary=self.jobs),
            Endpoint("GetPlan", admin.GetPlanRequest, Scope.ADMIN, unary=self.plan),
            Endpoint(
                "DrainLink", admin.DrainLinkRequest, Scope.ADMIN, unary=self.drain, changes=True
            ),
            Endpoint(
                "RestoreLink",
                admin.RestoreLinkRequest,
                Scope.ADMIN,
                unary=self.restore,
                changes=True,
            ),
            Endpoint("Replan", admin.ReplanRequest, Scope.ADMIN, unary=self.replan, changes=True),
            Endpoint("GetDecisionLog", admin.GetDecisionLogRequest, Scope.ADMIN, unary=self.log),
            Endpoint("WatchEvents", admin.EventWatchRequest, Scope.ADMIN, stream=self.events),
            Endpoint(
                "SetControlMode", admin.SetControlModeRequest, Scope.ADMIN, unary=self.set_mode
            ),
            Endpoint("RollbackAll", admin.RollbackAllRequest, Scope.ADMIN, unary=self.rollback),
        ]

    async def fabric(self, request: admin.GetFabricRequest, call: Call) -> admin.FabricSnapshot:
        rows = await asyncio.to_thread(link_rows, self.state, self.clock(), request.only_changed)
        f = self.state.fabric
        return admin.FabricSnapshot(
            name=f.name,
            switches=len(f.switches),
            hosts=len(f.hosts),
            nic_ports=len(f.index.ports),
            links_total=len(f.links),
            links=[
                admin.LinkInfo(
                    id=r.id,
                    a=r.a,
                    b=r.b,
                    speed_gbps=r.speed_gbps,
                    observed=r.observed.value,
                    effective=r.effective.value,
                    drained=r.drained,
                    drain_reason=r.drain_reason,
                    held=r.held,
                    flap_penalty=r.flap_penalty,
                    flows=r.flows,
                    jobs=r.jobs,
                    operator_penalty=r.operator_penalty,
                    usable_at=convert.timestamp(r.usable_at) if r.usable_at else None,
                )
                for r in rows
            ],
            epoch=self.state.epoch,
        )

    async def jobs(self, request: admin.ListJobsRequest, call: Call) -> admin.ListJobsResponse:
        rows = await asyncio.to_thread(job_rows, self.state, request.job_id)
        return admin.ListJobsResponse(
            jobs=[
                admin.JobInfo(
                    job_id=r.job_id,
                    tenant=r.tenant,
                    priority=r.priority,
                    ranks=r.ranks,
                    state=convert.intent_state(r.state),
                    communicators=[
                        admin.CommunicatorSummary(
                            id=c.spec.id,
                            version=c.version,
                            pattern=convert.pattern_name(c.spec.pattern.value),
                            collective=convert.collective_name(c.spec.collective.value),
                            connections=c.connections,
                            flows=c.flows,
                            accepted_at=convert.timestamp(c.accepted_at),
                        )
                        for c in r.communicators
                    ],
                    flows=r.flows,
                    bound=r.bound,
                    issues=r.issues,
                    intent_revision=r.intent_revision,
                    planned_revision=r.planned_revision,
                    last_change_epoch=r.event_epoch,
                    streams=self.hub.count(r.job_id),
                    prediction=convert.prediction(r.prediction) if r.prediction else None,
                    registered_at=convert.timestamp(r.registered_at),
                    control_mode=convert.control_mode(r.control),
                    control_source=r.control_source.value,
                    verified=r.verified,
                    unverified=r.unverified,
                    predicted=r.predicted,
                )
                for r in rows
            ],
            epoch=self.state.epoch,
        )

    def _epoch_decision(self) -> DecisionRecord | None:
        epoch = self.state.epoch
        for d in self.store.decisions(64):
            if d.result is DecisionResult.PLANNED and d.epoch == epoch:
                return d
        return None

    async def plan(self, request: admin.GetPlanRequest, call: Call) -> admin.PlanSummary:
        found = await asyncio.to_thread(self._epoch_decision)
        return convert.plan_summary(self.state.epoch, found)

    async def _waited(self, revision: int, wait: bool, call: Call) -> pb.Decision | None:
        """The decision that covered ``revision``, waited for as long as the caller waits
        (answering a moment before its deadline), or ``wait_s`` when it set no deadline;
        ``None`` if no step covered it by then. Why the caller's deadline: one step at
        131,072 GPUs outlasts the fixed wait (a drain's took 70-80 s, the wait 62 s), and
        ``--wait`` then answered before the plan without the link was in force, which is
        what it promises to wait for; a caller with a short deadline gets an answer (without
        the decision) instead of DEADLINE_EXCEEDED."""
        if not wait:
            return None
        timeout = self.wait_s
        if call.deadline is not None:
            left = call.deadline - time.monotonic() - ANSWER_MARGIN_S
            timeout = min(max(left, 0.0), MAX_WAIT_S)
        decision = await self.loop.wait_covered(revision, timeout)
        return None if decision is None else convert.decision(decision)

    async def drain(self, request: admin.DrainLinkRequest, call: Call) -> admin.LinkChangeResponse:
        link_id, changed, revision = await asyncio.to_thread(
            self.intake.drain, request.link, request.reason
        )
        if changed:
            self.loop.enqueue(Key(KeyKind.DRAIN, link_id, "drained"))
        return admin.LinkChangeResponse(
            link_id=link_id,
            effective="drained",
            changed=changed,
            decision=await self._waited(revision, request.wait, call),
        )

    async def restore(
        self, request: admin.RestoreLinkRequest, call: Call
    ) -> admin.LinkChangeResponse:
        link_id, changed, revision = await asyncio.to_thread(self.intake.restore, request.link)
        number = self.state.fabric.index.link_number(link_id)
        now = self.clock()
        if request.force and self.state.release_operator_hold(number, now):
            revision = self.state.bump()  # the hold ended: a forced step says so in the log
            changed = True
            log.warning(
                "forced restore",
                extra={"event": "forced-restore", "link": link_id, "caller": call.caller},
            )
            self.loop.enqueue(Key(KeyKind.DRAIN, link_id, "restored --force (hold ended)", True))
        elif changed:
            self.loop.enqueue(Key(KeyKind.DRAIN, link_id, "restored"))
        effective = self.state.effective_links(now).get(number)
        text = effective.value if effective else "up"
        if effective is LinkStatus.DRAINED and self.state.operator_held(number, now):
            text = "held"  # restored, back in use after the hold-down (flap damping)
        return admin.LinkChangeResponse(
            link_id=link_id,
            effective=text,
            changed=changed,
            decision=await self._waited(revision, request.wait, call),
        )

    async def replan(self, request: admin.ReplanRequest, call: Call) -> admin.ReplanResponse:
        reason = request.reason[:256]
        store = self.store
        if isinstance(store, SqliteStore) and (lost := store.verify()):
            raise StoreError(f"store {store.path}: {lost}")  # a plan that would not be kept:
            # say so now (its step could never commit, so waiting for it would only time out)
        revision = self.state.bump()
        self.loop.enqueue(Key(KeyKind.REPLAN, reason or "operator", force=True))
        return admin.ReplanResponse(decision=await self._waited(revision, request.wait, call))

    async def set_mode(
        self, request: admin.SetControlModeRequest, call: Call
    ) -> admin.SetControlModeResponse:
        try:
            mode = convert.control_mode_in(request.mode)
        except ValueError:
            raise InvalidRequest(f"unknown control mode {request.mode}", "mode") from None
        changed, revision = await asyncio.to_thread(self.intake.set_control, request.job_id, mode)
        if changed:
            self.loop.enqueue(Key(KeyKind.MODE, request.job_id))
        now, source = self.state.mode_if_registered(request.job_id) or (
            ControlMode.OFF,
            ModeSource.JOB,
        )  # released meanwhile: nothing is planned for it
        return admin.SetControlModeResponse(
            job_id=request.job_id,
            mode=convert.control_mode(now),
            source=source.value,
            changed=changed,
            decision=await self._waited(revision, request.wait, call),
        )

    async def rollback(
        self, request: admin.RollbackAllRequest, call: Call
    ) -> admin.RollbackAllResponse:
        changed, revision = await asyncio.to_thread(
            self.intake.rollback, not request.clear, request.reason
        )
        if changed:
            detail = "cleared" if request.clear else "engaged"
            self.loop.enqueue(Key(KeyKind.MODE, "rollback", detail))
        return admin.RollbackAllResponse(
            engaged=self.state.rollback is not None,
            changed=changed,
            jobs=len(self.state.jobs),
            decision=await self._waited(revision, request.wait, call),
        )

    async def log(
        self, request: admin.GetDecisionLogRequest, call: Call
    ) -> admin.GetDecisionLogResponse:
        limit = min(request.limit or 50, MAX_LOG)  # before_sequence: any uint64 (the store clamps)
        found = await asyncio.to_thread(self.store.decisions, limit, int(request.before_sequence))
        return admin.GetDecisionLogResponse(decisions=[convert.decision(d) for d in found])

    async def events(
        self, request: admin.EventWatchRequest, call: Call
    ) -> AsyncIterator[admin.Event]:
        """The events kept after ``after_sequence``, then new ones with ``follow``; subscribed
        before the backlog is read, so none falls between (repeats are skipped by number)."""
        det = self.detection
        if det is None:
            raise Unavailable("the detector is not running (detector.enabled: false)")
        seen, job = int(request.after_sequence), request.job_id
        q = det.subscribe()
        try:
            for event in det.after(seen, job):
                seen = event.sequence
                yield event_pb(event)
            while request.follow:
                event = await q.get()
                if event.sequence > seen and (not job or event.job_id == job):
                    seen = event.sequence
                    yield event_pb(event)
        finally:
            det.unsubscribe(q)


# -- views ----------------------------------------------------------------------------------------
# What an operator wants to see about a link or a job, computed under the state lock from the
# live structures; presentations that change with operators' needs, not with the controller.


@dataclass(frozen=True)
class LinkRow:
    id: str
    a: str
    b: str
    speed_gbps: float
    observed: LinkStatus
    effective: LinkStatus
    drained: bool
    drain_reason: str
    held: bool
    flap_penalty: float
    flows: int
    jobs: int
    operator_penalty: float = 0.0
    """The damping penalty of the operator's drains and restores (``flap_penalty``: the fabric
    source's reports); a held link shows the one that holds it and when it is usable again."""
    usable_at: float = 0.0


@dataclass(frozen=True)
class JobRow:
    job_id: str
    tenant: str
    priority: int
    ranks: int
    state: IntentState
    communicators: tuple[CommunicatorRecord, ...]
    flows: int
    bound: int
    issues: int
    intent_revision: int
    planned_revision: int
    event_epoch: int
    prediction: JobPredictionRecord | None
    registered_at: float
    control: ControlMode
    control_source: ModeSource
    verified: int = 0
    unverified: int = 0
    predicted: bool = False


def link_rows(state: ControllerState, now: float, only_changed: bool) -> list[LinkRow]:
    """Every link (or only those not plainly up) with what the planner makes of it."""
    with state.lock:
        effective = state.effective_links(now)
        rows = []
        for i, link in enumerate(state.fabric.links):
            observed = state.tracker.observed(i)
            eff = effective.get(i, LinkStatus.UP)
            override = state.overrides.get(link.id)
            held = state.tracker.held(i, now) or state.operator.held(i, now)
            tracker_at = state.tracker.usable_at(i, now)
            if only_changed and eff is LinkStatus.UP and observed is LinkStatus.UP:
                continue
            on: Mapping[str, int] = state.link_jobs.get(i, {})
            rows.append(
                LinkRow(
                    id=link.id,
                    a=link.a,
                    b=link.b,
                    speed_gbps=link.speed_gbps,
                    observed=observed,
                    effective=eff,
                    drained=override is not None,
                    drain_reason=override.reason if override else "",
                    held=held,
                    flap_penalty=state.tracker.penalty(i, now),
                    flows=sum(on.values()),
                    jobs=len(on),
                    operator_penalty=state.operator.penalty(i, now),
                    usable_at=max(
                        (t for t in (tracker_at, state.operator.usable_at(i, now)) if t),
                        default=0.0,
                    ),
                )
            )
        return rows


def job_rows(state: ControllerState, job_id: str = "") -> list[JobRow]:
    with state.lock:
        out = []
        for jid, e in sorted(state.jobs.items()):
            if job_id and jid != job_id:
                continue
            mode, source = state.mode_of(jid)
            out.append(
                JobRow(
                    job_id=jid,
                    tenant=e.record.tenant,
                    priority=e.record.priority,
                    ranks=len(e.ranks),
                    state=e.state,
                    communicators=tuple(e.communicators[c] for c in sorted(e.communicators)),
                    flows=e.flows,
                    bound=len(state.held.get(jid, {})),
                    issues=len(e.issues),
                    intent_revision=e.record.revision,
                    planned_revision=e.planned_revision,
                    event_epoch=e.event_epoch,
                    prediction=e.prediction,
                    registered_at=e.record.registered_at,
                    control=mode,
                    control_source=source,
                    verified=e.verified,
                    unverified=e.unverified,
                    predicted=e.predicted,
                )
            )
        return out
