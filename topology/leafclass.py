"""Destination leaves that forward alike away from themselves: one group for a class of them.

Why: the ECMP baseline (:func:`topology.forwarding.forward_many`) asks
:meth:`topology.routing.Routing.groups_many` for every distinct (switch, destination leaf,
phase) key of a step. At 131,072 GPUs a core meets some 250 destination leaves and scans its
128 members for each; on a healthy fat-tree the leaves of one pod all give the same group.

The rule that makes that exact. Call a switch *bottom* when no usable link goes down from it and
none goes up into it (a leaf: nothing below it). Toward destination ``D`` a bottom switch other
than ``D`` has no finite down-distance (the down pass only climbs through links going down from a
switch), and no group member reached by going up is bottom. So a key at switch ``X`` whose
distance toward ``D`` is two or more reads ``D``'s distances only at switches that are not
bottom, and at ``X`` itself: its members' far ends are never ``D``, and a member down to a
bottom switch would need a finite down-distance of at least one there. Another destination
``D'`` whose rows agree with ``D``'s on every switch that is not bottom then gives the same
group at ``X``, provided ``X`` is not ``D'`` (if ``X`` is bottom, its own distance follows from
its neighbours' above it, which agree, unless it is the destination). A key one hop from ``D``
is not shared: its member goes down into ``D`` itself.

:func:`leaf_classes` finds those classes exactly (rows hashed, then compared); what a
class may be used for is :func:`class_rows`' to decide, key by key.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from topology.arrays import BoolArray, IntArray
from topology.index import FabricIndex


def bottom_switches(index: FabricIndex, goes_down: BoolArray) -> BoolArray:
    """Per switch: no usable link goes down from it (``goes_down``, per resource:
    :attr:`Routing.down_mask`) and none goes up into it (usable, between switches, toward a
    higher tier: :class:`Routing`'s rule for a link up)."""
    src, dst, tier, n = index.res_src, index.res_dst, index.tier, index.num_switches
    goes_up = index.res_usable & (src < n) & (dst < n)
    goes_up &= tier[dst] > tier[src]
    bottom = np.ones(n, dtype=np.bool_)
    bottom[src[goes_down]] = False
    bottom[dst[goes_up]] = False
    return bottom


def leaf_classes(
    down_rows: npt.NDArray[Any], up_rows: npt.NDArray[Any], bottom: BoolArray
) -> IntArray:
    """For each row (one destination leaf's distances), a row whose down and up distances
    agree with it at every switch that is not ``bottom``: the first such row, or the row
    itself if two different rows ever share a hash (sharing less is never wrong).

    Why a hash: ``np.unique(axis=0)`` over 4,096 rows of 10 kB (the 131k fat-tree) cost
    0.82 s, and a dict of the rows' gathered bytes 0.37 s, more than the classes save. Here
    each row, its bottom columns zeroed, is read as 64-bit words and summed with random odd
    multipliers (wrapping), and only each row and its class's first are compared."""
    rows, switches = down_rows.shape
    if not rows:
        return np.zeros(0, dtype=np.int64)
    padded = -(-switches // 8) * 8
    keep = np.zeros(padded, dtype=down_rows.dtype)
    keep[:switches][~bottom] = 1
    words_per_row = padded * down_rows.dtype.itemsize // 8
    weights = np.random.default_rng(0x1EAF).integers(0, 1 << 63, size=(2, words_per_row))
    multipliers = weights.astype(np.uint64) * np.uint64(2) + np.uint64(1)
    hashes = np.zeros(rows, dtype=np.uint64)
    step = max(1, (1 << 22) // padded)  # slices of rows: a few MB of temporaries each
    masked = np.zeros((min(step, rows), padded), dtype=down_rows.dtype)
    for k in range(0, rows, step):
        n = min(step, rows - k)
        for matrix, multiplier in ((down_rows, multipliers[0]), (up_rows, multipliers[1])):
            np.multiply(matrix[k : k + n], keep[:switches], out=masked[:n, :switches])
            words = masked[:n].view(np.uint64)
            hashes[k : k + n] += (words * multiplier).sum(axis=1, dtype=np.uint64)
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    representative: IntArray = first[inverse.reshape(-1)].astype(np.int64)
    # Verify: a row whose non-bottom columns differ from its representative's keeps its own.
    columns = ~bottom
    for k in range(0, rows, step):
        mine = np.arange(k, min(k + step, rows))
        theirs = representative[mine]
        same = (down_rows[mine] == down_rows[theirs]) | ~columns
        same &= (up_rows[mine] == up_rows[theirs]) | ~columns
        representative[mine] = np.where(same.all(axis=1), theirs, mine)
    return representative


def class_rows(
    rows: IntArray,
    at: IntArray,
    here: npt.NDArray[Any],
    representative: IntArray,
    leaves: IntArray,
) -> IntArray:
    """The distance row each key may use: its class's representative where the module's rule
    allows (``here``, the key's distance toward its leaf, two or more, and the
    representative's leaf not the key's switch ``at``), else its own ``rows``."""
    shared = representative[rows]
    allowed = (here >= 2) & (leaves[shared] != at)
    picked: IntArray = np.where(allowed, shared, rows)
    return picked
