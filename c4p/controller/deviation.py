"""Plans checked by counters: the load each link should carry under the bindings in force,
against what the switches' interface counters say it carries.

Why: a binding is a prediction about hashing (the hash model's, or a probe's from another
socket), and only the data plane knows where the packets went. A lab once showed 27 of 32
predicted ports off plan under a job that said installed, and learned ports passed every check
while most QPs took another spine (issue 30). The switches' SAMPLE counters
(:meth:`southbound.fleet.Fleet.link_loads`) are the ground truth the controller already
collects. This module compares them with the plan. It does no I/O, so it is tested with
numbers and the service calls it on a timer.

The comparison, per direction of every link that is not a NIC's uplink:

* **What each QP sends** is not in the intents (they give relative ``rate`` s only), so it is
  read from the counters where it is unambiguous: a NIC port's uplink carries exactly the QPs
  bound to that port, whatever the fabric's hashing does. Each QP gets its port's observed
  transmit rate in proportion to its ``rate``.
* **Planned load** of a link direction: the sum of those rates over the QPs whose bound path
  crosses it.
* **A deviation**: ``|observed - planned|`` above ``tolerance`` of the link's line rate.
  Traffic the plan does not put there is ``unplanned``; planned traffic that is not there is
  ``missing``. Either way the bindings in force are not what the data plane does (or traffic
  the controller does not know about shares the link, which an operator wants to know too).
* **Likely QPs**: for ``missing``, the QPs planned across the link. For ``unplanned``, the
  QPs planned elsewhere for which the link lies on some equal-cost path (a hash may have put
  them there); those whose planned path misses traffic somewhere come first.

What counters cannot see: a *permutation* of equal QPs (each link still carries the load the
plan gives it) changes no counter. That is also harmless to load, which is what the plan is
for. A CRC hash with another seed permutes the members of a power-of-two group exactly like
this, so a 2-QP ring on a 4-spine fabric can be entirely off its paths and show nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from pydantic import Field

from southbound.bindings import BindingIssue, IssueKind
from southbound.routes import QpKey
from topology.base import Frozen
from topology.errors import TopologyError
from topology.model import Fabric
from topology.routing import Routing


class DeviationSettings(Frozen):
    """``deviation:`` in the controller config (used when the fabric comes from switches)."""

    every_s: float = Field(
        default=10.0, ge=0, le=3600, description="Compare every this often (0: never)."
    )
    tolerance: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="A link direction deviates when observed and planned load differ by more "
        "than this share of its line rate.",
    )
    settle_s: float = Field(
        default=15.0,
        ge=0,
        le=3600,
        description="Skip the comparison this long after a plan changed bindings (transports "
        "apply them, counters average over their sampling interval).",
    )
    max_qps: int = Field(default=16, ge=1, le=1024, description="Likely QPs named per link.")


class BoundQp(Protocol):
    """What the comparison needs of a binding in force (``southbound.bindings.Binding``)."""

    @property
    def key(self) -> QpKey: ...

    @property
    def src(self) -> str: ...

    @property
    def dst(self) -> str: ...

    @property
    def rate(self) -> float: ...

    @property
    def path(self) -> tuple[str, ...]: ...


class LoadLike(Protocol):
    """A link's observed utilization per direction (``southbound.events.LinkLoad``)."""

    @property
    def utilization_ab(self) -> float | None: ...

    @property
    def utilization_ba(self) -> float | None: ...


class DeviationKind(StrEnum):
    UNPLANNED = "unplanned"
    MISSING = "missing"


@dataclass(frozen=True)
class Deviation:
    """One link direction whose counters disagree with the plan."""

    link_id: str
    direction: str
    """``"a -> b"`` by node names."""
    resource: int
    kind: DeviationKind
    observed_bps: float
    planned_bps: float
    capacity_bps: float
    qps: tuple[QpKey, ...]
    """The likely QPs (see the module docstring), at most ``max_qps``."""

    @property
    def text(self) -> str:
        gap = (self.observed_bps - self.planned_bps) / self.capacity_bps
        what = "traffic the plan does not put there" if self.kind is DeviationKind.UNPLANNED \
            else "planned traffic missing"  # fmt: skip
        return (
            f"link {self.link_id} ({self.direction}): counters {_rate(self.observed_bps)}, "
            f"plan {_rate(self.planned_bps)} ({gap:+.2g} of line rate): {what}"
        )


