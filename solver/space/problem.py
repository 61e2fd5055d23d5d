"""The planning problem as arrays: each flow's weight, its leaf pair, and the pair's candidates.

Why a compiled form: every algorithm of the planner (greedy, exact colouring, CP-SAT, the
bounds) asks the same questions thousands of times — which equal-cost paths may this flow take,
what does a path load, how full is a link — and a Python object per path would make a 16k-GPU
plan take minutes. So a :class:`Problem` numbers the distinct *(source leaf, destination leaf)*
pairs of the cross-leaf flows and stores every pair's equal-cost switch paths once, as rows of
one padded integer table (a flow's choice is then a row number within its pair). NIC links are
fixed by the endpoints and carried aside; same-leaf flows have exactly one path and load no
switch-to-switch link; flows without any path (a NIC link down, a pair cut off) are marked.

Candidates come from :mod:`solver.space.candidates` (routing's equal-cost paths, enumerated once per
pair, or filtered from the previous snapshot's table when only links went away) — except on a
3-tier fat-tree, where :mod:`solver.space.treecandidates` computes them on demand from the structure
and the table is never built: consumers read rows through :meth:`Problem.row_paths` and
:meth:`Problem.candidates`, and the whole-table questions (component labels, the bounds'
families, matching a previous path) have structural answers there. Row ``offset[p] + k`` is
candidate ``k`` of pair ``p`` either way, in routing's order.

Utilization is :mod:`solver.yardstick.evaluate`'s: ``load * reference / capacity`` on
switch-to-switch resources, the reference being the most common NIC speed, where a flow's load is
its *weight* (rate x job priority; with every priority 1 the figures equal
:func:`solver.yardstick.evaluate.evaluate`'s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from solver.errors import PlanError
from solver.space.candidates import Candidates, filtered_table
from solver.space.labels import (
    TwoHopGroups,
    pair_entries,
    resource_labels,
    two_hop_graph,
    two_hop_groups,
)
from solver.space.labels import propagate as propagate
from solver.space.tabulate import SAME_LEAF as SAME_LEAF
from solver.space.tabulate import UNREACHABLE as UNREACHABLE
from solver.space.tabulate import _endpoints, _flow_problems, _tabulate
from solver.space.treecandidates import TreeCandidates, TreeLayout, lazy_candidates
from solver.workload.flows import Flow
from solver.yardstick.evaluate import reference_line_rate, switch_resources
from topology.arrays import distinct
from topology.index import BoolArray, FabricIndex, FloatArray, IntArray
from topology.model import Fabric

PAIR_CACHE = 4096
"""Pairs whose lazily built candidates a :class:`Problem` keeps (a cross-pod pair of a 4k- or
16k-GPU fat-tree: 32 KiB, so 128 MiB at most)."""

TOLERANCE = 1e-9
"""Relative tolerance when comparing utilizations (sums of floats)."""


@dataclass(frozen=True)
class Objective:
    """The planner's objective values for one assignment (see :mod:`solver.planner`)."""

    max_utilization: float
    links_at_max: int
    sum_squares: float
    moved: int = 0

    def key(self) -> tuple[float, int]:
        """Lexicographic comparison key of the assignment-quality part (not ``moved``)."""
        return (round_util(self.max_utilization), self.links_at_max)


def round_util(value: float) -> float:
    """Utilization rounded so that float noise does not decide a comparison."""
    return round(value, 9)


