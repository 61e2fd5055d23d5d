"""Labelling a graph given as arrays: its connected parts (label propagation), groups of
equal rows (a hash, then a check), and the pair-resource graphs of a candidate table whose
parts are a problem's independent sub-problems.

Why apart from :mod:`solver.space.problem`: these are array algorithms that know no flows and
no fabric; the problem's components and its two-hop groups (:attr:`Problem.two_hop_groups`)
call them with its table, and a test can check them on rows of its own.
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


def two_hop_groups(
    table: IntArray, hops: IntArray, offset: IntArray, counts: IntArray
) -> tuple[TwoHopGroups, TwoHopGroups] | None:
    """For a table whose candidates are all two hops (up a source-leaf link, down into
    the destination leaf), per hop: the groups of pairs with the same links at that hop
    (in candidate order), as the first pair of each group, each pair's group, and the
    groups' links with the group of each (for the first pairs only: a group's pairs all
    have them). ``None`` for any other table. Pairs of a group share their leaf at that
    hop and their component, which is what the components and the combinatorial bound
    read (:mod:`solver.bounds.combinatorial`). ``counts`` is each pair's number of
    candidates, ``offset`` its first row."""
    if table.shape[1] != 2 or np.any(hops != 2):
        return None
    cols = np.arange(int(counts.max()))
    valid = cols[None, :] < counts[:, None]
    at = np.where(valid, offset[:-1, None] + cols, 0)
    out = []
    for hop in (0, 1):
        side = np.where(valid, table[at, hop], -1)
        reps, group = _same_rows(side)
        r, c = np.nonzero(valid[reps])
        out.append((reps, group, side[reps[r], c], r))
    return out[0], out[1]


def two_hop_graph(
    groups: tuple[TwoHopGroups, TwoHopGroups], pad: int, n: int
) -> tuple[IntArray, IntArray, int, int]:
    """The pair-resource graph of a two-tier table of ``n`` pairs, compressed, from its
    :func:`two_hop_groups`: entries ``(node, owner)``, the number of owners and of nodes.

    Owners are the pairs, then groups of pairs with the same up-links (in candidate
    order), then groups with the same down-links; nodes are the resources and the pad,
    then one per pair, which the pair and its two groups own, and a group owns its
    links. Two pairs share a resource exactly when they share a group's link, so the
    components are the same, with a few entries per pair and one per group and link
    instead of two per candidate. Why: the full graph of a 16,384-GPU rail-optimized
    fabric is a million entries, and propagating labels over it was 65-70 ms of every
    re-plan."""
    pair_node = pad + 1 + np.arange(n)
    res: list[IntArray] = [pair_node]
    owner: list[IntArray] = [np.arange(n)]
    owners = n
    for reps, group, rep_links, rep_of_link in groups:
        res += [pair_node, rep_links]
        owner += [owners + group, owners + rep_of_link]
        owners += len(reps)
    return np.concatenate(res), np.concatenate(owner), owners, pad + 1 + n


def pair_entries(counts: IntArray, table: IntArray, pad: int) -> tuple[IntArray, IntArray]:
    """Every (resource, pair) of the table (``counts[p]`` rows per pair ``p``), pad
    excluded; an entry equal to the one above it in the same pair is left out (a 3-tier
    pair's rows repeat their first and last hops in runs: about half the entries, the same
    pair-resource graph)."""
    row_pair = np.repeat(np.arange(len(counts)), counts)
    keep = table != pad
    if len(table) > 1:
        same_pair = np.zeros(len(table), dtype=bool)
        same_pair[1:] = row_pair[1:] == row_pair[:-1]
        keep[1:] &= ~(same_pair[1:, None] & (table[1:] == table[:-1]))
    rows, cols = np.nonzero(keep)
    return table[rows, cols], row_pair[rows]


def resource_labels(
    res: IntArray, owner: IntArray, owner_label: IntArray, pad: int, n: int
) -> IntArray:
    """Component of each resource (and the pad) of a graph's entries ``(res, owner)``, from
    its owners' labels (:func:`propagate`), the first ``n`` owners being the pairs whose
    labels, numbered densely, name the components; ``-1`` where no entry goes."""
    out = np.full(pad + 1, -1, dtype=np.int64)
    real = res < pad
    first = np.unique(owner_label[:n], return_inverse=True)
    dense = np.full(len(owner_label), -1, dtype=np.int64)
    dense[first[0]] = np.arange(len(first[0]))
    out[res[real]] = dense[owner_label[owner[real]]]
    return out
