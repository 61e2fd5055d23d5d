"""What southbound is asked to bind, and the geometry of a planned path through ECMP groups.

Why this module: ``southbound`` may import only ``topology`` (docs/architecture.md), so it cannot
take the solver's ``Flow`` or ``Plan``. It defines its own small input, :class:`QpRoute` (one QP and
the path planned for it), and accepts anything shaped like a flow (:class:`FlowLike`, which the
solver's ``Flow`` satisfies structurally) to build routes from.

A path is a tuple of directed resources, NIC port to NIC port (``topology.index``). Source-port
synthesis, probing and verification all look at it the same way:

* its **middle** is the switch part, source leaf to destination leaf (``()`` on one leaf). The
  middle is what a leaf-pair table shares between every NIC pair of two leaves;
* its **stages** are the ECMP decisions along it: at every switch before the destination leaf,
  the switch's group toward that leaf (``Routing.next_hops``) and the member the path takes.
  A port follows the path iff every stage with more than one member hashes it onto that member.

:func:`nearest_middle` is the fallback rule when no port takes the planned path: keep the same
first hops as long as possible, then differ in as few hops as possible.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from topology.errors import PathError
from topology.index import FabricIndex
from topology.model import Fabric
from topology.routing import Routing

QpKey = tuple[str, str, int, int]
"""``(job, communicator, connection, qp)``: a QP's identity across plans."""

Middle = tuple[int, ...]
"""The switch part of a path: resources from the source leaf to the destination leaf."""

GroupKey = tuple[int, int, bool]
"""An ECMP group: ``(switch, destination leaf, descending)`` as ``Routing.next_hops`` takes it."""


class FlowLike(Protocol):
    """Anything that names one QP and its NIC ports (the solver's ``Flow`` is one)."""

    @property
    def job(self) -> str: ...
    @property
    def communicator(self) -> str: ...
    @property
    def connection(self) -> int: ...
    @property
    def qp(self) -> int: ...
    @property
    def src(self) -> str: ...
    @property
    def dst(self) -> str: ...
    @property
    def rate(self) -> float: ...


@dataclass(frozen=True, slots=True)
class QpRoute:
    """One QP and the path a plan gives it.

    ``src`` and ``dst`` are NIC port node names (``"h0003:nic2p0"``); ``path`` is resources from
    ``src`` to ``dst`` (``()`` when the plan has no path for it); ``rate`` weighs link load.
    """

    job: str
    communicator: str
    connection: int
    qp: int
    src: str
    dst: str
    path: tuple[int, ...]
    rate: float = 1.0

    @property
    def key(self) -> QpKey:
        return (self.job, self.communicator, self.connection, self.qp)

    @property
    def id(self) -> str:
        return f"{self.job}/{self.communicator}/{self.connection}/{self.qp}"


def routes_from_flows(
    flows: Sequence[FlowLike], paths: Sequence[Sequence[int] | None]
) -> list[QpRoute]:
    """Pair each flow with its planned path (``None`` or empty: no path)."""
    if len(flows) != len(paths):
        raise ValueError(f"paths: {len(paths)} paths for {len(flows)} flows")
    return [
        QpRoute(f.job, f.communicator, f.connection, f.qp, f.src, f.dst, tuple(p or ()), f.rate)
        for f, p in zip(flows, paths, strict=True)
    ]


def round_robin_paths(fabric: Fabric, pairs: Iterable[tuple[str, str]]) -> list[tuple[int, ...]]:
    """A simple stand-in for a planner: the ``k``-th pair of a leaf pair gets
    :func:`nth_middle` ``k``.

    Spreading per *leaf pair* (not per NIC pair), first decision fastest, keeps the uplinks of
    a leaf evenly used, so the result is a realistic, collision-light plan to bind. Unreachable
    pairs get ``()``.
    """
    index = fabric.index
    routing = index.routing
    seen: dict[tuple[int, int], int] = {}
    out: list[tuple[int, ...]] = []
    for src_name, dst_name in pairs:
        src, dst = index.node(src_name), index.node(dst_name)
        try:
            up, down = index.uplink(src), index.downlink(dst)
        except PathError:
            out.append(())
            continue
        leaves = (int(index.res_dst[up]), int(index.res_src[down]))
        k = seen.get(leaves, 0)
        middle = nth_middle(routing, *leaves, k)
        if src == dst or middle is None or not (index.res_usable[up] and index.res_usable[down]):
            out.append(())
            continue
        seen[leaves] = k + 1
        out.append((up, *middle, down))
    return out


