"""Candidate paths: every equal-cost switch path of a leaf pair, as rows of integers.

Why a module: the candidates are the planner's whole search space, and they must be exactly the
paths ECMP can be steered onto — the equal-cost, valley-free paths over usable links that
:class:`topology.routing.Routing` defines — or a plan could name a path no source port reaches.
Enumerating them is also the costliest step of compiling a 3-tier problem (1,024 paths per pair
across pods), so it is done three ways, all giving routing's paths in routing's order:

* **routed**: from routing's next-hop groups, once per (switch, destination leaf) rather than
  once per path: the paths from an aggregation switch through the cores are built once and
  shared by every leaf of its pod (about 5x faster than walking each path);
* **two tiers**: leaf -> spine -> leaf over usable links, so a pair's candidates are the spines
  both leaves reach, in the source leaf's member order — no routing tables at all;
* **filtered**: on a snapshot that only *lost* links (a failure, a drain), a pair's paths are its
  previous ones that avoid the lost links, as long as any remain (a shortest path can only
  lengthen when links go away); pairs left without any are enumerated afresh.

The tests check all three against :meth:`Routing.switch_paths`. A 3-tier fat-tree's candidates
are not enumerated at all: :mod:`solver.space.treecandidates` computes them on demand from the
structure (the enumeration here remains for other 3-tier fabrics, for pairs the structure
leaves without a path, and for the tests that compare the two).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from topology.index import FabricIndex, IntArray, Wiring
from topology.model import Fabric

__all__ = ["Candidates", "filtered_table", "pair_candidates", "same_wiring", "two_tier_table"]


def same_wiring(a: Wiring, b: Wiring) -> bool:
    """True when both snapshots number nodes and resources alike (statuses may differ)."""
    if a is b:
        return True
    ia, ib = a.index, b.index
    return (
        ia.node_names == ib.node_names
        and np.array_equal(ia.res_src, ib.res_src)
        and np.array_equal(ia.res_dst, ib.res_dst)
    )


@dataclass(frozen=True, eq=False)
class Candidates:
    """The candidate table of one snapshot, kept by a plan so that the next re-plan on a
    snapshot that only lost links can filter it instead of enumerating paths again."""

    fabric: Fabric
    pair_leaves: IntArray
    offset: IntArray
    table: IntArray
    hops: IntArray

    def reusable_on(self, fabric: Wiring) -> bool:
        """True when ``fabric`` numbers links alike and no link is usable that was not: then
        each pair's equal-cost paths are its old ones over usable links, if any remain (a
        shortest path can only lengthen when links go away)."""
        if not same_wiring(self.fabric, fabric):
            return False
        old, new = self.fabric.index, fabric.index
        inner = (new.res_src < new.num_switches) & (new.res_dst < new.num_switches)
        return not np.any(inner & new.res_usable & ~old.res_usable)

    @property
    def num_pairs(self) -> int:
        return len(self.pair_leaves)

    def rows(self) -> dict[tuple[int, int], IntArray]:
        return {
            (int(u), int(v)): self.table[self.offset[p] : self.offset[p + 1], : self.hops[p]]
            for p, (u, v) in enumerate(self.pair_leaves.tolist())
        }


def pair_candidates(
    index: FabricIndex, keys: IntArray, two_tier: bool, reuse: Candidates | None = None
) -> list[IntArray]:
    """Candidates (one ``(paths, hops)`` array each, possibly empty) of leaf pairs ``keys``."""
    enumerate_ = _two_tier_candidates if two_tier else _routed_candidates
    if reuse is not None and reuse.reusable_on(index.fabric):
        return _filtered_candidates(index, keys, reuse, enumerate_)
    return enumerate_(index, keys)


def filtered_table(
    index: FabricIndex, keys: IntArray, reuse: Candidates | None
) -> tuple[IntArray, IntArray, IntArray] | None:
    """Per pair of ``keys``: candidate count, hops, and the stacked candidate rows, filtered
    from ``reuse`` with arrays alone, when every pair is in it and keeps a path; else ``None``
    (then :func:`pair_candidates` does it pair by pair). A re-plan after a failure of the
    same flows takes this path: at 16k GPUs it is tens of milliseconds instead of hundreds."""
    if reuse is None or not len(keys) or not reuse.reusable_on(index.fabric):
        return None
    stride = index.num_nodes
    old_codes = reuse.pair_leaves[:, 0] * stride + reuse.pair_leaves[:, 1]
    order = np.argsort(old_codes, kind="stable")
    codes = keys[:, 0] * stride + keys[:, 1]
    at = np.minimum(np.searchsorted(old_codes[order], codes), len(order) - 1)
    which = order[at]
    if not np.array_equal(old_codes[which], codes):
        return None
    old_counts = np.diff(reuse.offset)
    counts = old_counts[which]
    same = len(which) == reuse.num_pairs and np.array_equal(which, np.arange(len(which)))
    if same:  # the same pairs in the same order (a re-plan of the same flows): no copy
        old_rows = reuse.table
    else:
        first = np.cumsum(counts) - counts
        rows = np.arange(int(counts.sum())) + np.repeat(reuse.offset[which] - first, counts)
        old_rows = reuse.table[rows]
    ok = np.append(index.res_usable, True)[old_rows].all(axis=1)
    kept = np.bincount(np.repeat(np.arange(len(keys)), counts)[ok], minlength=len(keys))
    if np.any(kept == 0):
        return None
    return kept, reuse.hops[which], old_rows[ok]


def _filtered_candidates(
    index: FabricIndex,
    keys: IntArray,
    reuse: Candidates,
    enumerate_: Callable[[FabricIndex, IntArray], list[IntArray]],
) -> list[IntArray]:
    """Old candidates over usable links; pairs new to the table or left without any path are
    enumerated afresh (their shortest paths may have lengthened)."""
    known = reuse.rows()
    usable = np.append(index.res_usable, True)
    out: list[IntArray] = []
    missing: list[int] = []
    for i, (u, v) in enumerate(keys.tolist()):
        rows = known.get((u, v))
        if rows is not None:
            rows = rows[usable[rows].all(axis=1)]
        if rows is None or not len(rows):
            missing.append(i)
            rows = np.empty((0, 0), dtype=np.int64)
        out.append(rows)
    if missing:
        for i, rows in zip(missing, enumerate_(index, keys[missing]), strict=True):
            out[i] = rows
    return out


def _routed_candidates(index: FabricIndex, keys: IntArray) -> list[IntArray]:
    """Every pair's equal-cost paths from routing's next-hop groups, in routing's order: the
    paths from a switch to a leaf are its members' next switches' paths, prefixed, memoized per
    destination leaf."""
    out: list[IntArray] = [np.empty((0, 0), dtype=np.int64)] * len(keys)
    order = np.argsort(keys[:, 1], kind="stable") if len(keys) else np.empty(0, dtype=np.int64)
    memo: dict[tuple[int, bool], IntArray] = {}
    leaf = -1
    for i in order.tolist():
        u, v = int(keys[i, 0]), int(keys[i, 1])
        if v != leaf:
            memo, leaf = {}, v  # paths toward one leaf at a time: bounded memory
        out[i] = _suffixes(index, u, v, False, memo)
    return out


def _suffixes(
    index: FabricIndex,
    node: int,
    leaf: int,
    descending: bool,
    memo: dict[tuple[int, bool], IntArray],
) -> IntArray:
    key = (node, descending)
    known = memo.get(key)
    if known is not None:
        return known
    routing = index.routing
    if node == leaf:
        result = np.empty((1, 0), dtype=np.int64)
    else:
        members = routing.next_hops(node, leaf, descending)
        tails = [
            _suffixes(index, int(index.res_dst[r]), leaf, descending or routing.is_down(r), memo)
            for r in members
        ]
        sizes = [len(t) for t in tails]
        total = sum(sizes)
        if not total:
            result = np.empty((0, 0), dtype=np.int64)
        else:
            width = max(t.shape[1] for t in tails)
            result = np.empty((total, width + 1), dtype=np.int64)
            result[:, 1:] = (
                tails[0] if len(tails) == 1 else np.concatenate([t for t in tails if len(t)])
            )
            result[:, 0] = members[0] if len(members) == 1 else np.repeat(members, sizes)
    memo[key] = result
    return result


def _two_tier_candidates(index: FabricIndex, keys: IntArray) -> list[IntArray]:
    """Leaf -> spine -> leaf over usable links, spines in the source leaf's member order."""
    counts, table = two_tier_table(index, keys)
    return np.split(table, np.cumsum(counts)[:-1]) if len(keys) else []


