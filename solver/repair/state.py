"""The state a repair works on: the loads, each flow's current path and the flows on each
resource of one component, with the moves that change them (remove, add, restore).

Why apart from :mod:`solver.repair.chains`: every repair method reads and writes this state
(eviction in :mod:`solver.repair.evict`, the chain search, joint chains, settling a relaxation's
answer), while the chain search is one method among them; ``chains`` re-exports
:class:`State`, :func:`limit_of` and :func:`restore` where callers import them today.
"""

from __future__ import annotations

import numpy as np

from solver.space.problem import TOLERANCE, Problem
from topology.index import FloatArray, IntArray


def limit_of(z: float) -> float:
    return z * (1 + TOLERANCE) + TOLERANCE


class State:
    """Loads and the flows on each resource, for one component, while repairing."""

    def __init__(
        self,
        problem: Problem,
        flows: IntArray,
        choice: IntArray,
        z: float,
        deadline: float = float("inf"),
    ) -> None:
        self.problem = problem
        self.deadline = deadline
        """``time.perf_counter()`` after which no search starts: a re-plan returns in time."""
        self.timed_out = False
        """A search was skipped or cut short by the deadline."""
        self.flows = flows
        self.choice = choice
        self.prior: IntArray = np.full(len(flows), -2, dtype=np.int64)
        """Each flow's previous candidate (``< 0``: none), to price moves."""
        self.limit = limit_of(z)
        self.weight = problem.weight[flows]
        self.pair = problem.pair[flows]
        self.load: FloatArray = np.zeros(problem.pad + 1)
        self.now = np.full((len(flows), problem.width), problem.pad, dtype=np.int64)
        placed = np.flatnonzero(choice >= 0)
        if placed.size:
            self.now[placed] = problem.row_paths(problem.rows(flows[placed], choice[placed]))
            self.load = problem.loads(flows[placed], choice[placed])
        self.load[problem.pad] = 0.0
        self.users: dict[int, set[int]] = {}
        """Flows on a resource, for the resources asked about so far (kept by add/remove):
        the few blocking resources are asked about thousands of times in a 3-tier repair."""

        self._sorted: tuple[IntArray, IntArray] | None = None
        self._since: set[int] = set()
        self._rows: dict[tuple[int, int], IntArray] = {}
        self._moving: dict[tuple[int, int], tuple[IntArray, FloatArray, FloatArray]] = {}
        self._held = 0

    def on(self, r: int) -> list[int]:
        """Positions of the flows whose current path crosses resource ``r``.

        The first question sorts every path's resources once (a chain search asks about
        hundreds of resources); later ones read that sorted copy and check the few flows that
        have changed since."""
        users = self.users.get(r)
        if users is None:
            if self._sorted is None or len(self._since) > 64:
                flat = self.now.ravel()
                order = np.argsort(flat, kind="stable")
                self._sorted = (flat[order], order // self.now.shape[1])
                self._since = set()
            keys, owners = self._sorted
            lo, hi = np.searchsorted(keys, [r, r + 1]).tolist()
            maybe = set(owners[lo:hi].tolist()) | self._since
            near = np.fromiter(maybe, np.int64, count=len(maybe))
            users = set(near[(self.now[near] == r).any(axis=1)].tolist())
            self.users[r] = users
        return sorted(users)

    def row(self, i: int, k: int) -> IntArray:
        """Candidate ``k`` of flow ``i`` (remembered: a chain search asks for the same few
        rows tens of thousands of times)."""
        key = (i, k)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = self.problem.row(int(self.pair[i]), k)
        return row

    def candidates(self, i: int) -> IntArray:
        return self.problem.candidates(int(self.pair[i]))

    def moving(self, i: int, old: int) -> tuple[IntArray, FloatArray, FloatArray]:
        """Flow ``i``'s candidates, their resources' scales, and what moving ``i`` there from
        candidate ``old`` adds to their loads (nothing where a candidate shares a resource
        with ``old``: a pair's paths cross each layer at the same hop); remembered, as a chain
        search asks about the same few flows thousands of times."""
        key = (i, old)
        found = self._moving.get(key)
        if found is None:
            rows = self.candidates(i)
            if self._held > MOVING_HELD:
                self._moving.clear()
                self._held = 0
            self._held += rows.size
            scale = self.problem.scale[rows]
            w = float(self.weight[i])
            extra = (
                np.full(rows.shape, w) if old < 0 else np.where(rows == self.row(i, old), 0.0, w)
            )
            found = self._moving[key] = (rows, scale, extra)
        return found

    def remove(self, i: int) -> None:
        k = int(self.choice[i])
        if k < 0:
            return
        row = self.row(i, k)
        self.load[row] -= self.weight[i]
        self.load[self.problem.pad] = 0.0
        self.now[i] = self.problem.pad
        if self._sorted is not None:
            self._since.add(i)
        if self.users:
            for r in row.tolist():
                users = self.users.get(r)
                if users is not None:
                    users.discard(i)
        self.choice[i] = -1

    def add(self, i: int, k: int) -> None:
        row = self.row(i, k)
        self.load[row] += self.weight[i]
        self.load[self.problem.pad] = 0.0
        self.now[i] = row
        if self._sorted is not None:
            self._since.add(i)
        if self.users:
            for r in row.tolist():
                users = self.users.get(r)
                if users is not None:
                    users.add(i)
        self.choice[i] = k

    def utils(self, i: int) -> FloatArray:
        """Utilization along each candidate of flow ``i`` were it added there."""
        rows = self.candidates(i)
        util: FloatArray = (self.load[rows] + self.weight[i]) * self.problem.scale[rows]
        return util

    def best_fit(self, i: int) -> int:
        """The candidate that keeps ``i``'s worst utilization least if within the limit,
        ties by the sum; ``-1`` if none fits."""
        util = self.utils(i)
        peak = util.max(axis=1)
        fits = np.flatnonzero(peak <= self.limit)
        if not fits.size:
            return -1
        best = peak[fits].min()
        tied = fits[peak[fits] <= best + abs(best) * TOLERANCE]
        if tied.size > 1:
            total = util[tied].sum(axis=1)
            return int(tied[np.argmin(total)])
        return int(tied[0])


MOVING_HELD = 1_000_000
"""Candidate entries :meth:`State.moving` keeps (about 24 MB; a 3-tier pair has up to a
thousand candidates) before it starts again."""


def restore(state: State, saved: IntArray) -> None:
    for g in np.flatnonzero(state.choice != saved).tolist():
        state.remove(g)
        if saved[g] >= 0:
            state.add(g, int(saved[g]))
