"""Stage-1 fix-up of a degraded fat-tree colouring: alternating chains that free pod room.

Why: when a fat-tree loses a core (or an agg-core link), agg ``j`` of a pod has fewer core links,
so at most ``K`` times that many of the pod's cross-pod flows may take colour ``j``. A leaf-wise
colouring (:mod:`solver.repair.degraded`, Theorem 1's sets) keeps every leaf link within its room
but knows nothing of pods; on a tight fabric (every leaf link at exactly ``K``, the 16k-GPU ring)
it leaves a few (pod, agg) pairs a flow or two over, and stage 2 then has no room. Pod-aware
splits fail there too (leaf totals and pods cross). What is missing is local: intra-pod flows
need no core, so a pod over at colour ``j`` needs more of its *intra-pod* flows on ``j``.

**Chain.** Pod ``p`` is over at colour ``j`` (out, in or both). Take an intra-pod flow ``f =
u -> v`` of ``p`` coloured ``j' != j`` and recolour it ``j``: leaf ``u`` now has one flow too
many on ``j`` going out, ``v`` one too many coming in. Walk from ``v``: recolour a cross-pod flow
``y -> v`` from ``j`` to ``j'`` (``v`` is balanced again), then a cross-pod flow ``y -> z`` from
``j'`` to ``j`` (``y`` balanced), then one into ``z`` from ``j`` to ``j'``, and so on until the
flow recoloured ``j -> j'`` leaves ``u`` (``u`` balanced: the chain closes), or reaches a leaf
with room left on ``j'`` (an open end). Every leaf keeps its counts per colour, or at an open end
stays within its room. Every recoloured flow but ``f`` crosses pods, and at every inner leaf one
flow of the leaf's pod turns ``j -> j'`` and one ``j' -> j``, so those pods' counts are unchanged.
Pod ``p`` loses one flow on ``j`` out of ``u`` and one into ``v`` and gains them on ``j'``
(``j'`` is picked with room at ``p`` both ways). The walk is a breadth-first search over the
leaves of the two colours' subgraph: the shortest chain, in time linear in its flows.

**Guarantee.** None beyond what is checked: a pod without intra-pod flows, or without a chain,
is left over and the caller gets ``None``. Each chain strictly lowers the total excess over pod
rooms without creating any, so the loop ends after at most that many chains (and a bound).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from solver.exact.fattree import FatTreeShape
from solver.exact.kempechain import Incidence
from topology.index import BoolArray, IntArray

__all__ = ["MAX_CHAINS", "fix_pods"]

MAX_CHAINS = 4096
"""Chains one fix-up may build (each lowers the pods' total excess by one or two)."""

MAX_STARTS = 64
"""Intra-pod flows tried as the first link of a chain for one over-full (pod, colour)."""

COMPARED = 16
"""Chains found (from different starts) among which the shortest is taken."""

SHORT_CHAIN = 4
"""A chain this short (the intra-pod flow and three more) is taken without trying more
starts: the fewer flows a chain recolours, the fewer a re-plan moves."""


class _Counts:
    """Per colour: each leaf's flows out and in, each pod's cross-pod flows out and in, with
    the flows indexed by (leaf, colour) for the search."""

    def __init__(
        self, shape: FatTreeShape, s: IntArray, d: IntArray, agg: IntArray, far: BoolArray
    ) -> None:
        self.shape, self.s, self.d, self.agg, self.far = shape, s, d, agg, far
        n, a, p = shape.is_leaf.size, shape.aggs, shape.pods
        self.out = np.bincount(s * a + agg, minlength=n * a).reshape(n, a)
        self.into = np.bincount(d * a + agg, minlength=n * a).reshape(n, a)
        ps, pd = shape.pod[s[far]], shape.pod[d[far]]
        self.pod_out = np.bincount(ps * a + agg[far], minlength=p * a).reshape(p, a)
        self.pod_in = np.bincount(pd * a + agg[far], minlength=p * a).reshape(p, a)
        self.by_out = Incidence(s, agg, a)
        self.by_in = Incidence(d, agg, a)

    free: BoolArray
    """Flows that move anyway (see :func:`fix_pods`)."""

    def first_free(self, flows: set[int]) -> list[int]:
        """``flows`` in search order: those that move anyway first, then by number."""
        return sorted(flows, key=lambda f: (not self.free[f], f))

    def recolour(self, f: int, j: int) -> None:
        shape, old = self.shape, int(self.agg[f])
        u, v = int(self.s[f]), int(self.d[f])
        self.out[u, old] -= 1
        self.out[u, j] += 1
        self.into[v, old] -= 1
        self.into[v, j] += 1
        if self.far[f]:
            self.pod_out[shape.pod[u], old] -= 1
            self.pod_out[shape.pod[u], j] += 1
            self.pod_in[shape.pod[v], old] -= 1
            self.pod_in[shape.pod[v], j] += 1
        self.by_out.move(f, u, old, j)
        self.by_in.move(f, v, old, j)
        self.agg[f] = j


def _chain(counts: _Counts, rooms: tuple[IntArray, ...], f: int, j: int, k: int) -> list[int]:
    """The flows to recolour with ``f`` (``k -> j``), alternately ``j -> k`` (into a leaf) and
    ``k -> j`` (out of one), ending ``j -> k``; ``[]`` if the search finds no chain."""
    up = rooms[0]
    pod_up = rooms[2]
    pod = counts.shape.pod
    u, v = int(counts.s[f]), int(counts.d[f])
    u_free = bool(counts.out[u, j] < up[u, j])  # u takes one more j: no need to close at u
    if u_free and counts.into[v, j] < rooms[1][v, j]:
        return [f]
    # parent[z] = (t, g, h): in-side leaf z was reached from in-side leaf t, g = y -> t
    # turning j -> k and h = y -> z turning k -> j.
    parent: dict[int, tuple[int, int, int]] = {v: (-1, -1, -1)}
    seen_out: set[int] = set()
    queue = deque([v])
    while queue:
        t = queue.popleft()
        for g in counts.first_free(counts.by_in.get(t, j)):
            y = int(counts.s[g])
            if y in seen_out:
                continue
            seen_out.add(y)
            py = int(pod[y])
            ends = y == u or (
                u_free and counts.out[y, k] < up[y, k] and counts.pod_out[py, k] < pod_up[py, k]
            )
            if ends:
                chain = [g]
                at = t
                while at != v:
                    before, g2, h = parent[at]
                    chain += [h, g2]
                    at = before
                found = [f, *reversed(chain)]
                if _lowers(counts, rooms, found, j, k):
                    return found
                continue
            for h in counts.first_free(counts.by_out.get(y, k)):
                z = int(counts.d[h])
                if z not in parent:
                    parent[z] = (t, g, h)
                    queue.append(z)
    return []


def _lowers(counts: _Counts, rooms: tuple[IntArray, ...], chain: list[int], j: int, k: int) -> bool:
    """True when recolouring ``chain`` (``k -> j``, ``j -> k``, alternately) lowers the pods'
    total excess over their rooms and puts no pod over that was within (intra-pod flows in
    the chain shift their pod's counts between ``j`` and ``k``)."""
    pod, far = counts.shape.pod, counts.far
    flows = np.asarray(chain, dtype=np.int64)
    cross = far[flows]
    sign = np.where(np.arange(len(flows)) % 2 == 0, 1, -1)[cross]  # +1: one more on j
    before_after = []
    for ends, have, room in (
        (counts.s, counts.pod_out, rooms[2]),
        (counts.d, counts.pod_in, rooms[3]),
    ):
        delta = np.bincount(pod[ends[flows[cross]]], weights=sign, minlength=have.shape[0])
        new = have[:, [j, k]] + np.column_stack([delta, -delta]).astype(np.int64)
        before_after.append((np.maximum(have[:, [j, k]] - room[:, [j, k]], 0),
                             np.maximum(new - room[:, [j, k]], 0)))  # fmt: skip
    worse = any(np.any(after > before) for before, after in before_after)
    lower = sum(int(after.sum()) for _, after in before_after) < sum(
        int(before.sum()) for before, _ in before_after
    )
    return lower and not worse


def fix_pods(
    shape: FatTreeShape,
    ok: BoolArray,
    ends: tuple[IntArray, IntArray],
    agg: IntArray,
    target: int,
    free: BoolArray | None = None,
) -> IntArray | None:
    """Recolour the cross-leaf flows ``ends`` (agg index ``agg`` each, every leaf link within
    ``target`` on usable links) so no pod has more cross-pod flows on an agg than ``target``
    times its usable core links, both ways; ``None`` if some pod stays over (module doc).
    ``ok`` marks usable resources (the pad last, unusable). ``free`` marks flows that move
    anyway (a re-plan: their old path is gone): chains take them first and are compared by
    the other flows they recolour, so a re-plan moves fewer."""
    s, d = ends
    agg = agg.copy()
    far = shape.pod[s] != shape.pod[d]
    leaves = np.flatnonzero(shape.is_leaf)
    up = np.zeros(shape.up.shape, dtype=np.int64)
    down = np.zeros(shape.down.shape, dtype=np.int64)
    up[leaves] = target * ok[shape.up[leaves]]
    down[leaves] = target * ok[shape.down[leaves]]
    pod_up = target * ok[shape.agg_up].sum(axis=2)
    pod_down = target * ok[shape.agg_down].sum(axis=2)
    rooms = (up, down, pod_up, pod_down)
    excess = np.maximum(_pod_counts(shape, s, d, agg, far)[0] - pod_up, 0)
    excess += np.maximum(_pod_counts(shape, s, d, agg, far)[1] - pod_down, 0)
    if not excess.any():
        return agg
    counts = _Counts(shape, s, d, agg, far)
    counts.free = np.zeros(s.size, dtype=bool) if free is None else free
    intra = np.flatnonzero(~far)
    intra_pod = shape.pod[s[intra]]
    for _ in range(MAX_CHAINS):
        over = np.maximum(counts.pod_out - pod_up, 0) + np.maximum(counts.pod_in - pod_down, 0)
        if not over.any():
            return counts.agg
        p, j = (int(x) for x in np.unravel_index(int(np.argmax(over)), over.shape))
        slack = np.minimum(pod_up[p] - counts.pod_out[p], pod_down[p] - counts.pod_in[p])
        mine = intra[intra_pod == p]
        colour = counts.agg[mine]
        usable = mine[(colour != j) & (slack[colour] > 0)]
        order = usable[np.argsort(-slack[counts.agg[usable]], kind="stable")]
        best: list[int] = []
        found = 0
        for f in order[:MAX_STARTS].tolist():  # the shortest chain of a few starts
            chain = _chain(counts, rooms, f, j, int(counts.agg[f]))
            found += bool(chain)
            if chain and (not best or _cost(counts, chain) < _cost(counts, best)):
                best = chain
            if best and (_cost(counts, best) <= SHORT_CHAIN or found >= COMPARED):
                break
        if not best:
            return None
        k = int(counts.agg[best[0]])
        for n, g in enumerate(best):
            counts.recolour(g, j if n % 2 == 0 else k)
    return None


def _cost(counts: _Counts, chain: list[int]) -> int:
    """Flows of ``chain`` that would not have moved anyway."""
    return int(np.count_nonzero(~counts.free[np.asarray(chain, dtype=np.int64)]))


def _pod_counts(
    shape: FatTreeShape, s: IntArray, d: IntArray, agg: IntArray, far: BoolArray
) -> tuple[IntArray, IntArray]:
    a, p = shape.aggs, shape.pods
    out = np.bincount(shape.pod[s[far]] * a + agg[far], minlength=p * a).reshape(p, a)
    into = np.bincount(shape.pod[d[far]] * a + agg[far], minlength=p * a).reshape(p, a)
    return out, into
