"""The probe worker: takes what the reconcile step wants learned and probes it via the agents.

Why a worker beside the loop and not in the step: a probe round is network I/O that takes
seconds (agents pace their probes under the switches' ICMP limits), and the controller is
level-triggered: the step *says* what it is missing (:meth:`PortLearner.take_wants`) and binds
what the table already knows. After every step the service kicks this worker; it runs one round
in a thread (the table lock is released while packets are in flight), records the black holes
the agents reported, and enqueues a forced ``probe`` key so that the next step binds from what
was learned. Rounds never overlap, and each want is bounded in rounds by the learner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from c4p.controller.learning import PortLearner, ProbeWants
from c4p.controller.loop import ControllerLoop
from c4p.controller.triggers import Key, KeyKind
from c4p.service.agents import AgentHub
from southbound.pathtable import Outcome
from southbound.probeplan import ProbeReport

log = logging.getLogger("c4p.service")


class ProbeWorker:
    """One probe round at a time, for one learner, through one agent hub."""

    def __init__(self, learner: PortLearner, hub: AgentHub, loop: ControllerLoop) -> None:
        self.learner = learner
        self.hub = hub
        self.loop = loop
        self.rounds = 0
        self.traces = 0
        self.packets = 0
        self.incomplete = 0  # traces with a hop that never answered (lost probes or answers)
        self.seconds = 0.0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="c4p-probe-worker")

    def kick(self) -> None:
        """Something may want probes (call on the loop thread)."""
        if self._wake is not None:
            self._wake.set()

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            wants = self.learner.take_wants()
            if wants.empty:
                continue
            try:
                report = await asyncio.to_thread(self._round, wants)
            except Exception:  # a bug: log it; the next step asks again (bounded)
                log.exception("probe round failed", extra={"event": "probe-failed"})
                self.learner.answered()
                continue
            self.loop.enqueue(Key(KeyKind.PROBE, detail=f"{report.traces} traces", force=True))

    def _round(self, wants: ProbeWants) -> ProbeReport:
        started = time.perf_counter()
        report = self.learner.probe(wants, self.hub)
        self.learner.record_black_holes(self.hub.take_black_holes())
        self.learner.answered()
        took = time.perf_counter() - started
        self.rounds += 1
        self.traces += report.traces
        self.packets += report.packets
        self.incomplete += report.outcomes[Outcome.INCOMPLETE]
        self.seconds += took
        log.info(
            "probed",
            extra={
                "event": "probed",
                "keys": len(wants.cover),
                "exact": len(wants.exact),
                "stale": sum(len(i.stale) for i in wants.invalidations),
                "traces": report.traces,
                "packets": report.packets,
                "rounds": report.rounds,
                "uncovered": len(report.uncovered),
                "seconds": round(took, 3),
            },
        )
        return report
