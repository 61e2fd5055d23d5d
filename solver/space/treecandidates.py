"""A 3-tier fat-tree's candidate paths, computed on demand from its structure (never listed).

Why: a cross-pod leaf pair of a fat-tree has ``A x G`` equal-cost paths (1,024 at 4,096 GPUs), so
enumerating every pair's paths makes millions of rows, and every pass over them (bounds,
component labels, matching a previous plan, filtering after a failure) costs a large part of a
second. But the paths are a product: a cross-pod pair ``(u, v)`` takes agg index ``j`` and core
``g`` of group ``j``, ``up[u,j] -> agg_up[pu,j,g] -> agg_down[pv,j,g] -> down[v,j]``; an
intra-pod pair takes ``up[u,j] -> down[v,j]`` (:class:`solver.exact.fattree.FatTreeShape`).

**Which paths, in which order.** On any snapshot of the cabling (links down or drained anywhere)
routing's equal-cost paths of a pair are exactly the ``(j, g)`` whose four links are usable, as
long as one is: a core reaches leaf ``v`` going down only through ``agg (pv, j)`` and
``down[v,j]``, an agg climbs only to the cores of its group, and valley-free paths never go
up again, so a cross-pod path always has four hops and an intra-pod one two (a core would bring
a packet back to the same agg). Routing lists them in member order: the leaf's uplinks in its
interface order, then the agg's core links in the agg's; :class:`TreeLayout` keeps both orders.
A pair left without such a path has none at all; :func:`solver.space.problem.build_problem` still
asks routing's general enumeration about such pairs and falls back to the enumerated table if
it ever disagreed.

**What is stored** is per pair and agg position (``pairs x A`` counts) and per pod pair, agg
and core (which cores are usable both ways): row ``offset[p] + k`` of the problem maps to its
``(j, g)`` by arithmetic, so a consumer materializes only the rows it touches. Whole-table
questions have structural answers here: the resources a family of pairs reaches at a hop
(:meth:`TreeCandidates.hop_entries`: pairs of one pod pair and one set of usable aggs reach the
same cores) and the pair-resource graph behind the component labels
(:meth:`TreeCandidates.graph`: a pair joins its leaf links and one node per pod pair and agg,
that node the core links). The layout depends on the cabling only, so a re-plan on another
snapshot of the same fabric (a failure, a drain, a restore) reuses it: no pass over links.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from solver.exact import fattree
from solver.space.candidates import pair_candidates, same_wiring
from topology.arrays import distinct
from topology.index import BoolArray, FabricIndex, IntArray
from topology.model import Fabric

__all__ = ["TreeCandidates", "TreeLayout", "lazy_candidates"]

RECENT_ROWS = 2
"""How many of :meth:`TreeCandidates.rows`' answers are kept (a greedy and a c4p plan)."""


