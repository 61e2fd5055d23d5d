"""The counter check of a serving controller: every ``deviation.every_s``, the switches' SAMPLE
counters (the fleet's link loads) against the bindings in force.

Why a thread of its own and not a step: the counters change every sampling interval while plans
change rarely, and the comparison is read-only. Only when its findings *change* does the
check hand them to the reconciler (:meth:`~c4p.controller.reconcile.Reconciler.set_deviations`)
and enqueue a ``counters`` key. The next step then shows them as ``deviation`` issues in the jobs'
streams (a job with one is ``DEGRADED``). With learned or verified ports it also distrusts the
table entries of the likely QPs (:meth:`~c4p.controller.learning.PortLearner.suspect`), so they
are probed again and re-bound from what the probes see. A QP is suspected at most once per
``4 * settle_s``, so noisy counters cannot keep the agents probing.

The check waits ``settle_s`` after any plan that changed bindings: the transports apply them,
and the counters average over their own interval. It compares the *mean* of the loads read every
second since the last comparison, not one reading: one SAMPLE rate covers one sampling interval
of one switch, and bursts or unaligned samples on two switches would look like a deviation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from c4p.controller.deviation import (
    Deviation,
    DeviationSettings,
    LoadLike,
    deviation_issues,
    find_deviations,
)
from c4p.controller.learning import PortLearner
from c4p.controller.reconcile import Reconciler
from c4p.controller.state import ControllerState
from c4p.controller.triggers import Key, KeyKind
from southbound.routes import QpKey
from topology.errors import TopologyError

log = logging.getLogger("c4p.counters")


SAMPLE_S = 1.0
"""How often the check reads the fleet's link loads into the window it averages."""


@dataclass(frozen=True)
class _Mean:
    utilization_ab: float | None
    utilization_ba: float | None


class LoadSource(Protocol):
    def link_loads(self) -> Mapping[str, LoadLike]: ...


class CounterCheck:
    """See the module docstring; :meth:`check` is one round (tests call it directly)."""

    def __init__(
        self,
        settings: DeviationSettings,
        state: ControllerState,
        reconciler: Reconciler,
        loads: LoadSource,
        enqueue: Callable[[Key], None],
        clock: Callable[[], float],
        learner: PortLearner | None = None,
    ) -> None:
        self.settings = settings
        self.state = state
        self.reconciler = reconciler
        self.loads = loads
        self.enqueue = enqueue
        self.clock = clock
        self.learner = learner
        self.last: list[Deviation] = []
        self.rounds = 0
        self._suspected: dict[QpKey, float] = {}
        self._changed_at = -1e18
        self._epoch = -1
        self._window: dict[str, tuple[float, float, int]] = {}

    def plan_changed(self, epoch: int, bindings_changed: bool) -> None:
        """A step committed (the runtime's after-step hook): start the settle time."""
        if bindings_changed and epoch != self._epoch:
            self._epoch = epoch
            self._changed_at = self.clock()

    def observe(self) -> None:
        """Add one reading of the link loads to the window the next :meth:`check` averages
        (a SAMPLE rate spans one sampling interval; the sum over a window smooths bursts and
        the switches' unaligned sampling)."""
        for link, load in self.loads.link_loads().items():
            ab, ba, n = self._window.get(link, (0.0, 0.0, 0))
            self._window[link] = (
                ab + (load.utilization_ab or 0.0),
                ba + (load.utilization_ba or 0.0),
                n + 1,
            )

    def averaged(self) -> dict[str, LoadLike]:
        """The window's mean utilization per link (one reading now when the window is empty);
        the window starts afresh."""
        if not self._window:
            self.observe()
        window, self._window = self._window, {}
        return {link: _Mean(ab / n, ba / n) for link, (ab, ba, n) in window.items() if n}

    def check(self) -> list[Deviation] | None:
        """One comparison over the window's mean loads; ``None`` while settling after a plan
        that changed bindings (the window is dropped: it saw the old bindings)."""
        now = self.clock()
        if now - self._changed_at < self.settings.settle_s:
            self._window = {}
            return None
        loads = self.averaged()
        with self.state.lock:
            fabric = self.state.fabric
            bindings = [h.binding for held in self.state.held.values() for h in held.values()]
            down = self.state.forwarding_links()
        forwarding = fabric.with_link_status(down) if down else fabric
        found = find_deviations(fabric, bindings, loads, self.settings, forwarding)
        self.rounds += 1
        self.last = found
        for d in found:
            log.warning(
                "counters disagree with the plan: %s",
                d.text,
                extra={"event": "deviation", "link": d.link_id, "qps": len(d.qps)},
            )
        if self.reconciler.set_deviations(deviation_issues(found)):
            self.enqueue(Key(KeyKind.COUNTERS, f"{len(found)} deviations", force=True))
        if found and self.learner is not None:
            self._suspect(found, now)
        return found

    def _suspect(self, found: list[Deviation], now: float) -> None:
        index = self.state.fabric.index
        with self.state.lock:
            held = {k: h.binding for job in self.state.held.values() for k, h in job.items()}
        exacts = []
        for d in found:
            for key in d.qps:
                if now - self._suspected.get(key, -1e18) < 4 * self.settings.settle_s:
                    continue
                b = held.get(key)
                if b is None:
                    continue
                try:
                    exacts.append((index.node(b.src), index.node(b.dst), b.sport))
                except TopologyError:
                    continue
                self._suspected[key] = now
        if exacts and self.learner is not None:
            count = self.learner.suspect(exacts)
            log.info(
                "ports contradicted by counters: probing again",
                extra={"event": "deviation-reprobe", "ports": len(exacts), "distrusted": count},
            )
            self.enqueue(Key(KeyKind.COUNTERS, "re-probe", force=True))

    def start(self, stopping: threading.Event) -> threading.Thread:
        """Check every ``every_s`` until ``stopping`` is set (a daemon thread)."""

        def run() -> None:
            due = self.clock() + self.settings.every_s
            while not stopping.wait(min(SAMPLE_S, self.settings.every_s)):
                try:
                    self.observe()
                    if self.clock() >= due:
                        due = self.clock() + self.settings.every_s
                        self.check()
                except Exception as exc:  # a bad round must not end the service
                    log.warning("counter check failed: %s", exc, extra={"event": "deviation"})

        thread = threading.Thread(target=run, name="c4p-counter-check", daemon=True)
        thread.start()
        return thread
