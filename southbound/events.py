"""What the drivers tell the controller while they watch: typed events and counter rates.

Why a small typed interface: the controller's reconcile loop is level-triggered; an event only
says "look again at this link / target", and the loop reads the current snapshot. So events
are few, immutable and self-describing:

* :class:`LinkEvent`: a link's status changed (``up``/``down``), with the switch's own
  timestamp (``at``) and when c4p received it (``received``), so latency can be measured;
* :class:`TargetEvent`: a session became live, stale (unreachable/slow; its last known links
  are kept) or failed (credentials, capabilities);
* :class:`LinkLoad`: utilization per direction and error, discard and ECN-mark rates of a
  link, derived from counter samples by :class:`RateTracker`;
* :class:`~southbound.observed.Problem`: something a target sent that could not be used.

A sink is any callable taking an event; :class:`EventQueue` is the bounded, thread-safe one
the controller drains. When full it drops the oldest *load* samples (the next sample replaces
them) and never a link, target or problem event.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum

from pydantic import Field

from southbound.observed import CounterSample, Observed, Problem
from topology.model import LinkStatus


class TargetHealth(StrEnum):
    PENDING = "pending"  # not reached yet
    LIVE = "live"  # answering; its state is current
    STALE = "stale"  # unreachable or slow; retried with backoff, last known state kept
    FAILED = "failed"  # refused us (auth, capabilities); retried slowly, needs a person


class LinkEvent(Observed):
    link_id: str
    status: LinkStatus
    at: float = Field(description="Switch timestamp of the change (seconds since the epoch).")
    received: float = Field(description="When c4p received it (seconds since the epoch).")
    target: str
    interface: str


class TargetEvent(Observed):
    target: str
    health: TargetHealth
    at: float
    reason: str = ""


class InterfaceRates(Observed):
    """Per-second rates of one interface over one sampling interval."""

    target: str
    interface: str
    at: float
    interval_s: float
    in_bps: float | None = None
    out_bps: float | None = None
    in_errors_per_s: float | None = None
    out_errors_per_s: float | None = None
    in_discards_per_s: float | None = None
    out_discards_per_s: float | None = None
    ecn_marks_per_s: float | None = None


class LinkLoad(Observed):
    """Load of one link ``a--b``: utilization 0..1 per direction, errors and marks per second."""

    link_id: str
    at: float
    utilization_ab: float | None = None
    utilization_ba: float | None = None
    errors_per_s: float = 0.0
    discards_per_s: float = 0.0
    ecn_marks_per_s: float = 0.0


TopologyEvent = LinkEvent | TargetEvent | LinkLoad | Problem
EventSink = Callable[[TopologyEvent], None]

_RATE_FIELDS = {
    "in_octets": ("in_bps", 8.0),
    "out_octets": ("out_bps", 8.0),
    "in_errors": ("in_errors_per_s", 1.0),
    "out_errors": ("out_errors_per_s", 1.0),
    "in_discards": ("in_discards_per_s", 1.0),
    "out_discards": ("out_discards_per_s", 1.0),
    "ecn_marked": ("ecn_marks_per_s", 1.0),
}


class RateTracker:
    """Turns counter samples into per-interface rates (thread-safe, cheap per sample).

    Each counter keeps its own last ``(value, time)``: switches often send octets and ECN marks
    in separate notifications a millisecond apart, and a rate must only ever divide a
    counter's own increase by its own interval. Models are built only when asked for.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
        self._rates: dict[tuple[str, str], dict[str, float]] = {}
        self._lock = threading.Lock()

    def update(self, sample: CounterSample) -> bool:
        """Record a sample; whether it produced a new rate."""
        key = (sample.target, sample.interface)
        fresh = False
        with self._lock:
            last = self._last.setdefault(key, {})
            rates = self._rates.setdefault(key, {})
            for counter, (name, scale) in _RATE_FIELDS.items():
                value = getattr(sample.counters, counter)
                if value is None:
                    continue
                before = last.get(counter)
                last[counter] = (value, sample.at)
                if before is None or sample.at <= before[1] or value < before[0]:
                    continue  # first sample, no time passed, or a reset
                rates[name] = (value - before[0]) * scale / (sample.at - before[1])
                rates["interval_s"] = max(rates.get("interval_s", 0.0), sample.at - before[1])
                rates["at"] = sample.at
                fresh = True
        return fresh

    def rates(self, target: str, interface: str) -> InterfaceRates | None:
        with self._lock:
            values = self._rates.get((target, interface))
            if not values or "at" not in values:
                return None
            return InterfaceRates(target=target, interface=interface, **values)

    def interfaces(self) -> list[tuple[str, str]]:
        """Every ``(target, interface)`` that has rates."""
        with self._lock:
            return [key for key, values in self._rates.items() if "at" in values]


class EventQueue:
    """A bounded, thread-safe event queue; a sink (call it) and a source (:meth:`get`)."""

    def __init__(self, maxsize: int = 100_000) -> None:
        self._items: deque[TopologyEvent] = deque()
        self._maxsize = maxsize
        self._cond = threading.Condition()
        self.dropped = 0

    def __call__(self, event: TopologyEvent) -> None:
        with self._cond:
            if len(self._items) >= self._maxsize:
                for i, item in enumerate(self._items):
                    if isinstance(item, LinkLoad):
                        del self._items[i]
                        self.dropped += 1
                        break
                else:
                    if isinstance(event, LinkLoad):
                        self.dropped += 1
                        return
            self._items.append(event)
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> TopologyEvent | None:
        """The oldest event, waiting up to ``timeout`` seconds; ``None`` if none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._items:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            return self._items.popleft()

    def drain(self) -> list[TopologyEvent]:
        with self._cond:
            items = list(self._items)
            self._items.clear()
            return items

    def wait_for(
        self, predicate: Callable[[TopologyEvent], bool], timeout: float
    ) -> TopologyEvent | None:
        """Consume events until one satisfies ``predicate``; ``None`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            event = self.get(left)
            if event is not None and predicate(event):
                return event
        return None

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)
