"""Destination-based routing of a Clos fabric: ECMP next-hop groups and equal-cost paths.

Why this shape: a switch forwards on the destination alone, choosing among the members of an
ECMP group, and the equal-cost paths a planner may pick from are exactly the paths those groups
allow. So both the data-plane model (``topology.forwarding``) and the planner's candidate paths
come from one place, and they can never disagree.

The rules, over *usable* links only (status ``up``; ``down`` and ``drained`` links are in no
group):

* Paths are valley-free: up zero or more tiers, then down; links within a tier are never used.
* ``down_dist[x]`` is the number of hops from switch ``x`` to the destination leaf going only
  down; ``up_dist[x]`` the length of the shortest valley-free path (``min(down_dist[x],
  1 + min over parents up_dist)``).
* A packet still climbing at ``x`` may take any member that achieves ``up_dist[x]``; once it has
  gone down it may only go down along ``down_dist``. Members are in the switch's interface
  order (natural sort: ``Ethernet2`` before ``Ethernet10``), which is the order ``hash mod n``
  indexes.

Everything is computed once per destination leaf, with numpy over each tier, and cached: the
tables for all leaves of a 16k-GPU fabric cost a fraction of a second, and paths per
``(source leaf, destination leaf)`` are enumerated once and reused by every flow between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from topology.errors import PathError, UnreachableError
from topology.index import BoolArray, FabricIndex, IntArray

_Step = tuple[IntArray, IntArray, IntArray]
"""One tier of a distance pass: target switch per resource, group starts, source switches."""

UNREACHABLE = np.iinfo(np.int64).max // 4
"""Distance of a switch that cannot reach the destination (large, and safe to add 1 to)."""


@dataclass
class DestinationTable:
    """Distances toward one destination leaf and the next-hop groups derived from them."""

    leaf: int
    down_dist: IntArray
    up_dist: IntArray
    groups: dict[tuple[int, bool], tuple[int, ...]] = field(default_factory=dict)
    counts: dict[tuple[int, bool], int] = field(default_factory=dict)


class Routing:
    """Routing state of one fabric snapshot (usable links only)."""

    def __init__(self, index: FabricIndex) -> None:
        self.index = index
        tier = index.tier
        src, dst = index.res_src, index.res_dst
        between_switches = (src < index.num_switches) & (dst < index.num_switches)
        live = index.res_usable & between_switches
        self._down = live & (tier[dst] < tier[src])
        self._up = live & (tier[dst] > tier[src])
        tiers = sorted({int(t) for t in tier[: index.num_switches]})
        self._down_by_tier = [np.flatnonzero(self._down & (tier[src] == t)) for t in tiers]
        self._up_by_tier = [np.flatnonzero(self._up & (tier[src] == t)) for t in reversed(tiers)]
        # Per switch, its switch-to-switch resources in member order (NIC links never transit).
        self._out = [
            np.asarray([r for r in rs if between_switches[r]], dtype=np.int64)
            for rs in index.out_resources[: index.num_switches]
        ]
        self._tables: dict[int, DestinationTable] = {}
        self._paths: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
        self._path_sets: dict[tuple[int, int], frozenset[tuple[int, ...]]] = {}

    # -- per-destination tables -------------------------------------------------------------

    @cached_property
    def _tier_steps(self) -> tuple[list[_Step], list[_Step]]:
        """Each tier's resources grouped by source switch, for :meth:`table`.

        Within a tier the order of updates does not matter (every resource leads to a tier
        whose distances are already final), so a minimum per source switch over its sorted
        resources (``minimum.reduceat``) gives what ``minimum.at`` over the tier gave, at a
        fraction of the cost (``table`` runs once per destination leaf: 512 times at 16k GPUs).
        """
        src, dst = self.index.res_src, self.index.res_dst
        steps: tuple[list[_Step], list[_Step]] = ([], [])
        for tiers, out in ((self._down_by_tier, steps[0]), (self._up_by_tier, steps[1])):
            for rs in tiers:
                if not rs.size:
                    continue
                ordered = rs[np.argsort(src[rs], kind="stable")]
                by = src[ordered]
                starts = np.flatnonzero(np.concatenate(([True], by[1:] != by[:-1])))
                out.append((dst[ordered], starts, by[starts]))
        return steps

    def table(self, leaf: int) -> DestinationTable:
        cached = self._tables.get(leaf)
        if cached is not None:
            return cached
        down_steps, up_steps = self._tier_steps
        # Distances over switches only (NIC ports are never transit): small arrays per leaf.
        down = np.full(self.index.num_switches, UNREACHABLE, dtype=np.int64)
        down[leaf] = 0
        for targets, starts, sources in down_steps:  # lower tiers first: theirs are final
            best = np.minimum.reduceat(down[targets] + 1, starts)
            down[sources] = np.minimum(down[sources], best)
        up = down.copy()
        for targets, starts, sources in up_steps:  # upper tiers first
            best = np.minimum.reduceat(up[targets] + 1, starts)
            up[sources] = np.minimum(up[sources], best)
        np.minimum(down, UNREACHABLE, out=down)
        np.minimum(up, UNREACHABLE, out=up)
        table = DestinationTable(leaf=leaf, down_dist=down, up_dist=up)
        self._tables[leaf] = table
        return table

    def next_hops(self, switch: int, leaf: int, descending: bool) -> tuple[int, ...]:
        """Members (resources) of ``switch``'s ECMP group toward ``leaf``, in hash order.

        ``descending`` is true once the packet has taken a downward hop (valley-free).
        Empty when the switch cannot reach the leaf in that phase.
        """
        table = self.table(leaf)
        key = (switch, descending)
        group = table.groups.get(key)
        if group is None:
            # A member leads one hop closer: while climbing, along the shortest valley-free
            # distance (up or down); once descending, downward only.
            out = self._out[switch]
            nxt = self.index.res_dst[out]
            down, up = table.down_dist, table.up_dist
            if descending:
                mask = self._down[out] & (down[nxt] == down[switch] - 1)
                reachable = down[switch] < UNREACHABLE
            else:
                target = up[switch] - 1
                mask = (self._down[out] & (down[nxt] == target)) | (
                    self._up[out] & (up[nxt] == target)
                )
                reachable = up[switch] < UNREACHABLE
            group = tuple(int(r) for r in out[mask]) if reachable else ()
            table.groups[key] = group
        return group

    def distance_rows(self, leaves: IntArray) -> tuple[IntArray, IntArray]:
        """``down_dist`` and ``up_dist`` toward each of ``leaves``, one row per leaf (from the
        cached tables), for :meth:`groups_at`."""
        tables = [self.table(leaf) for leaf in leaves.tolist()]
        width = self.index.num_switches
        if not tables:
            empty = np.zeros((0, width), dtype=np.int64)
            return empty, empty
        return (
            np.stack([t.down_dist for t in tables]),
            np.stack([t.up_dist for t in tables]),
        )

    def groups_at(
        self,
        switch: int,
        down: IntArray,
        up: IntArray,
        rows: IntArray,
        descending: BoolArray,
    ) -> tuple[IntArray, IntArray]:
        """:meth:`next_hops` of one switch toward many destinations at once, with numpy.

        Row ``i`` of the result holds the members of ``switch``'s group toward the leaf of
        distance row ``rows[i]`` (of :meth:`distance_rows`) in phase ``descending[i]``, in
        hash order, padded with -1; the second array holds each group's size. Why: the ECMP
        baseline of a shuffled ring at 16k GPUs meets some 26,000 distinct groups, and asking
        :meth:`next_hops` for each one cost a second; this asks once per switch.
        """
        out = self._out[switch]
        nxt = self.index.res_dst[out]
        column = rows[:, None]
        d_next, u_next = down[column, nxt], up[column, nxt]
        d_here, u_here = down[rows, switch], up[rows, switch]
        goes_down, goes_up = self._down[out][None, :], self._up[out][None, :]
        # The rules of next_hops: once descending, down along down_dist only; while climbing,
        # along the shortest valley-free distance, up or down.
        if descending.all():
            mask = goes_down & (d_next == (d_here - 1)[:, None])
        else:
            target = (u_here - 1)[:, None]
            mask = (goes_down & (d_next == target)) | (goes_up & (u_next == target))
            if descending.any():
                falling = goes_down & (d_next == (d_here - 1)[:, None])
                mask = np.where(descending[:, None], falling, mask)
        mask &= np.where(descending, d_here < UNREACHABLE, u_here < UNREACHABLE)[:, None]
        sizes = np.count_nonzero(mask, axis=1)
        if bool((sizes == mask.shape[1]).all()):  # every member in every group (climbing)
            return np.broadcast_to(out, mask.shape), sizes
        order = np.argsort(~mask, axis=1, kind="stable")  # members first, in member order
        # Plain fancy indexing: take_along_axis checks and builds its index in Python per call
        # (2,000 calls for a 16k-GPU fat-tree's ECMP baseline).
        line = np.arange(len(order))[:, None]
        return np.where(mask, out[None, :], -1)[line, order], sizes

    @property
    def down_mask(self) -> BoolArray:
        """Per resource: usable, between switches, and toward a lower tier."""
        return self._down

    def is_down(self, resource: int) -> bool:
        """True if the resource goes to a lower tier (a packet on it is descending)."""
        return bool(self._down[resource])

    # -- equal-cost paths between leaves ----------------------------------------------------

    def switch_paths(self, src_leaf: int, dst_leaf: int) -> tuple[tuple[int, ...], ...]:
        """Every equal-cost valley-free path between two leaves, as resource tuples.

        Enumerated once per leaf pair and cached; ``()`` for the same leaf is one empty path.
        """
        key = (src_leaf, dst_leaf)
        cached = self._paths.get(key)
        if cached is not None:
            return cached
        if src_leaf == dst_leaf:
            result: tuple[tuple[int, ...], ...] = ((),)
        else:
            found: list[tuple[int, ...]] = []
            self._walk(src_leaf, dst_leaf, False, [], found)
            result = tuple(found)
        self._paths[key] = result
        return result

    def _walk(
        self, node: int, leaf: int, descending: bool, prefix: list[int], out: list[tuple[int, ...]]
    ) -> None:
        if node == leaf:
            out.append(tuple(prefix))
            return
        for r in self.next_hops(node, leaf, descending):
            prefix.append(r)
            self._walk(int(self.index.res_dst[r]), leaf, descending or self.is_down(r), prefix, out)
            prefix.pop()

    def path_count(self, src_leaf: int, dst_leaf: int) -> int:
        """How many equal-cost paths join two leaves, counted without enumerating them.

        Counts from every switch toward a destination are memoized in its table, so counting
        from all sources to one leaf costs one pass over the switches, not one per source.
        """
        memo = self.table(dst_leaf).counts

        def count(node: int, descending: bool) -> int:
            if node == dst_leaf:
                return 1
            k = (node, descending)
            if k not in memo:
                memo[k] = sum(
                    count(int(self.index.res_dst[r]), descending or self.is_down(r))
                    for r in self.next_hops(node, dst_leaf, descending)
                )
            return memo[k]

        return count(src_leaf, False)

    # -- paths between NIC ports ------------------------------------------------------------

    def equal_cost_paths(self, src_port: int, dst_port: int) -> list[tuple[int, ...]]:
        """Every equal-cost path from one NIC port to another, NIC links included.

        Raises :class:`UnreachableError` if a NIC link is unusable or no path exists.
        """
        index = self.index
        if src_port == dst_port:
            raise PathError(f"{index.node_names[src_port]} is both source and destination")
        up, down = index.uplink(src_port), index.downlink(dst_port)
        for res, what in ((up, "source"), (down, "destination")):
            if not index.res_usable[res]:
                raise UnreachableError(f"{what} NIC link {index.resource_name(res)} is not up")
        middle = self.switch_paths(int(index.res_dst[up]), int(index.res_src[down]))
        if not middle:
            raise UnreachableError(
                f"no usable path from {index.node_names[src_port]} to {index.node_names[dst_port]}"
            )
        return [(up, *m, down) for m in middle]

    def is_equal_cost_path(self, src_port: int, dst_port: int, path: tuple[int, ...]) -> bool:
        """True if ``path`` is one of the equal-cost paths between the two ports right now."""
        index = self.index
        if src_port == dst_port or not (
            index.out_resources[src_port] and index.out_resources[dst_port]
        ):
            return False
        if (
            len(path) < 2
            or path[0] != index.uplink(src_port)
            or path[-1] != index.downlink(dst_port)
        ):
            return False
        if not (index.res_usable[path[0]] and index.res_usable[path[-1]]):
            return False
        key = (int(index.res_dst[path[0]]), int(index.res_src[path[-1]]))
        known = self._path_sets.get(key)
        if known is None:
            known = frozenset(self.switch_paths(*key))
            self._path_sets[key] = known
        return path[1:-1] in known
