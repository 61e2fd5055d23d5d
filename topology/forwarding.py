"""Where the data plane sends a packet: ECMP forwarding, hop by hop, with each switch's hash.

Why: the planner chooses paths, but packets go where the switches' hashes send them. This module
is that model of the data plane. The ECMP baseline (``solver``) uses it to see where the kernel's
QPN-derived source ports land, and source-port synthesis (``southbound``) uses it to check that a
port it picked really follows the planned path. Both must agree with ``topology.routing``, so
the groups come from it (:meth:`Routing.next_hops` for one packet, :meth:`Routing.groups_many`
for a step of many) and the choice from :mod:`topology.hashing`.

The walk, for one packet: out of the source NIC port on its only link; at each switch, if it is
the destination leaf, out on the destination NIC port's link; otherwise member
``ecmp_hash(switch.hash, five_tuple) % len(group)`` of the switch's group toward the destination
leaf. The packet is *descending* (valley-free routing) from the first hop that goes down a tier.

:func:`forward` follows one packet and explains every choice; :func:`forward_many` forwards
thousands of flows at once with numpy, one step of all flows at a time, and gives the same
resources as :func:`forward` for every flow. The hash depends only on the switch's
:class:`HashProfile` and the 5-tuple, so :func:`forward_many` hashes all flows once per distinct
profile and then only indexes groups (every step's groups from one routing call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topology.arrays import distinct
from topology.errors import PathError, UnknownNameError, UnreachableError
from topology.hashing import HashArray, ecmp_hash, ecmp_hash_many
from topology.index import FabricIndex
from topology.leafclass import bottom_switches, class_rows, leaf_classes
from topology.model import Fabric, HashProfile
from topology.roce import ROCE_UDP_DPORT, UDP_PROTOCOL, FiveTuple


@dataclass(frozen=True)
class HopChoice:
    """One ECMP decision: which member of which group a switch picked, and why."""

    switch: str
    group_size: int
    member: int
    hash_value: int
    resource: int


@dataclass(frozen=True)
class ForwardedPath:
    """The path one packet takes: resources, node names from NIC port to NIC port, and choices.

    ``hops`` has one entry per switch that forwarded by its ECMP group toward the destination
    leaf (a group of one, going down, included); the destination leaf itself delivers on the
    destination NIC port's link, which is not a choice, and has no entry.
    """

    five_tuple: FiveTuple
    resources: tuple[int, ...]
    nodes: tuple[str, ...]
    hops: tuple[HopChoice, ...]

    def explain(self) -> str:
        """A human-readable account of every choice, one line per switch."""
        lines = [
            f"{self.five_tuple.src_ip}:{self.five_tuple.src_port} -> "
            f"{self.five_tuple.dst_ip}:{self.five_tuple.dst_port}: {' -> '.join(self.nodes)}"
        ]
        lines.extend(
            f"  {hop.switch}: hash {hop.hash_value:#06x} % {hop.group_size} = member {hop.member}"
            for hop in self.hops
        )
        return "\n".join(lines)


def _profiles(index: FabricIndex) -> tuple[HashProfile, ...]:
    """The hash profile of every switch, by node number (switches are numbered first)."""
    return tuple(s.hash for s in index.fabric.switches)


def _attachment(index: FabricIndex, src_port: int, dst_port: int) -> tuple[int, int]:
    """The source uplink and destination downlink, refusing what cannot carry a packet."""
    if src_port == dst_port:
        raise PathError(
            f"source and destination are the same NIC port {index.node_names[src_port]}"
        )
    up, down = index.uplink(src_port), index.downlink(dst_port)
    for res, what in ((up, "source"), (down, "destination")):
        if not index.res_usable[res]:
            raise UnreachableError(f"{what} NIC link {index.resource_name(res)} is not up")
    return up, down


def forward(fabric: Fabric, five_tuple: FiveTuple) -> ForwardedPath:
    """Follow one packet from its source NIC port to its destination NIC port.

    Raises :class:`UnknownNameError` if no NIC port has the source or destination address,
    :class:`UnreachableError` if a NIC link is not up or a switch has no usable next hop, and
    :class:`PathError` if the two addresses are the same port or a port is not cabled.
    """
    index = fabric.index
    routing = index.routing
    src = index.port_by_address(five_tuple.src_ip).node
    dst = index.port_by_address(five_tuple.dst_ip).node
    up, down = _attachment(index, src, dst)
    leaf = int(index.res_src[down])
    profiles = _profiles(index)
    resources = [up]
    hops: list[HopChoice] = []
    node = int(index.res_dst[up])
    descending = False
    while node != leaf:
        if len(hops) > index.num_switches:  # distances strictly fall; this is only a guard
            raise PathError(f"forwarding loop toward {index.node_names[leaf]}: {resources}")
        group = routing.next_hops(node, leaf, descending)
        if not group:
            raise UnreachableError(
                f"{index.node_names[node]} has no usable next hop toward "
                f"{index.node_names[leaf]} (for {index.node_names[dst]})"
            )
        value = ecmp_hash(profiles[node], five_tuple)
        member = value % len(group)
        res = group[member]
        hops.append(HopChoice(index.node_names[node], len(group), member, value, res))
        resources.append(res)
        descending = descending or routing.is_down(res)
        node = int(index.res_dst[res])
    resources.append(down)
    return ForwardedPath(
        five_tuple=five_tuple,
        resources=tuple(resources),
        nodes=index.path_nodes(resources),
        hops=tuple(hops),
    )


def _port_nodes(index: FabricIndex, name: str, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    nodes = np.asarray(values).reshape(-1)
    if nodes.size == 0:
        return np.zeros(0, dtype=np.int64)
    if nodes.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected NIC-port node numbers, got dtype {nodes.dtype}")
    nodes = nodes.astype(np.int64)
    bad = (nodes < index.num_switches) | (nodes >= index.num_nodes)
    if bad.any():
        raise UnknownNameError(f"{name}: node {int(nodes[bad][0])} is not a NIC port")
    return nodes


def forward_many(
    fabric: Fabric,
    src_ports: npt.ArrayLike,
    dst_ports: npt.ArrayLike,
    src_udp_ports: npt.ArrayLike,
    *,
    protocol: int = UDP_PROTOCOL,
    dst_udp_port: int = ROCE_UDP_DPORT,
) -> list[tuple[int, ...]]:
    """The resources each flow's packets take, for many flows at once.

    Flow ``i`` goes from NIC-port node ``src_ports[i]`` to ``dst_ports[i]`` with UDP source port
    ``src_udp_ports[i]``; addresses are the ports' own. The result is exactly
    ``forward(...).resources`` for every flow, except that a flow :func:`forward` would refuse
    with a :class:`PathError` (unreachable, same port, uncabled port) gets an **empty tuple**:
    the caller, typically the ECMP baseline, reports such flows rather than stopping at the
    first. Arguments that are not NIC ports or not ports at all raise, as they are bugs.
    """
    index = fabric.index
    routing = index.routing
    src = _port_nodes(index, "src_ports", src_ports)
    dst = _port_nodes(index, "dst_ports", dst_ports)
    sports = np.asarray(src_udp_ports).reshape(-1)
    if sports.size and sports.dtype.kind not in "iu":
        raise TypeError(f"src_udp_ports: expected integers, got dtype {sports.dtype}")
    if sports.size and (int(sports.min()) < 0 or int(sports.max()) > 0xFFFF):
        raise ValueError("src_udp_ports: UDP ports must lie in 0..65535")
    if not src.size == dst.size == sports.size:
        raise ValueError(
            f"src_ports, dst_ports and src_udp_ports differ in length: "
            f"{src.size}, {dst.size}, {sports.size}"
        )
    count = src.size
    address = index.port_addresses
    src_ips, dst_ips = address[src], address[dst]

    # Switches share a few hash profiles (one per tier, typically): every flow is hashed once
    # per distinct profile, and a step reads each flow's hash under its switch's profile.
    profiles = _profiles(index)
    kinds = list(dict.fromkeys(profiles))
    profile_number = {p: i for i, p in enumerate(kinds)}
    profile_of = np.fromiter(
        (profile_number[p] for p in profiles), dtype=np.int64, count=len(profiles)
    )
    hashes: dict[int, HashArray] = {}

    def hashes_for(number: int) -> HashArray:
        if number not in hashes:
            hashes[number] = ecmp_hash_many(
                kinds[number], src_ips, dst_ips, protocol, sports, dst_udp_port
            )
        return hashes[number]

    # Attach every flow (or mark it unforwardable), then step all travelling flows together.
    # A NIC port's uplink is its only link (-1 if it has none or several, as in uplink()).
    uplink = index.port_uplinks
    up, dst_up = uplink[src], uplink[dst]
    down = np.where(dst_up >= 0, dst_up ^ 1, -1)
    usable = index.res_usable
    ok = (src != dst) & (up >= 0) & (dst_up >= 0)
    ok &= usable[np.maximum(up, 0)] & usable[np.maximum(down, 0)]
    if not ok.any():  # also spares the indexing below a fabric without links
        return [() for _ in range(count)]
    # Valley-free: at most (tiers - 1) hops up and as many down, plus the two NIC links.
    max_len = 2 * int(index.tier.max(initial=1)) + 2
    path = np.full((count, max_len), -1, dtype=np.int64)
    path[:, 0] = up
    length = np.zeros(count, dtype=np.int64)
    length[ok] = 1
    node = np.where(ok, index.res_dst[np.maximum(path[:, 0], 0)], -1)
    leaf = np.where(ok, index.res_src[np.maximum(down, 0)], -1)
    descending = np.zeros(count, dtype=np.bool_)
    goes_down = routing.down_mask
    moving = ok & (node != leaf)

    # Distances toward every destination leaf, one row each; a flow knows its row.
    leaves, leaf_row = np.unique(np.where(ok, leaf, 0), return_inverse=True)
    leaf_row = leaf_row.reshape(-1)
    down_rows, up_rows, far = routing.narrow_rows(leaves)  # bytes: 75 MB at 131k, not 600
    # Leaves whose rows agree away from the leaves share their groups there (leafclass):
    # at 131k GPUs a core's keys fall from ~256 destination leaves to ~112 pods.
    representative = leaf_classes(down_rows, up_rows, bottom_switches(index, goes_down))
    width = 2 * len(leaves)
    while moving.any():
        flows = np.flatnonzero(moving)
        if int(length[flows].max()) >= max_len - 1:  # distances strictly fall; only a guard
            raise PathError("forwarding loop: a path grew longer than the fabric allows")
        # One step for every travelling flow: the distinct (switch, destination row, phase)
        # keys of all of them numbered in one pass, and all their groups from one call
        # (Routing.groups_many; it was one call per switch, 2,560 on a 16k-GPU fat-tree).
        at, row, phase = node[flows], leaf_row[flows], descending[flows]
        here = np.where(phase, down_rows[row, at], up_rows[row, at])
        row = class_rows(row, at, here, representative, leaves)
        every, number = np.unique(at * width + row * 2 + phase, return_inverse=True)
        number = number.reshape(-1)
        rest = every % width
        members, starts, sizes = routing.groups_many(
            every // width,
            down_rows,
            up_rows,
            rest // 2,
            rest % 2 == 1,
            unreachable=far,
            leaves=leaves,
        )
        size = sizes[number]
        stuck = size == 0
        if stuck.any():
            ok[flows[stuck]] = False
            moving[flows[stuck]] = False
            flows, at, number, size = flows[~stuck], at[~stuck], number[~stuck], size[~stuck]
            if not flows.size:
                continue
        pick = np.empty(flows.size, dtype=np.int64)
        profile = profile_of[at]
        for p in distinct(profile).tolist():
            mine = profile == p
            pick[mine] = hashes_for(p)[flows[mine]] % size[mine].astype(np.uint32)
        chosen = members[starts[number] + pick]
        path[flows, length[flows]] = chosen
        length[flows] += 1
        node[flows] = index.res_dst[chosen]
        descending[flows] |= goes_down[chosen]
        moving &= node != leaf

    # Whole columns to lists once (a numpy slice and element per flow cost 30 ms at 16k).
    rows = zip(path.tolist(), length.tolist(), down.tolist(), ok.tolist(), strict=True)
    return [(*hops[:n], last) if good else () for hops, n, last, good in rows]


def forward_tuples(fabric: Fabric, tuples: Sequence[FiveTuple]) -> list[tuple[int, ...]]:
    """:func:`forward_many` for flows given as 5-tuples (addresses looked up in the fabric).

    All tuples must share one protocol and destination port (RoCEv2's, normally).
    """
    if not tuples:
        return []
    protocols = {t.protocol for t in tuples}
    dports = {t.dst_port for t in tuples}
    if len(protocols) != 1 or len(dports) != 1:
        raise ValueError("tuples: all must share one protocol and one destination port")
    index = fabric.index
    src = [index.port_by_address(t.src_ip).node for t in tuples]
    dst = [index.port_by_address(t.dst_ip).node for t in tuples]
    return forward_many(
        fabric,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        np.asarray([t.src_port for t in tuples], dtype=np.int64),
        protocol=protocols.pop(),
        dst_udp_port=dports.pop(),
    )
