"""A fat-tree's flows as counts per switch link, by option (agg index, core): the state the
re-plan chains of :mod:`solver.treemoves` search over.

Why its own module: the chains ask, thousands of times per re-plan, "which options of this flow
would overfill which link"; answering that from a path table (:mod:`solver.chains` over the
lazily built candidates) cost most of a 3-tier re-plan. Here a flow's options are read off the
fat-tree's tables by layer: the leaf links per agg index ``j`` (``A`` of them) and the agg-core
links per ``(j, g)`` (``A x G``), so a question costs ``2A + 2AG`` look-ups and no path is built.
An option is ``j`` within a pod and ``j * G + g`` across pods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.fattree import FatTreeShape
from topology.index import BoolArray, IntArray

__all__ = ["BIG", "Chain", "Counts", "Layers"]

BIG = 1 << 30
"""A count no option reaches: the current option and lost ones."""

Chain = list[tuple[int, int]]
"""Moves ``(flow, option)`` in the order made."""


@dataclass(frozen=True)
class Layers:
    """A leaf pair's option resources: leaf links per agg index ``j`` (``[A]``), agg-core
    links per ``(j, g)`` (``[A, G]``, ``None`` within a pod), lost options (flat)."""

    up: IntArray
    down: IntArray
    core_up: IntArray | None
    core_down: IntArray | None
    dead: BoolArray


class Counts:
    """Counts per switch resource and the option of each flow, while repairing."""

    def __init__(
        self,
        shape: FatTreeShape,
        ok: BoolArray,
        ends: tuple[IntArray, IntArray],
        option: IntArray,
        target: int,
    ) -> None:
        s, t = ends
        self.shape = shape
        self.pad = ok.size - 1  # a column no option fills (room without end)
        self.room = np.where(ok, target, 0).astype(np.int64)
        self.room[self.pad] = BIG
        self.ok = ok.copy()
        self.ok[self.pad] = True
        self.s, self.t = s, t
        self.far = shape.pod[s] != shape.pod[t]
        self.width = np.where(self.far, shape.aggs * shape.cores_per_group, shape.aggs)
        self._layers: dict[tuple[int, int], Layers] = {}
        self.option = option
        self.prior = option.copy()
        self.load = np.zeros(ok.size, dtype=np.int64)
        self.path = np.full((s.size, 4), self.pad, dtype=np.int64)
        placed = np.flatnonzero(option >= 0)
        if placed.size:
            self.path[placed] = self.paths(placed, option[placed])
            np.add.at(self.load, self.path[placed].ravel(), 1)
        self.load[self.pad] = 0
        flat = self.path.ravel()
        order = np.argsort(flat, kind="stable")
        self._sorted = (flat[order], order // 4)
        self._users: dict[int, set[int]] = {}
        self._changed: set[int] = set()

    def paths(self, flows: IntArray, option: IntArray) -> IntArray:
        """Resources of ``option`` for each of ``flows`` (pad-filled for intra-pod ones)."""
        sh = self.shape
        g_count = sh.cores_per_group
        far = self.far[flows]
        j = np.where(far, option // g_count, option)
        g = np.where(far, option % g_count, 0)
        s, t = self.s[flows], self.t[flows]
        out = np.full((flows.size, 4), self.pad, dtype=np.int64)
        out[:, 0] = sh.up[s, j]
        out[:, 3] = sh.down[t, j]
        out[far, 1] = sh.agg_up[sh.pod[s[far]], j[far], g[far]]
        out[far, 2] = sh.agg_down[sh.pod[t[far]], j[far], g[far]]
        return out

    def layers(self, f: int) -> Layers:
        """The resources of every option of flow ``f`` by layer (shared by its leaf pair)."""
        key = (int(self.s[f]), int(self.t[f]))
        got = self._layers.get(key)
        if got is None:
            sh, ok = self.shape, self.ok
            s, t = key
            up, down = sh.up[s], sh.down[t]
            dead = ~(ok[up] & ok[down])
            if self.far[f]:
                cu, cd = sh.agg_up[sh.pod[s]], sh.agg_down[sh.pod[t]]
                dead = (dead[:, None] | ~(ok[cu] & ok[cd])).ravel()
                got = Layers(up, down, cu, cd, dead)
            else:
                got = Layers(up, down, None, None, dead)
            self._layers[key] = got
        return got

    def resources(self, f: int, k: int) -> list[int]:
        """The resources of option ``k`` of flow ``f`` (pad-filled within a pod)."""
        lay = self.layers(f)
        if lay.core_up is None or lay.core_down is None:
            return [int(lay.up[k]), self.pad, self.pad, int(lay.down[k])]
        j, g = divmod(k, self.shape.cores_per_group)
        return [int(lay.up[j]), int(lay.core_up[j, g]), int(lay.core_down[j, g]), int(lay.down[j])]

    def on(self, r: int) -> set[int]:
        """Flows whose current option uses resource ``r`` (a live set: do not change it)."""
        users = self._users.get(r)
        if users is None:
            keys, owners = self._sorted
            lo, hi = np.searchsorted(keys, [r, r + 1]).tolist()
            maybe = set(owners[lo:hi].tolist()) | self._changed
            near = np.fromiter(maybe, np.int64, count=len(maybe))
            users = set(near[(self.path[near] == r).any(axis=1)].tolist())
            self._users[r] = users
        return users

    def set(self, f: int, k: int) -> None:
        """Flow ``f`` takes option ``k`` (``-1``: none)."""
        old = self.path[f]
        for r in old.tolist():
            if r != self.pad:
                self.load[r] -= 1
                users = self._users.get(r)
                if users is not None:
                    users.discard(f)
        new = self.resources(f, k) if k >= 0 else [self.pad] * 4
        for r in new:
            if r != self.pad:
                self.load[r] += 1
                users = self._users.get(r)
                if users is not None:
                    users.add(f)
        self.path[f] = new
        self.option[f] = k
        self._changed.add(f)

    def shift(self, chain: Chain, sign: int) -> None:
        """The chain's moves on the loads only (a search prices many chains, makes one)."""
        load = self.load
        for f, k in chain:
            for r in self.path[f].tolist():
                load[r] -= sign
            for r in self.resources(f, k):
                load[r] += sign
        load[self.pad] = 0

    def make(self, chain: Chain) -> list[tuple[int, int]]:
        undo = [(f, int(self.option[f])) for f, _ in chain]
        for f, k in chain:
            self.set(f, k)
        return undo

    def unmake(self, undo: list[tuple[int, int]]) -> None:
        for f, k in reversed(undo):
            self.set(f, k)

    def price(self, f: int, k: int) -> int:
        """New moves of ``f`` taking ``k``: one off its previous option, minus one back."""
        before = int(self.prior[f])
        if before < 0:
            return 0
        if k == before:
            return -1
        return 1 if self.option[f] == before else 0

    def blocked(self, f: int) -> tuple[IntArray, IntArray, IntArray]:
        """For each option of ``f``: how many of its links would be over their room were
        ``f`` to take it (``BIG`` for its current option and lost ones), and the full links
        with the largest and the smallest id (``-1`` for none; both the full one for a
        count of one, both full ones for a count of two). Layer by layer: the leaf
        links per agg index ``j``, the agg-core links per ``(j, g)``; a flow changing only its
        core adds nothing to its leaf links."""
        lay = self.layers(f)
        load, room = self.load, self.room
        k = int(self.option[f])
        far = lay.core_up is not None
        add = np.ones(self.shape.aggs, dtype=np.int64)
        if k >= 0:
            add[k // self.shape.cores_per_group if far else k] = 0
        up = load[lay.up] + add > room[lay.up]
        down = load[lay.down] + add > room[lay.down]
        count = up.astype(np.int64) + down
        hi = np.where(down, lay.down, np.where(up, lay.up, -1))
        lo = np.where(up, lay.up, hi)
        if lay.core_up is not None and lay.core_down is not None:
            cu = load[lay.core_up] >= room[lay.core_up]
            cd = load[lay.core_down] >= room[lay.core_down]
            count = (count[:, None] + cu + cd).ravel()
            top = np.where(cd, lay.core_down, np.where(cu, lay.core_up, -1))
            low = np.where(cu, lay.core_up, top)
            hi = np.maximum(hi[:, None], top).ravel()
            lo = np.where(
                lo[:, None] < 0, low, np.where(low < 0, lo[:, None], np.minimum(lo[:, None], low))
            ).ravel()
        count[lay.dead] = BIG
        if k >= 0:
            count[k] = BIG
        return count, hi, lo

    def moves(self) -> int:
        return int(np.count_nonzero((self.prior >= 0) & (self.option != self.prior)))