@dataclass(frozen=True, eq=False)
class TreeLayout:
    """The fat-tree shape of a fabric's cabling (every link taken as up) and routing's member
    orders over it: what every snapshot of the same cabling shares."""

    fabric: Fabric
    shape: fattree.FatTreeShape
    jorder: IntArray
    """``jorder[leaf, t]``: the agg index ``j`` of the leaf's ``t``-th uplink in member order."""
    jpos: IntArray
    """``jpos[leaf, j]``: the position of agg ``j`` in ``jorder[leaf]``."""
    gorder: IntArray
    """``gorder[pod, j, s]``: the core ``g`` of agg ``(pod, j)``'s ``s``-th core link."""

    @classmethod
    def of(cls, fabric: Fabric) -> TreeLayout | str:
        """The layout, or why the cabling is not a fat-tree (see :func:`fattree.analyse`)."""
        shape = fattree.analyse(fabric, ignore_status=True)
        if isinstance(shape, str):
            return shape
        index = fabric.index
        slot = np.zeros(index.num_resources, dtype=np.int64)
        for node in range(index.num_switches):
            members = np.asarray(index.out_resources[node], dtype=np.int64)
            slot[members] = np.arange(len(members))
        leaves = np.flatnonzero(shape.is_leaf)
        jorder = np.zeros_like(shape.up)
        jorder[leaves] = np.argsort(slot[shape.up[leaves]], axis=1, kind="stable")
        jpos = np.zeros_like(shape.up)
        jpos[leaves] = np.argsort(jorder[leaves], axis=1, kind="stable")
        gorder = np.argsort(slot[shape.agg_up], axis=2, kind="stable")
        return cls(fabric, shape, jorder, jpos, gorder)

    def reusable_on(self, fabric: Fabric) -> bool:
        """True when ``fabric`` is a snapshot of the same cabling (statuses may differ)."""
        return same_wiring(self.fabric, fabric)

    def intact_status(self, fabric: Fabric) -> fattree.FatTreeShape | str:
        """:func:`fattree.analyse` of a snapshot of this cabling, without a pass over links:
        the shape when every switch link is up, else which link is not."""
        index = fabric.index
        n = index.num_switches
        inner = np.flatnonzero((index.res_src < n) & (index.res_dst < n) & ~index.res_usable)
        if not inner.size:
            return self.shape
        link = fabric.links[int(inner[0]) // 2]
        return f"link {link.id} is {link.status.value}"


@dataclass(frozen=True, eq=False)
class TreeCandidates:
    """The candidates of some leaf pairs on one snapshot, by arithmetic (see module doc)."""

    layout: TreeLayout
    pad: int
    u: IntArray
    v: IntArray
    far: BoolArray
    """Per pair: the leaves are in different pods (four hops, else two)."""
    pp: IntArray
    """Per pair: its pod pair's row in ``pod_pairs``."""
    pod_pairs: IntArray
    """``(source pod, destination pod)`` of every pod pair the pairs span."""
    jord: IntArray
    """``jord[p, t]``: agg index of pair ``p``'s ``t``-th agg position (the source's order)."""
    count: IntArray
    """``count[p, t]``: candidates of pair ``p`` through its ``t``-th agg position."""
    core_ok: BoolArray
    """``core_ok[q, j, s]``: core ``gorder[source pod, j, s]`` usable up from the source pod
    and down into the destination pod of pod pair ``q``."""
    gnth: IntArray
    """``gnth[q, j, i]``: the ``i``-th usable core of pod pair ``q`` and agg ``j``."""
    grank: IntArray
    """``grank[q, j, g]``: the rank of core ``g`` among the usable ones, ``-1`` if unusable."""

    @property
    def core_usable(self) -> BoolArray:
        """``[q, j, g]``: core ``g`` of group ``j`` usable for pod pair ``q``."""
        usable: BoolArray = self.grank >= 0
        return usable

    @classmethod
    def build(cls, layout: TreeLayout, index: FabricIndex, keys: IntArray) -> TreeCandidates:
        """Candidate counts of the leaf pairs ``keys`` on snapshot ``index``."""
        shape = layout.shape
        ok = np.append(index.res_usable, True)
        u, v = keys[:, 0], keys[:, 1]
        pu, pv = shape.pod[u], shape.pod[v]
        codes, pp = np.unique(pu * shape.pods + pv, return_inverse=True)
        pp = pp.ravel()
        pod_pairs = np.column_stack(np.divmod(codes, shape.pods)).reshape(-1, 2)
        jord = layout.jorder[u]
        leaf_ok = ok[shape.up[u[:, None], jord]] & ok[shape.down[v[:, None], jord]]
        core_ok, gnth, grank = _core_tables(layout, ok, pod_pairs)
        cores = core_ok.sum(axis=2)
        far = pu != pv
        count = np.where(far[:, None], leaf_ok * cores[pp[:, None], jord], leaf_ok)
        return cls(layout, index.num_resources, u, v, far, pp, pod_pairs, jord,
                   count.astype(np.int64), core_ok, gnth, grank)  # fmt: skip

    @property
    def num_pairs(self) -> int:
        return len(self.u)

    @property
    def hops(self) -> IntArray:
        return np.where(self.far, 4, 2).astype(np.int64)

    @property
    def width(self) -> int:
        return 4 if self.far.any() else (2 if self.num_pairs else 0)

    def counts(self) -> IntArray:
        total: IntArray = self.count.sum(axis=1)
        return total

    @cached_property
    def offset(self) -> IntArray:
        """``offset[p]``: the first row of pair ``p`` (as
        :class:`solver.space.problem.Problem`'s)."""
        out = np.zeros(self.num_pairs + 1, dtype=np.int64)
        np.cumsum(self.counts(), out=out[1:])
        return out

    @cached_property
    def _first(self) -> IntArray:
        """``[p, t]``: the first candidate number of pair ``p``'s agg position ``t``."""
        first: IntArray = np.cumsum(self.count, axis=1) - self.count
        return first

    @cached_property
    def _blocks(self) -> IntArray:
        """First row of every (pair, agg position) block, flattened: nondecreasing."""
        blocks: IntArray = (self.offset[:-1, None] + self._first).ravel()
        return blocks

    def subset(self, keep: BoolArray) -> TreeCandidates:
        """The same candidates for the pairs ``keep`` selects (pod-pair tables shared)."""
        return TreeCandidates(self.layout, self.pad, self.u[keep], self.v[keep], self.far[keep],
                              self.pp[keep], self.pod_pairs, self.jord[keep], self.count[keep],
                              self.core_ok, self.gnth, self.grank)  # fmt: skip

    # -- rows --------------------------------------------------------------------------------

    def _paths(self, p: IntArray, t: IntArray, i: IntArray) -> IntArray:
        """Rows (padded to :attr:`width`) of candidates ``i`` within agg position ``t``."""
        shape = self.layout.shape
        j = self.jord[p, t]
        out = np.full((len(p), self.width), self.pad, dtype=np.int64)
        if not len(p):
            return out
        u, v = self.u[p], self.v[p]
        out[:, 0] = shape.up[u, j]
        far = self.far[p]
        near = ~far
        out[near, 1] = shape.down[v[near], j[near]]
        if far.any():
            jf = j[far]
            g = self.gnth[self.pp[p[far]], jf, i[far]]
            pods = self.pod_pairs[self.pp[p[far]]]
            out[far, 1] = shape.agg_up[pods[:, 0], jf, g]
            out[far, 2] = shape.agg_down[pods[:, 1], jf, g]
            out[far, 3] = shape.down[v[far], jf]
        return out

    def rows(self, rows: IntArray) -> IntArray:
        """The candidate rows ``rows`` (``offset[p] + k``), each ``width`` wide, pad after.

        Read-only, and the last :data:`RECENT_ROWS` answers are kept: a plan asks for the
        same rows again and again (its loads for the bound check, the objective, the parts'
        objectives, the paths: 9 calls and 2 distinct answers for a 16k-GPU fat-tree's greedy
        and c4p plans, each a search over some 500,000 blocks)."""
        rows = np.asarray(rows, dtype=np.int64)
        key = (rows.shape, rows.tobytes())
        recent = self._recent
        for known, answer in recent:
            if known == key:
                return answer
        blocks = self._blocks
        b = np.searchsorted(blocks, rows, side="right") - 1
        p, t = np.divmod(b, self.count.shape[1])
        out = self._paths(p, t, rows - blocks[b])
        out.flags.writeable = False
        recent.insert(0, (key, out))
        del recent[RECENT_ROWS:]
        return out

    @cached_property
    def _recent(self) -> list[tuple[tuple[tuple[int, ...], bytes], IntArray]]:
        """:meth:`rows`' last answers by their question, the newest first."""
        return []

    def pair(self, p: int) -> IntArray:
        """Every candidate of pair ``p`` in routing's order."""
        count = self.count[p]
        t = np.repeat(np.arange(len(count)), count)
        first = np.cumsum(count) - count
        i = np.arange(len(t)) - first[t]
        return self._paths(np.full(len(t), p, dtype=np.int64), t, i)

    def table(self) -> IntArray:
        """Every candidate of every pair (what the lazy form avoids: for small cases, tests)."""
        flat = self.count.ravel()
        b = np.repeat(np.arange(len(flat)), flat)
        first = np.cumsum(flat) - flat
        p, t = np.divmod(b, self.count.shape[1])
        return self._paths(p, t, np.arange(len(b)) - first[b])

    def match(self, pair: IntArray, middles: IntArray) -> IntArray:
        """Candidate number of each switch path ``middles`` (padded, ``width`` wide) for its
        pair, or ``-1`` where it is none of the pair's candidates now."""
        shape = self.layout.shape
        out = np.full(len(pair), -1, dtype=np.int64)
        if not len(pair) or middles.shape[1] < 2:
            return out
        first = middles[:, 0]
        inside = (first >= 0) & (first < self.pad)
        j = np.where(inside, shape.choice[np.where(inside, first, 0)], -1)
        j = np.where((j >= 0) & (j < shape.aggs), j, 0)
        second = middles[:, 1]
        core = (second >= 0) & (second < self.pad)
        g = np.where(core, shape.choice[np.where(core, second, 0)], -1)
        g = np.where((g >= 0) & (g < shape.cores_per_group), g, 0)
        u = self.u[pair]
        t = self.layout.jpos[u, j]
        far = self.far[pair]
        rank = np.where(far, self.grank[self.pp[pair], j, g], 0)
        valid = inside & (self.count[pair, t] > 0) & (rank >= 0)
        k = self._first[pair, t]
        expect = self._paths(pair, t, np.maximum(rank, 0))
        width = min(expect.shape[1], middles.shape[1])
        same = np.all(expect[:, :width] == middles[:, :width], axis=1)
        same &= np.all(middles[:, width:] == self.pad, axis=1)
        found = valid & same
        out[found] = (k + rank)[found]
        return out

    # -- whole-table questions, answered from the structure ---------------------------------

    @cached_property
    def _aggs(self) -> BoolArray:
        """``[p, j]``: pair ``p`` has a candidate through agg ``j`` (by agg index, not order)."""
        used = np.zeros(self.count.shape, dtype=bool)
        np.put_along_axis(used, self.jord, self.count > 0, axis=1)
        return used

    def _groups(self, sel: IntArray, ids: IntArray) -> tuple[IntArray, IntArray, BoolArray]:
        """Pairs of ``sel`` grouped by ``ids`` and their set of usable aggs: each group's first
        pair, every pair's group, and the groups' agg sets (``[group, j]``)."""
        used = self._aggs[sel]
        first, inverse = _classes(np.asarray(ids).reshape(len(sel), -1), used)
        return sel[first], inverse, used[first]

    def _leaf_links(self, reps: IntArray, used: BoolArray, down: bool) -> tuple[IntArray, ...]:
        """``(group, resource)`` of the leaf links of each group (source uplinks, or
        destination downlinks with ``down``) through its usable aggs."""
        shape = self.layout.shape
        r, j = np.nonzero(used)
        res = shape.down[self.v[reps[r]], j] if down else shape.up[self.u[reps[r]], j]
        return r, res

    def hop_entries(
        self, sel: IntArray, position: int, code: IntArray
    ) -> tuple[IntArray, IntArray]:
        """``(pair, resource)``: every resource the candidates of pairs ``sel`` (one hop count)
        cross at ``position``, for one pair per family ``code`` and set of usable aggs (at the
        core hops, per pod pair too): all of them reach the same resources there."""
        shape = self.layout.shape
        if not len(sel):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        last = 3 if self.far[sel[0]] else 1
        if position in (0, last):
            reps, _, used = self._groups(sel, code)
            r, res = self._leaf_links(reps, used, position != 0)
            return reps[r], res
        # Per pod pair and agg set the cores are known; a family's are their union.
        reps, _, used = self._groups(sel, np.column_stack([code, self.pp[sel]]))
        reach = used[:, :, None] & self.core_usable[self.pp[reps]]
        families, which = np.unique(code[np.searchsorted(sel, reps)], return_inverse=True)
        # A family's union of its groups' cores: one sort and a reduction over runs
        # (``np.logical_or.at`` was 0.2 s at 131k GPUs, 16k pod pairs x 1,024 cores).
        which = which.ravel()
        by_family = np.argsort(which, kind="stable")
        runs = np.flatnonzero(np.diff(which[by_family], prepend=-1))
        union = np.logical_or.reduceat(reach[by_family], runs, axis=0)
        first = reps[np.unique(which, return_index=True)[1]]
        r, j, g = np.nonzero(union)
        pods = self.pod_pairs[self.pp[first[r]]]
        if position == 1:
            return first[r], shape.agg_up[pods[:, 0], j, g]
        return first[r], shape.agg_down[pods[:, 1], j, g]

    def graph(self) -> tuple[IntArray, IntArray, int, int]:
        """The pair-resource graph of the component labels, compressed: entries ``(node,
        owner)``, the number of owners and of nodes. Owners are the pairs, then groups of
        pairs sharing a source leaf (destination leaf, pod pair) and a set of usable aggs,
        then (pod pair, agg) of cross-pod pairs; nodes are the resources and the pad, then one
        per group and per (pod pair, agg). A pair owns its three groups' nodes; a leaf group
        owns its node and its leaf links, a pod-pair group its node and its (pod pair, agg)
        nodes, and such a node's owner its node and core links. So two pairs are joined
        exactly when their candidates share a resource, transitively, while the graph has a
        few entries per pair rather than a few per candidate."""
        shape = self.layout.shape
        n, aggs = self.num_pairs, shape.aggs
        every = np.arange(n)
        far = np.flatnonzero(self.far)
        sides = [(every, self.u, False), (every, self.v, True), (far, self.pp[far], None)]
        res: list[IntArray] = []
        owner: list[IntArray] = []
        owners = n
        nodes = self.pad + 1 + len(self.pod_pairs) * aggs
        triples: list[IntArray] = []
        for sel, ids, down in sides:
            if not len(sel):
                continue
            reps, inverse, used = self._groups(sel, ids)
            group_owner = owners + np.arange(len(reps))
            group_node = nodes + np.arange(len(reps))
            owners, nodes = owners + len(reps), nodes + len(reps)
            res += [group_node[inverse], group_node]
            owner += [sel, group_owner]
            if down is None:
                r, j = np.nonzero(used)
                triple = self.pp[reps[r]] * aggs + j
                triples.append(triple)
                res.append(self.pad + 1 + triple)
            else:
                r, link = self._leaf_links(reps, used, down)
                res.append(link)
            owner.append(group_owner[r])
        if triples:  # (pod pair, agg) nodes own a group of core links per side
            used_t = distinct(np.concatenate(triples))
            q, jt = np.divmod(used_t, aggs)
            node_owner = owners + np.arange(len(used_t))
            owners += len(used_t)
            res.append(self.pad + 1 + used_t)
            owner.append(node_owner)
            usable = self.core_usable[q, jt]
            for side, links in ((0, shape.agg_up), (1, shape.agg_down)):
                pod = self.pod_pairs[q, side]
                first, inverse = _classes(np.column_stack([pod, jt]), usable)
                group_owner = owners + np.arange(len(first))
                group_node = nodes + np.arange(len(first))
                owners, nodes = owners + len(first), nodes + len(first)
                r, g = np.nonzero(usable[first])
                res += [group_node[inverse], group_node, links[pod[first][r], jt[first][r], g]]
                owner += [node_owner, group_owner, group_owner[r]]
        return np.concatenate(res), np.concatenate(owner), owners, nodes


def _core_tables(
    layout: TreeLayout, ok: BoolArray, pod_pairs: IntArray
) -> tuple[BoolArray, IntArray, IntArray]:
    """:class:`TreeCandidates`' ``core_ok``, ``gnth`` and ``grank`` of ``pod_pairs``.

    Why not one sort of every row: a 131,072-GPU fat-tree has 16,384 pod pairs x 32 aggs x
    32 cores, and sorting, ranking and masking all 16.8 million entries took seconds of every
    plan and re-plan. A pod pair whose source pod has every agg-to-core link up and whose
    destination pod every core-to-agg link has its rows straight from its source pod's core
    order (``gnth`` is ``gorder``, ``grank`` its inverse): per pod, gathered. Only pod pairs
    touching a pod with a link down or drained are masked and sorted as before (a link down:
    255 of 16,384). The tables are the same either way (tested against the sort of every
    row)."""
    shape = layout.shape
    gorder = layout.gorder
    inverse = np.empty_like(gorder)
    np.put_along_axis(inverse, gorder, np.arange(gorder.shape[2])[None, None, :], 2)
    up_ok: BoolArray = np.all(ok[shape.agg_up], axis=(1, 2))  # per pod: every link up usable
    down_ok: BoolArray = np.all(ok[shape.agg_down], axis=(1, 2))
    src, dst = pod_pairs[:, 0], pod_pairs[:, 1]
    core_ok = np.ones((len(pod_pairs),) + gorder.shape[1:], dtype=bool)
    gnth, grank = gorder[src], inverse[src]
    bad = np.flatnonzero(~(up_ok[src] & down_ok[dst]))
    if bad.size:
        go = gnth[bad]
        jj = np.arange(shape.aggs)[None, :, None]
        mask = ok[shape.agg_up[src[bad, None, None], jj, go]]
        mask &= ok[shape.agg_down[dst[bad, None, None], jj, go]]
        order = np.argsort(~mask, axis=2, kind="stable")
        rank = np.full_like(go, -1)
        np.put_along_axis(rank, go, np.where(mask, np.cumsum(mask, axis=2) - 1, -1), 2)
        core_ok[bad], gnth[bad], grank[bad] = mask, np.take_along_axis(go, order, axis=2), rank
    return core_ok, gnth, grank


def lazy_candidates(
    layout: TreeLayout, index: FabricIndex, keys: IntArray
) -> tuple[TreeCandidates, BoolArray] | None:
    """The fat-tree's candidates of ``keys`` on demand, and which pairs have any; ``None`` if
    routing's own enumeration finds a path for a pair the structure leaves without one (it
    cannot on a fat-tree: see the module doc; then the table is enumerated)."""
    tree = TreeCandidates.build(layout, index, keys)
    alive = tree.counts() > 0
    if not alive.all():
        orphans = keys[~alive]
        if any(len(rows) for rows in pair_candidates(index, orphans, False)):
            return None
        tree = tree.subset(alive)
    return tree, alive


def _classes(ids: npt.NDArray[Any], mask: BoolArray) -> tuple[IntArray, IntArray]:
    """Rows grouped by equal ``ids`` row and equal ``mask`` row: each group's first row and
    every row's group."""
    code: IntArray = _dense(ids) * (len(ids) + 1) + _dense(np.packbits(mask, axis=1))
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _dense(rows: npt.NDArray[Any]) -> IntArray:
    """A class number per row of a small-integer matrix, equal exactly for equal rows (one
    integer sort instead of a sort of rows; rows of at most 8 bytes are read as one integer)."""
    if rows.shape[1] == 1:
        return np.unique(rows[:, 0], return_inverse=True)[1].ravel()
    if rows.dtype == np.uint8 and rows.shape[1] <= 8:
        wide = np.zeros((len(rows), 8), dtype=np.uint8)
        wide[:, : rows.shape[1]] = rows
        return np.unique(wide.view(np.uint64).ravel(), return_inverse=True)[1].ravel()
    code = np.zeros(len(rows), dtype=np.int64)
    for column in rows.T:
        values = np.unique(column, return_inverse=True)[1].ravel()
        code = np.unique(code * (int(values.max(initial=0)) + 1) + values, return_inverse=True)[1]
        code = code.ravel()
    return code
