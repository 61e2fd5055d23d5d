"""The links as the controller's state knows them: observed events and operator drains, each
damped by its own :class:`~c4p.controller.triggers.LinkTracker`, and the reverse index of the
jobs whose bindings in force cross each link.

Why apart from :mod:`c4p.controller.state`: the jobs, their intents and the bindings in force
are one concern; which links are usable now, when a held link comes back, and whom a link
touches is another, read by the step, the loop's timer and the admin API alike. This is a base
class of :class:`~c4p.controller.state.ControllerState`, under its lock (``lock`` guards these
attributes too); each method that changes what a step plans from bumps the state's revision.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

from c4p.controller.triggers import FlapSettings, LinkTracker
from c4p.store.base import HeldBinding
from southbound.routes import QpKey
from topology.errors import TopologyError
from topology.model import Fabric, LinkStatus


class LinkState:
    """Damped link states and the link -> jobs index (see the module docstring)."""

    lock: threading.RLock
    fabric: Fabric
    shadow: dict[str, dict[QpKey, HeldBinding]]

    def __init__(self, fabric: Fabric, overrides: Iterable[str], flap: FlapSettings, now: float):
        self.tracker = LinkTracker(flap)
        for i, link in enumerate(fabric.links):
            if link.status is not LinkStatus.UP:
                self.tracker.seed(i, link.status, now)
        self.operator = LinkTracker(flap)
        """Operator drains, damped like observed events (see the module docstring)."""
        for link_id in overrides:
            try:
                self.operator.seed(fabric.index.link_number(link_id), LinkStatus.DRAINED, now)
            except TopologyError:  # drained, then re-cabled away: the drain stays stored
                continue
        self.link_jobs: dict[int, Counter[str]] = {}

    def bump(self) -> int:
        """A change the next step must plan from (:meth:`ControllerState.bump`)."""
        raise NotImplementedError

    def _carry_links(self, new: Fabric, moved: dict[int, int], now: float) -> None:
        """Link histories carried onto a new snapshot by the links' ends (``moved``: old link
        number -> new), the new snapshot's declared states seeded."""
        tracker = LinkTracker(self.tracker.settings)
        for number, link in enumerate(new.links):
            if link.status is not LinkStatus.UP:
                tracker.seed(number, link.status, now)
        for old_number, history in self.tracker.histories().items():
            if old_number in moved and moved[old_number] not in tracker.histories():
                tracker.adopt(moved[old_number], history)
        self.tracker = tracker
        operator = LinkTracker(self.operator.settings)  # drains follow their cables too
        for old_number, history in self.operator.histories().items():
            if old_number in moved:
                operator.adopt(moved[old_number], history)
        self.operator = operator

    # -- the reverse index ---------------------------------------------------------------------

    def _links_of(self, held: HeldBinding) -> list[int]:
        index = self.fabric.index
        nodes = [index.node_of.get(n, -1) for n in held.binding.path]
        out = []
        for u, v in zip(nodes, nodes[1:], strict=False):
            res = index.resource_between.get((u, v))
            if res is not None:
                out.append(res // 2)
        return out

    def _index(self, job_id: str, held: HeldBinding, sign: int) -> None:
        for link in self._links_of(held):
            counter = self.link_jobs.setdefault(link, Counter())
            counter[job_id] += sign
            if counter[job_id] <= 0:
                del counter[job_id]

    def jobs_on_links(self, links: list[int]) -> list[str]:
        """Jobs with QPs across ``links``: bindings in force (the index), and shadow jobs'
        planned bindings (scanned: a shadow job's failure is a prediction worth reporting, and
        links fail rarely)."""
        with self.lock:
            found: set[str] = set()
            for link in links:
                found.update(self.link_jobs.get(link, {}))
            wanted = set(links)
            for job, held in self.shadow.items():
                if job not in found and any(
                    wanted.intersection(self._links_of(h)) for h in held.values()
                ):
                    found.add(job)
            return sorted(found)

    def observe_link(self, link: int, status: LinkStatus, now: float) -> bool:
        with self.lock:
            changed = self.tracker.observe(link, status, now)
            if changed:
                self.bump()
            return changed

    # -- what a step plans from --------------------------------------------------------------

    def effective_links(self, now: float) -> dict[int, LinkStatus]:
        with self.lock:
            status = self.tracker.effective(now)
            for link in self.operator.effective(now):  # drained, or restored but held
                status[link] = LinkStatus.DRAINED
            return status

    def forwarding_links(self) -> dict[int, LinkStatus]:
        """The links the switches themselves leave out of their ECMP groups: observed (or
        declared) not up. An operator drain (``DrainLink``) is a planning decision: the switch
        still hashes over the link, so port synthesis must too, or the ports of QPs whose paths
        did not change get rewritten and some land on the drained link (issue 30). A link held
        down by flap damping is back in the switch's group as well."""
        with self.lock:
            return {
                link: h.observed
                for link, h in self.tracker.histories().items()
                if h.observed is not LinkStatus.UP
            }

    def next_link_change(self, now: float) -> float | None:
        """When a held link (observed or operator-restored) becomes usable next."""
        with self.lock:
            times = [t.next_change(now) for t in (self.tracker, self.operator)]
        found = [t for t in times if t is not None]
        return min(found) if found else None

    def release_operator_hold(self, link: int, now: float) -> bool:
        """An operator forced a restore: end the hold-down or flap suppression of a restored
        link now (only in memory, like the damping history itself). ``True`` if it was held."""
        with self.lock:
            if not self.operator.release(link, now):
                return False
            self.bump()
            return True

    def operator_held(self, link: int, now: float) -> bool:
        """Restored by an operator but not yet back in use (hold-down or suppressed)."""
        with self.lock:
            return self.operator.held(link, now)