def nth_middle(routing: Routing, src_leaf: int, dst_leaf: int, k: int) -> Middle | None:
    """The ``k``-th equal-cost middle in mixed radix, first decision varying fastest.

    ``k = 0 .. P-1`` gives ``P`` distinct middles where every branch has the same shape (all
    generated fabrics while no link is down), without enumerating them; ``None`` if the
    leaves are not connected.
    """
    index = routing.index
    node, descending, middle = src_leaf, False, []
    while node != dst_leaf:
        group = routing.next_hops(node, dst_leaf, descending)
        if not group:
            return None
        res = group[k % len(group)]
        k //= len(group)
        middle.append(res)
        descending = descending or routing.is_down(res)
        node = int(index.res_dst[res])
    return tuple(middle)


# -- path geometry ---------------------------------------------------------------------------


def middle_of(path: Sequence[int]) -> Middle:
    """The switch part of a NIC-to-NIC path (drops the two NIC links)."""
    if len(path) < 2:
        raise PathError(f"a NIC-to-NIC path has at least two links, got {list(path)}")
    return tuple(path[1:-1])


def full_path(index: FabricIndex, src: int, dst: int, middle: Middle) -> tuple[int, ...]:
    """NIC-to-NIC resources from a middle: the source uplink, the middle, the downlink."""
    return (index.uplink(src), *middle, index.downlink(dst))


@dataclass(frozen=True, slots=True)
class Stage:
    """One forwarding decision along a path: ``group[member]`` is the resource taken.

    ``(switch, leaf, descending)`` names the group as ``Routing.next_hops`` takes it.
    """

    switch: int
    leaf: int
    descending: bool
    group: tuple[int, ...]
    member: int

    @property
    def key(self) -> GroupKey:
        return (self.switch, self.leaf, self.descending)


def middle_stages(
    routing: Routing, src_leaf: int, dst_leaf: int, middle: Middle
) -> tuple[Stage, ...] | None:
    """Every decision a packet makes along ``middle`` (groups of one included).

    ``None`` if the middle is not an equal-cost path between the leaves right now (a hop that
    is no member of the switch's group, or a walk that does not end at ``dst_leaf``).
    """
    index = routing.index
    node, descending = src_leaf, False
    stages: list[Stage] = []
    for res in middle:
        if int(index.res_src[res]) != node:
            return None
        group = routing.next_hops(node, dst_leaf, descending)
        if res not in group:
            return None
        stages.append(Stage(node, dst_leaf, descending, group, group.index(res)))
        descending = descending or routing.is_down(res)
        node = int(index.res_dst[res])
    return tuple(stages) if node == dst_leaf else None


def branching_positions(routing: Routing, src_leaf: int, dst_leaf: int) -> tuple[int, ...]:
    """Positions (0 = the source leaf) of switches that choose among several members, over
    every equal-cost middle of a leaf pair; where probes must look to tell paths apart.

    A walk over the (switch, descending) states by depth: no path is enumerated.
    """
    index = routing.index
    found: set[int] = set()
    level = {(src_leaf, False)}
    depth = 0
    while level:
        following: set[tuple[int, bool]] = set()
        for node, descending in level:
            if node == dst_leaf:
                continue
            group = routing.next_hops(node, dst_leaf, descending)
            if len(group) > 1:
                found.add(depth)
            for res in group:
                following.add((int(index.res_dst[res]), descending or routing.is_down(res)))
        level, depth = following, depth + 1
    return tuple(sorted(found))


def nearest_middle(planned: Middle, candidates: Iterable[Middle]) -> Middle | None:
    """The candidate closest to the planned middle, or ``None`` if there is none.

    Closest: the longest common first hops, then the fewest hops that differ (position by
    position, with a length difference counting as differing hops), then the first given.
    """
    best: Middle | None = None
    best_key: tuple[int, int] | None = None
    for candidate in candidates:
        prefix = 0
        for a, b in zip(planned, candidate, strict=False):
            if a != b:
                break
            prefix += 1
        differing = sum(1 for a, b in zip(planned, candidate, strict=False) if a != b)
        differing += abs(len(planned) - len(candidate))
        key = (-prefix, differing)
        if best_key is None or key < best_key:
            best, best_key = candidate, key
    return best
