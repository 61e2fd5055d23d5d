"""Place one more edge in a bipartite multigraph coloured within rooms, by an alternating chain.

Why: a re-plan on a degraded fat-tree keeps almost every flow's colour (its agg at the leaves,
its core at the pods) and must colour a few flows whose path is gone, where the vertices they
join have room in *different* colours. Recolouring the whole graph would move hundreds of
flows; the classic step of bipartite edge colouring (König's proof) moves a few: put the new
edge ``p -> q`` on colour ``a`` (room at ``p``), then walk from ``q`` alternately recolouring an
``a`` edge to ``b`` (room at ``q``) and a ``b`` edge to ``a`` until a vertex has room for what it
gained. With rooms (several edges per vertex and colour, none for a lost link) the walk is
checked as it goes and undone if it gets stuck, and the next pair of colours is tried.

Used by :mod:`solver.degraded` for both stages: leaves and agg indices (rooms: leaf links), and
per core group pods and cores (rooms: agg-core links).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from topology.index import IntArray

__all__ = ["Colouring", "MAX_STEPS", "MAX_TRIES"]

MAX_STEPS = 256
"""Edges one chain may recolour before it is abandoned."""

MAX_TRIES = 16
"""Colour pairs ``(a, b)`` tried for one new edge."""


@dataclass
class Colouring:
    """Edges ``left[e] -> right[e]`` with ``colour[e]`` (``-1``: not placed) and each vertex's
    room per colour; :meth:`place` colours an unplaced edge."""

    left: IntArray
    right: IntArray
    colour: IntArray
    room_left: IntArray
    room_right: IntArray
    at_left: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    at_right: dict[tuple[int, int], set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.count_left = np.zeros_like(self.room_left)
        self.count_right = np.zeros_like(self.room_right)
        placed = np.flatnonzero(self.colour >= 0)
        c = self.colour[placed]
        np.add.at(self.count_left, (self.left[placed], c), 1)
        np.add.at(self.count_right, (self.right[placed], c), 1)
        for e, x, y, k in zip(placed.tolist(), self.left[placed].tolist(),
                              self.right[placed].tolist(), c.tolist(), strict=True):  # fmt: skip
            self.at_left.setdefault((x, k), set()).add(e)
            self.at_right.setdefault((y, k), set()).add(e)

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
            self.at_left[(x, old)].discard(e)
            self.at_right[(y, old)].discard(e)
        if k >= 0:
            self.count_left[x, k] += 1
            self.count_right[y, k] += 1
            self.at_left.setdefault((x, k), set()).add(e)
            self.at_right.setdefault((y, k), set()).add(e)
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
        return any(self._chain(e, a, b) for a, b in tries[:MAX_TRIES])

    def _chain(self, e: int, a: int, b: int) -> bool:
        """``e`` on ``a``, then the shortest alternating chain from its right end: an ``a``
        edge of a right vertex turns ``b``, a ``b`` edge of its left vertex turns ``a``, ...,
        until a vertex has room for what it gained (breadth-first over the vertices)."""
        q = int(self.right[e])
        # parent_r[y] = (edge into y that turned a, or -1 at q); parent_l[x] = (edge g, y)
        parent_r: dict[int, int] = {q: -1}
        parent_l: dict[int, int] = {}
        frontier = [q]
        for _ in range(MAX_STEPS):
            if not frontier:
                return False
            nxt: list[int] = []
            for y in frontier:
                for g in sorted(self.at_right.get((y, a), ())):
                    x = int(self.left[g])
                    if x in parent_l or self.room_left[x, b] <= 0:
                        continue
                    parent_l[x] = g
                    if self.count_left[x, b] < self.room_left[x, b]:
                        return self._apply(e, a, b, x, parent_l, parent_r)
                    for h in sorted(self.at_left.get((x, b), ())):
                        z = int(self.right[h])
                        if z in parent_r or self.room_right[z, a] <= 0:
                            continue
                        parent_r[z] = h
                        if self.count_right[z, a] < self.room_right[z, a]:
                            return self._apply(e, a, b, -1, parent_l, parent_r, z)
                        nxt.append(z)
            frontier = nxt
        return False

    def _apply(
        self,
        e: int,
        a: int,
        b: int,
        x: int,
        parent_l: dict[int, int],
        parent_r: dict[int, int],
        z: int = -1,
    ) -> bool:
        """Recolour the chain that ends at left vertex ``x`` (or right vertex ``z``)."""
        turn: list[tuple[int, int]] = []
        if z >= 0:
            h = parent_r[z]
            turn.append((h, a))
            x = int(self.left[h])
        while True:
            g = parent_l[x]
            turn.append((g, b))
            y = int(self.right[g])
            h = parent_r[y]
            if h < 0:
                break
            turn.append((h, a))
            x = int(self.left[h])
        self._set(e, a)
        for f, k in turn:
            self._set(f, k)
        if self.within():
            return True
        for f, k in reversed(turn):  # a chain through one vertex twice: undo it
            self._set(f, b if k == a else a)
        self._set(e, -1)
        return False