def _rate(bps: float) -> str:
    """A rate in the unit that shows it (a lab's veth carries Mb/s, a fabric Gb/s)."""
    for unit, scale in (("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if abs(bps) >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} b/s"


def _observed(load: LoadLike | None, resource: int) -> float | None:
    """The utilization of one direction (resource ``2i`` is ``a -> b`` of link ``i``)."""
    if load is None:
        return None
    return load.utilization_ab if resource % 2 == 0 else load.utilization_ba


def _resources(fabric: Fabric, path: Sequence[str]) -> tuple[int, ...] | None:
    index = fabric.index
    try:
        return tuple(index.path_resources(list(path)))
    except (TopologyError, KeyError):
        return None


def qp_rates(
    fabric: Fabric, bindings: Sequence[BoundQp], loads: Mapping[str, LoadLike]
) -> dict[QpKey, float]:
    """Each QP's sending rate in bit/s, from its NIC port's uplink counters shared by ``rate``
    (QPs whose port has no counters are left out: nothing is known of them)."""
    index = fabric.index
    by_port: dict[str, list[BoundQp]] = {}
    for b in bindings:
        by_port.setdefault(b.src, []).append(b)
    out: dict[QpKey, float] = {}
    for port, qps in by_port.items():
        try:
            up = int(index.uplink(index.node(port)))
        except TopologyError:
            continue
        link = fabric.links[up // 2]
        util = _observed(loads.get(link.id), up)
        if util is None:
            continue
        sent = max(util, 0.0) * link.speed_gbps * 1e9
        total = sum(b.rate for b in qps) or 1.0
        for b in qps:
            out[b.key] = sent * b.rate / total
    return out


def find_deviations(
    fabric: Fabric,
    bindings: Sequence[BoundQp],
    loads: Mapping[str, LoadLike],
    settings: DeviationSettings,
    forwarding: Fabric | None = None,
) -> list[Deviation]:
    """Every link direction (not a NIC uplink) whose counters and plan differ by more than the
    tolerance; ``forwarding`` is the fabric the switches hash on (for the likely QPs of
    unplanned traffic), ``fabric`` by default."""
    index = fabric.index
    rates = qp_rates(fabric, bindings, loads)
    paths = {b.key: _resources(fabric, b.path) for b in bindings}
    planned: dict[int, float] = {}
    crossing: dict[int, list[QpKey]] = {}
    for b in bindings:
        path = paths[b.key]
        if path is None or b.key not in rates:
            continue
        for r in path[1:]:
            planned[r] = planned.get(r, 0.0) + rates[b.key]
            crossing.setdefault(r, []).append(b.key)
    uplinks = {
        int(index.uplink(p.node)) for p in index.ports if len(index.out_resources[p.node]) == 1
    }
    found: list[Deviation] = []
    for number, link in enumerate(fabric.links):
        load = loads.get(link.id)
        if load is None:
            continue
        capacity = link.speed_gbps * 1e9
        for r in (2 * number, 2 * number + 1):
            util = _observed(load, r)
            if util is None or r in uplinks:
                continue
            observed = max(util, 0.0) * capacity
            plan = planned.get(r, 0.0)
            if abs(observed - plan) <= settings.tolerance * capacity:
                continue
            kind = DeviationKind.UNPLANNED if observed > plan else DeviationKind.MISSING
            direction = f"{index.node_names[int(index.res_src[r])]} -> " \
                f"{index.node_names[int(index.res_dst[r])]}"  # fmt: skip
            found.append(Deviation(link.id, direction, r, kind, observed, plan, capacity, ()))
    missing = {d.resource for d in found if d.kind is DeviationKind.MISSING}
    routing = (forwarding or fabric).index.routing
    out = []
    for d in found:
        if d.kind is DeviationKind.MISSING:
            qps = sorted(crossing.get(d.resource, ()))
        else:
            qps = _could_hash_onto(fabric, routing, d.resource, bindings, paths, missing)
        out.append(
            Deviation(
                d.link_id,
                d.direction,
                d.resource,
                d.kind,
                d.observed_bps,
                d.planned_bps,
                d.capacity_bps,
                tuple(qps[: settings.max_qps]),
            )  # fmt: skip
        )
    return out


def _equal_cost_resources(
    fabric: Fabric, routing: Routing, src_leaf: int, dst_leaf: int
) -> frozenset[int]:
    """Every link direction on some equal-cost path between two leaves (a walk through the
    ECMP groups, each (switch, direction) once)."""
    index = fabric.index
    found: set[int] = set()
    stack = [(src_leaf, False)]
    visited: set[tuple[int, bool]] = set()
    while stack:
        node, descending = stack.pop()
        if (node, descending) in visited or node == dst_leaf:
            continue
        visited.add((node, descending))
        for res in routing.next_hops(node, dst_leaf, descending):
            found.add(int(res))
            stack.append((int(index.res_dst[res]), descending or bool(routing.is_down(res))))
    return frozenset(found)


def _could_hash_onto(
    fabric: Fabric,
    routing: Routing,
    resource: int,
    bindings: Sequence[BoundQp],
    paths: Mapping[QpKey, tuple[int, ...] | None],
    missing: set[int],
) -> list[QpKey]:
    """QPs planned elsewhere for which the link is on some equal-cost path (a hash may put
    them on it): those whose planned path misses traffic somewhere first, then by key."""
    index = fabric.index
    closure: dict[tuple[int, int], frozenset[int]] = {}
    first: list[QpKey] = []
    rest: list[QpKey] = []
    for b in bindings:
        path = paths.get(b.key)
        if not path or resource in path:
            continue
        leaves = (int(index.res_dst[path[0]]), int(index.res_src[path[-1]]))
        if leaves not in closure:
            closure[leaves] = _equal_cost_resources(fabric, routing, *leaves)
        if resource in closure[leaves]:
            (first if missing.intersection(path) else rest).append(b.key)
    return sorted(first) + sorted(rest)


def deviation_issues(deviations: Sequence[Deviation]) -> dict[str, list[BindingIssue]]:
    """Per job, one ``deviation`` issue per likely QP (its first deviation names the link)."""
    seen: set[QpKey] = set()
    out: dict[str, list[BindingIssue]] = {}
    for d in deviations:
        for key in d.qps:
            if key in seen:
                continue
            seen.add(key)
            job, communicator, connection, qp = key
            out.setdefault(job, []).append(
                BindingIssue(
                    job=job,
                    communicator=communicator,
                    connection=connection,
                    qp=qp,
                    kind=IssueKind.DEVIATION,
                    reason=f"{d.text}; this QP is a likely cause"[:1000],
                )
            )
    return out
