"""How flows become the problem's pairs and candidate table: each flow's end nodes (remembered
per flow set), the error list for flows that are no NIC-to-NIC flows, and the table of every
pair's equal-cost rows built pair by pair or stacked at once on two tiers.

Why apart from :mod:`solver.space.problem`: the problem is what every method asks (rows, loads,
components); this is how :func:`~solver.space.problem.build_problem` fills it, once per plan.
It writes the pair codes :data:`SAME_LEAF` and :data:`UNREACHABLE` (re-exported by the problem,
whose ``pair`` array holds them) and knows no :class:`~solver.space.problem.Problem`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from solver.space.candidates import Candidates, pair_candidates, two_tier_table
from solver.workload.flows import Flow
from topology.index import BoolArray, FabricIndex, IntArray
from topology.model import Fabric

SAME_LEAF = -1
"""``Problem.pair`` of a flow whose ends share a leaf: one path, no switch-to-switch link."""


UNREACHABLE = -2
"""``Problem.pair`` of a flow the snapshot cannot deliver (NIC link down, no usable path)."""


Endpoints = tuple[tuple[str, ...], bool, IntArray, IntArray]
"""Flow ids, whether they are all different, and each flow's source and destination node."""


_ENDPOINTS: list[tuple[Sequence[Flow], Mapping[str, int], Endpoints]] = []


ENDPOINTS_KEPT = 2
"""Flow sets whose :func:`_endpoints` are remembered (the latest first): the flows planned
now and the ones before. Each holds its flows alive and adds its own (32,768 flows: 3 MB of
ids and arrays beside about 8 MB of flows), so few."""


def _endpoints(flows: Sequence[Flow], node_of: Mapping[str, int]) -> Endpoints:
    """Each flow's id and end nodes (``-1``: no such node), remembered for the same tuple of
    flows on the same node numbering.

    Why: a controller re-plans the same flows on every new snapshot of one cabling, and
    snapshots share their numbering (:meth:`FabricIndex.with_status`); working these out is
    a Python step per flow, 25-40 ms of every 16,384-GPU re-plan (32,768 flows). Only tuples
    are remembered (a list could change under the cache; flows are frozen), and the arrays are
    read-only."""
    global _ENDPOINTS  # replaced whole, never changed in place: safe across threads
    found = next((e for f, m, e in _ENDPOINTS if f is flows and m is node_of), None)
    if found is not None:
        return found
    n = len(flows)
    ids = tuple(f.id for f in flows)
    src = np.fromiter((node_of.get(f.src, -1) for f in flows), np.int64, count=n)
    dst = np.fromiter((node_of.get(f.dst, -1) for f in flows), np.int64, count=n)
    src.flags.writeable = dst.flags.writeable = False
    entry = (ids, len(set(ids)) == n, src, dst)
    if type(flows) is tuple:
        _ENDPOINTS = [(flows, node_of, entry), *_ENDPOINTS[: ENDPOINTS_KEPT - 1]]
    return entry


def _flow_problems(
    fabric: Fabric, flows: Sequence[Flow], ids: tuple[str, ...]
) -> list[tuple[str, str]]:
    """Every repeated flow and every end that is no NIC port, in flow order (the error path of
    :func:`build_problem`, whose fast path only detects that there is one)."""
    index = fabric.index
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for flow, fid in zip(flows, ids, strict=True):
        if fid in seen:
            problems.append((fid, "appears twice among the flows"))
        seen.add(fid)
        for name in (flow.src, flow.dst):
            node = index.node_of.get(name)
            if node is None or node < index.num_switches:
                problems.append((fid, f"{name!r} is not a NIC port of fabric {fabric.name!r}"))
    return problems


def _tabulate_two_tier(
    index: FabricIndex, keys: IntArray, inverse: IntArray, pair: IntArray, cross: BoolArray
) -> tuple[IntArray, IntArray, IntArray, IntArray, BoolArray]:
    """:func:`_tabulate` on two tiers from :func:`solver.space.candidates.two_tier_table`: the table
    comes out stacked already, with no array per pair."""
    counts, rows = two_tier_table(index, keys)
    alive = counts > 0
    renumber = np.cumsum(alive) - 1
    pair[cross] = np.where(alive[inverse.ravel()], renumber[inverse.ravel()], UNREACHABLE)
    offset = np.zeros(int(alive.sum()) + 1, dtype=np.int64)
    np.cumsum(counts[alive], out=offset[1:])
    hops = np.full(int(alive.sum()), 2, dtype=np.int64)
    width = 2 if len(rows) else 0  # an empty table has no columns, as :func:`_tabulate`'s
    return pair, np.ascontiguousarray(rows[:, :width]), offset, hops, alive


def _tabulate(
    index: FabricIndex,
    keys: IntArray,
    inverse: IntArray,
    pair: IntArray,
    cross: BoolArray,
    two_tier: bool,
    reuse: Candidates | None,
) -> tuple[IntArray, IntArray, IntArray, IntArray, BoolArray]:
    """Candidates pair by pair: ``pair`` updated, the table, offsets, hops of the pairs that
    have a path, and which of ``keys`` do."""
    if two_tier and (reuse is None or not reuse.reusable_on(index.fabric)):
        return _tabulate_two_tier(index, keys, inverse, pair, cross)
    rows = pair_candidates(index, keys, two_tier, reuse)
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    hops = np.array([r.shape[1] if len(r) else 0 for r in rows], dtype=np.int64)
    # Pairs without any path are unreachable; renumber the rest densely.
    alive = counts > 0
    renumber = np.cumsum(alive) - 1
    pair_of_cross = np.where(alive[inverse.ravel()], renumber[inverse.ravel()], UNREACHABLE)
    pair[cross] = pair_of_cross
    kept = [r for r, a in zip(rows, alive.tolist(), strict=True) if a]
    width = int(hops.max(initial=0))
    table = np.full((int(counts[alive].sum()), width), index.num_resources, dtype=np.int64)
    offset = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(counts[alive], out=offset[1:])
    for p, r in enumerate(kept):
        table[offset[p] : offset[p + 1], : r.shape[1]] = r
    return pair, table, offset, hops[alive], alive
