"""Whether a fabric is a fat-tree the exact colouring applies to, and its structure as lookup
tables (:class:`FatTreeShape`: pods, aggs, core groups, the resource of each leaf-agg and
agg-core link), with the lower bound ``K`` every plan on it meets.

Why apart from :mod:`solver.exact.fattree`: recognising the structure is read by far more than
the colouring: the fat-tree's candidates, counts, re-plan chains, bounds and the degraded
colouring all take a :class:`FatTreeShape`; the colouring is one user. The structure and the
bound are described in :mod:`solver.exact.fattree`, which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topology.arrays import distinct
from topology.index import BoolArray, IntArray
from topology.model import Fabric


@dataclass(frozen=True, eq=False)
class FatTreeShape:
    """The fat-tree structure of a fabric, as lookup tables over switch nodes and resources."""

    pod: IntArray
    """Pod of each leaf and agg (pods ordered by their first leaf), ``-1`` for other nodes."""
    is_leaf: BoolArray
    up: IntArray
    """``up[leaf, j]`` / ``down[leaf, j]``: resource leaf -> agg ``j`` of its pod / back."""
    down: IntArray
    agg_up: IntArray
    """``agg_up[pod, j, g]`` / ``agg_down``: resource agg ``(pod, j)`` -> core ``(j, g)`` / back."""
    agg_down: IntArray
    choice: IntArray
    """Per resource: ``j`` of a leaf -> agg link, ``g`` of an agg -> core link, else ``-1``."""
    aggs: int
    """``A``: aggs per pod, and core groups; ``cores_per_group`` is ``G``."""
    cores_per_group: int
    pods: int


def _by_neighbours(adjacent: dict[int, set[int]]) -> list[tuple[frozenset[int], list[int]]]:
    """Nodes grouped by their neighbour set, groups ordered by their first node."""
    groups: dict[frozenset[int], list[int]] = {}
    for node, near in adjacent.items():
        groups.setdefault(frozenset(near), []).append(node)
    return sorted(groups.items(), key=lambda kv: min(kv[1]))


def analyse(fabric: Fabric, *, ignore_status: bool = False) -> FatTreeShape | str:
    """The fabric's fat-tree shape, or why it has none (see the module docstring).

    ``ignore_status`` reads the shape of the cabling with every link taken as up: the planner
    colours the intact tree and then repairs around the links that are down or drained.

    Written over the index's arrays, not the links: a 16k-GPU fabric has 50k links, and a
    Python pass over them (with a dictionary lookup per table cell) took 0.15-0.6 s of every
    plan. The first faulty link in link order is the one named, as a pass would find it.
    """
    index = fabric.index
    n, tier = index.num_switches, index.tier[: index.num_switches]
    if not (tier == 3).any():
        return "not a 3-tier fabric: no core switches"
    a_end, b_end = index.res_src[0::2], index.res_dst[0::2]
    links = np.flatnonzero((a_end < n) & (b_end < n))  # switch-to-switch links, in order
    a_end, b_end = a_end[links], b_end[links]
    rising = tier[a_end] < tier[b_end]
    low, high = np.where(rising, a_end, b_end), np.where(rising, b_end, a_end)
    upward = 2 * links + ~rising  # the resource low -> high
    _, first, seen = np.unique(low * n + high, return_index=True, return_inverse=True)
    faulty = (tier[high] != tier[low] + 1) | (first[seen.ravel()] != np.arange(len(links)))
    down = np.zeros(len(links), dtype=np.bool_) if ignore_status else ~index.res_usable[2 * links]
    if (faulty | down).any():
        at = int(np.argmax(faulty | down))
        link = fabric.links[int(links[at])]
        if down[at]:
            return f"link {link.id} is {link.status.value}"
        return f"link {link.id} is parallel to another or skips a tier"
    speeds = distinct(index.res_capacity[2 * links]).tolist()
    if len(speeds) > 1:
        return f"switch links have unequal speeds {speeds} Gb/s"
    above: dict[int, set[int]] = {int(v): set() for v in np.flatnonzero(tier < 3)}
    below: dict[int, set[int]] = {int(v): set() for v in np.flatnonzero(tier > 1)}
    for lo, hi in zip(low.tolist(), high.tolist(), strict=True):
        above[lo].add(hi)
        below[hi].add(lo)
    pods = _by_neighbours({v: s for v, s in above.items() if tier[v] == 1})
    groups = _by_neighbours({v: s for v, s in above.items() if tier[v] == 2})
    cores = [sorted(key) for key, _ in groups]
    if any(not key for key, _ in pods) or any(not c for c in cores):
        return "a leaf or an aggregation switch has no uplink"
    covered = sorted(c for group in cores for c in group)
    if len({len(c) for c in cores}) > 1 or covered != np.flatnonzero(tier == 3).tolist():
        return "agg uplinks do not split the cores into disjoint groups of one size"
    if sum(len(key) for key, _ in pods) != int((tier == 2).sum()):
        return "an aggregation switch serves no pod or several"
    group_of = {agg: j for j, (_, aggs) in enumerate(groups) for agg in aggs}
    a, g, p = len(groups), len(cores[0]), len(pods)
    pod = np.full(n, -1, dtype=np.int64)
    for i, (key, leaves) in enumerate(pods):
        name = index.node_names[leaves[0]]
        if sorted(group_of[x] for x in key) != list(range(a)):
            return f"the pod of {name} does not have one agg per core group"
        if any(below[x] != set(leaves) for x in key):
            return f"the pod of {name} is not complete: a leaf misses an agg or an agg a leaf"
        pod[leaves] = i
        pod[list(key)] = i
    # Every link is now known to be a leaf-agg link within a pod or an agg-core link of its
    # group: the tables fill in one assignment each.
    j_of = np.full(n, -1, dtype=np.int64)
    j_of[list(group_of)] = list(group_of.values())
    k_of = np.full(n, -1, dtype=np.int64)
    for group in cores:
        k_of[group] = np.arange(g)
    leaf_link = tier[low] == 1
    leaf, agg, j = low[leaf_link], high[leaf_link], j_of[high[leaf_link]]
    up, down_ = np.full((n, a), -1, dtype=np.int64), np.full((n, a), -1, dtype=np.int64)
    up[leaf, j] = upward[leaf_link]
    down_[leaf, j] = upward[leaf_link] ^ 1
    agg, core = low[~leaf_link], high[~leaf_link]
    cell = (pod[agg], j_of[agg], k_of[core])
    agg_up, agg_down = np.empty((p, a, g), dtype=np.int64), np.empty((p, a, g), dtype=np.int64)
    agg_up[cell] = upward[~leaf_link]
    agg_down[cell] = upward[~leaf_link] ^ 1
    choice = np.full(index.num_resources, -1, dtype=np.int64)
    choice[upward[leaf_link]] = j
    choice[upward[~leaf_link]] = k_of[core]
    return FatTreeShape(pod, tier == 1, up, down_, agg_up, agg_down, choice, a, g, p)


def applies(fabric: Fabric) -> str | None:
    """``None`` if :func:`assign_fat_tree` applies to the fabric, else the reason it does not."""
    return shape if isinstance(shape := analyse(fabric), str) else None


def _shape(fabric: Fabric | FatTreeShape) -> FatTreeShape:
    shape = fabric if isinstance(fabric, FatTreeShape) else analyse(fabric)
    if isinstance(shape, str):
        raise ValueError(f"not a fat-tree that assign_fat_tree applies to: {shape}")
    return shape


def _leaves(
    shape: FatTreeShape, src: npt.ArrayLike, dst: npt.ArrayLike
) -> tuple[IntArray, IntArray]:
    s, d = np.asarray(src), np.asarray(dst)
    if s.ndim != 1 or s.shape != d.shape:
        raise ValueError(f"src and dst must be 1-D of one length, got {s.shape} and {d.shape}")
    for name, a in (("src", s), ("dst", d)):
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name} must hold integer switch node ids, got dtype {a.dtype}")
        bad = (a < 0) | (a >= shape.is_leaf.size)
        bad[~bad] = ~shape.is_leaf[a[~bad]]
        if bad.any():
            raise ValueError(f"{name}[{int(np.argmax(bad))}] = {int(a[bad][0])} is not a leaf")
    return s.astype(np.int64), d.astype(np.int64)


def _bound(shape: FatTreeShape, s: IntArray, d: IntArray) -> int:
    cross, far = s != d, shape.pod[s] != shape.pod[d]
    leaf = max(np.bincount(x[cross]).max(initial=0) for x in (s, d))
    pod = max(np.bincount(shape.pod[x[far]]).max(initial=0) for x in (s, d))
    return max(-(-int(leaf) // shape.aggs), -(-int(pod) // (shape.aggs * shape.cores_per_group)))


def lower_bound(fabric: Fabric | FatTreeShape, src: npt.ArrayLike, dst: npt.ArrayLike) -> int:
    """``K = max(ceil(Δ/A), ceil(Π/C))``: every path choice loads some switch link this much."""
    shape = _shape(fabric)
    return _bound(shape, *_leaves(shape, src, dst))
