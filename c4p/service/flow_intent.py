"""FlowIntentService: register a job, submit its intents, watch its bindings, release it.

Why thin: validation and durability are the intake's (:mod:`c4p.controller.intake`), planning is
the reconcile loop's; this module converts messages, runs blocking work (store writes, fabric
checks) off the event loop, wakes the reconcile loop with a key, and streams.

The stream (WatchBindings) is level-triggered like the controller: it sends the full set or the
differences since the client's epoch, then sleeps until the hub wakes it (a plan changed this
job) and sends the differences since the epoch it last sent. A heartbeat timeout makes it look
again every ``stream_check_s`` even without a wake-up, so a lost wake-up costs latency, never
correctness. The stream ends when the job is released or the server stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterable

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.controller.errors import LimitExceeded, PermissionDenied
from c4p.controller.intake import Intake, Outcome
from c4p.controller.loop import ControllerLoop
from c4p.controller.state import ControllerState, JobUpdate
from c4p.controller.triggers import Key, KeyKind
from c4p.service import convert, intent_bounds
from c4p.service.access import Guard, host_problems
from c4p.service.rpc import Call, Endpoint, Scope
from c4p.service.telemetry import Metrics
from c4p.store.base import ControlMode

SERVICE = "c4p.v1.FlowIntentService"

_OUTCOME = {
    Outcome.CREATED: fi.CommunicatorStatus.OUTCOME_CREATED,
    Outcome.UPDATED: fi.CommunicatorStatus.OUTCOME_UPDATED,
    Outcome.UNCHANGED: fi.CommunicatorStatus.OUTCOME_UNCHANGED,
    Outcome.WITHDRAWN: fi.CommunicatorStatus.OUTCOME_WITHDRAWN,
    Outcome.ABSENT: fi.CommunicatorStatus.OUTCOME_ABSENT,
}


class FlowIntentServicer:
    """The four methods of ``c4p.v1.FlowIntentService``."""

    def __init__(
        self,
        intake: Intake,
        state: ControllerState,
        loop: ControllerLoop,
        hub: StreamHub,
        guard: Guard,
        metrics: Metrics,
        stream_check_s: float = 5.0,
    ) -> None:
        self.intake = intake
        self.state = state
        self.loop = loop
        self.hub = hub
        self.guard = guard
        self.metrics = metrics
        self.stream_check_s = stream_check_s

    def endpoints(self) -> list[Endpoint]:
        return [
            Endpoint("RegisterJob", fi.RegisterJobRequest, Scope.REGISTER, unary=self.register),
            Endpoint("SubmitIntents", fi.SubmitIntentsRequest, Scope.JOB, unary=self.submit),
            Endpoint("WatchBindings", fi.WatchBindingsRequest, Scope.JOB, stream=self.watch),
            Endpoint("ReleaseJob", fi.ReleaseJobRequest, Scope.JOB, unary=self.release),
        ]

    async def register(self, request: fi.RegisterJobRequest, call: Call) -> fi.RegisterJobResponse:
        self.intake.admit_registration(len(request.hosts), len(request.ranks))
        denied = host_problems(list(request.hosts), call.hosts, "hosts")
        denied += host_problems([r.host for r in request.ranks], call.hosts, "ranks")
        if denied:
            raise PermissionDenied(denied)
        done = await asyncio.to_thread(
            self.intake.register, convert.registration(request), call.credential
        )
        record = done.record
        # Off the loop too: a 2,048-rank job's ports as text took 0.05-0.2 s (IPv6 to string
        # is pure Python), and 64 registrations held every other call that long each.
        ranks = await asyncio.to_thread(convert.resolved_ranks, self.state.fabric, done.ranks)
        mode = self.state.mode_if_registered(record.job_id)  # None: released meanwhile
        if not done.replayed:
            self.loop.enqueue(Key(KeyKind.JOB, record.job_id, "registered"))
            self.metrics.active_jobs.set(len(self.state.jobs))
        return fi.RegisterJobResponse(
            job_id=record.job_id,
            token=self.guard.token_for(record.job_id, record.incarnation),
            epoch=done.epoch,
            ranks=ranks,
            control_mode=convert.control_mode(mode[0] if mode else ControlMode.OFF),
        )

    async def submit(
        self, request: fi.SubmitIntentsRequest, call: Call
    ) -> fi.SubmitIntentsResponse:
        self.intake.admit_submission(
            call.job_id,
            [(len(c.ranks), len(c.connections)) for c in request.communicators],
            len(request.withdraw),
        )  # sizes first: nothing is copied out of the message before they pass
        intent_bounds.admit_connections(request.communicators, self.intake.limits)
        with self.state.lock:
            entry = self.state.jobs.get(call.job_id)
            size = len(entry.ranks) if entry is not None else 0
            nics = {f"{r.host}:{r.nic}" for r in entry.ranks} if entry is not None else set()
        found = await asyncio.to_thread(
            intent_bounds.connection_problems, request.communicators, size, nics
        )
        intent_bounds.refuse(found)  # read, not built: nothing converted until this passes
        comms = [convert.communicator(c) for c in request.communicators]
        done = await asyncio.to_thread(
            self.intake.submit, call.job_id, call.incarnation, comms, list(request.withdraw)
        )
        if done.changed:
            self.loop.enqueue(Key(KeyKind.JOB, call.job_id, "intents"))
        return fi.SubmitIntentsResponse(
            revision=done.revision,
            communicators=[
                fi.CommunicatorStatus(
                    id=c.id,
                    version=c.version,
                    outcome=_OUTCOME[c.outcome],
                    connections=c.connections,
                    flows=c.flows,
                )
                for c in done.communicators
            ],
            flows=done.flows,
        )

    async def release(self, request: fi.ReleaseJobRequest, call: Call) -> fi.ReleaseJobResponse:
        epoch = await asyncio.to_thread(self.intake.release, call.job_id, call.incarnation)
        self.hub.notify([call.job_id])  # its streams send WITHDRAWN and end
        self.loop.enqueue(Key(KeyKind.JOB, call.job_id, "released"))
        self.metrics.active_jobs.set(len(self.state.jobs))
        return fi.ReleaseJobResponse(epoch=epoch)

    async def watch(
        self, request: fi.WatchBindingsRequest, call: Call
    ) -> AsyncIterator[fi.BindingUpdate]:
        sub = self.hub.open(call.job_id)
        self.metrics.active_streams.inc()
        try:
            seen = int(request.from_epoch)
            hosts = frozenset(request.src_hosts)
            shown: tuple[object, ...] | None = None
            while not sub.closed:
                found = await asyncio.to_thread(
                    self._next, call.job_id, call.incarnation, seen, hosts, shown
                )
                if found is None:  # the job was released: say so, then end
                    yield fi.BindingUpdate(
                        epoch=self.state.epoch,
                        kind=fi.BindingUpdate.KIND_DELTA,
                        state=pb.INTENT_STATE_WITHDRAWN,
                    )
                    return
                seen, shown, messages = found
                for message in messages:
                    self.metrics.bindings_pushed.inc(len(message.bindings))
                    yield message
                await sub.wait(self.stream_check_s)
        finally:
            sub.close()
            self.metrics.active_streams.dec()

    def _next(
        self,
        job_id: str,
        incarnation: int,
        seen: int,
        hosts: frozenset[str],
        shown: tuple[object, ...] | None,
    ) -> tuple[int, tuple[object, ...], list[fi.BindingUpdate]] | None:
        """The messages a stream sends next (none when nothing changed since ``seen`` and the
        status ``shown``), with the epoch and status they bring it to; ``None`` once the job
        is gone. Run off the event loop, conversion included: a full set of a 2,048-rank job
        is 4,096 bindings, and 64 of them converted on the loop held every other call and
        stream (the health check too) for seconds (issue 31, the service at scale)."""
        update = self.state.update_since(job_id, incarnation, seen)
        if update is None:
            return None
        if hosts:
            update = only_from_hosts(update, hosts)
        status = (update.intent_revision, update.state, update.issues, update.control)
        messages: list[fi.BindingUpdate] = []
        if shown is None or not update.empty or status != shown:
            messages = list(convert.updates(update))
        return update.epoch, status, messages


def only_from_hosts(update: JobUpdate, hosts: frozenset[str]) -> JobUpdate:
    """The update with only the bindings whose source NIC port is on one of ``hosts`` (a host
    agent's view). Removals stay whole: a QP key does not name its host, and a client ignores
    removals of QPs it does not hold."""
    mine = tuple(h for h in update.bindings if h.binding.src.split(":", 1)[0] in hosts)
    return dataclasses.replace(update, bindings=mine)


# -- streams --------------------------------------------------------------------------------------
# Why wake-ups and not queues of updates: a stream does not need every intermediate epoch, it
# needs "what changed since the epoch I last sent". Each stream therefore only waits for a
# wake-up and then asks the state for the differences since its own epoch (``update_since``): a
# slow client gets one compacted delta instead of an ever-growing queue, memory per stream is
# constant, and a resumed stream runs exactly the same code as a live one. A plan wakes only the
# streams of the jobs whose bindings changed. Everything here runs on the event loop thread.


class Subscription:
    """One open stream of one job."""

    def __init__(self, hub: StreamHub, job_id: str) -> None:
        self.hub = hub
        self.job_id = job_id
        self.event = asyncio.Event()
        self.closed = False

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait for a wake-up (``False`` on timeout); clears it for the next one."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True

    def close(self) -> None:
        self.hub._remove(self)


class StreamHub:
    """Streams by job (see the module docstring)."""

    def __init__(self, max_streams_per_job: int, max_streams: int) -> None:
        self.max_per_job = max_streams_per_job
        self.max_total = max_streams
        self._subs: dict[str, set[Subscription]] = {}

    def open(self, job_id: str) -> Subscription:
        mine = self._subs.setdefault(job_id, set())
        if len(mine) >= self.max_per_job:
            raise LimitExceeded(
                f"job {job_id!r} already has {len(mine)} open streams (limit {self.max_per_job})"
            )
        if self.count() >= self.max_total:
            raise LimitExceeded(f"the controller serves {self.max_total} streams already")
        sub = Subscription(self, job_id)
        mine.add(sub)
        return sub

    def _remove(self, sub: Subscription) -> None:
        mine = self._subs.get(sub.job_id)
        if mine is not None:
            mine.discard(sub)
            if not mine:
                del self._subs[sub.job_id]

    def notify(self, jobs: Iterable[str]) -> None:
        for job in jobs:
            for sub in self._subs.get(job, ()):
                sub.event.set()

    def close_all(self) -> None:
        """The server stops: every stream ends (clients reconnect and resume elsewhere)."""
        for subs in self._subs.values():
            for sub in subs:
                sub.closed = True
                sub.event.set()

    def count(self, job_id: str | None = None) -> int:
        if job_id is not None:
            return len(self._subs.get(job_id, ()))
        return sum(len(s) for s in self._subs.values())