@dataclass(frozen=True, eq=False)
class Problem:
    """Flows, their candidate paths and the fabric's capacities, as arrays (see module doc).

    ``table[offset[p] + k, :hops[p]]`` is candidate ``k`` of pair ``p`` (switch resources);
    unused columns hold the pad resource ``index.num_resources``, whose scale is 0. The table
    is ``dense`` (enumerated) or computed on demand by ``tree``; :attr:`table` builds the whole
    of a lazy one, which hot paths never ask for (they use :meth:`row_paths`).
    """

    fabric: Fabric
    flows: tuple[Flow, ...]
    ids: tuple[str, ...]
    weight: FloatArray
    nic_up: IntArray
    nic_down: IntArray
    pair: IntArray
    pair_leaves: IntArray
    offset: IntArray
    dense: IntArray | None
    tree: TreeCandidates | None
    hops: IntArray
    scale: FloatArray
    reference: float
    inner: IntArray
    two_tier: bool

    @property
    def index(self) -> FabricIndex:
        return self.fabric.index

    @property
    def num_flows(self) -> int:
        return len(self.flows)

    @property
    def num_pairs(self) -> int:
        return len(self.pair_leaves)

    @property
    def pad(self) -> int:
        return self.fabric.index.num_resources

    @cached_property
    def table(self) -> IntArray:
        """Every candidate row (built in full for a lazy table: small cases and tests only)."""
        if self.dense is not None:
            return self.dense
        assert self.tree is not None
        return self.tree.table()

    @property
    def width(self) -> int:
        """Columns of a row: the most hops of any pair."""
        if self.dense is not None:
            return int(self.dense.shape[1])
        assert self.tree is not None
        return self.tree.width

    def row_paths(self, rows: IntArray) -> IntArray:
        """The table's rows ``rows`` (``width`` wide), without building a lazy table."""
        if self.dense is not None:
            return self.dense[rows]
        assert self.tree is not None
        return self.tree.rows(rows)

    def candidates(self, pair: int) -> IntArray:
        """Every candidate of ``pair`` (``width`` wide); a lazy table's are kept for the pairs
        asked about, up to :data:`PAIR_CACHE` of them (a repair asks about a few thousand
        pairs again and again)."""
        if self.dense is not None:
            return self.dense[self.offset[pair] : self.offset[pair + 1]]
        assert self.tree is not None
        cache = self._pairs
        rows = cache.get(pair)
        if rows is None:
            if len(cache) >= PAIR_CACHE:
                cache.clear()
            rows = cache[pair] = self.tree.pair(pair)
        return rows

    def row(self, pair: int, k: int) -> IntArray:
        """Candidate ``k`` of ``pair``."""
        if self.dense is not None:
            row: IntArray = self.dense[self.offset[pair] + k]
            return row
        found: IntArray = self.candidates(pair)[k]
        return found

    @cached_property
    def _pairs(self) -> dict[int, IntArray]:
        return {}

    def num_candidates(self, pairs: IntArray | None = None) -> IntArray:
        counts = np.diff(self.offset)
        return counts if pairs is None else counts[pairs]

    @property
    def candidate_table(self) -> Candidates | TreeLayout:
        """What the next re-plan may reuse: the enumerated table, or a fat-tree's layout."""
        if self.tree is not None:
            return self.tree.layout
        return Candidates(self.fabric, self.pair_leaves, self.offset, self.table, self.hops)

    @cached_property
    def cross(self) -> IntArray:
        """Flows that cross a spine (the ones a plan chooses for), in flow order."""
        return np.flatnonzero(self.pair >= 0)

    @cached_property
    def row_keys(self) -> tuple[IntArray, IntArray]:
        """Sorted keys ``(pair, first hop, second hop)`` of every candidate row, and the rows.

        Finds which candidate a given switch path is (see :mod:`solver.space.incremental`).
        """
        base = self.pad + 1
        table = self.table  # only asked of dense tables (a tree matches by structure)
        second = table[:, 1] if table.shape[1] > 1 else np.full(len(table), self.pad)
        row_pair = np.repeat(np.arange(self.num_pairs), self.num_candidates())
        keys = (row_pair * base + table[:, 0]) * base + second
        order = np.argsort(keys, kind="stable")
        return keys[order], order

    @cached_property
    def lightest_scale(self) -> FloatArray:
        """Per pair: the least, over its candidates, of the largest scale along the path."""
        if not self.num_pairs:
            return np.zeros(0)
        inner = self.scale[self.inner]
        if inner.size and inner.min() == inner.max() and np.all(self.num_candidates() > 0):
            # One link speed: every path peaks at that scale (no pass over a 3-tier table).
            return np.full(self.num_pairs, float(inner[0]))
        peak = self.scale[self.table].max(axis=1)  # several speeds: never a fat-tree
        return np.minimum.reduceat(peak, self.offset[:-1])

    # -- loads and objective -------------------------------------------------------------------

    def rows(self, flows: IntArray, choice: IntArray) -> IntArray:
        """Table rows of ``flows`` (cross-leaf) given their choices (candidate numbers)."""
        return self.offset[self.pair[flows]] + choice

    def loads(self, flows: IntArray, choice: IntArray) -> FloatArray:
        """Load per resource (plus the pad) of ``flows`` on their chosen candidates."""
        rows = self.row_paths(self.rows(flows, choice))
        weights = np.repeat(self.weight[flows], rows.shape[1])
        return np.bincount(rows.ravel(), weights=weights, minlength=self.pad + 1).astype(np.float64)

    def measure(
        self, load: FloatArray, moved: int = 0, resources: IntArray | None = None
    ) -> Objective:
        """Objective values of a load vector over switch-to-switch resources (or ``resources``,
        a subset holding every loaded one, e.g. a component's: the same values, faster)."""
        inner = self.inner if resources is None else resources
        util = load[inner] * self.scale[inner]
        peak = float(util.max(initial=0.0))
        at_max = int(np.count_nonzero(util >= peak * (1 - TOLERANCE))) if peak > 0 else 0
        # Not np.dot: that is BLAS, whose threads then spun on the second core after every call
        # (a 3-tier 4,096-GPU re-plan: 0.23 s CPU for 0.12 s wall; now equal, and faster).
        return Objective(peak, at_max, float(np.square(util).sum()), moved)

    def path_loads(self, paths: Sequence[Sequence[int]]) -> FloatArray:
        """Load per resource (plus the pad) of whole paths (NIC links included), one per flow."""
        load = np.zeros(self.pad + 1)
        lengths = np.fromiter((len(p) for p in paths), np.int64, count=len(paths))
        if lengths.sum():
            flat = np.fromiter((r for p in paths for r in p), np.int64, count=int(lengths.sum()))
            np.add.at(load, flat, np.repeat(self.weight, lengths))
        return load

    # -- paths -------------------------------------------------------------------------------

    def paths(
        self,
        choice: IntArray,
        kept: tuple[Sequence[tuple[int, ...]], BoolArray] | None = None,
    ) -> tuple[tuple[int, ...], ...]:
        """Whole paths (NIC links included) for a choice per flow (``-1`` where not cross;
        a cross-leaf flow with ``-1`` gets ``()``). ``kept``: paths known to be the flows'
        choices already (a previous plan's, aligned) and which of them are; those are reused
        rather than built again (a re-plan at 16k GPUs keeps almost all of 32k tuples)."""
        out: list[tuple[int, ...]] = [()] * self.num_flows
        todo = np.ones(self.num_flows, dtype=bool)
        if kept is not None:
            out = list(kept[0])
            todo = ~kept[1]
            for f in np.flatnonzero(todo).tolist():
                out[f] = ()
        same = np.flatnonzero((self.pair == SAME_LEAF) & todo)
        for f, up, down in zip(
            same.tolist(), self.nic_up[same].tolist(), self.nic_down[same].tolist(), strict=True
        ):
            out[f] = (up, down)
        cross = self.cross
        cross = cross[(choice[cross] >= 0) & todo[cross]]  # without a choice: no path
        if cross.size:
            rows = self.row_paths(self.rows(cross, choice[cross]))
            hops = self.hops[self.pair[cross]]
            for length in distinct(hops).tolist():
                sel = hops == length
                body = np.column_stack(
                    [
                        self.nic_up[cross[sel]],
                        rows[sel, :length],
                        self.nic_down[cross[sel]],
                    ]
                )
                for f, path in zip(cross[sel].tolist(), body.tolist(), strict=True):
                    out[f] = tuple(path)
        return tuple(out)

    # -- independent sub-problems ----------------------------------------------------------

    @cached_property
    def label(self) -> IntArray:
        """Component of each pair: pairs whose candidates share no resource, transitively,
        are in different components; numbered densely in order of their first pair.

        Planes of a dual-plane fabric, rails of rail-aligned rings: what one component does
        cannot change what another can reach, so each is solved on its own.
        """
        n = self.num_pairs
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        label = self._owner_label
        return np.unique(label[:n], return_inverse=True)[1].ravel()

    @cached_property
    def _owner_label(self) -> IntArray:
        """Label propagation over the pair-resource graph: each owner of :attr:`_graph` gets
        the least owner it is joined to (:func:`propagate`)."""
        return propagate(*self._graph)

    @cached_property
    def _graph(self) -> tuple[IntArray, IntArray, int, int]:
        """Entries ``(node, owner)``, the number of owners and of nodes: for a tree, or a
        table of two-hop candidates, a compressed graph with the same components
        (:meth:`TreeCandidates.graph`, :meth:`_two_hop_graph`); else the pairs and their
        resources."""
        if self.tree is not None:
            return self.tree.graph()
        compressed = self._two_hop_graph()
        if compressed is not None:
            return compressed
        res, owner = self._entries
        return res, owner, self.num_pairs, self.pad

    def _two_hop_graph(self) -> tuple[IntArray, IntArray, int, int] | None:
        """The pair-resource graph of a two-tier table, compressed (:func:`two_hop_graph`);
        ``None`` where a pair's candidates are not all two hops."""
        groups = self.two_hop_groups
        if groups is None:
            return None
        return two_hop_graph(groups, self.pad, self.num_pairs)

    @cached_property
    def two_hop_groups(self) -> tuple[TwoHopGroups, TwoHopGroups] | None:
        """Per hop, the groups of pairs with the same links at that hop, for a table whose
        candidates are all two hops (:func:`~solver.space.labels.two_hop_groups`); ``None``
        for any other table, and for a tree's (whose table is never built)."""
        if self.num_pairs == 0 or self.tree is not None:
            return None
        return two_hop_groups(self.table, self.hops, self.offset, self.num_candidates())

    @cached_property
    def _entries(self) -> tuple[IntArray, IntArray]:
        """Every (resource, pair) of the table, pad excluded (:func:`pair_entries`)."""
        return pair_entries(self.num_candidates(), self.table, self.pad)

    @property
    def num_components(self) -> int:
        return int(self.label.max()) + 1 if self.num_pairs else 0

    @cached_property
    def resource_label(self) -> IntArray:
        """Component of each resource (and the pad): ``-1`` where no candidate goes."""
        if not self.num_pairs:
            return np.full(self.pad + 1, -1, dtype=np.int64)
        res, owner, _, _ = self._graph
        return resource_labels(res, owner, self._owner_label, self.pad, self.num_pairs)

    def _split(self, items: IntArray, labels: IntArray) -> list[IntArray]:
        if not self.num_components:
            return []
        order = np.argsort(labels, kind="stable")
        cuts = np.searchsorted(labels[order], np.arange(1, self.num_components))
        return np.split(items[order], cuts)

    def components(self) -> list[IntArray]:
        """Pairs of each component (sorted), in component order."""
        return self._split(np.arange(self.num_pairs), self.label)

    def component_flows(self) -> list[IntArray]:
        """Cross-leaf flows of each component, in flow order."""
        cross = self.cross
        return self._split(cross, self.label[self.pair[cross]])

    def component_resources(self) -> list[IntArray]:
        """Resources each component's candidates cross (sorted)."""
        used = np.flatnonzero(self.resource_label[:-1] >= 0)
        return self._split(used, self.resource_label[used])

    def peaks(self, load: FloatArray) -> FloatArray:
        """Max utilization of each component under ``load``."""
        out = np.zeros(self.num_components)
        used = np.flatnonzero(self.resource_label[:-1] >= 0)
        np.maximum.at(out, self.resource_label[used], load[used] * self.scale[used])
        return out


