"""The fabric as the switches last described it: observations in, snapshot and events out.

Why apart from the sessions (:mod:`southbound.fleet`): this is the state, not the I/O. Each
method takes what a driver reported and *returns* the events it implies (the caller sends
them), so it can be tested without threads and reasoned about as a sequence of steps.

Two speeds, on purpose. Rebuilding the :class:`~topology.model.Fabric` (validation of every
host, port and link) costs about half a second at 2,048 GPUs, so it never runs on the path of
a status change: an oper-status change updates one observation, finds the link through the
end -> link map of the last snapshot and compares with the last status *emitted* for that
link (``_emitted``), all under one short lock. Rebuilds run when wiring changed (an LLDP
neighbor appeared or moved) or a snapshot is asked for; they build from a copy of the
observations outside the lock, then swap the map in and emit any change the fast path could
not attribute: a link whose status moved without an event, or a link new to the map that is
down (its target was observed after the last snapshot and its link failed before the next).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from southbound.discovery import DiscoveryResult, build_fabric
from southbound.events import LinkEvent, LinkLoad, RateTracker
from southbound.observed import CounterSample, OperChange, SwitchObservation
from southbound.targets import TargetConfig
from topology.generators.common import AddressPlan
from topology.model import Fabric, Link, LinkStatus, split_end


def wiring_changed(before: SwitchObservation | None, after: SwitchObservation) -> bool:
    """Whether an interface now shows a neighbor it did not show before (new or moved).

    A neighbor that vanished is not a change: a down link has none, and fail-static keeps
    the link it had.
    """
    if before is None:
        return True
    old = {n.local_interface: (n.system_name, n.port_id) for n in before.neighbors}
    return any(old.get(n.local_interface) != (n.system_name, n.port_id) for n in after.neighbors)


class FabricTracker:
    """Observations of every target, the fabric they make, and link statuses; thread-safe."""

    def __init__(
        self,
        targets: Mapping[str, TargetConfig],
        *,
        declared: Fabric | None = None,
        address_plan: AddressPlan | None = None,
        name: str | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._targets = dict(targets)
        self._declared, self._plan, self._name = declared, address_plan, name
        self._wall = wall
        self._lock = threading.RLock()
        self._build_lock = threading.Lock()
        self._obs: dict[str, SwitchObservation] = {}
        self._result: DiscoveryResult | None = None
        self._previous: Fabric | None = None
        self._end_link: dict[str, Link] = {}
        self._drained: set[str] = set()
        self._emitted: dict[str, LinkStatus] = {}
        self._wiring_dirty = True
        self._status_dirty = True
        self.rates = RateTracker()

    @property
    def wiring_dirty(self) -> bool:
        with self._lock:
            return self._wiring_dirty

    @property
    def has_map(self) -> bool:
        with self._lock:
            return self._result is not None

    def observation(self, name: str) -> SwitchObservation | None:
        with self._lock:
            return self._obs.get(name)

    def observations(self) -> dict[str, SwitchObservation]:
        with self._lock:
            return dict(self._obs)

    def knows(self, target: str, interface: str) -> bool:
        """Whether the last snapshot has a link on this interface."""
        with self._lock:
            return f"{target}:{interface}" in self._end_link

    def mark_status_dirty(self) -> None:
        with self._lock:
            self._status_dirty = True

    # -- what drivers report ----------------------------------------------------------------

    def observe(
        self, name: str, obs: SwitchObservation, *, stream_owns_status: bool
    ) -> list[LinkEvent]:
        """A new observation of ``name``; the link events it implies.

        ``stream_owns_status``: the target is streaming, so its streamed oper-status is newer
        than this answer (a refresh); keep the statuses we have.
        """
        with self._lock:
            before = self._obs.get(name)
            if stream_owns_status and before is not None:
                known = {i.name: i.oper_status for i in before.interfaces}
                obs = obs.with_oper_status(
                    {i.name: known[i.name] for i in obs.interfaces if i.name in known}
                )
            self._obs[name] = obs
            if wiring_changed(before, obs):
                self._wiring_dirty = True
            self._status_dirty = True
            events = []
            for iface in obs.interfaces if before is not None else ():
                was = before.interface(iface.name) if before is not None else None
                if was is None or was.oper_status != iface.oper_status:
                    event = self._change(name, iface.name, obs.at)
                    if event is not None:
                        events.append(event)
            return events

    def oper_change(self, update: OperChange) -> tuple[bool, LinkEvent | None]:
        """A streamed or polled oper-status: whether the interface changed, and the link
        event if its link's status changed (``None`` also when the link is not mapped yet)."""
        with self._lock:
            obs = self._obs.get(update.target)
            current = obs.interface(update.interface) if obs else None
            if obs is None or current is None or current.oper_status == update.oper_status:
                return False, None
            self._obs[update.target] = obs.with_oper_status({update.interface: update.oper_status})
            self._status_dirty = True
            return True, self._change(update.target, update.interface, update.at)

    def counters(self, sample: CounterSample, *, want_load: bool) -> LinkLoad | None:
        """Record a counter sample; its link's load when asked and there is a new rate."""
        if not self.rates.update(sample) or not want_load:
            return None
        return self.load_of(sample.target, sample.interface, sample.at)

    # -- links ------------------------------------------------------------------------------

    def _status_of(self, link: Link) -> LinkStatus:
        for end in link.ends:
            device, iface = split_end(end)
            state = self._obs[device].interface(iface) if device in self._obs else None
            if state is not None and not state.up:
                return LinkStatus.DOWN
        return LinkStatus.DRAINED if link.id in self._drained else LinkStatus.UP

    def _change(self, name: str, interface: str, at: float) -> LinkEvent | None:
        link = self._end_link.get(f"{name}:{interface}")
        if link is None:
            return None  # not in the last snapshot: the next rebuild will account for it
        status = self._status_of(link)
        if self._emitted.get(link.id) is status:
            return None
        self._emitted[link.id] = status
        return LinkEvent(
            link_id=link.id,
            status=status,
            at=at,
            received=self._wall(),
            target=name,
            interface=interface,
        )

    def rebuild(self, stale: Iterable[str]) -> tuple[DiscoveryResult, list[LinkEvent]]:
        """Build the snapshot from the current observations; also the link events for
        changes the fast path could not see (links that were not in the previous map)."""
        with self._build_lock:
            with self._lock:
                inputs, previous = dict(self._obs), self._previous
                self._wiring_dirty = self._status_dirty = False
            try:
                result = build_fabric(
                    inputs,
                    targets=self._targets,
                    declared=self._declared,
                    previous=previous,
                    address_plan=self._plan,
                    name=self._name,
                    stale=stale,
                )
            except BaseException:
                with self._lock:
                    self._wiring_dirty = True
                raise
            events = []
            now = self._wall()
            with self._lock:
                self._result, self._previous = result, result.fabric
                links = result.fabric.links
                self._end_link = {end: link for link in links for end in link.ends}
                self._drained = {link.id for link in links if link.status is LinkStatus.DRAINED}
                for link in links:
                    status = self._status_of(link)
                    old = self._emitted.get(link.id)
                    self._emitted[link.id] = status
                    # A change the fast path missed, or a link that is new to us and down.
                    if (old is not None and old is not status) or (
                        old is None and status is LinkStatus.DOWN
                    ):
                        device, iface = split_end(
                            link.a if split_end(link.a)[0] in self._obs else link.b
                        )
                        events.append(
                            LinkEvent(
                                link_id=link.id,
                                status=status,
                                at=now,
                                received=now,
                                target=device,
                                interface=iface,
                            )
                        )
            return result, events

    def current(self) -> DiscoveryResult | None:
        """The last snapshot, if nothing changed since it was built."""
        with self._lock:
            if self._result is None or self._wiring_dirty or self._status_dirty:
                return None
            return self._result

    def load_of(self, target: str, interface: str, at: float) -> LinkLoad | None:
        """Utilization per direction and error/discard/ECN rates of the link on an interface."""
        with self._lock:
            link = self._end_link.get(f"{target}:{interface}")
        if link is None:
            return None
        ra, rb = (self.rates.rates(*split_end(end)) for end in link.ends)
        ab = ra.out_bps if ra and ra.out_bps is not None else (rb.in_bps if rb else None)
        ba = rb.out_bps if rb and rb.out_bps is not None else (ra.in_bps if ra else None)
        capacity = link.speed_gbps * 1e9
        present = [r for r in (ra, rb) if r is not None]
        return LinkLoad(
            link_id=link.id,
            at=at,
            utilization_ab=None if ab is None else ab / capacity,
            utilization_ba=None if ba is None else ba / capacity,
            errors_per_s=sum(
                (r.in_errors_per_s or 0.0) + (r.out_errors_per_s or 0.0) for r in present
            ),
            discards_per_s=sum(
                (r.in_discards_per_s or 0.0) + (r.out_discards_per_s or 0.0) for r in present
            ),
            ecn_marks_per_s=sum(r.ecn_marks_per_s or 0.0 for r in present),
        )

    def link_loads(self) -> dict[str, LinkLoad]:
        """Current load of every link with counter rates."""
        loads: dict[str, LinkLoad] = {}
        for target, interface in self.rates.interfaces():
            with self._lock:
                link = self._end_link.get(f"{target}:{interface}")
            if link is None or link.id in loads:
                continue
            rates = self.rates.rates(target, interface)
            load = self.load_of(target, interface, rates.at if rates else self._wall())
            if load is not None:
                loads[link.id] = load
        return loads
