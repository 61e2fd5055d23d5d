"""The shell around the reconciler: keys in, debounced steps in a worker thread, outcomes out.

Why asyncio with the step in a thread: the gRPC API runs on an asyncio loop, and a plan can take
seconds of CPU in OR-Tools. The step runs in a worker thread (``asyncio.to_thread``) so streams
and API calls stay responsive, and only one step runs at a time (a single reconciler: the
outcome of one is the input of the next).

Where keys come from:

* the API (:meth:`ControllerLoop.enqueue`): a job registered, intents changed, a drain;
* the fabric source (:meth:`ControllerLoop.observe_link`, thread-safe): a link changed state.
  This is the seam for the southbound drivers: anything with ``link_id``, ``status`` and
  ``at`` (``southbound.events.LinkEvent`` is one) can be passed, from any thread;
* timers: a held (flapping) link may be usable now; a failed plan is retried with backoff; an
  optional periodic re-plan.

After each step, :attr:`on_step` receives the outcome on the loop thread (the service wakes the
changed jobs' streams there), and callers of :meth:`wait_covered` are released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pydantic import Field

from c4p.controller.reconcile import Reconciler, StepOutcome
from c4p.controller.state import ControllerState
from c4p.controller.triggers import Debouncer, Key, KeyKind
from c4p.store.base import DecisionRecord
from topology.base import Frozen
from topology.errors import TopologyError
from topology.model import LinkStatus

log = logging.getLogger("c4p.controller")


class LoopSettings(Frozen):
    """Batching and timers of the reconcile loop."""

    debounce_s: float = Field(default=0.05, ge=0, le=60, description="Quiet time of a burst.")
    max_delay_s: float = Field(
        default=0.5, ge=0, le=600, description="A burst waits at most this long."
    )
    retry_initial_s: float = Field(default=0.5, gt=0, description="First retry of a failure.")
    retry_max_s: float = Field(default=30.0, gt=0, description="Longest retry interval.")
    replan_interval_s: float = Field(
        default=0.0, ge=0, description="Plan again this often even if nothing changed (0: off)."
    )


@runtime_checkable
class LinkEventLike(Protocol):
    """What a fabric source reports (``southbound.events.LinkEvent`` has these fields)."""

    @property
    def link_id(self) -> str: ...
    @property
    def status(self) -> LinkStatus: ...
    @property
    def at(self) -> float: ...


class ControllerLoop:
    """Runs the reconciler on its keys (see the module docstring)."""

    def __init__(
        self,
        reconciler: Reconciler,
        settings: LoopSettings,
        *,
        clock: Callable[[], float] = time.time,
        on_step: Callable[[StepOutcome], None] | None = None,
    ) -> None:
        if settings.max_delay_s < settings.debounce_s:
            raise ValueError("max_delay_s must be at least debounce_s")
        self.reconciler = reconciler
        self.state: ControllerState = reconciler.state
        self.settings = settings
        self.clock = clock
        self.on_step = on_step
        self.steps = 0
        self._debouncer = Debouncer(settings.debounce_s, settings.max_delay_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._covered: asyncio.Condition | None = None
        self._task: asyncio.Task[None] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._failures = 0
        self._stopping = False

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._covered = asyncio.Condition()
        self.enqueue(Key(KeyKind.STARTUP))
        self._task = asyncio.create_task(self._run(), name="c4p-reconcile")
        self._schedule_periodic()

    async def stop(self) -> None:
        """Stop after the step in progress (if any); pending keys are dropped."""
        self._stopping = True
        for handle in self._timers.values():
            handle.cancel()
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            await self._task

    # -- keys --------------------------------------------------------------------------------

    def enqueue(self, key: Key) -> None:
        """Add a key (call on the loop thread)."""
        if self._stopping or self._wake is None:
            return
        self._debouncer.add(key, self.clock())
        self._wake.set()

    def enqueue_threadsafe(self, key: Key) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.enqueue, key)

    def observe_link(self, event: LinkEventLike) -> bool:
        """A fabric source's report (any thread); ``True`` if it changed the link's state."""
        fabric = self.state.fabric
        try:
            number = fabric.index.link_number(event.link_id)
        except TopologyError:
            log.warning("link event for an unknown link", extra={"link": event.link_id})
            return False
        status = LinkStatus(event.status)
        # Hysteresis runs on our clock: switch clocks may be skewed; ``at`` is for latency.
        if not self.state.observe_link(number, status, self.clock()):
            return False
        key = Key(KeyKind.LINK, fabric.links[number].id, status.value)
        self.enqueue_threadsafe(key)
        return True

    # -- waiting -----------------------------------------------------------------------------

    async def wait_covered(self, revision: int, timeout: float) -> DecisionRecord | None:
        """Wait until a step has seen the state at ``revision``; the latest decision then
        (``None`` on timeout)."""
        assert self._covered is not None
        try:
            async with self._covered:
                await asyncio.wait_for(
                    self._covered.wait_for(lambda: self.state.covered_revision >= revision),
                    timeout,
                )
        except TimeoutError:
            return None
        return self.state.last_decision

    # -- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            due = self._debouncer.due_at()
            wait = None if due is None else due - self.clock()
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                self._wake.clear()
                continue
            keys = self._debouncer.take(self.clock())
            if keys:
                await self._step(keys)

    async def _step(self, keys: list[Key]) -> None:
        try:
            outcome = await asyncio.to_thread(self.reconciler.step, self.clock(), keys)
        except Exception:  # the step handles planning errors; this is a bug or the store
            log.exception("reconcile step crashed", extra={"event": "step-crashed"})
            outcome = None
            self._retry()
        self.steps += 1
        if outcome is not None:
            if outcome.failed:
                self._retry()
            else:
                self._failures = 0
            if self.on_step is not None:
                try:
                    self.on_step(outcome)
                except Exception:
                    log.exception("on_step failed")
        self._schedule_held()
        assert self._covered is not None
        async with self._covered:
            self._covered.notify_all()

    # -- timers ------------------------------------------------------------------------------

    def _later(self, name: str, delay: float, key: Key) -> None:
        assert self._loop is not None
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()
        self._timers[name] = self._loop.call_later(max(0.0, delay), self.enqueue, key)

    def _retry(self) -> None:
        s = self.settings
        delay = min(s.retry_max_s, s.retry_initial_s * 2**self._failures)
        self._failures += 1
        self._later("retry", delay, Key(KeyKind.RETRY, force=True))

    def _schedule_held(self) -> None:
        now = self.clock()
        at = self.state.next_link_change(now)
        if at is not None:
            self._later("held", at - now + 0.01, Key(KeyKind.TIMER, "held-link"))

    def _schedule_periodic(self) -> None:
        interval = self.settings.replan_interval_s
        if interval <= 0 or self._stopping:
            return
        if self.steps:
            self.enqueue(Key(KeyKind.TIMER, "periodic", force=True))
        assert self._loop is not None
        self._timers["periodic"] = self._loop.call_later(interval, self._schedule_periodic)
