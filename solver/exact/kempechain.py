"""Place one more edge in a bipartite multigraph coloured within rooms, by an alternating chain.

Why: a re-plan on a degraded fat-tree keeps almost every flow's colour (its agg at the leaves,
its core at the pods) and must colour a few flows whose path is gone, where the vertices they
join have room in *different* colours. Recolouring the whole graph would move hundreds of
flows; the classic step of bipartite edge colouring (König's proof) moves a few: put the new
edge ``p -> q`` on colour ``a`` (room at ``p``), then walk from ``q`` alternately recolouring an
``a`` edge to ``b`` (room at ``q``) and a ``b`` edge to ``a`` until a vertex has room for what it
gained. With rooms (several edges per vertex and colour, none for a lost link) the walk is
checked as it goes and undone if it gets stuck, and the next pair of colours is tried.

Used by :mod:`solver.repair.degraded` for both stages: leaves and agg indices (rooms: leaf links),
and per core group pods and cores (rooms: agg-core links).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topology.index import IntArray

__all__ = ["MAX_STEPS", "MAX_TRIES", "Colouring", "Incidence"]

MAX_STEPS = 256
"""Edges one chain may recolour before it is abandoned."""

MAX_TRIES = 16
"""Colour pairs ``(a, b)`` tried for one new edge."""


class Incidence:
    """Edges by (vertex, colour), for walks that ask about a few vertices of many: the first
    colours sorted once (one ``argsort``), a set per key made when first asked or changed."""

    def __init__(self, vertex: IntArray, colour: IntArray, colours: int) -> None:
        self._width = colours + 1  # colour -1 (not placed) has a key too
        key = vertex * self._width + colour + 1
        self._order = np.argsort(key, kind="stable")
        self._sorted = key[self._order]
        self._sets: dict[int, set[int]] = {}

    def get(self, v: int, c: int) -> set[int]:
        """The edges at vertex ``v`` coloured ``c`` (a live set: do not change it)."""
        k = v * self._width + c + 1
        found = self._sets.get(k)
        if found is None:
            lo, hi = np.searchsorted(self._sorted, [k, k + 1])
            found = set(self._order[lo:hi].tolist())
            self._sets[k] = found
        return found

    def move(self, e: int, v: int, old: int, new: int) -> None:
        """Edge ``e`` at vertex ``v`` changes colour from ``old`` to ``new``."""
        self.get(v, old).discard(e)
        self.get(v, new).add(e)


_At = Incidence


@dataclass
class Colouring:
    """Edges ``left[e] -> right[e]`` with ``colour[e]`` (``-1``: not placed) and each vertex's
    room per colour; :meth:`place` colours an unplaced edge."""

    left: IntArray
    right: IntArray
    colour: IntArray
    room_left: IntArray
    room_right: IntArray

    def __post_init__(self) -> None:
        self.count_left = np.zeros_like(self.room_left)
        self.count_right = np.zeros_like(self.room_right)
        placed = np.flatnonzero(self.colour >= 0)
        c = self.colour[placed]
        np.add.at(self.count_left, (self.left[placed], c), 1)
        np.add.at(self.count_right, (self.right[placed], c), 1)
        colours = self.room_left.shape[1]
        self.at_left = Incidence(self.left, self.colour, colours)
        self.at_right = Incidence(self.right, self.colour, colours)

    def within(self) -> bool:
        """True when no vertex holds more edges of a colour than its room."""
        return bool(np.all(self.count_left <= self.room_left)) and bool(
            np.all(self.count_right <= self.room_right)
        )

    def _set(self, e: int, k: int) -> None:
        x, y, old = int(self.left[e]), int(self.right[e]), int(self.colour[e])
        if old >= 0:
            self.count_left[x, old] -= 1
            self.count_right[y, old] -= 1
        if k >= 0:
            self.count_left[x, k] += 1
            self.count_right[y, k] += 1
        self.at_left.move(e, x, old, k)
        self.at_right.move(e, y, old, k)
        self.colour[e] = k

    def place(self, e: int) -> bool:
        """Colour edge ``e`` within the rooms, recolouring a chain if needed; ``False`` (and
        nothing changed) if no chain of the tried colour pairs works."""
        p, q = int(self.left[e]), int(self.right[e])
        free_l = self.room_left[p] - self.count_left[p]
        free_r = self.room_right[q] - self.count_right[q]
        both = np.flatnonzero((free_l > 0) & (free_r > 0))
        if both.size:
            self._set(e, int(both[np.argmax(np.minimum(free_l, free_r)[both])]))
            return True
        tries = [(a, b) for a in np.argsort(-free_l, kind="stable").tolist() if free_l[a] > 0
                 for b in np.argsort(-free_r, kind="stable").tolist() if free_r[b] > 0]  # fmt: skip
        for a, b in tries[:MAX_TRIES]:
            # e on a, its right end sheds an a (it must be able to hold one), or e on b and
            # its left end sheds a b.
            if self.room_right[q, a] > 0 and self._chain(e, a, b, False):
                return True
            if self.room_left[p, b] > 0 and self._chain(e, b, a, True):
                return True
        return False

    def _sides(self, flip: bool) -> tuple[tuple[IntArray, IntArray, IntArray, _At], ...]:
        """(ends, rooms, counts, edges by vertex and colour) of the side a chain starts on
        (the right, or the left with ``flip``), then of the other side."""
        right = (self.right, self.room_right, self.count_right, self.at_right)
        left = (self.left, self.room_left, self.count_left, self.at_left)
        return (left, right) if flip else (right, left)

    def _chain(self, e: int, a: int, b: int, flip: bool) -> bool:
        """``e`` on ``a``, then the shortest alternating chain from its end on the starting
        side: an ``a`` edge there turns ``b``, a ``b`` edge of its other end turns ``a``, ...,
        until a vertex has room for what it gained (breadth-first over the vertices)."""
        (near, near_room, near_count, near_at), (far, far_room, far_count, far_at) = self._sides(
            flip
        )
        q = int(near[e])
        parent_near: dict[int, int] = {q: -1}  # vertex -> the b edge that turned a into it
        parent_far: dict[int, int] = {}  # vertex -> the a edge that turned b out of it
        frontier = [q]
        for _ in range(MAX_STEPS):
            if not frontier:
                return False
            nxt: list[int] = []
            for y in frontier:
                for g in sorted(near_at.get(y, a)):
                    x = int(far[g])
                    if x in parent_far or far_room[x, b] <= 0:
                        continue
                    parent_far[x] = g
                    if far_count[x, b] < far_room[x, b]:
                        return self._apply(e, (a, b), (near, far), (parent_near, parent_far), x)
                    for h in sorted(far_at.get(x, b)):
                        z = int(near[h])
                        if z in parent_near or near_room[z, a] <= 0:
                            continue
                        parent_near[z] = h
                        if near_count[z, a] < near_room[z, a]:
                            ends = (near, far)
                            return self._apply(e, (a, b), ends, (parent_near, parent_far), -1, z)
                        nxt.append(z)
            frontier = nxt
        return False

    def _apply(
        self,
        e: int,
        colours: tuple[int, int],
        ends: tuple[IntArray, IntArray],
        parents: tuple[dict[int, int], dict[int, int]],
        x: int,
        z: int = -1,
    ) -> bool:
        """Recolour the chain that ends at far vertex ``x`` (or near vertex ``z``)."""
        (a, b), (near, far), (parent_near, parent_far) = colours, ends, parents
        turn: list[tuple[int, int]] = []
        if z >= 0:
            h = parent_near[z]
            turn.append((h, a))
            x = int(far[h])
        while True:
            g = parent_far[x]
            turn.append((g, b))
            h = parent_near[int(near[g])]
            if h < 0:
                break
            turn.append((h, a))
            x = int(far[h])
        self._set(e, a)
        for f, k in turn:
            self._set(f, k)
        if self.within():
            return True
        for f, k in reversed(turn):  # a chain through one vertex twice: undo it
            self._set(f, b if k == a else a)
        self._set(e, -1)
        return False
