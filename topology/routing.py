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
from typing import Any

import numpy as np
import numpy.typing as npt

from topology.arrays import BoolArray, IntArray, spans
from topology.distances import Step, distance_type
from topology.errors import PathError, UnreachableError
from topology.leafrows import class_pass
from topology.switchgraph import SwitchGraph

UNREACHABLE = np.iinfo(np.int64).max // 4
"""Distance of a switch that cannot reach the destination (large, and safe to add 1 to)."""

LOOKUP_FROM = 0.5
"""The share of a step's keys one hop from their leaf from which :meth:`Routing.groups_many`
looks those up (see :meth:`Routing._groups_split`)."""

GROUP_CELLS = 1 << 18
"""Keys x members that :meth:`Routing.groups_many` looks at in one slice (bounds its
temporaries to a few MB each, whatever the switches' degrees)."""


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

    def __init__(self, index: SwitchGraph) -> None:
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
        # Per switch, its switch-to-switch resources in member order (NIC links never transit);
        # the mask read as a list (a numpy element per resource was 10 ms at 16k GPUs).
        transit: list[bool] = between_switches.tolist()
        self._out = [
            np.asarray([r for r in rs if transit[r]], dtype=np.int64)
            for rs in index.out_resources[: index.num_switches]
        ]
        self._tables: dict[int, DestinationTable] = {}
        self._narrow: dict[int, tuple[npt.NDArray[Any], npt.NDArray[Any], int, int]] = {}
        self._paths: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
        self._path_sets: dict[tuple[int, int], frozenset[tuple[int, ...]]] = {}

    # -- per-destination tables -------------------------------------------------------------

    @cached_property
    def _tier_steps(self) -> tuple[list[Step], list[Step]]:
        """Each tier's resources grouped by source switch, for :meth:`table`.

        Within a tier the order of updates does not matter (every resource leads to a tier
        whose distances are already final), so a minimum per source switch over its sorted
        resources (``minimum.reduceat``) gives what ``minimum.at`` over the tier gave, at a
        fraction of the cost (``table`` runs once per destination leaf: 512 times at 16k GPUs).
        """
        src, dst = self.index.res_src, self.index.res_dst
        steps: tuple[list[Step], list[Step]] = ([], [])
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
        narrow = self._narrow.get(leaf)
        if narrow is not None:  # computed by narrow_rows: its column, widened
            rows_down, rows_up, column, far = narrow
            down, up = (r[column].astype(np.int64) for r in (rows_down, rows_up))
            for dist in (down, up):
                dist[dist >= far] = UNREACHABLE
            table = DestinationTable(leaf=leaf, down_dist=down, up_dist=up)
            self._tables[leaf] = table
            return table
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

    def _pass(self, leaves: list[int]) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
        """:func:`topology.leafrows.class_pass` (the distance pass, once per class) here."""
        ends, goes = (self.index.res_src, self.index.res_dst), (self._down, self._up)
        return class_pass(self._tier_steps, self.index.num_switches, leaves, ends, goes)

    def narrow_rows(self, leaves: IntArray) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
        """:meth:`distance_rows` in the pass's own narrow integers, with its sentinel (a
        distance at or above it is unreachable; give it to :meth:`groups_many`).

        Why: the ECMP baseline at 131k GPUs needs all 4,096 leaves, and their rows as 64-bit
        integers were 600 MB and 3.8 s to convert and cache as tables; as bytes they are
        75 MB. The tables of these leaves are made from these rows when first asked for."""
        wanted = leaves.tolist()
        distinct = list(dict.fromkeys(wanted))
        if not distinct:
            dtype, far = distance_type(0)
            empty = np.zeros((0, self.index.num_switches), dtype=dtype)
            return empty, empty, far
        down, up, far = self._pass(distinct)
        for column, leaf in enumerate(distinct):
            self._narrow.setdefault(leaf, (down, up, column, far))
        if distinct != wanted:
            position = {leaf: i for i, leaf in enumerate(distinct)}
            picked = np.asarray([position[leaf] for leaf in wanted], dtype=np.int64)
            down, up = down[picked], up[picked]
        return down, up, far

    def distance_rows(self, leaves: IntArray) -> tuple[IntArray, IntArray]:
        """``down_dist`` and ``up_dist`` toward each of ``leaves``, one row per leaf, for
        :meth:`groups_many`.

        Leaves without a cached table get theirs from one pass over all of them at once (the
        same per-tier minima as :meth:`table`, on a leaves x switches matrix): the ECMP
        baseline at 16k GPUs needs all 512 leaves, and 512 separate passes were a tenth of a
        second of small numpy calls. The rows are cached as tables like :meth:`table`'s."""
        wanted = leaves.tolist()
        missing = [leaf for leaf in dict.fromkeys(wanted) if leaf not in self._tables]
        if len(missing) > 1:
            narrow_down, narrow_up, far = self._pass(missing)
            down_rows, up_rows = (d.astype(np.int64) for d in (narrow_down, narrow_up))
            for rows in (down_rows, up_rows):
                rows[rows >= far] = UNREACHABLE
            for i, leaf in enumerate(missing):
                self._tables[leaf] = DestinationTable(
                    leaf=leaf, down_dist=down_rows[i], up_dist=up_rows[i]
                )
            if missing == wanted:  # the usual first call: the rows as computed
                return down_rows, up_rows
        tables = [self.table(leaf) for leaf in wanted]
        width = self.index.num_switches
        if not tables:
            empty = np.zeros((0, width), dtype=np.int64)
            return empty, empty
        return (
            np.stack([t.down_dist for t in tables]),
            np.stack([t.up_dist for t in tables]),
        )

    @cached_property
    def _padded(self) -> tuple[IntArray, IntArray, IntArray, BoolArray, BoolArray]:
        """Per switch, its switch-to-switch resources in member order, one row each, padded
        with -1 to the largest such degree; beside them each switch's degree, and per cell
        the resource's far end (0 for padding) and whether it is a usable link down or up
        (false for padding): what :meth:`groups_many` gathers from."""
        degree = np.asarray([len(out) for out in self._out], dtype=np.int64)
        width = max(int(degree.max(initial=0)), 1)
        out = np.full((len(self._out), width), -1, dtype=np.int64)
        for switch, resources in enumerate(self._out):
            out[switch, : len(resources)] = resources
        real = out >= 0
        res = np.where(real, out, 0)
        return out, degree, self.index.res_dst[res], self._down[res] & real, self._up[res] & real

    def groups_many(
        self,
        switches: IntArray,
        down: IntArray,
        up: IntArray,
        rows: IntArray,
        descending: BoolArray,
        unreachable: int = UNREACHABLE,
        leaves: IntArray | None = None,
    ) -> tuple[IntArray, IntArray, IntArray]:
        """:meth:`next_hops` of many (switch, destination, phase) keys at once, with numpy.

        Key ``i``'s group is that of ``switches[i]`` toward the leaf of distance row
        ``rows[i]`` (of :meth:`distance_rows`) in phase ``descending[i]``; the result is every
        group's members one after the other, in key order and hash order within a group,
        with each group's start in it and its size (``members[starts[i] : starts[i] +
        sizes[i]]`` is ``next_hops(...)`` of key ``i``). Why: the ECMP baseline of a shuffled
        ring at 16k GPUs meets some 26,000 distinct groups; asking :meth:`next_hops` for each
        cost a second, and one call per switch (2,560 of them on a fat-tree) still a third
        of one. This is one call per forwarding step. ``unreachable``: the distance from
        which a switch cannot reach the leaf (:meth:`narrow_rows`' sentinel for its rows).

        ``leaves`` (the leaf of each distance row), when given, lets a key one hop from its
        leaf skip the scan of every member: distance 0 is the leaf's alone, so that group is
        the switch's links to the leaf (down-going ones once descending), found by a lookup
        (:meth:`_last_hops`). A 2-tier spine at 131k GPUs has 4,096 links, and scanning them
        for its one member was most of the ECMP baseline there.
        """
        if leaves is not None and len(switches):
            return self._groups_split(switches, down, up, rows, descending, unreachable, leaves)
        degree = self._padded[1]
        width = int(degree[switches].max(initial=0))  # only as wide as these switches need
        # In slices of at most GROUP_CELLS keys x members: a 2-tier spine has 512 members, and
        # a shuffled ring's 16k keys at once would be 8M cells per temporary.
        step = max(1, GROUP_CELLS // max(width, 1))
        found = [
            self._groups_slice(
                switches[k : k + step],
                down,
                up,
                rows[k : k + step],
                descending[k : k + step],
                width,
                unreachable,
            )  # fmt: skip
            for k in range(0, len(switches), step)
        ]
        if not found:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        members = np.concatenate([m for m, _ in found])
        sizes = np.concatenate([n for _, n in found])
        starts = np.cumsum(sizes) - sizes
        return members, starts, sizes

    @cached_property
    def _last_hops(self) -> tuple[IntArray, IntArray, BoolArray]:
        """Every switch-to-switch member cell that goes up or down, keyed ``switch *
        num_switches + far end`` and sorted by key (member order kept within a key): its
        resource, and whether it goes down."""
        padded, _, far_end, goes_down, goes_up = self._padded
        real = goes_down | goes_up
        at = np.nonzero(real)[0]
        keys = at * self.index.num_switches + far_end[real]
        order = np.argsort(keys, kind="stable")
        return keys[order], padded[real][order], goes_down[real][order]

    def _groups_split(
        self,
        switches: IntArray,
        down: IntArray,
        up: IntArray,
        rows: IntArray,
        descending: BoolArray,
        unreachable: int,
        leaves: IntArray,
    ) -> tuple[IntArray, IntArray, IntArray]:
        """:meth:`groups_many` with the keys one hop from their leaf found by lookup, the
        rest by the scan; the result put together in key order."""
        here = np.where(descending, down[rows, switches], up[rows, switches])
        last = here == 1
        if int(np.count_nonzero(last)) < LOOKUP_FROM * len(switches):
            # Mostly keys further away (a fat-tree's step at the aggs, where a few flows turn
            # down inside their pod): putting two parts together costs more than it saves.
            return self.groups_many(switches, down, up, rows, descending, unreachable)
        rest = np.flatnonzero(~last)
        sizes = np.zeros(len(switches), dtype=np.int64)
        parts: list[tuple[IntArray, IntArray, IntArray]] = []  # keys, their sizes, members
        if rest.size:
            members, _, found = self.groups_many(
                switches[rest], down, up, rows[rest], descending[rest], unreachable
            )
            parts.append((rest, found, members))
        near = np.flatnonzero(last)
        if near.size:
            keys, resources, goes_down = self._last_hops
            wanted = switches[near] * self.index.num_switches + leaves[rows[near]]
            first = np.searchsorted(keys, wanted, side="left")
            count = np.searchsorted(keys, wanted, side="right") - first
            cells = spans(first, count)
            owner = np.repeat(np.arange(near.size), count)
            keep = goes_down[cells] | ~descending[near][owner]
            found = np.bincount(owner[keep], minlength=near.size).astype(np.int64)
            parts.append((near, found, resources[cells[keep]]))
        if len(parts) == 1:  # every key one hop away: already in key order
            _, found, members = parts[0]
            return members, np.cumsum(found) - found, found
        for keys_of, found, _ in parts:
            sizes[keys_of] = found
        starts = np.cumsum(sizes) - sizes
        members_all = np.empty(int(sizes.sum()), dtype=np.int64)
        for keys_of, found, members in parts:
            members_all[spans(starts[keys_of], found)] = members
        return members_all, starts, sizes

    def _groups_slice(
        self,
        switches: IntArray,
        down: IntArray,
        up: IntArray,
        rows: IntArray,
        descending: BoolArray,
        width: int,
        unreachable: int,
    ) -> tuple[IntArray, IntArray]:
        """:meth:`groups_many` for some keys: their members one after the other, and sizes."""
        padded, _, far_end, goes_down, goes_up = self._padded
        out = padded[switches, :width]
        mask = np.zeros(out.shape, dtype=np.bool_)
        # The rules of next_hops: once descending, down along down_dist only; while climbing,
        # along the shortest valley-free distance, up or down. Each key only in its phase.
        for phase in (True, False):
            keys = np.flatnonzero(descending == phase)
            if not keys.size:
                continue
            whole = keys.size == len(switches)
            at, row = (switches, rows) if whole else (switches[keys], rows[keys])
            nxt, column = far_end[at, :width], row[:, None]
            if phase:
                here = down[row, at].astype(np.int64)  # narrow rows: no wrap below 0
                hit = goes_down[at, :width] & (down[column, nxt] == (here - 1)[:, None])
            else:
                here = up[row, at].astype(np.int64)
                target = (here - 1)[:, None]
                hit = (goes_down[at, :width] & (down[column, nxt] == target)) | (
                    goes_up[at, :width] & (up[column, nxt] == target)
                )
            hit &= (here < unreachable)[:, None]
            if whole:
                mask = hit
            else:
                mask[keys] = hit
        return out[mask], np.count_nonzero(mask, axis=1)  # row by row, in member order

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
