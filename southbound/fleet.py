"""The collector: one session per target, kept current, and the fabric they describe.

Why: the controller needs one object that (1) discovers the fabric from every switch at once,
(2) stays current, turning ON_CHANGE/poll updates into :class:`~southbound.events.LinkEvent`
and counter samples into :class:`~southbound.events.LinkLoad`, and (3) survives the switches:
a target that is unreachable, slow or silent is retried with exponential backoff and marked
*stale*, and its last known observation stays in every snapshot (fail-static: its links are
kept, not dropped); a target that refuses us (credentials, capabilities) is *failed* and
retried at the slowest pace; a target that answers garbage has its problems reported (target
and path) and its thread carries on.

Threads: one per target (open, observe, watch; retry on failure), one supervisor (cancels
streams silent for longer than the target's ``stream_silence_s``, schedules LLDP refreshes
after a link comes up and every ``refresh_s``) and a small pool for those refreshes. Every
wait is bounded and :meth:`Fleet.stop` joins them all.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Self

from pydantic import Field

from southbound.discovery import DiscoveryResult
from southbound.driver_errors import SouthboundError, TargetUnreachable
from southbound.drivers import Driver, Session, driver_factory
from southbound.events import EventSink, LinkLoad, TargetEvent, TargetHealth, TopologyEvent
from southbound.observed import (
    CounterSample,
    LldpChanged,
    Observed,
    OperChange,
    Problem,
    StreamSynced,
    SwitchObservation,
    WatchUpdate,
)
from southbound.targets import TargetConfig, TargetsFile
from southbound.tracker import FabricTracker
from topology.backoff import Backoff
from topology.generators.common import AddressPlan
from topology.model import Fabric

PROBLEM_REPEAT_S = 60.0
REBUILD_EVERY_S = 0.5
LLDP_SETTLE_S = 0.2
"""After an LLDP ON_CHANGE update, wait this long for the rest of the change, then re-read."""
"""Wiring changes are folded into the snapshot at most this often, off the event path."""
"""The same problem from the same target is reported at most once per this many seconds."""


class TargetStatus(Observed):
    name: str
    health: TargetHealth
    since: float
    last_ok: float | None = None
    last_error: str = ""
    failures: int = 0
    problems: int = 0
    streaming: bool = Field(default=False, description="Watching: initial values all received.")


class Fleet:
    """Sessions to every target of a targets file; see the module docstring."""

    def __init__(
        self,
        targets: TargetsFile | Sequence[TargetConfig],
        *,
        sink: EventSink | None = None,
        declared: Fabric | None = None,
        address_plan: AddressPlan | None = None,
        name: str | None = None,
        wall: Callable[[], float] = time.time,
        seed: int = 0,
        refresh_s: float = 300.0,
        refresh_after_up_s: float = 1.0,
        emit_loads: bool = True,
    ) -> None:
        configs = targets.targets if isinstance(targets, TargetsFile) else tuple(targets)
        self._targets = {t.name: t for t in configs}
        self._sink = sink
        self._declared, self._plan, self._name = declared, address_plan, name
        self._wall = wall
        self._rng = random.Random(seed)
        self._refresh_s, self._refresh_after_up_s = refresh_s, refresh_after_up_s
        self._emit_loads = emit_loads
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._drivers: dict[str, Driver] = {}
        now = wall()
        self._status = {
            n: TargetStatus(name=n, health=TargetHealth.PENDING, since=now) for n in self._targets
        }
        self._sessions: dict[str, Session] = {}
        self._silenced: set[str] = set()
        self._refresh_due: dict[str, float] = {}
        self._tracker = FabricTracker(
            self._targets, declared=declared, address_plan=address_plan, name=name, wall=wall
        )
        self._rebuilding = False
        self._last_rebuild = 0.0
        self._last_update: dict[str, float] = {}
        self._reported: dict[tuple[str, str, str], float] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool: ThreadPoolExecutor | None = None

    # -- one-shot discovery -----------------------------------------------------------------

    def discover(self, *, attempts: int = 2, workers: int = 32) -> DiscoveryResult:
        """Observe every target once (concurrently, ``attempts`` tries each) and build."""
        names = list(self._targets)
        try:
            if names:
                with ThreadPoolExecutor(max_workers=min(workers, len(names))) as pool:
                    list(pool.map(lambda n: self._observe_once(n, attempts), names))
        finally:
            if not self._threads:  # not watching: nothing else needs the drivers
                self._close_drivers()
        return self.snapshot()

    def _observe_once(self, name: str, attempts: int) -> None:
        cfg = self._targets[name]
        backoff = Backoff(cfg.timeouts.retry_initial_s, cfg.timeouts.retry_max_s, rng=self._rng)
        for attempt in range(attempts):
            session = self._driver(cfg.driver).session(cfg)
            try:
                session.open()
                self._observed(name, session.observe())
                return
            except SouthboundError as exc:
                self._failed(name, exc)
                if not exc.retryable:
                    return
            except Exception as exc:  # a target's garbage must never end discovery
                self._failed(
                    name, TargetUnreachable(f"unexpected {type(exc).__name__}: {exc}", target=name)
                )
            finally:
                session.close()
            if attempt + 1 < attempts and self._stop.wait(backoff.delay(attempt)):
                return

    def _driver(self, name: str) -> Driver:
        with self._lock:
            if name not in self._drivers:
                self._drivers[name] = driver_factory(name)()
            return self._drivers[name]

    # -- live -------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start one thread per target and the supervisor; returns at once."""
        self._stop.clear()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="c4p-refresh")
        for name in self._targets:
            self._spawn(self._run, name, f"c4p-target-{name}")
        self._spawn(self._supervise, None, "c4p-supervisor")
        return self

    def _spawn(self, fn: Callable[..., None], arg: str | None, name: str) -> None:
        thread = threading.Thread(target=fn, args=(arg,) if arg else (), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel every stream, join every thread (bounded by ``timeout``), close drivers."""
        self._stop.set()
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.cancel()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._close_drivers()

    def _close_drivers(self) -> None:
        with self._lock:
            drivers = list(self._drivers.values())
            self._drivers.clear()
        for driver in drivers:
            driver.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _run(self, name: str) -> None:
        cfg = self._targets[name]
        backoff = Backoff(cfg.timeouts.retry_initial_s, cfg.timeouts.retry_max_s, rng=self._rng)
        attempt = 0
        while not self._stop.is_set():
            session = self._driver(cfg.driver).session(cfg)
            with self._lock:
                self._sessions[name] = session
            delay = 0.0
            try:
                session.open()
                self._observed(name, session.observe())
                attempt = 0
                session.watch(lambda update: self._on_update(name, update))
                if self._stop.is_set():
                    break
                with self._lock:
                    silenced = name in self._silenced
                    self._silenced.discard(name)
                reason = (
                    f"stream silent for over {cfg.stream_silence_s:g} s"
                    if silenced
                    else "watch ended"
                )
                raise TargetUnreachable(reason, target=name)
            except SouthboundError as exc:
                if self._stop.is_set():
                    break
                self._failed(name, exc)
                delay = backoff.delay(attempt) if exc.retryable else cfg.timeouts.retry_max_s
            except Exception as exc:  # a target's garbage must never end its thread
                self._failed(
                    name, TargetUnreachable(f"unexpected {type(exc).__name__}: {exc}", target=name)
                )
                delay = backoff.delay(attempt)
            finally:
                with self._lock:
                    self._sessions.pop(name, None)
                session.close()
            attempt += 1
            self._stop.wait(delay)

    def _supervise(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                sessions = dict(self._sessions)
                due = [n for n, t in self._refresh_due.items() if t <= now and n in sessions]
                for n in due:
                    del self._refresh_due[n]
            for name, session in sessions.items():
                last = session.last_message_at
                if last is not None and now - last > self._targets[name].stream_silence_s:
                    with self._lock:
                        self._silenced.add(name)
                    session.last_message_at = None
                    session.cancel()
            for name in due:
                if self._pool is not None:
                    self._pool.submit(self._refresh, name, sessions[name])
            with self._lock:
                rebuild = (
                    self._tracker.wiring_dirty
                    and not self._rebuilding
                    and now - self._last_rebuild >= REBUILD_EVERY_S
                    and self._pool is not None
                )
                if rebuild:
                    self._rebuilding = True
            if rebuild and self._pool is not None:
                self._pool.submit(self._rebuild_in_background)

    def _refresh(self, name: str, session: Session) -> None:
        """Re-learn wiring (LLDP) while streaming; the stream keeps owning oper-status."""
        try:
            obs = session.observe()
        except Exception:  # the watch stream notices a dead target; nothing to add here
            return
        self._observed(name, obs, refresh=True)

    # -- state changes ----------------------------------------------------------------------

    def _emit(self, event: TopologyEvent) -> None:
        if self._sink is not None:
            self._sink(event)

    def _report(self, problems: Sequence[Problem]) -> None:
        now = time.monotonic()
        fresh = []
        with self._lock:
            for p in problems:
                key = (p.target, p.path, p.reason)
                if now - self._reported.get(key, -PROBLEM_REPEAT_S) >= PROBLEM_REPEAT_S:
                    self._reported[key] = now
                    fresh.append(p)
        for p in fresh:
            self._emit(p)

    def _set_status(self, name: str, health: TargetHealth, **update: object) -> bool:
        old = self._status[name]
        changed = old.health is not health
        since = self._wall() if changed else old.since
        self._status[name] = old.model_copy(update={"health": health, "since": since, **update})
        self._changed.notify_all()
        return changed

    def _observed(self, name: str, obs: SwitchObservation, *, refresh: bool = False) -> None:
        self._last_update[name] = self._wall()
        events: list[TopologyEvent] = list(
            self._tracker.observe(name, obs, stream_owns_status=refresh)
        )
        with self._lock:
            self._refresh_due[name] = time.monotonic() + self._refresh_s
            became_live = self._set_status(
                name,
                TargetHealth.LIVE,
                last_ok=obs.at,
                last_error="",
                failures=0,
                problems=len(obs.problems),
            )
        if became_live:
            events.insert(0, TargetEvent(target=name, health=TargetHealth.LIVE, at=self._wall()))
        self._report(obs.problems)
        for event in events:
            self._emit(event)

    def _failed(self, name: str, exc: SouthboundError) -> None:
        health = TargetHealth.STALE if exc.retryable else TargetHealth.FAILED
        with self._lock:
            failures = self._status[name].failures + 1
            changed = self._set_status(
                name, health, last_error=str(exc), failures=failures, streaming=False
            )
        self._tracker.mark_status_dirty()
        if changed:
            self._emit(TargetEvent(target=name, health=health, at=self._wall(), reason=str(exc)))

    def _on_update(self, name: str, update: WatchUpdate) -> None:
        self._last_update[name] = self._wall()  # one dict store: cheap on the hot path
        if isinstance(update, Problem):
            self._report([update])
        elif isinstance(update, LldpChanged):
            with self._lock:  # re-read this target's wiring soon (a burst costs one read)
                due = time.monotonic() + LLDP_SETTLE_S
                self._refresh_due[name] = min(self._refresh_due.get(name, due), due)
        elif isinstance(update, StreamSynced):
            with self._lock:
                self._status[name] = self._status[name].model_copy(update={"streaming": True})
                self._changed.notify_all()
        elif isinstance(update, OperChange):
            if not self._tracker.has_map:
                self._rebuild()
            changed, event = self._tracker.oper_change(update)
            if not changed:
                return
            known = self._tracker.knows(name, update.interface)
            if event is not None:
                self._emit(event)
            elif not known and self._tracker.wiring_dirty:  # a link newer than the map
                self._rebuild()
            if update.up and (event is not None or not known):
                with self._lock:  # LLDP may soon show a (new) neighbor on it: look again
                    self._refresh_due[name] = time.monotonic() + self._refresh_after_up_s
        elif isinstance(update, CounterSample):
            if self._emit_loads and not self._tracker.has_map:
                self._rebuild()
            load = self._tracker.counters(update, want_load=self._emit_loads)
            if load is not None:
                self._emit(load)

    def _rebuild(self) -> DiscoveryResult | None:
        with self._lock:
            stale = [n for n, s in self._status.items() if s.health is not TargetHealth.LIVE]
            self._last_rebuild = time.monotonic()
        try:
            result, events = self._tracker.rebuild(stale)
        except SouthboundError as exc:
            self._report([Problem(target="fabric", path="/", reason=str(exc))])
            return None
        for event in events:
            self._emit(event)
        return result

    def _rebuild_in_background(self) -> None:
        try:
            self._rebuild()
        finally:
            with self._lock:
                self._rebuilding = False

    # -- queries ----------------------------------------------------------------------------

    def snapshot(self) -> DiscoveryResult:
        """The fabric as last seen (stale targets included as last known), rebuilt if needed."""
        current = self._tracker.current()
        if current is not None:
            return current
        with self._lock:
            stale = [n for n, s in self._status.items() if s.health is not TargetHealth.LIVE]
        result, events = self._tracker.rebuild(stale)
        for event in events:
            self._emit(event)
        return result

    def last_updates(self) -> dict[str, float]:
        """When each target last sent anything (an answer or a streamed update), wall time."""
        return dict(self._last_update)

    def status(self) -> dict[str, TargetStatus]:
        with self._lock:
            return dict(self._status)

    def link_loads(self) -> dict[str, LinkLoad]:
        """Current load of every link with counter rates (computed now from the rates)."""
        return self._tracker.link_loads()

    def observation(self, name: str) -> SwitchObservation | None:
        return self._tracker.observation(name)

    def wait_until(
        self, predicate: Callable[[dict[str, TargetStatus]], bool], timeout: float
    ) -> bool:
        """Wait (bounded) until ``predicate(status())`` holds; returns whether it did."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(dict(self._status)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
            return True

    def wait_streaming(self, timeout: float) -> bool:
        """Wait until every target is live and its watch has delivered the initial values."""
        return self.wait_until(
            lambda s: all(x.health is TargetHealth.LIVE and x.streaming for x in s.values()),
            timeout,
        )

    def wait_ready(self, timeout: float) -> bool:
        """Wait until no target is pending (each is live, stale or failed)."""
        return self.wait_until(
            lambda s: all(x.health is not TargetHealth.PENDING for x in s.values()), timeout
        )
