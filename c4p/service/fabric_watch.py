"""The discovered fabric while ``c4p serve`` runs: logs, per-target metrics, re-discovery.

Why apart from the runtime: a discovered fabric needs more care than a file. An operator must
see each target's transitions (live, stale, failed, with the reason) and each link event in
the log, and per-target state and last-update age in the metrics; and the wiring may change
under a running controller. :class:`FabricWatch` does all three for one :class:`Fleet`:

* :meth:`on_event` logs what the fleet reports (the runtime's event pump calls it);
* :meth:`refresh_metrics` sets ``c4p_target_state{target,state}`` (1 for the current state)
  and ``c4p_target_last_update_age_seconds{target}``;
* :meth:`rediscover` compares the fleet's current snapshot with the last accepted one
  (:mod:`southbound.rediscovery`): a snapshot that lost most of the fabric is held as suspect
  (``c4p_rediscovery_suspect`` 1, a warning); a real wiring change is logged, links that went
  away are reported down to the controller (so it re-plans the flows on them), and the change
  enters the decision log as a ``wiring`` trigger. Links that are *new* are logged and listed
  in the decision log.

With ``offer`` given (the service gives it), an accepted snapshot with other wiring is *offered*
to the controller instead: the next reconcile step swaps it in whole (added, removed, moved and
re-speeded links alike) and re-plans only the jobs it touches (:mod:`c4p.controller.rewire`);
no link events are sent for it. Without ``offer`` (a fixed fabric), gone links are reported
down and new ones need a restart, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from c4p.controller.triggers import Key, KeyKind
from southbound.events import LinkEvent, TargetEvent, TargetHealth
from southbound.fleet import Fleet
from southbound.observed import Problem
from southbound.rediscovery import WiringChange, judge, wiring_change
from topology.model import Fabric, LinkStatus

log = logging.getLogger("c4p.discovery")


class FabricWatch:
    """Logs, metrics and re-discovery for a discovered fabric (see the module docstring)."""

    def __init__(
        self,
        fleet: Fleet,
        fabric: Fabric,
        registry: CollectorRegistry,
        *,
        observe_link: Callable[[LinkEvent], Any],
        enqueue: Callable[[Key], None],
        clock: Callable[[], float],
        offer: Callable[[Fabric], Any] | None = None,
    ) -> None:
        self.fleet = fleet
        self._offer = offer
        self.in_force = fabric
        self.accepted = fabric
        self._speaking = self._with_neighbours()
        """Switches whose answers in the accepted round listed LLDP neighbours."""
        self._observe_link = observe_link
        self._enqueue = enqueue
        self._clock = clock
        self._lock = threading.Lock()
        self.target_state = Gauge(
            "c4p_target_state",
            "1 for a target's current session state (live, stale, failed, pending).",
            ["target", "state"],
            registry=registry,
        )
        self.update_age = Gauge(
            "c4p_target_last_update_age_seconds",
            "Seconds since a target last sent anything (answer or streamed update).",
            ["target"],
            registry=registry,
        )
        self.suspect = Gauge(
            "c4p_rediscovery_suspect",
            "1 while the latest re-discovery snapshot is held as suspect.",
            registry=registry,
        )
        self.wiring_changes = Counter(
            "c4p_wiring_changes_total", "Accepted re-discoveries that changed wiring.",
            registry=registry,
        )  # fmt: skip

    # -- events -----------------------------------------------------------------------------

    def on_event(self, event: object) -> None:
        """Log one fleet event: target transitions, link events, problems."""
        if isinstance(event, TargetEvent):
            level = logging.INFO if event.health is TargetHealth.LIVE else logging.WARNING
            log.log(
                level,
                "target %s is %s%s",
                event.target,
                event.health.value,
                f": {event.reason}" if event.reason else "",
                extra={
                    "event": "target",
                    "target": event.target,
                    "health": event.health.value,
                    "reason": event.reason or None,
                },
            )
        elif isinstance(event, LinkEvent):
            log.info(
                "link %s %s",
                event.link_id,
                event.status.value,
                extra={
                    "event": "link",
                    "link": event.link_id,
                    "status": event.status.value,
                    "target": event.target,
                    "interface": event.interface,
                    "latency_ms": round(max(0.0, event.received - event.at) * 1000, 1),
                },
            )
        elif isinstance(event, Problem):
            log.warning(
                "%s", event, extra={"event": "problem", "target": event.target, "path": event.path}
            )

    def refresh_metrics(self) -> None:
        now = self._clock()
        updates = self.fleet.last_updates()
        for name, status in self.fleet.status().items():
            for health in TargetHealth:
                value = 1.0 if status.health is health else 0.0
                self.target_state.labels(target=name, state=health.value).set(value)
            if name in updates:
                self.update_age.labels(target=name).set(max(0.0, now - updates[name]))

    # -- re-discovery -----------------------------------------------------------------------

    def rediscover(self) -> str:
        """Compare the fleet's snapshot with the last accepted one and act (see the module
        docstring); returns ``unchanged``, ``suspect`` or ``changed``."""
        with self._lock:
            result = self.fleet.snapshot()
            new = result.fabric
            speaking = self._with_neighbours()
            verdict = judge(self.accepted, new, fell_silent=sorted(self._speaking - speaking))
            if not verdict.accepted:
                self.suspect.set(1)
                log.warning(
                    "re-discovery held as suspect: %s",
                    verdict.reason,
                    extra={"event": "rediscovery-suspect", "reason": verdict.reason},
                )
                return "suspect"
            self.suspect.set(0)
            change = wiring_change(self.accepted, new)
            self.accepted = new
            self._speaking = speaking
            if change.empty:
                return "unchanged"
            self.wiring_changes.inc()
            if self._offer is not None:
                return self._offered(new, change)
            known = {link.id for link in self.in_force.links}
            log.warning(
                "wiring changed: %s",
                change.summary(),
                extra={
                    "event": "wiring-changed",
                    "removed": list(change.removed),
                    "added": list(change.added),
                    "respeeded": list(change.respeeded),
                    "needs_restart": [i for i in change.added if i not in known],
                },
            )
            now = self._clock()
            # Gone: down to the controller. Back (a cable restored): up again.
            for ids, status in ((change.removed, LinkStatus.DOWN), (change.added, LinkStatus.UP)):
                for link_id in ids:
                    if link_id in known:
                        self._observe_link(
                            LinkEvent(
                                link_id=link_id,
                                status=status,
                                at=now,
                                received=now,
                                target="rediscovery",
                                interface="",
                            )
                        )
            self._enqueue(Key(KeyKind.WIRING, "rediscovery", change.summary(), force=True))
            return "changed"

    def _with_neighbours(self) -> set[str]:
        """Switches whose last answers listed at least one LLDP neighbour."""
        out = set()
        for name in self.fleet.status():
            seen = self.fleet.observation(name)
            if seen is not None and seen.neighbors:
                out.add(name)
        return out

    def _offered(self, new: Fabric, change: WiringChange) -> str:
        """Hand the new snapshot to the controller (it swaps it in at its next step)."""
        assert self._offer is not None
        log.warning(
            "wiring changed: %s",
            change.summary(),
            extra={
                "event": "wiring-changed",
                "removed": list(change.removed),
                "added": list(change.added),
                "respeeded": list(change.respeeded),
                "offered": True,
            },
        )
        self.in_force = new
        self._offer(new)
        self._enqueue(Key(KeyKind.WIRING, "rediscovery", change.summary(), force=True))
        return "changed"
