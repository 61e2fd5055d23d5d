"""A proven lower bound on a minimizing LP from any row multipliers: the Lagrangian over boxes.

Why: a first-order LP method (PDLP) solves LPs that simplex and interior point cannot in the
time (the 3-tier 16,384-GPU moves bound of :mod:`solver.bounds.treefewest`: 783,572 columns, about a
minute, where HiGHS's dual simplex with generated rows had not converged after 40 minutes),
but its answer is only optimal to a tolerance, and its objective may lie on either side of the
optimum. A bound must not. Weak duality gives one from *any* multipliers, however rough:

for ``min c.x + offset`` subject to ``lo <= A x <= hi`` and ``l <= x <= u`` (every column
boxed), and multipliers ``y`` whose sign matches a finite side of each row (``y_i > 0`` only
where ``lo_i`` is finite, ``y_i < 0`` only where ``hi_i`` is), every feasible ``x`` has
``y_i (A x)_i >= y_i lo_i`` or ``>= y_i hi_i``, so

    c.x = (c - A'y).x + y.(A x) >= sum_j min((c - A'y)_j l_j, (c - A'y)_j u_j) + sum_i y_i b_i

with ``b_i`` the side ``y_i`` leans on. Multipliers of the wrong sign are set to zero first,
which only weakens the bound; with a solver's optimal duals it is the optimum. The sums are
taken with :func:`math.fsum` (exactly rounded), so the float error is that of the products
alone; callers round up after subtracting :data:`SLACK`.

The model is read from the solver's own export (:class:`MPModelProto`), not from the code that
built it, so a bound rests on what was solved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ortools.linear_solver import linear_solver_pb2

__all__ = ["SLACK", "lagrangian_bound", "proven_integer_bound"]

SLACK = 1e-6
"""Taken off a bound before rounding it up to an integer: far above the float error of the
products (each within 1e-16 relative, a million columns of values at most a few thousand)
and far below the distance a first-order solve leaves to the optimum (1e-4 at most here)."""


def lagrangian_bound(model: linear_solver_pb2.MPModelProto, duals: Sequence[float]) -> float:
    """A lower bound on the minimum of ``model`` (an LP: integrality is ignored) from row
    multipliers ``duals`` (one per constraint, any values); ``-inf`` where a column with a
    nonzero reduced cost is unbounded on its improving side. See the module docstring."""
    if model.maximize:
        raise ValueError("lagrangian_bound: the model maximizes; only minimization is bounded")
    rows = model.constraint
    if len(duals) != len(rows):
        raise ValueError(f"lagrangian_bound: {len(duals)} multipliers for {len(rows)} rows")
    y = np.asarray(duals, dtype=np.float64)
    lo = np.fromiter((r.lower_bound for r in rows), dtype=np.float64, count=len(rows))
    hi = np.fromiter((r.upper_bound for r in rows), dtype=np.float64, count=len(rows))
    y = np.where(np.isfinite(y), y, 0.0)
    y = np.where(np.isfinite(lo), y, np.minimum(y, 0.0))
    y = np.where(np.isfinite(hi), y, np.maximum(y, 0.0))
    side = np.where(y > 0, np.where(np.isfinite(lo), lo, 0.0), np.where(np.isfinite(hi), hi, 0.0))
    columns = model.variable
    cost = np.fromiter((v.objective_coefficient for v in columns), dtype=np.float64,
                       count=len(columns))  # fmt: skip
    low = np.fromiter((v.lower_bound for v in columns), dtype=np.float64, count=len(columns))
    up = np.fromiter((v.upper_bound for v in columns), dtype=np.float64, count=len(columns))
    sizes = np.fromiter((len(r.var_index) for r in rows), dtype=np.int64, count=len(rows))
    index = np.fromiter((i for r in rows for i in r.var_index), dtype=np.int64,
                        count=int(sizes.sum()))  # fmt: skip
    value = np.fromiter((a for r in rows for a in r.coefficient), dtype=np.float64,
                        count=int(sizes.sum()))  # fmt: skip
    weighted = value * np.repeat(y, sizes)
    reduced = cost - np.bincount(index, weights=weighted, minlength=len(columns))
    at = np.where(reduced > 0, low, up)  # where each column's term is least
    moving = reduced != 0
    if not np.all(np.isfinite(at[moving])):
        return -math.inf
    terms = np.concatenate([reduced[moving] * at[moving], (y * side)[y != 0]])
    return math.fsum([model.objective_offset, *terms.tolist()])


def proven_integer_bound(value: float) -> int:
    """The least integer a quantity bounded below by ``value`` (from :func:`lagrangian_bound`)
    can take, with :data:`SLACK` for the float error."""
    return math.ceil(value - SLACK)
