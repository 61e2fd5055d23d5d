"""Labelling a graph given as arrays: its connected parts (label propagation) and groups of
equal rows (a hash, then a check).

Why apart from :mod:`solver.space.problem`: these are array algorithms that know no flows and
no fabric; the problem's components and its two-hop groups (:attr:`Problem.two_hop_groups`)
call them, and a test can check them on rows of its own.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from topology.index import IntArray

TwoHopGroups = tuple[IntArray, IntArray, IntArray, IntArray]
"""One hop's groups (:attr:`Problem.two_hop_groups`): first pair of each group, each pair's
group, the groups' links and the group of each link."""


def propagate(res: IntArray, owner: IntArray, owners: int, nodes: int) -> IntArray:
    """Connected components of a graph given as entries ``(node, owner)``: each owner's label
    is the least owner it is joined to through shared nodes. Label propagation with pointer
    jumping: Clos diameters are small, so a few rounds."""
    label = np.arange(owners)
    while True:
        by_res = np.full(nodes, owners, dtype=np.int64)
        np.minimum.at(by_res, res, label[owner])
        new = label.copy()
        np.minimum.at(new, owner, by_res[res])
        new = new[new]
        if np.array_equal(new, label):
            return label
        label = new


def _same_rows(rows: IntArray) -> tuple[IntArray, IntArray]:
    """Groups of equal rows: the first row of each group and each row's group. Rows are
    grouped by a hash and then compared with their group's first row; a collision (never
    seen) falls back to comparing whole rows."""
    _, first, group = np.unique(_row_keys(rows), return_index=True, return_inverse=True)
    group = group.ravel()
    if np.array_equal(rows, rows[first[group]]):
        return first, group
    _, first, group = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return first, group.ravel()


def _row_keys(rows: IntArray) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of each row (odd multipliers per column, sums wrapping)."""
    mix = np.random.default_rng(0x5EED).integers(1, 2**63, rows.shape[1], dtype=np.uint64) | 1
    with np.errstate(over="ignore"):
        keys: npt.NDArray[np.uint64] = (rows.astype(np.uint64) * mix).sum(axis=1, dtype=np.uint64)
    return keys
