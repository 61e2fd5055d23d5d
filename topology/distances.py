"""Distances toward many destination leaves in one numpy pass, for batched routing.

Why a module of its own: :class:`topology.routing.Routing` says what the rules are (one
destination leaf at a time, its tables the reference); this is only how to compute the same
per-tier minima for hundreds or thousands of leaves at once, on a switches x leaves matrix in
the narrowest integers that serve. It knows nothing of a fabric beyond the tier steps
``Routing`` gives it, so the rules and this arithmetic can be read, and tested, apart.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from topology.arrays import IntArray

Distance = TypeVar("Distance", bound=np.integer[Any])
"""The integers of a distance pass (see :func:`distance_type`)."""

Step = tuple[IntArray, IntArray, IntArray]
"""One tier of a distance pass: target switch per resource, group starts, source switches."""

PASS_CELLS = 1 << 24
"""Resources x leaves that one slice of :func:`distance_pass` gathers (16 MB of bytes)."""


def row_minima(rows: npt.NDArray[Distance], starts: IntArray) -> npt.NDArray[Distance]:
    """``np.minimum.reduceat(rows, starts, axis=0)``: the minimum of each run of rows.

    Runs of one length (every switch of a tier with as many links to the next, as in the
    generated Clos fabrics) as one reshaped minimum: reduceat down the rows of a wide matrix
    is some ten times slower."""
    lengths = np.diff(starts, append=len(rows))
    if starts.size and starts[0] == 0 and bool((lengths == lengths[0]).all()) and lengths[0]:
        minima: npt.NDArray[Distance] = rows.reshape(len(starts), int(lengths[0]), -1).min(axis=1)
        return minima
    return np.minimum.reduceat(rows, starts, axis=0)


def even_runs(targets: IntArray, starts: IntArray) -> IntArray:
    """``targets`` in runs (from ``starts``) made one length, each short run filled up with
    its own first target: a minimum over a run is the same with a repeat in it.

    Why: :func:`row_minima`'s reshaped minimum needs runs of one length, and one link down
    makes one switch's run shorter; the slow path (reduceat down a wide matrix) then took the
    ECMP baseline at 131k GPUs from 2.6 to 4.6 s. The rows of a (switches x leaves) pass are
    then ``targets[result]`` reshaped to ``(len(starts), length, -1)``."""
    lengths = np.diff(starts, append=len(targets))
    length = int(lengths.max(initial=1))
    column = np.arange(length)
    within = np.where(column[None, :] < lengths[:, None], column[None, :], 0)
    picked: IntArray = targets[starts[:, None] + within]
    return picked


def distance_type(steps: int) -> tuple[type[np.integer[Any]], int]:
    """The integer type and the "unreachable" sentinel of the passes over ``steps`` tier
    steps (:meth:`~topology.routing.Routing.distance_rows`).

    A finite distance after ``k`` steps is at most ``k`` (each step sets a switch from the
    tier before, plus one), and a step adds one to at most the sentinel, so bytes serve while
    ``steps`` stays below the sentinel, ``0x7F``: a Clos has three tiers, at most four steps.
    Why bytes: the passes gather whole rows of a switches x leaves matrix (2,048 x 512 on a
    16k-GPU fat-tree) per tier, and streaming bytes instead of 32-bit integers took them from
    63 to 11 ms there (28 to 4 ms on the 2-tier fabric; best of five, the same distances)."""
    if steps + 1 < 0x7F:
        return np.uint8, 0x7F
    return np.int32, 1 << 30


def distance_pass(
    steps: tuple[list[Step], list[Step]], switches: int, leaves: list[int]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
    """``down_dist`` and ``up_dist`` toward each of ``leaves`` (distinct), one row per leaf,
    in the narrowest integers that hold a sentinel far above any distance
    (see :func:`distance_type`), and that sentinel: a distance at or above it is
    unreachable. One pass over many leaves at once (the same per-tier minima as
    :meth:`topology.routing.Routing.table`, on a switches x leaves matrix: a tier's gather
    takes whole rows, reduceat runs down columns)."""
    down_steps, up_steps = steps
    dtype, far = distance_type(len(down_steps) + len(up_steps))
    down = np.empty((len(leaves), switches), dtype=dtype)
    up = np.empty_like(down)
    # Each step's runs made one length (see even_runs), unless that would more than
    # double the gather (runs of very different lengths: not a Clos tier).
    evened = []
    for targets, starts, sources in (*down_steps, *up_steps):
        runs: IntArray | None = even_runs(targets, starts)
        if runs is not None and runs.size > 2 * len(targets):
            runs = None
        evened.append((targets, starts, sources, runs))
    down_even, up_even = evened[: len(down_steps)], evened[len(down_steps) :]

    def minima(matrix: npt.NDArray[Any], step: tuple[Any, ...]) -> npt.NDArray[Any]:
        targets, starts, _, runs = step
        if runs is None:
            return row_minima(matrix[targets], starts)
        found: npt.NDArray[Any] = matrix[runs.ravel()].reshape(*runs.shape, -1).min(axis=1)
        return found

    # In slices of leaves whose gathers (a tier's resources x the slice) stay near
    # PASS_CELLS: at 131k GPUs a tier has 131,072 resources, and all 4,096 leaves at once
    # made 512 MB temporaries per tier (1.8 s; 0.7 s in slices, the same distances).
    widest = max((len(t) if r is None else r.size for t, _, _, r in evened), default=1)
    step = max(1, PASS_CELLS // max(widest, 1))
    for k in range(0, len(leaves), step):
        part = leaves[k : k + step]
        d = np.full((switches, len(part)), far, dtype=dtype)
        d[part, np.arange(len(part))] = 0
        for tier in down_even:
            d[tier[2]] = np.minimum(d[tier[2]], minima(d, tier) + 1)
        u = d.copy()
        for tier in up_even:
            u[tier[2]] = np.minimum(u[tier[2]], minima(u, tier) + 1)
        down[k : k + step], up[k : k + step] = d.T, u.T  # small slices: cheap to turn
    return down, up, far
