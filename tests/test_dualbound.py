"""The Lagrangian bound from row multipliers (solver.bounds.dualbound), against LP optima found by
two solvers the project did not write (OR-Tools' GLOP and HiGHS): with their optimal duals it is
the optimum; with any other multipliers it is never above it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ortools.linear_solver import linear_solver_pb2, pywraplp

from solver.bounds.dualbound import lagrangian_bound, proven_integer_bound


def _random_lp(
    seed: int, engine: str
) -> tuple[pywraplp.Solver, list[pywraplp.Constraint], linear_solver_pb2.MPModelProto]:
    """A feasible, boxed LP with ``<=``, ``>=``, ranged and equality rows (the equalities and
    lower sides met by a known point), minimized; its solver, rows and exported model."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(3, 12)), int(rng.integers(2, 9))
    solver = pywraplp.Solver.CreateSolver(engine)
    low = rng.integers(-3, 2, size=n).astype(float)
    up = low + rng.integers(1, 5, size=n)
    boxes = enumerate(zip(low.tolist(), up.tolist(), strict=True))
    xs = [solver.NumVar(a, b, f"x{j}") for j, (a, b) in boxes]
    point = low + rng.random(n) * (up - low)  # feasible by construction
    rows = []
    for _ in range(m):
        coef = rng.integers(-3, 4, size=n).astype(float)
        at = float(coef @ point)
        kind = int(rng.integers(0, 4))
        lo, hi = {
            0: (-solver.infinity(), at + float(rng.random())),
            1: (at - float(rng.random()), solver.infinity()),
            2: (at - float(rng.random()), at + float(rng.random())),
            3: (at, at),
        }[kind]
        row = solver.Constraint(lo, hi)
        for v, a in zip(xs, coef.tolist(), strict=True):
            row.SetCoefficient(v, a)
        rows.append(row)
    objective = solver.Objective()
    for v, c in zip(xs, rng.integers(-5, 6, size=n).tolist(), strict=True):
        objective.SetCoefficient(v, float(c))
    objective.SetOffset(float(rng.integers(-10, 10)))
    objective.SetMinimization()
    model = linear_solver_pb2.MPModelProto()
    solver.ExportModelToProto(model)
    return solver, rows, model


@pytest.mark.parametrize("seed", range(40))
def test_optimal_duals_give_the_optimum_and_other_multipliers_never_more(seed: int) -> None:
    """GLOP's duals (simplex, exact) give its optimum; PDLP's (first-order) give it to PDLP's
    tolerance and never more; OR-Tools' HiGHS interface's, and random multipliers of any sign,
    give no more than the optimum (HiGHS's here are far off: -504.9 where the optimum is -14.9
    on seed 0, a bound still)."""
    solver, rows, model = _random_lp(seed, "GLOP")
    assert solver.Solve() == pywraplp.Solver.OPTIMAL
    optimum = solver.Objective().Value()
    duals = [r.dual_value() for r in rows]
    assert lagrangian_bound(model, duals) == pytest.approx(optimum, abs=1e-6)
    for engine, close in (("PDLP", 1e-3), ("HIGHS_LP", None)):
        other, other_rows, same = _random_lp(seed, engine)
        assert same == model
        assert other.Solve() == pywraplp.Solver.OPTIMAL
        bound = lagrangian_bound(model, [r.dual_value() for r in other_rows])
        assert bound <= optimum + 1e-9
        if close is not None:
            assert bound == pytest.approx(optimum, abs=close)
    rng = np.random.default_rng(1000 + seed)
    for scale in (0.1, 1.0, 10.0):
        for _ in range(25):
            rough = (np.asarray(duals) + rng.normal(0.0, scale, size=len(duals))).tolist()
            assert lagrangian_bound(model, rough) <= optimum + 1e-9
        wild = rng.normal(0.0, 100 * scale, size=len(duals)).tolist()  # any sign, any row
        assert lagrangian_bound(model, wild) <= optimum + 1e-9


def test_a_multiplier_of_the_wrong_sign_is_dropped_not_used() -> None:
    """min -x with x in [0, 1] and x <= 0.5: the optimum is -0.5. A positive multiplier on the
    ``<=`` row would 'prove' more than the optimum; it is set to zero, leaving the box's -1."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    x = solver.NumVar(0.0, 1.0, "x")
    row = solver.Constraint(-solver.infinity(), 0.5)
    row.SetCoefficient(x, 1.0)
    solver.Objective().SetCoefficient(x, -1.0)
    solver.Objective().SetMinimization()
    model = linear_solver_pb2.MPModelProto()
    solver.ExportModelToProto(model)
    assert lagrangian_bound(model, [5.0]) == -1.0
    assert lagrangian_bound(model, [-1.0]) == -0.5  # the optimal dual
    assert lagrangian_bound(model, [math.nan]) == -1.0  # no multiplier at all


def test_an_unbounded_column_with_a_reduced_cost_bounds_nothing() -> None:
    solver = pywraplp.Solver.CreateSolver("GLOP")
    x = solver.NumVar(0.0, solver.infinity(), "x")
    row = solver.Constraint(1.0, solver.infinity())
    row.SetCoefficient(x, 1.0)
    solver.Objective().SetCoefficient(x, 1.0)
    solver.Objective().SetMinimization()
    model = linear_solver_pb2.MPModelProto()
    solver.ExportModelToProto(model)
    assert lagrangian_bound(model, [1.0]) == 1.0  # reduced cost 0: the box's top never read
    assert lagrangian_bound(model, [2.0]) == -math.inf  # reduced cost -1 on an open box


def test_refuses_a_maximization_and_a_miscounted_multiplier_list() -> None:
    solver = pywraplp.Solver.CreateSolver("GLOP")
    x = solver.NumVar(0.0, 1.0, "x")
    solver.Constraint(0.0, 1.0).SetCoefficient(x, 1.0)
    solver.Objective().SetMaximization()
    model = linear_solver_pb2.MPModelProto()
    solver.ExportModelToProto(model)
    with pytest.raises(ValueError, match="maximizes"):
        lagrangian_bound(model, [0.0])
    model.maximize = False
    with pytest.raises(ValueError, match="2 multipliers for 1 rows"):
        lagrangian_bound(model, [0.0, 0.0])


def test_an_integer_bound_rounds_up_past_float_noise_only() -> None:
    assert proven_integer_bound(14.999998) == 15
    assert proven_integer_bound(15.0000000001) == 15  # noise above an integer is not a move
    assert proven_integer_bound(14.2) == 15
    assert proven_integer_bound(-0.3) == 0