def build_problem(
    fabric: Fabric,
    flows: Sequence[Flow],
    weight: FloatArray,
    reuse: Candidates | TreeLayout | None = None,
    *,
    lazy: bool = True,
) -> Problem:
    """Compile flows on a snapshot; raises :class:`PlanError` for unknown or repeated flows.

    ``reuse`` is an earlier snapshot's table, used where :meth:`Candidates.reusable_on` allows,
    or a fat-tree layout (its cabling analysed once). ``lazy=False`` enumerates a fat-tree's
    candidates as any fabric's (the tests compare the two).
    """
    index = fabric.index
    n = len(flows)
    ids, unique, src, dst = _endpoints(flows, index.node_of)
    if not unique or np.any(src < index.num_switches) or np.any(dst < index.num_switches):
        raise PlanError(_flow_problems(fabric, flows, ids))
    up = np.full(n, -1, dtype=np.int64)
    down = np.full(n, -1, dtype=np.int64)
    nic = np.array([rs[0] if len(rs) == 1 else -1 for rs in index.out_resources], dtype=np.int64)
    if n:
        up, down = nic[src], nic[dst]
        down = np.where(down >= 0, down ^ 1, -1)
    ok = (up >= 0) & (down >= 0) & (src != dst)
    ok[ok] = index.res_usable[up[ok]] & index.res_usable[down[ok]]
    src_leaf = np.where(ok, index.res_dst[np.maximum(up, 0)], -1)
    dst_leaf = np.where(ok, index.res_src[np.maximum(down, 0)], -1)
    pair = np.where(ok, SAME_LEAF, UNREACHABLE).astype(np.int64)
    cross = ok & (src_leaf != dst_leaf)
    stride = index.num_nodes
    codes, inverse = np.unique(src_leaf[cross] * stride + dst_leaf[cross], return_inverse=True)
    keys = np.column_stack(np.divmod(codes, stride)).reshape(-1, 2).astype(np.int64)
    two_tier = bool(np.all(np.isin(index.tier[: index.num_switches], (1, 2))))
    tree: TreeCandidates | None = None
    table: IntArray | None = None
    layout = None
    if lazy and not two_tier:
        if isinstance(reuse, TreeLayout) and reuse.reusable_on(fabric):
            layout = reuse
        else:
            found = TreeLayout.of(fabric)
            layout = found if isinstance(found, TreeLayout) else None
    if isinstance(reuse, TreeLayout):
        reuse = None
    fast = None if layout is not None else filtered_table(index, keys, reuse)
    if layout is not None and (lazy_tree := lazy_candidates(layout, index, keys)) is not None:
        tree, alive = lazy_tree
        renumber = np.cumsum(alive) - 1
        pair[cross] = np.where(alive[inverse.ravel()], renumber[inverse.ravel()], UNREACHABLE)
        offset, hops = tree.offset, tree.hops
    elif fast is not None:
        counts, hops, table = fast
        pair[cross] = inverse.ravel()
        alive = np.ones(len(keys), dtype=bool)
        width = int(hops.max(initial=0))
        table = np.ascontiguousarray(table[:, :width])
        offset = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(counts, out=offset[1:])
    else:
        pair, table, offset, hops, alive = _tabulate(index, keys, inverse, pair, cross, two_tier,
                                                     reuse)  # fmt: skip
    reference = reference_line_rate(fabric)
    scale = np.zeros(index.num_resources + 1)
    scale[:-1] = reference / index.res_capacity
    return Problem(
        fabric=fabric,
        flows=tuple(flows),
        ids=ids,
        weight=np.asarray(weight, dtype=np.float64),
        nic_up=up,
        nic_down=down,
        pair=pair,
        pair_leaves=keys[alive],
        offset=offset,
        dense=table,
        tree=tree,
        hops=hops,
        scale=scale,
        reference=reference,
        inner=switch_resources(fabric),
        two_tier=two_tier,
    )