def two_tier_table(index: FabricIndex, keys: IntArray) -> tuple[IntArray, IntArray]:
    """:func:`_two_tier_candidates` for every pair at once: per pair its number of paths, and
    the paths stacked pair by pair as ``(up, down)`` resource rows.

    Why whole arrays: a 16k-GPU shuffled ring has ~16,000 leaf pairs, and one small array per
    pair cost 0.2 s of a 2 s ``c4p plan``; here the pairs' up-links are one padded matrix and
    each (spine, destination leaf) down-link is found by a sorted search (with parallel links,
    the last one cabled, as before).
    """
    switches = index.num_switches
    src, dst, tier = index.res_src, index.res_dst, index.tier
    inner = (src < switches) & (dst < switches) & index.res_usable
    is_down = np.zeros(len(src), dtype=bool)
    is_down[inner] = tier[src[inner]] > tier[dst[inner]]
    downs = np.flatnonzero(is_down)
    if not len(keys):
        return np.zeros(0, dtype=np.int64), np.empty((0, 2), dtype=np.int64)
    leaves, row_of = np.unique(keys[:, 0], return_inverse=True)
    ups: list[IntArray] = []
    for u in leaves.tolist():
        member = np.asarray(index.out_resources[u], dtype=np.int64)
        member = member[inner[member]] if member.size else member
        ups.append(member[tier[dst[member]] > tier[u]])
    width = max((len(m) for m in ups), default=0)
    up_of_leaf = np.full((len(leaves), max(width, 1)), -1, dtype=np.int64)
    for i, member in enumerate(ups):
        up_of_leaf[i, : len(member)] = member
    up = up_of_leaf[row_of.ravel()]
    has_up = up >= 0
    stride = index.num_nodes
    down_codes = src[downs] * stride + dst[downs]
    order = np.argsort(down_codes, kind="stable")
    sorted_codes = down_codes[order]
    wanted = np.where(has_up, dst[np.maximum(up, 0)], 0) * stride + keys[:, 1][:, None]
    at = np.searchsorted(sorted_codes, wanted, side="right") - 1
    found = has_up & (at >= 0) & (sorted_codes[np.maximum(at, 0)] == wanted)
    second = downs[order][np.maximum(at, 0)]
    table = np.column_stack([up[found], second[found]]).astype(np.int64, copy=False)
    return found.sum(axis=1).astype(np.int64), table
