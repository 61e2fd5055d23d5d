"""Re-planning against a previous plan: which flows may stay where they are.

Why its own module: this is the "react" step of the C4P loop (docs/architecture.md) — a link goes
down or is drained, a job starts, stops or resizes — and the controller calls the planner with the
plan it is running. Moving a live QP costs something (a new source port, a window of reordering), so
the planner must know, per flow, whether its current path is still allowed.

A flow may stay when it is the *same flow* (same id, same source and destination NIC ports) and
its previous path is still one of its equal-cost candidates on the new snapshot: every link
usable and the path still shortest valley-free (a link coming back can shorten paths and so
invalidate an old one). The check is the candidate table itself, so it is exactly what routing
allows now. Flows are matched by id; new flows have no previous path and do not count as moved.

Paths from another snapshot are read through node names when the two snapshots number their
links differently (a fabric file edited between the plans); a previous path that names a link
the new fabric lacks cannot be kept.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solver.space.candidates import same_wiring
from solver.space.problem import SAME_LEAF, Problem
from solver.workload.flows import Flow
from topology.errors import TopologyError
from topology.index import BoolArray, IntArray
from topology.model import Fabric

__all__ = ["Previous", "match_middles", "match_previous"]


@dataclass(frozen=True, eq=False)
class Previous:
    """Per flow of the new problem: ``choice`` is the candidate its previous path still is
    (``0`` for an unchanged same-leaf path), or ``-1``; ``had`` says it had a path before."""

    choice: IntArray
    had: BoolArray
    aligned: bool = False
    """The previous plan had exactly these flows in this order, on a snapshot numbered alike:
    a flow whose ``choice`` is unchanged has the very same path (NIC links included)."""

    @property
    def keepable(self) -> int:
        return int(np.count_nonzero(self.choice >= 0))


def match_middles(problem: Problem, flows: IntArray, middles: IntArray) -> IntArray:
    """Candidate number of each flow's switch path (``middles`` padded with the pad), or -1.

    ``flows`` must be cross-leaf flows; a middle that is no candidate of the flow's pair now
    (including one of the wrong length) gives -1.
    """
    result = np.full(len(flows), -1, dtype=np.int64)
    if not len(flows) or not problem.num_pairs:
        return result
    if problem.tree is not None:  # a fat-tree's lazy table: (j, g) by the structure
        return problem.tree.match(problem.pair[flows], middles)
    width = problem.width
    if middles.shape[1] < width:
        pad = np.full((len(flows), width - middles.shape[1]), problem.pad, dtype=np.int64)
        middles = np.hstack([middles, pad])
    elif middles.shape[1] > width:
        too_long = np.any(middles[:, width:] != problem.pad, axis=1)
        middles = middles[:, :width]
    else:
        too_long = np.zeros(len(flows), dtype=bool)
    base = problem.pad + 1
    pair = problem.pair[flows]
    second = middles[:, 1] if width > 1 else np.full(len(flows), problem.pad)
    query = (pair * base + middles[:, 0]) * base + second
    keys, order = problem.row_keys
    at = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    row = order[at]
    found = (keys[at] == query) & ~too_long
    found &= np.all(problem.table[row] == middles, axis=1)
    result[found] = row[found] - problem.offset[pair[found]]
    return result


def match_previous(
    problem: Problem,
    flows: Sequence[Flow],
    paths: Sequence[Sequence[int]],
    fabric: Fabric,
) -> Previous:
    """Match the previous plan's ``flows``/``paths`` (resources of ``fabric``) to ``problem``."""
    n = problem.num_flows
    if (flows is problem.flows or tuple(flows) == problem.flows) and same_wiring(
        fabric, problem.fabric
    ):
        return _match_aligned(problem, paths)
    choice = np.full(n, -1, dtype=np.int64)
    had = np.zeros(n, dtype=bool)
    before = {f.id: (f, p) for f, p in zip(flows, paths, strict=True) if p}
    translate = not same_wiring(fabric, problem.fabric)
    old_index, new_index = fabric.index, problem.index
    pad = problem.pad
    width = max(problem.width, 1)
    cross: list[int] = []
    middles: list[list[int]] = []
    for i, (flow, fid) in enumerate(zip(problem.flows, problem.ids, strict=True)):
        entry = before.get(fid)
        if entry is None or entry[0].src != flow.src or entry[0].dst != flow.dst:
            continue
        had[i] = True
        path = tuple(entry[1])
        if translate:
            try:
                path = new_index.path_resources(old_index.path_nodes(path))
            except TopologyError:
                continue
        if len(path) < 2 or path[0] != problem.nic_up[i] or path[-1] != problem.nic_down[i]:
            continue
        if problem.pair[i] == SAME_LEAF:
            choice[i] = 0 if len(path) == 2 else -1
        elif problem.pair[i] >= 0:
            middle = list(path[1:-1])
            if len(middle) > width:
                continue
            cross.append(i)
            middles.append(middle + [pad] * (width - len(middle)))
    if cross:
        idx = np.asarray(cross, dtype=np.int64)
        choice[idx] = match_middles(problem, idx, np.asarray(middles, dtype=np.int64))
    return Previous(choice, had)


def _match_aligned(problem: Problem, paths: Sequence[Sequence[int]]) -> Previous:
    """:func:`match_previous` when the previous plan has exactly these flows, in this order, on
    a snapshot numbered alike (the controller's re-plan, a plan file of the same jobs): the
    same answer, with arrays instead of a loop over flows."""
    n = problem.num_flows
    lengths = np.fromiter(map(len, paths), np.int64, count=n)
    flat = np.fromiter(itertools.chain.from_iterable(paths), np.int64, count=int(lengths.sum()))
    had = lengths > 0
    starts = np.cumsum(lengths) - lengths
    first, last = starts, starts  # no flow had a path (all cut off before): nothing matches
    if len(flat):
        first = np.where(had, flat[np.minimum(starts, len(flat) - 1)], -1)
        last = np.where(had, flat[np.maximum(starts + lengths - 1, 0)], -1)
    ok = had & (lengths >= 2) & (first == problem.nic_up) & (last == problem.nic_down)
    choice = np.full(n, -1, dtype=np.int64)
    same = ok & (problem.pair == SAME_LEAF)
    choice[same & (lengths == 2)] = 0
    width = max(problem.width, 1)
    cross = np.flatnonzero(ok & (problem.pair >= 0) & (lengths - 2 <= width))
    if cross.size:
        cols = np.arange(width)
        inside = cols[None, :] < (lengths[cross] - 2)[:, None]
        at = np.where(inside, starts[cross, None] + 1 + cols[None, :], 0)
        middles = np.where(inside, flat[at], problem.pad)
        choice[cross] = match_middles(problem, cross, middles)
    return Previous(choice, had, aligned=True)
