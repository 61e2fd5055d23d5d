"""Distances toward many destination leaves from one pass per class of leaves with the same
parents, for batched routing.

Why: the ECMP baseline at 131,072 GPUs needs distance rows toward all 4,096 leaves, and the
pass over all of them (:func:`topology.distances.distance_pass`) was 0.6-0.9 s of its ~2.6 s.
Leaves with the same parents get the same rows but at the leaves themselves, so one pass per
class (a pod's leaves on a healthy fat-tree) and a copy give every row.

The rule. Call a switch *bottom* when no usable link goes down from it and none goes up into it
(a leaf). In the down pass a bottom switch is never updated (it has no link down), so toward
leaf ``D`` it keeps 0 if it is ``D`` and the sentinel otherwise, and a switch that is not
bottom reads a bottom switch only through its own links down, where "is it ``D``" is "am I a
parent of ``D``". The up pass reads only switches a link goes up into, none of them bottom. So
two bottom leaves with the same parents (switches with a usable link down into them) have the
same distances at every switch that is not bottom, and at every bottom switch but the two of
them. At those two: the destination is 0 both ways; the other one is the sentinel down and,
up, one more than the least up-distance over its own links up (read when its tier's step ran,
after every tier above it: final values), capped at the sentinel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from topology.arrays import BoolArray, IntArray, spans
from topology.distances import Step, distance_pass


def class_pass(
    steps: tuple[list[Step], list[Step]],
    switches: int,
    leaves: list[int],
    ends: tuple[IntArray, IntArray],
    goes: tuple[BoolArray, BoolArray],
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
    """:func:`topology.distances.distance_pass` of ``leaves`` (distinct), the same rows,
    computed once per class of bottom leaves with the same parents (see the module).

    ``ends``: every resource's source and far end; ``goes``: per resource, a usable link
    between switches going down, and going up (:class:`~topology.routing.Routing`'s masks)."""
    (src, dst), (goes_down, goes_up) = ends, goes
    bottom = np.ones(switches, dtype=np.bool_)
    bottom[src[goes_down]] = False
    bottom[dst[goes_up]] = False
    downs = np.flatnonzero(goes_down)
    order = np.lexsort((src[downs], dst[downs]))
    into, parent = dst[downs][order], src[downs][order]
    wanted = np.asarray(leaves, dtype=np.int64)
    first = np.searchsorted(into, wanted, side="left").tolist()
    last = np.searchsorted(into, wanted, side="right").tolist()
    parents = parent.tolist()
    is_bottom = bottom[wanted].tolist()
    number: dict[tuple[int, ...], int] = {}
    reps: list[int] = []
    klass = np.empty(len(leaves), dtype=np.int64)
    for i, leaf in enumerate(leaves):
        key = tuple(parents[first[i] : last[i]]) if is_bottom[i] else (-1 - leaf,)
        if key not in number:
            number[key] = len(reps)
            reps.append(leaf)
        klass[i] = number[key]
    if len(reps) == len(leaves):
        return distance_pass(steps, switches, leaves)
    rep_down, rep_up, far = distance_pass(steps, switches, reps)
    down, up = rep_down[klass], rep_up[klass]
    rep_leaf = np.asarray(reps, dtype=np.int64)[klass]
    moved = np.flatnonzero(rep_leaf != wanted)  # rows copied from another leaf's
    if moved.size:
        # Up-distance at the representative leaf, were it not the destination: one more than
        # the least over its links up, in its class's row (the same at switches not bottom).
        ups = np.flatnonzero(goes_up)
        by = np.argsort(src[ups], kind="stable")
        up_src, up_dst = src[ups][by], dst[ups][by]
        r = rep_leaf[moved]
        lo = np.searchsorted(up_src, r, side="left")
        count = np.searchsorted(up_src, r, side="right") - lo
        least = np.full(moved.size, far, dtype=np.int64)
        has = np.flatnonzero(count)
        if has.size:
            cells = spans(lo[has], count[has])
            owner = np.repeat(has, count[has])
            values = up[moved[owner], up_dst[cells]].astype(np.int64)
            np.minimum.at(least, owner, values)
            least[has] = np.minimum(least[has] + 1, far)
        down[moved, r] = far
        up[moved, r] = least.astype(up.dtype)
        down[moved, wanted[moved]] = 0
        up[moved, wanted[moved]] = 0
    return down, up, far
