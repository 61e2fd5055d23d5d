"""Bindings: the source port (and GRH flow label) each QP must use so that it takes its planned
path, for a whole plan, and the difference between two plans' bindings.

Why: a plan is worth nothing until each QP takes its path, and on RoCEv2 the host's only handle
is the QP's UDP source port (``mlx5dv_modify_qp_udp_sport``) or the GRH flow label the kernel
folds into it (``rdma_flow_label_to_udp_sport``, set at INIT->RTR). So every :class:`Binding`
carries both: ``sport`` and ``flow_label = flow_label_for_sport(sport)``, and the model refuses
a pair that the kernel's formula would not turn into that port.

:func:`bindings_for_paths` is the one entry point (the CLI's ``c4p plan --bindings`` and the
controller use it). It takes :class:`~southbound.routes.QpRoute` s and a port source, predicted
from the hash model (:class:`~southbound.ports.PredictedPorts`) or learned by probing
(:class:`~southbound.learnedports.LearnedPorts`), and decides per QP:

* **keep**: with ``previous`` bindings, a QP whose path is unchanged keeps its port if that port
  still takes the path, so a re-plan pushes only what moved (and a live QP is not disturbed);
* **bind**: the QPs of one NIC pair on one path get *distinct* ports, lowest first, where enough
  exist (so they stay distinguishable in telemetry and re-hash independently if a group changes);
  if there are fewer ports than QPs they share them round-robin;
* **fall back**: when no port takes the planned path (or the planned path is no longer an
  equal-cost path), the nearest path some port takes (``routes.nearest_middle``), and a
  :class:`BindingIssue` says so; a QP with no usable path at all is left unbound, with an issue.

:func:`diff_bindings` compares two sets by QP (job, communicator, connection, QP index): the
controller pushes ``added`` and ``changed`` and withdraws ``removed``. A change is what the
transport sees (ports, label, endpoints); a new path with the same port is counted apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from southbound.learnedports import LearnedPorts
from southbound.pathtable import PathTable
from southbound.ports import PortRequest, PortSource, PredictedPorts
from southbound.routes import Middle, QpKey, QpRoute, full_path, middle_stages, nearest_middle
from topology.base import Frozen
from topology.errors import TopologyError
from topology.model import Fabric, Name
from topology.roce import (
    FLOW_LABEL_MASK,
    SPORT_MAX,
    SPORT_MIN,
    flow_label_for_sport,
    rdma_flow_label_to_udp_sport,
)


class SynthesisMode(StrEnum):
    """Where the ports come from: the hash model, or probe-learned tables."""

    PREDICTED = "predicted"
    LEARNED = "learned"


class Binding(Frozen):
    """The port one QP must use, the flow label that yields it, and the path it then takes."""

    job: Name
    communicator: Name
    connection: int = Field(ge=0)
    qp: int = Field(ge=0)
    src: str
    dst: str
    sport: int = Field(ge=SPORT_MIN, le=SPORT_MAX)
    flow_label: int = Field(ge=1, le=FLOW_LABEL_MASK)
    path: tuple[str, ...] = Field(min_length=2)
    epoch: int = Field(ge=0)
    rate: float = Field(default=1.0, gt=0)
    verified: bool = False
    """True only when a probe (a trusted learned-table entry) showed this port take ``path``,
    or when the NIC pair has a single path (no switch on the way has a choice, so no hash
    decides): the hash model alone never sets it."""

    @model_validator(mode="after")
    def _label_gives_port(self) -> Self:
        made = rdma_flow_label_to_udp_sport(self.flow_label)
        if made != self.sport:
            raise ValueError(
                f"flow_label {self.flow_label:#x} makes the kernel use port {made:#x}, "
                f"not sport {self.sport:#x}"
            )
        if self.path[0] != self.src or self.path[-1] != self.dst:
            raise ValueError(f"path must run from src {self.src!r} to dst {self.dst!r}")
        return self

    @property
    def key(self) -> QpKey:
        return (self.job, self.communicator, self.connection, self.qp)

    @property
    def id(self) -> str:
        return f"{self.job}/{self.communicator}/{self.connection}/{self.qp}"

    def applies_same(self, other: Binding) -> bool:
        """True if the transport would do nothing to go from ``other`` to this binding."""
        return (self.src, self.dst, self.sport, self.flow_label) == (
            other.src,
            other.dst,
            other.sport,
            other.flow_label,
        )


class IssueKind(StrEnum):
    FALLBACK = "fallback"
    UNBOUND = "unbound"
    MISMATCH = "mismatch"  # a probe saw the port take another path than predicted
    BLACK_HOLE = "black-hole"  # a probe of the port was answered "unreachable" on the way
    PREDICTED = "predicted"  # no agent on the host: the port is the model's, not seen
    UNSTABLE = "unstable"  # probes of a port disagreed on its path: the port is not used
    DEVIATION = "deviation"  # switch counters disagree with the plan on a link this QP may use


class BindingIssue(Frozen):
    """A QP not bound to its planned path: bound elsewhere (``fallback``) or not at all."""

    job: str
    communicator: str
    connection: int
    qp: int
    kind: IssueKind
    reason: str
    planned: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.job}/{self.communicator}/{self.connection}/{self.qp}"


class BindingSet(Frozen):
    """The bindings in force at one plan epoch (each stamped with the epoch that set it, at
    most the set's), with the QPs that could not be bound as planned."""

    fabric: Name
    epoch: int = Field(ge=0)
    mode: SynthesisMode
    bindings: tuple[Binding, ...] = ()
    issues: tuple[BindingIssue, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        seen: set[QpKey] = set()
        for i, b in enumerate(self.bindings):
            if b.key in seen:
                raise ValueError(f"bindings[{i}]: QP {b.id} is bound twice")
            # A binding carries the epoch that set it: a set in force mixes older ones.
            if b.epoch > self.epoch:
                raise ValueError(f"bindings[{i}]: epoch {b.epoch} is after the set's {self.epoch}")
            seen.add(b.key)
        return self

    def by_key(self) -> dict[QpKey, Binding]:
        return {b.key: b for b in self.bindings}

    @property
    def fallbacks(self) -> tuple[BindingIssue, ...]:
        return tuple(i for i in self.issues if i.kind is IssueKind.FALLBACK)

    @property
    def unbound(self) -> tuple[BindingIssue, ...]:
        return tuple(i for i in self.issues if i.kind is IssueKind.UNBOUND)


@dataclass(frozen=True)
class BindingDiff:
    """What changed between two binding sets, per QP."""

    added: tuple[Binding, ...]
    changed: tuple[tuple[Binding, Binding], ...]
    removed: tuple[Binding, ...]
    unchanged: int
    repathed: int

    @property
    def to_push(self) -> tuple[Binding, ...]:
        """The bindings the transport must apply: new ones and changed ones."""
        return self.added + tuple(new for _, new in self.changed)

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)


def diff_bindings(
    old: BindingSet | Sequence[Binding], new: BindingSet | Sequence[Binding]
) -> BindingDiff:
    """Added, changed (old, new), removed bindings, by QP; epochs and rates are ignored."""
    before = {b.key: b for b in (old.bindings if isinstance(old, BindingSet) else old)}
    after = new.bindings if isinstance(new, BindingSet) else tuple(new)
    added, changed, unchanged, repathed = [], [], 0, 0
    for b in after:
        was = before.get(b.key)
        if was is None:
            added.append(b)
        elif not b.applies_same(was):
            changed.append((was, b))
        else:
            unchanged += 1
            repathed += was.path != b.path
    keys = {b.key for b in after}
    removed = tuple(b for k, b in before.items() if k not in keys)
    return BindingDiff(tuple(added), tuple(changed), removed, unchanged, repathed)


# -- synthesis -----------------------------------------------------------------------------------


@dataclass
class _Qp:
    route: QpRoute
    src: int
    dst: int
    middle: Middle | None
    problem: str = ""
    sport: int = 0
    bound: Middle | None = None


def _resolve(fabric: Fabric, route: QpRoute, valid: dict[tuple[int, int, Middle], bool]) -> _Qp:
    """Node numbers and the planned middle of a route, or why the plan cannot be followed.

    ``valid`` caches, per (source leaf, destination leaf, middle), whether the middle is an
    equal-cost path now (a walk through the ECMP groups; no enumeration of all paths).
    """
    index = fabric.index
    try:
        src, dst = index.port(route.src).node, index.port(route.dst).node
    except TopologyError as exc:
        return _Qp(route, -1, -1, None, f"unbound: {exc}")
    routing = index.routing
    try:
        up, down = index.uplink(src), index.downlink(dst)
    except TopologyError as exc:
        return _Qp(route, src, dst, None, f"unbound: {exc}")
    if src == dst:
        return _Qp(route, src, dst, None, "unbound: source and destination are the same port")
    for res, what in ((up, "source"), (down, "destination")):
        if not index.res_usable[res]:
            link = index.resource_name(res)
            return _Qp(route, src, dst, None, f"unbound: {what} NIC link {link} is not up")
    src_leaf, dst_leaf = int(index.res_dst[up]), int(index.res_src[down])
    if src_leaf != dst_leaf and not routing.next_hops(src_leaf, dst_leaf, False):
        return _Qp(route, src, dst, None, "unbound: no usable path between the NIC ports")
    if not route.path:
        return _Qp(route, src, dst, None, "the plan gives no path")
    if not all(0 <= res < index.num_resources for res in route.path):
        return _Qp(route, src, dst, None, "the planned path names links the fabric lacks")
    middle = tuple(route.path[1:-1])
    key = (src_leaf, dst_leaf, middle)
    if key not in valid:
        valid[key] = middle_stages(routing, *key) is not None
    if len(route.path) < 2 or (route.path[0], route.path[-1]) != (up, down) or not valid[key]:
        return _Qp(route, src, dst, None, "the planned path is not an equal-cost path now")
    return _Qp(route, src, dst, middle)


def port_source(
    fabric: Fabric, mode: SynthesisMode | str, table: PathTable | None = None
) -> PortSource:
    """The port source for a mode: the fabric's hash model, or a learned table of it."""
    if SynthesisMode(mode) is SynthesisMode.PREDICTED:
        return PredictedPorts(fabric)
    if table is None:
        raise ValueError("mode 'learned' needs a PathTable (table=)")
    if table.fabric.links != fabric.links:
        raise ValueError(
            "table: learned on another snapshot of the fabric; call table.invalidate(fabric) "
            "and re-probe first"
        )
    return LearnedPorts(table)


def bindings_for_paths(
    fabric: Fabric,
    routes: Sequence[QpRoute],
    epoch: int,
    *,
    mode: SynthesisMode | str = SynthesisMode.PREDICTED,
    table: PathTable | None = None,
    previous: BindingSet | None = None,
    source: PortSource | None = None,
) -> BindingSet:
    """Bind every route's QP to a source port for its planned path (see the module docstring).

    ``source`` overrides the port source that ``mode`` and ``table`` choose (reuse a
    :class:`PredictedPorts` across calls on one snapshot to keep its caches). Raises
    ``ValueError`` if a QP appears twice, if ``mode`` is learned without a table, or if the
    table was learned on another snapshot.
    """
    source = source or port_source(fabric, mode, table)
    mode = SynthesisMode(source.mode)
    seen: set[QpKey] = set()
    for route in routes:
        if route.key in seen:
            raise ValueError(f"routes: QP {route.id} appears more than once")
        seen.add(route.key)
    valid: dict[tuple[int, int, Middle], bool] = {}
    qps = [_resolve(fabric, r, valid) for r in routes]
    _keep_previous(qps, previous, source, fabric)
    groups: dict[tuple[int, int, Middle], list[_Qp]] = {}
    for qp in qps:
        if qp.middle is not None and qp.bound is None:
            groups.setdefault((qp.src, qp.dst, qp.middle), []).append(qp)
    kept: dict[tuple[int, int, Middle], set[int]] = {}
    for qp in qps:
        if qp.bound is not None:
            kept.setdefault((qp.src, qp.dst, qp.bound), set()).add(qp.sport)
    keys = list(groups)
    requests = [
        PortRequest(s, d, m, len(groups[(s, d, m)]), frozenset(kept.get((s, d, m), ())))
        for s, d, m in keys
    ]
    missing = (
        "no source port takes the planned path"
        if source.mode == SynthesisMode.PREDICTED
        else "no trusted learned port takes the planned path"
    )
    for key, ports in zip(keys, source.find(requests), strict=True):
        if not ports:
            for qp in groups[key]:
                qp.problem = missing
            continue
        for k, qp in enumerate(groups[key]):
            qp.sport, qp.bound = ports[k % len(ports)], qp.middle
    _fall_back([qp for qp in qps if qp.bound is None and qp.src >= 0], source, fabric)
    return _assemble(fabric, qps, epoch, mode)


def _keep_previous(
    qps: list[_Qp], previous: BindingSet | None, source: PortSource, fabric: Fabric
) -> None:
    if previous is None:
        return
    index = fabric.index
    before = previous.by_key()
    candidates = []
    for qp in qps:
        old = before.get(qp.route.key)
        if (
            old is not None
            and qp.middle is not None
            and (old.src, old.dst) == (qp.route.src, qp.route.dst)
            and old.path == index.path_nodes(qp.route.path)
        ):
            candidates.append((qp, old.sport))
    taken = source.middles_of(
        [qp.src for qp, _ in candidates],
        [qp.dst for qp, _ in candidates],
        [sport for _, sport in candidates],
    )
    for (qp, sport), middle in zip(candidates, taken, strict=True):
        if middle == qp.middle:
            qp.sport, qp.bound = sport, middle


def _fall_back(qps: list[_Qp], source: PortSource, fabric: Fabric) -> None:
    """Bind QPs without a port for their plan to the nearest path some port takes, among the
    paths ``fabric`` may use: the source may forward on the switches' groups, which still hold
    a link an operator drained (see :meth:`c4p.controller.reconcile.Reconciler.snapshot`)."""
    usable = fabric.index.res_usable
    used: dict[tuple[int, int, Middle], int] = {}
    for qp in qps:
        if qp.problem.startswith("unbound"):
            continue
        known = {
            m: ports
            for m, ports in source.alternatives(qp.src, qp.dst).items()
            if all(usable[r] for r in m)
        }
        choice = nearest_middle(qp.middle or (), known)
        if choice is None:
            qp.problem = f"unbound: {qp.problem}; no port is known to take any path"
            continue
        k = used.get((qp.src, qp.dst, choice), 0)
        used[(qp.src, qp.dst, choice)] = k + 1
        ports = known[choice]
        qp.sport, qp.bound = ports[k % len(ports)], choice


def _issue(route: QpRoute, kind: IssueKind, reason: str, planned: tuple[str, ...]) -> BindingIssue:
    return BindingIssue(
        job=route.job,
        communicator=route.communicator,
        connection=route.connection,
        qp=route.qp,
        kind=kind,
        reason=reason,
        planned=planned,
    )


def _assemble(fabric: Fabric, qps: list[_Qp], epoch: int, mode: SynthesisMode) -> BindingSet:
    index = fabric.index
    bindings: list[Binding] = []
    issues: list[BindingIssue] = []
    for qp in qps:
        r = qp.route
        sound = all(0 <= res < index.num_resources for res in r.path)
        planned = index.path_nodes(r.path) if sound else ()
        if qp.bound is None:
            reason = qp.problem.removeprefix("unbound: ")
            issues.append(_issue(r, IssueKind.UNBOUND, reason, planned))
            continue
        if qp.bound != qp.middle:
            reason = f"{qp.problem}; bound to the nearest path instead"
            issues.append(_issue(r, IssueKind.FALLBACK, reason, planned))
        bindings.append(
            Binding(
                job=r.job,
                communicator=r.communicator,
                connection=r.connection,
                qp=r.qp,
                src=r.src,
                dst=r.dst,
                sport=qp.sport,
                flow_label=flow_label_for_sport(qp.sport),
                path=index.path_nodes(full_path(index, qp.src, qp.dst, qp.bound)),
                epoch=epoch,
                rate=r.rate,
            )
        )
    return BindingSet(
        fabric=fabric.name,
        epoch=epoch,
        mode=mode,
        bindings=tuple(bindings),
        issues=tuple(issues),
    )
