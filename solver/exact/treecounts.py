"""A fat-tree's flows as counts per switch link, by option (agg index, core): the state the
re-plan chains of :mod:`solver.repair.treemoves` search over.

Why its own module: the chains ask, thousands of times per re-plan, "which options of this flow
would overfill which link"; answering that from a path table (:mod:`solver.repair.chains` over the
lazily built candidates) cost most of a 3-tier re-plan. Here a flow's options are read off the
fat-tree's tables by layer: the leaf links per agg index ``j`` (``A`` of them) and the agg-core
links per ``(j, g)`` (``A x G``), so a question costs ``2A + 2AG`` look-ups and no path is built.
An option is ``j`` within a pod and ``j * G + g`` across pods.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from solver.exact.fattree import FatTreeShape
from topology.index import BoolArray, IntArray

__all__ = ["BIG", "Chain", "Counts", "Layers"]

BIG = 1 << 30
"""A count no option reaches: the current option and lost ones."""

Chain = list[tuple[int, int]]
"""Moves ``(flow, option)`` in the order made."""


@dataclass(frozen=True)
class Layers:
    """A leaf pair's option resources: leaf links per agg index ``j`` (``[A]``), agg-core
    links per ``(j, g)`` (``[A, G]``, ``None`` within a pod), lost ones."""

    up: IntArray
    down: IntArray
    core_up: IntArray | None
    core_down: IntArray | None
    lost_aggs: BoolArray
    """Per agg index ``j``: a leaf link of it is lost."""
    lost_cores: BoolArray | None
    """Per ``(j, g)``: an agg-core link of it is lost (shared by a pod pair's leaf pairs)."""
    alive: list[int]
    """Per agg index ``j``: its live options as bits (core ``g`` across pods, bit 0 within)."""
    ends: tuple[list[int], list[int]]
    """``up`` and ``down`` as lists (read one at a time in a chain step)."""
    slots: tuple[int, int, int, int]
    """Where :attr:`Counts.full` holds this pair's full leaf links (over ``j``: up at the
    source leaf, down at the destination) and, across pods, the first agg's full agg-core
    links (over ``g``: up in the source pod, down in the destination; ``-1`` within a pod)."""

    @property
    def dead(self) -> BoolArray:
        """Lost options, flat (by option): asked by :meth:`Counts.blocked` only, so made there
        rather than for each of the hundreds of leaf pairs a chain search meets."""
        if self.lost_cores is None:
            return self.lost_aggs
        out: BoolArray = (self.lost_aggs[:, None] | self.lost_cores).ravel()
        return out


def _row_bits(live: BoolArray) -> list[int]:
    """Each row of ``live`` as the bits of one integer (column ``g`` is bit ``g``).

    Asked once per pod pair (:meth:`Counts.layers`), and most have no lost core link: their
    rows are all ones without packing them. Packing every leaf pair's rows made building its
    layers 64 us at 16,384 GPUs instead of 14 (thousands of pairs a re-plan)."""
    rows, size = live.shape
    if live.all():
        return [(1 << size) - 1] * rows
    return _row_ints(live)


def _tables(shape: FatTreeShape) -> tuple[IntArray, ...]:
    """The link tables whose rows :attr:`Counts.full` holds: leaf up, leaf down (rows per
    node), agg up, agg down (rows per pod and agg)."""
    cores = shape.cores_per_group
    return (shape.up, shape.down, shape.agg_up.reshape(-1, cores),
            shape.agg_down.reshape(-1, cores))  # fmt: skip


_SLOTS: weakref.WeakKeyDictionary[FatTreeShape, tuple[tuple[int, ...], list[int], list[int]]]
_SLOTS = weakref.WeakKeyDictionary()
"""Per shape (one per cabling, shared by its re-plans): where each link's fullness bit is."""


def _slots(shape: FatTreeShape, size: int) -> tuple[tuple[int, ...], list[int], list[int]]:
    """The first row of each of :func:`_tables` in :attr:`Counts.full`, and per resource its
    row there (``-1``: none) and its bit as a mask. Remembered per shape: as lists they took
    3 ms of every 16,384-GPU re-plan's two counts."""
    got = _SLOTS.get(shape)
    if got is None or len(got[1]) != size:
        tables = _tables(shape)
        bases = tuple(np.cumsum([0] + [t.shape[0] for t in tables[:-1]]).tolist())
        slot = np.full(size, -1, dtype=np.int64)
        bit = np.zeros(size, dtype=np.int64)
        for base, table in zip(bases, tables, strict=True):
            rows, cols = np.nonzero(table >= 0)
            links = table[rows, cols]
            slot[links], bit[links] = base + rows, cols
        got = _SLOTS[shape] = (bases, slot.tolist(), np.left_shift(1, bit).tolist())
    return got


def _row_ints(bits: BoolArray) -> list[int]:
    """Each row of ``bits`` as one integer (column ``g`` is bit ``g``); rows of at most 64
    columns at once, as unsigned 64-bit words."""
    rows, size = bits.shape
    packed = np.packbits(bits, axis=1, bitorder="little")
    if size <= 64:
        words = np.zeros((rows, 8), dtype=np.uint8)
        words[:, : packed.shape[1]] = packed
        out: list[int] = words.view("<u8").ravel().tolist()
        return out
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


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
        self._live_cores: dict[tuple[int, int], tuple[list[int], BoolArray]] = {}
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
        self._onto: dict[int, set[int]] = {}
        self._moves: dict[int, dict[int, tuple[tuple[int, ...], tuple[int, ...]]]] = {}
        self._fullness(shape)

    def _fullness(self, shape: FatTreeShape) -> None:
        """:attr:`full`: for each leaf's up links, each leaf's down links and each agg's core
        links up and down, which are full (load at the target) as the bits of one integer,
        kept as loads change; and where each link's bit is (:attr:`slot`, :attr:`mask`).

        Why: a chain step (:meth:`escapes`) asks which of a flow's leaf and agg-core links
        are full for every flow on every link a search visits; reading that off integers
        kept current costs a few bit operations per agg, where gathering and packing the
        loads each time was most of the step (3-tier 4,096 GPUs: 2,470 steps a re-plan)."""
        self._bases, self.slot, self.mask = _slots(shape, self.pad + 1)
        at_target = self.load >= self.target
        full: list[int] = []
        for table in _tables(shape):
            full += _row_ints(at_target[np.maximum(table, 0)] & (table >= 0))
        self.full = full
        """Bits of full links per leaf and per agg (see :meth:`_fullness`)."""
        self.count: list[int] = self.load.tolist()
        """:attr:`load` as a list, for the search's reads one link at a time."""
        self.rooms: list[int] = self.room.tolist()

    def bump(self, links: tuple[int, ...] | list[int], by: int) -> None:
        """Each of ``links``' loads changes by ``by`` (its count, its array entry and its
        fullness bit: a chain search does this for every move it prices)."""
        load, count, slot, mask, full, target = (
            self.load,
            self.count,
            self.slot,
            self.mask,
            self.full,
            self.target,
        )
        for r in links:
            now = count[r] + by
            count[r] = now
            load[r] = now
            at = slot[r]
            if at >= 0:
                if now >= target:
                    full[at] |= mask[r]
                else:
                    full[at] &= ~mask[r]

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
                both = self._live_cores.get(pods)
                if both is None:  # one pod pair's live cores serve all its leaf pairs
                    live = ok[cu] & ok[cd]
                    both = self._live_cores[pods] = (_row_bits(live), ~live)
                cores, gone = both
                lost = dead.tolist()  # an agg lost at a leaf end: none of its cores
                alive = (
                    [0 if d else c for d, c in zip(lost, cores, strict=True)]
                    if any(lost)
                    else cores
                )
                size, bases = sh.aggs, self._bases
                slots = (bases[0] + s, bases[1] + t, bases[2] + pods[0] * size,
                         bases[3] + pods[1] * size)  # fmt: skip
                got = Layers(up, down, cu, cd, dead, gone, alive, (up.tolist(), down.tolist()),
                             slots)  # fmt: skip
            else:
                alive = (~dead).astype(int).tolist()
                slots = (self._bases[0] + s, self._bases[1] + t, -1, -1)
                got = Layers(up, down, None, None, dead, None, alive,
                             (up.tolist(), down.tolist()), slots)  # fmt: skip
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
        """Flows whose current option uses resource ``r`` (a live set: do not change it).

        Found once per resource and kept current by :meth:`set`: the flows there at the
        start that have not moved, and those that moved onto it since (:attr:`_onto`, kept by
        :meth:`set`). Asked for about 1,000 resources a re-plan; gathering the changed flows'
        paths with numpy each time made it 10 us, a tenth of a 4,096-GPU re-plan."""
        users = self._users.get(r)
        if users is None:
            keys, owners = self._sorted
            lo, hi = int(keys.searchsorted(r)), int(keys.searchsorted(r + 1))
            changed = self._changed
            users = {g for g in owners[lo:hi].tolist() if g not in changed}
            users |= self._onto.get(r, set())
            self._users[r] = users
        return users

    def set(self, f: int, k: int) -> None:
        """Flow ``f`` takes option ``k`` (``-1``: none)."""
        old = [r for r in self.path[f].tolist() if r != self.pad]
        self.bump(old, -1)
        onto = self._onto
        for r in old:
            users = self._users.get(r)
            if users is not None:
                users.discard(f)
            there = onto.get(r)
            if there is not None:
                there.discard(f)
        new = self.resources(f, k) if k >= 0 else [self.pad] * 4
        self.bump([r for r in new if r != self.pad], 1)
        for r in new:
            if r != self.pad:
                users = self._users.get(r)
                if users is not None:
                    users.add(f)
                there = onto.get(r)
                if there is None:
                    onto[r] = {f}
                else:
                    there.add(f)
        self.path[f] = new
        self.option[f] = k
        self._changed.add(f)
        self._moves.pop(f, None)

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
        flow on each link a search visits (1,452 times in a 3-tier 4,096-GPU light-uplink
        re-plan). Counting every option's full links (``blocked``: 0.08-0.1 ms on that fabric,
        ``A = G = 32``, 1,024 options) and then grouping them by a sort cost twice that; the
        groups follow from the layers instead: a free option needs both its leaf links and
        both agg-core links with room, a leaf link over groups every core of its agg with
        room, and a full agg-core link is a group of one option. The leaf links' and each
        agg's core links' fullness are the bits of an integer kept as loads change
        (:attr:`full`), so the step is bit operations per agg; gathering and packing the loads
        here made it about 0.03 ms, twice as long."""
        lay = self.layers(f)
        k, back = int(self.option[f]), int(self.prior[f])
        core_up, core_down = lay.core_up, lay.core_down
        size = 1 if core_up is None else self.shape.cores_per_group
        kj, kg = divmod(k, size) if k >= 0 else (-1, -1)
        bj, bg = divmod(back, size) if back >= 0 else (-1, -1)
        full, fulls = self.target, self.full  # a live link is full at the target
        at_up, at_down, at_cu, at_cd = lay.slots
        up, down = lay.ends
        # Leaf links over were f to take agg j: full, or over already for its own agg (a
        # move of its core only adds nothing to its leaf links). Lost ones: not alive.
        ou, od = fulls[at_up], fulls[at_down]
        if kj >= 0:
            mine = 1 << kj
            ou = ou & ~mine | (mine if self.count[up[kj]] > full else 0)
            od = od & ~mine | (mine if self.count[down[kj]] > full else 0)
        rows = ~(ou & od) & ((1 << self.shape.aggs) - 1)
        if not rows:
            return []
        alive = lay.alive
        free = -1  # the free option: a return where there is one, else the lowest
        found: list[tuple[int, int]] = []  # (link left over, option)
        while rows:
            low = rows & -rows
            rows ^= low
            j = low.bit_length() - 1
            over_up, over_down = ou & low, od & low
            if core_up is None or core_down is None:
                if not alive[j] or j == k:
                    continue
                if over_up or over_down:
                    found.append((down[j] if over_down else up[j], j))
                elif free < 0 or j == back:
                    free = j
                continue
            live = alive[j] & ~(1 << kg) if j == kj else alive[j]
            if not live:
                continue
            bits_up, bits_down = fulls[at_cu + j], fulls[at_cd + j]
            both = ~(bits_up | bits_down) & live
            if over_up or over_down:  # that leaf link: any core with room, a return first
                if both:
                    g = bg if j == bj and both >> bg & 1 else (both & -both).bit_length() - 1
                    found.append((down[j] if over_down else up[j], j * size + g))
                continue
            if both:
                if free < 0:
                    free = j * size + (both & -both).bit_length() - 1
                if j == bj and both >> bg & 1:
                    free = back
            one = (bits_up ^ bits_down) & live
            while one:
                bit = one & -one
                g = bit.bit_length() - 1
                ends = core_down if bits_down & bit else core_up
                found.append((int(ends[j, g]), j * size + g))
                one ^= bit
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

    def move(self, f: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The links flow ``f`` would leave and take moving to option ``k``, each without the
        links both options use (a move of the core only changes two links, not eight).

        Remembered per flow until its option changes (:meth:`set`): a search prices the same
        moves over and over, and so do the searches of one repair (3-tier 4,096 GPUs, a light
        uplink lost: 4,100 moves priced, found in about 80 searches)."""
        mine = self._moves.get(f)
        if mine is None:
            mine = self._moves[f] = {}
        got = mine.get(k)
        if got is None:
            held, taken = self.held(f), self.taken(f, k)
            got = mine[k] = (tuple(r for r in held if r not in taken),
                             tuple(r for r in taken if r not in held))  # fmt: skip
        return got

    def apply(self, gone: tuple[int, ...], taken: tuple[int, ...], sign: int) -> None:
        """A priced chain's moves on the loads only (a search prices many chains, makes one),
        as the links its flows leave and take: found once per move, not per chain priced.

        :meth:`bump`'s work for both at once (this is the inner step of a search), on
        :attr:`count` and :attr:`full` only: a search reads nothing else, and it undoes every
        move it applies before it returns, so the array :attr:`load` (read between searches)
        is left alone (writing it was a tenth of this)."""
        count, slot, mask, full, target = (self.count, self.slot, self.mask, self.full,
                                           self.target)  # fmt: skip
        for links, by in ((gone, -sign), (taken, sign)):
            for r in links:
                now = count[r] + by
                count[r] = now
                at = slot[r]
                if at >= 0:
                    if now >= target:
                        full[at] |= mask[r]
                    else:
                        full[at] &= ~mask[r]

    def moves(self) -> int:
        return int(np.count_nonzero((self.prior >= 0) & (self.option != self.prior)))
