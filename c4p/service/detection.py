"""The controller's side of the detector: the telemetry sink, the actions, the event stream.

Why a sink object and not code in the agent servicer: the agent stream hands every
:class:`~c4p.detector.summary.TelemetryReport` to ``accept`` and returns; the detector, the
plan in force (each QP's path, from the bindings in force, which probes verified where agents
probed) and the response live here. ``accept`` runs the detector at once (milliseconds per
step, see ``docs/benchmarks-detect.md``) under a lock of its own, never the state's for long.

Actions (:mod:`c4p.detector.respond`): a drain goes through :meth:`Intake.drain`, the same
path, damping and hold-down as ``c4p admin drain``, with a reason naming the event; the
reconcile key's detail names it too, so the decision log's trigger leads to the evidence.
Events are kept in a bounded log, streamed to ``WatchEvents`` subscribers (asyncio queues,
bounded: a slow watcher loses events, never blocks the detector) and, for acted reports and
drains, POSTed as JSON to ``detector.webhook_url`` by one thread with bounded retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from dataclasses import replace as _replace
from typing import Any

from c4p.api.v1 import admin_pb2
from c4p.controller.errors import RequestError
from c4p.controller.intake import Intake
from c4p.controller.loop import ControllerLoop
from c4p.controller.state import ControllerState
from c4p.controller.triggers import Key, KeyKind
from c4p.detector.detector import Detector
from c4p.detector.findings import DetectorSettings, ElementKind, Finding
from c4p.detector.paths import PathIndex, build
from c4p.detector.respond import (
    Action,
    DetectorConfig,
    Event,
    EventKind,
    EventLog,
    decide,
    drain_reason,
)
from c4p.detector.summary import ConnectionKey, TelemetryReport
from c4p.errors import C4pError
from c4p.store.base import ControlMode

log = logging.getLogger("c4p.detector")

QUEUE = 1000  # events per watcher, and webhook posts waiting


def event_pb(event: Event) -> admin_pb2.Event:
    """An event as ``WatchEvents`` streams it."""
    msg = admin_pb2.Event(
        sequence=event.sequence,
        kind=event.kind.value,
        job_id=event.job_id,
        mode=event.mode,
        action=event.action.value,
        acted=event.acted,
        detail=event.detail,
        latency_s=event.latency_s,
        steps=event.steps,
        wait_s=event.wait_s,
        busbw_gbps=event.busbw_gbps,
        interval_s=event.interval_s,
        truth=event.truth,
    )
    msg.at.FromNanoseconds(int(event.at * 1e9))
    f = event.finding
    if f is not None:
        msg.finding_class = f.cls.value
        msg.element_kind = f.kind.value
        msg.element, msg.host, msg.confidence = f.element, f.host, f.confidence
        msg.communicator, msg.step, msg.first_step = f.communicator, f.step, f.first_step
        msg.evidence.extend(f.evidence)
        for name, score in f.candidates:
            msg.candidates.add(element=name, score=score)
    return msg


def event_json(event: Event) -> dict[str, Any]:
    data = asdict(event)
    data["kind"], data["action"] = event.kind.value, event.action.value
    return data


class Webhook:
    """One thread posting events in order; a full queue drops (counted), each post retried
    ``retries`` times with doubling pauses, then dropped (counted)."""

    def __init__(self, url: str, retries: int, timeout_s: float) -> None:
        self.url, self.retries, self.timeout_s = url, retries, timeout_s
        self.queue: queue.Queue[Event | None] = queue.Queue(QUEUE)
        self.sent = self.failed = self.dropped = 0
        self.thread = threading.Thread(target=self._run, name="c4p-webhook", daemon=True)
        self.thread.start()

    def post(self, event: Event) -> None:
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def close(self) -> None:
        with contextlib.suppress(queue.Full):
            self.queue.put_nowait(None)
        self.thread.join(timeout=self.timeout_s * (self.retries + 1) + 1)

    def _run(self) -> None:
        while (event := self.queue.get()) is not None:
            body = json.dumps(event_json(event)).encode()
            pause = 0.25
            for attempt in range(self.retries + 1):
                request = urllib.request.Request(
                    self.url, body, {"Content-Type": "application/json"}, method="POST"
                )
                try:
                    with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                        if 200 <= answer.status < 300:
                            self.sent += 1
                            break
                except OSError as exc:
                    log.warning("webhook %s: %s", self.url, exc, extra={"event": "webhook"})
                if attempt == self.retries:
                    self.failed += 1
                else:
                    time.sleep(pause)
                    pause *= 2


class DetectionService:
    """The :class:`~c4p.detector.summary.TelemetrySink` of the controller (see module)."""

    def __init__(
        self,
        state: ControllerState,
        intake: Intake,
        loop: ControllerLoop,
        config: DetectorConfig | None = None,
        settings: DetectorSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state, self.intake, self.loop = state, intake, loop
        self.config = config or DetectorConfig()
        self.clock = clock
        self.detector = Detector(settings)
        self.events = EventLog()
        self.lock = threading.Lock()
        self._paths: dict[str, int] = {}  # job -> the state epoch its paths were read at
        self._watchers: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Event]]] = set()
        self._stats_at = clock()
        self.webhook: Webhook | None = None
        if self.config.webhook_url:
            c = self.config
            self.webhook = Webhook(c.webhook_url, c.webhook_retries, c.webhook_timeout_s)

    # -- the sink ---------------------------------------------------------------------------

    def accept(self, report: TelemetryReport) -> None:
        if not self.config.enabled:
            return
        now = self.clock()
        with self.lock:
            for job_id in {s.job_id for s in report.steps} | {p.job_id for p in report.progress}:
                self._refresh_paths(job_id)
            self.detector.accept(report)
            events = [e for f in self.detector.evaluate(now) if (e := self._respond(f, now))]
            if now - self._stats_at >= self.config.stats_s:
                events.extend(self._stats(now))
                for job_id in list(self.detector.jobs):  # released jobs: drop their state
                    if self.state.mode_if_registered(job_id) is None:
                        self.detector.forget(job_id)
                        self._paths.pop(job_id, None)
        for event in events:
            self._publish(event)

    def _refresh_paths(self, job_id: str) -> None:
        """The paths of a job's QPs as the bindings in force have them (shadow jobs: the
        bindings they would get), re-read when the controller's epoch moved."""
        with self.state.lock:
            epoch = self.state.epoch
            if self._paths.get(job_id) == epoch:
                return
            held = self.state.held.get(job_id) or self.state.shadow.get(job_id) or {}
            bindings = list(held.values())
            index = self.state.fabric.index
            fabric = self.state.fabric
        self._paths[job_id] = epoch
        by_comm: dict[str, list[tuple[ConnectionKey, list[int]]]] = {}
        for h in bindings:
            b = h.binding
            nodes = [index.node_of.get(n, -1) for n in b.path]
            # Directed: a link slow one way (a shaped egress queue) is told from its neighbours
            # only by the direction the slow paths cross it in (docs/detector.md).
            links = [
                res
                for u, v in zip(nodes, nodes[1:], strict=False)
                if (res := index.resource_between.get((u, v))) is not None
            ]
            key = ConnectionKey(b.communicator, h.src_rank, h.dst_rank, h.channel, b.qp)
            by_comm.setdefault(b.communicator, []).append((key, links))
        if not by_comm:
            return
        import numpy as np

        ends = np.stack([index.res_src, index.res_dst], axis=1)
        switch_ends = np.where(ends < index.num_switches, ends, -1).astype(np.int64)
        names = [fabric.links[res // 2].id for res in range(len(index.res_src))]
        switches = [s.name for s in fabric.switches]
        for comm, items in by_comm.items():
            paths: PathIndex = build(items, names, switch_ends, switches)
            self.detector.set_paths(job_id, comm, paths)

    def _respond(self, finding: Finding, now: float) -> Event | None:
        found = self.state.mode_if_registered(finding.job_id)
        mode = found[0] if found is not None else ControlMode.OFF
        host_end = self._host_end(finding)
        if host_end:  # the host behind the NIC link is the one the scheduler must hear of
            finding = _replace(finding, host=host_end.partition(":")[0])
        decided = decide(finding, mode, host_end)
        if decided is None:
            return None
        action, acted, detail = decided
        event = Event(
            self.events.next_sequence(),
            now,
            EventKind.CLEARED if finding.cleared else EventKind.FINDING,
            finding.job_id,
            mode=mode.value,
            action=action,
            acted=acted,
            detail=detail,
            finding=finding,
            latency_s=max(0.0, finding.detected_s - finding.started_s),
        )
        if acted and action is Action.DRAIN:
            try:
                link_id, changed, _ = self.intake.drain(finding.element, drain_reason(event))
            except RequestError as exc:
                event = _with(event, acted=False, detail=f"drain refused: {exc}")
            else:
                if changed:
                    self.loop.enqueue_threadsafe(
                        Key(KeyKind.DRAIN, link_id, f"detector event {event.sequence}")
                    )
                else:
                    event = _with(event, detail=f"{link_id} was already drained")
        log.warning(
            "%s %s %s: %s",
            event.kind.value,
            finding.cls.value,
            finding.element,
            event.detail,
            extra={"event": "detector", "job": finding.job_id, "sequence": event.sequence},
        )
        return self.events.add(event)

    def _host_end(self, finding: Finding) -> str:
        """The host end (``host:port``) of the link a finding names, when it is a host link
        (those are reported, never drained: :mod:`c4p.detector.respond`); else ``""``."""
        if finding.kind is not ElementKind.LINK:
            return ""
        index = self.state.fabric.index
        try:
            res = 2 * index.link_number(finding.element)
        except C4pError:
            return ""
        for node in (int(index.res_src[res]), int(index.res_dst[res])):
            if not index.is_switch(node):
                return str(index.node_names[node])
        return ""

    def _stats(self, now: float) -> list[Event]:
        interval, self._stats_at = now - self._stats_at, now
        out = []
        for job_id, s in sorted(self.detector.take_stats().items()):
            found = self.state.mode_if_registered(job_id)
            mode = found[0] if found is not None else ControlMode.OFF
            if mode is ControlMode.OFF:
                continue
            event = Event(self.events.next_sequence(), now, EventKind.STATS, job_id,
                          mode=mode.value, steps=s.steps, wait_s=s.wait_s,
                          busbw_gbps=s.busbw_gbps, interval_s=interval)  # fmt: skip
            out.append(self.events.add(event))
        return out

    # -- the stream and the webhook ---------------------------------------------------------

    def _publish(self, event: Event) -> None:
        for loop, q in self._watchers:
            with contextlib.suppress(RuntimeError):  # its event loop closed meanwhile
                loop.call_soon_threadsafe(_offer, q, event)
        if self.webhook is not None and event.acted:
            self.webhook.post(event)

    def subscribe(self) -> asyncio.Queue[Event]:
        """A queue of new events for a watcher on the running event loop."""
        q: asyncio.Queue[Event] = asyncio.Queue(QUEUE)
        # a new set, swapped in whole: the publishing thread iterates the old one safely
        self._watchers = self._watchers | {(asyncio.get_running_loop(), q)}
        return q

    def unsubscribe(self, q: asyncio.Queue[Event]) -> None:
        self._watchers = {w for w in self._watchers if w[1] is not q}

    def after(self, sequence: int, job_id: str = "") -> list[Event]:
        with self.lock:
            return self.events.after(sequence, job_id)

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close()


def _offer(q: asyncio.Queue[Event], event: Event) -> None:
    # a slow watcher loses events (it can resume by sequence)
    with contextlib.suppress(asyncio.QueueFull):
        q.put_nowait(event)


def _with(event: Event, **changes: Any) -> Event:
    from dataclasses import replace

    return replace(event, **changes)
