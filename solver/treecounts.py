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
    alive: list[int]
    """Per agg index ``j``: its live options as bits (core ``g`` across pods, bit 0 within)."""


def _row_bits(live: BoolArray) -> list[int]:
    """Each row of ``live`` as the bits of one integer (column ``g`` is bit ``g``).

    Asked once per pod pair (:meth:`Counts.layers`), and most have no lost core link: their
    rows are all ones without packing them. Packing every leaf pair's rows made building its
    layers 64 us at 16,384 GPUs instead of 14 (thousands of pairs a re-plan)."""
    rows, size = live.shape
    if live.all():
        return [(1 << size) - 1] * rows
    width = (size + 7) // 8
    bits = np.packbits(live, axis=1, bitorder="little").tobytes()
    return [int.from_bytes(bits[i : i + width], "little") for i in range(0, len(bits), width)]


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
        self.target = target
        self.room = np.where(ok, target, 0).astype(np.int64)
        self.room[self.pad] = BIG
        self.ok = ok.copy()
        self.ok[self.pad] = True
        self.s, self.t = s, t
        self.far = shape.pod[s] != shape.pod[t]
        self.width = np.where(self.far, shape.aggs * shape.cores_per_group, shape.aggs)
        self._layers: dict[tuple[int, int], Layers] = {}
        self._flow_layers: dict[int, Layers] = {}
        self._live_cores: dict[tuple[int, int], list[int]] = {}
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
        mine = self._flow_layers.get(f)
        if mine is not None:
            return mine
        key = (int(self.s[f]), int(self.t[f]))
        got = self._layers.get(key)
        if got is None:
            sh, ok = self.shape, self.ok
            s, t = key
            up, down = sh.up[s], sh.down[t]
            dead = ~(ok[up] & ok[down])
            if self.far[f]:
                pods = (int(sh.pod[s]), int(sh.pod[t]))
                cu, cd = sh.agg_up[pods[0]], sh.agg_down[pods[1]]
                live = ok[cu] & ok[cd]
                cores = self._live_cores.get(pods)
                if cores is None:  # one pod pair's live cores serve all its leaf pairs
                    cores = self._live_cores[pods] = _row_bits(live)
                lost = dead.tolist()  # an agg lost at a leaf end: none of its cores
                alive = (
                    [0 if d else c for d, c in zip(lost, cores, strict=True)]
                    if any(lost)
                    else cores
                )
                got = Layers(up, down, cu, cd, (dead[:, None] | ~live).ravel(), alive)
            else:
                alive = (~dead).astype(int).tolist()
                got = Layers(up, down, None, None, dead, alive)
            self._layers[key] = got
        self._flow_layers[f] = got
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

    def escapes(self, f: int) -> list[tuple[int, tuple[int, ...]]]:
        """The options of ``f`` that would leave at most one link over its room were ``f`` to
        take them, one per link so left (none first, then by link id): ``(option, links)``.
        Of the options leaving the same link over, the previous one (a return) where it is
        among them, else the lowest.

        Why beside :meth:`blocked`: this is the step of every chain search, asked for each
        flow on each link a search visits (2,470 times in a 3-tier 4,096-GPU light-uplink
        re-plan). Counting every option's full links (``blocked``: 0.08-0.1 ms on that fabric,
        ``A = G = 32``, 1,024 options) and then grouping them by a sort cost twice that; the
        groups follow from the layers instead, about 0.05 ms: a free option needs both its
        leaf links and both agg-core links with room, a leaf link over groups every core of
        its agg with room, and a full agg-core link is a group of one option. Only the aggs
        with at most one leaf link over are looked at further, their cores' fullness as the
        bits of one integer per agg."""
        lay = self.layers(f)
        load, full = self.load, self.target  # a live link is full at the target
        k, back = int(self.option[f]), int(self.prior[f])
        core_up, core_down = lay.core_up, lay.core_down
        size = 1 if core_up is None else self.shape.cores_per_group
        kj, kg = divmod(k, size) if k >= 0 else (-1, -1)
        bj, bg = divmod(back, size) if back >= 0 else (-1, -1)
        # Leaf links over were f to take agg j: full, or over already for its own agg (a
        # move of its core only adds nothing to its leaf links). Lost ones: not alive.
        over_up, over_down = load[lay.up] >= full, load[lay.down] >= full
        if kj >= 0:
            over_up[kj] = load[lay.up[kj]] > full
            over_down[kj] = load[lay.down[kj]] > full
        rows = (~(over_up & over_down)).nonzero()[0]
        if not rows.size:
            return []
        ou, od = over_up.tolist(), over_down.tolist()
        up, down = lay.up, lay.down
        alive = lay.alive
        free = -1  # the free option: a return where there is one, else the lowest
        found: list[tuple[int, int]] = []  # (link left over, option)
        if core_up is None or core_down is None:
            for j in rows.tolist():
                if not alive[j] or j == k:
                    continue
                if ou[j] or od[j]:
                    found.append((int(down[j] if od[j] else up[j]), j))
                elif free < 0 or j == back:
                    free = j
        else:
            # Only those aggs' cores matter (a full 4,096-GPU fabric: a few of 32), as bits.
            width = (size + 7) // 8
            busy = (
                np.packbits(load[core_up[rows]] >= full, axis=1, bitorder="little").tobytes(),
                np.packbits(load[core_down[rows]] >= full, axis=1, bitorder="little").tobytes(),
            )
            for i, j in enumerate(rows.tolist()):
                live = alive[j] & ~(1 << kg) if j == kj else alive[j]
                if not live:
                    continue
                bits_up = int.from_bytes(busy[0][i * width : (i + 1) * width], "little")
                bits_down = int.from_bytes(busy[1][i * width : (i + 1) * width], "little")
                both = ~(bits_up | bits_down) & live
                if ou[j] or od[j]:  # that leaf link: any core with room, a return first
                    if both:
                        g = bg if j == bj and both >> bg & 1 else (both & -both).bit_length() - 1
                        found.append((int(down[j] if od[j] else up[j]), j * size + g))
                    continue
                if both:
                    if free < 0:
                        free = j * size + (both & -both).bit_length() - 1
                    if j == bj and both >> bg & 1:
                        free = back
                one = (bits_up ^ bits_down) & live
                while one:
                    low = one & -one
                    g = low.bit_length() - 1
                    ends = core_down if bits_down & low else core_up
                    found.append((int(ends[j, g]), j * size + g))
                    one ^= low
        found.sort()
        out: list[tuple[int, tuple[int, ...]]] = [(free, ())] if free >= 0 else []
        out += [(option, (link,)) for link, option in found]
        return out

    def held(self, f: int) -> tuple[int, ...]:
        """The links flow ``f``'s current option uses."""
        return tuple(r for r in self.path[f].tolist() if r != self.pad)

    def taken(self, f: int, k: int) -> tuple[int, ...]:
        """The links option ``k`` of flow ``f`` would use."""
        return tuple(r for r in self.resources(f, k) if r != self.pad)

    def apply(self, gone: tuple[int, ...], taken: tuple[int, ...], sign: int) -> None:
        """A priced chain's moves on the loads only (a search prices many chains, makes one),
        as the links its flows leave and take: found once per move, not per chain priced."""
        load = self.load
        for r in gone:
            load[r] -= sign
        for r in taken:
            load[r] += sign

    def moves(self) -> int:
        return int(np.count_nonzero((self.prior >= 0) & (self.option != self.prior)))
