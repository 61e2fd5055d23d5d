"""The general solver: one CP-SAT model per sub-problem, on flow *counts*, anytime.

Why counts: the flows of one leaf pair with one weight are interchangeable (they have the same
candidates and load the same links), so the model has an integer ``x[g, k]`` = how many flows of
group ``g`` take candidate ``k``, not a Boolean per flow and path; a ring's thousands of flows
become a few hundred groups. Any integer solution hands back to flows exactly, group by group.

Model, all in integers: ``sum_k x[g, k] = n_g``; for each resource ``r``,
``K_r * sum w_g x[g, k] <= Z`` over the candidates crossing ``r``, where ``w_g`` and ``K_r`` are
the weights and the ``reference / capacity`` scales made integral by common denominators, so
``Z * unit`` is exactly the max utilization (when weights or scales are not small rationals they
are rounded and the model is marked inexact: its optimum is then not claimed). ``Z`` is bounded
below by the planner's lower bound and above by the hint, and minimized.

Search: a full hint (every ``x`` and ``Z``) from the incumbent, two workers, the caller's seed and
time limit; the best solution found is kept (anytime). Workers run interleaved
(``interleave_search``), which makes the search deterministic for a seed as long as it ends by
proof or by the deterministic-time limit rather than the wall clock.

Phase 2, with the time left: ``Z`` fixed at its best, minimize the flows moved from the previous
plan (``kept[g, k] <= min(x[g, k], previous count)``), then the number of resources at ``Z``
(one Boolean each, enforcing ``< Z`` when false), lexicographically by weighting.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solver.bounds.combinatorial import as_integers
from solver.space.problem import Problem
from topology.arrays import distinct
from topology.index import IntArray

if TYPE_CHECKING:  # OR-Tools' CP-SAT pulls in pandas (0.2 s): imported where a model is built
    from ortools.sat.python import cp_model

__all__ = ["CpOutcome", "integer_scales", "solve_cpsat"]

DTIME_PER_SECOND = 0.2
"""Deterministic time granted per second of budget (CP-SAT's dtime is roughly seconds)."""


@dataclass(frozen=True)
class CpOutcome:
    """What CP-SAT made of one sub-problem; ``choice`` is aligned with the flows given."""

    choice: IntArray
    proven: bool
    bound: float | None
    seconds: float
    note: str


def integer_scales(
    problem: Problem, flows: IntArray, resources: IntArray
) -> tuple[IntArray, IntArray, float, bool]:
    """Integer weights per flow, integer scales per resource, the utilization of ``Z = 1``,
    and whether ``Z * unit`` is exact."""
    wvals, wunique = np.unique(problem.weight[flows], return_inverse=True)
    svals, sunique = np.unique(problem.scale[resources], return_inverse=True)
    wint, wd, wexact = as_integers(wvals)
    sint, sd, sexact = as_integers(svals)
    exact = wexact and sexact
    unit = 1.0 / (wd * sd) if exact else float(wvals[0] * svals[0]) / float(wint[0] * sint[0])
    return wint[wunique.ravel()], sint[sunique.ravel()], unit, exact


def solve_cpsat(
    problem: Problem,
    pairs: IntArray,
    flows: IntArray,
    hint: IntArray,
    *,
    lower_bound: float,
    time_limit: float,
    seed: int,
    previous: IntArray | None = None,
    secondary: bool = True,
) -> CpOutcome:
    """Improve ``hint`` (choices aligned with ``flows``) for one component within ``time_limit``.

    ``previous`` (aligned, ``-1`` for none) is the candidate each flow held before; phase 2
    keeps as many as it can. Returns the hint itself when nothing better is found in time.
    """
    start = time.perf_counter()
    deadline = start + time_limit
    local_pair = np.searchsorted(pairs, problem.pair[flows])
    counts = problem.num_candidates(pairs)
    rows_of_pair = [problem.candidates(int(p)) for p in pairs.tolist()]
    used = distinct(np.concatenate([r.ravel() for r in rows_of_pair]))
    used = used[used != problem.pad]
    wint, sint, unit, exact = integer_scales(problem, flows, used)
    k_of = np.zeros(problem.pad + 1, dtype=np.int64)
    k_of[used] = sint
    # Groups: same pair, same integer weight.
    gkeys, group = np.unique(local_pair * (int(wint.max()) + 1) + wint, return_inverse=True)
    group = group.ravel()
    gpair = gkeys // (int(wint.max()) + 1)
    gweight = gkeys % (int(wint.max()) + 1)
    size = np.bincount(group, minlength=len(gkeys))
    first_var = np.zeros(len(gkeys) + 1, dtype=np.int64)
    np.cumsum(counts[gpair], out=first_var[1:])
    var_of_flow = first_var[group] + hint
    hint_x = np.bincount(var_of_flow, minlength=int(first_var[-1]))

    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    xs = [
        model.new_int_var(0, int(size[g]), "")
        for g in range(len(gkeys))
        for _ in range(int(counts[gpair[g]]))
    ]
    for g in range(len(gkeys)):
        model.add(sum(xs[first_var[g] : first_var[g + 1]]) == int(size[g]))
    # Entries (variable, resource, coefficient) grouped by resource.
    var_ids: list[IntArray] = []
    res_ids: list[IntArray] = []
    for g in range(len(gkeys)):
        rows = rows_of_pair[int(gpair[g])]
        var_ids.append(np.repeat(np.arange(first_var[g], first_var[g + 1]), rows.shape[1]))
        res_ids.append(rows.ravel())
    var_all = np.concatenate(var_ids)
    res_all = np.concatenate(res_ids)
    real = res_all != problem.pad
    var_all, res_all = var_all[real], res_all[real]
    owner_group = np.searchsorted(first_var, var_all, side="right") - 1
    coef = gweight[owner_group] * k_of[res_all]
    order = np.argsort(res_all, kind="stable")
    var_all, res_all, coef = var_all[order], res_all[order], coef[order]
    cuts = np.flatnonzero(np.diff(res_all)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(res_all)]])
    hint_load = np.zeros(len(starts), dtype=np.int64)
    np.add.at(hint_load, np.repeat(np.arange(len(starts)), ends - starts), coef * hint_x[var_all])
    hint_z = int(hint_load.max(initial=0))
    low_z = max(0, math.ceil(lower_bound / unit - 1e-6)) if exact else 0
    proof = low_z * unit if exact else None
    if low_z >= hint_z and not secondary:
        return CpOutcome(hint, exact, proof, time.perf_counter() - start, "hint optimal")
    z = model.new_int_var(min(low_z, hint_z), hint_z, "z")
    loads = [
        cp_model.LinearExpr.weighted_sum([xs[v] for v in var_all[a:b].tolist()], coef[a:b].tolist())
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
    ]
    for expr in loads:
        model.add(expr <= z)
    for v, value in enumerate(hint_x.tolist()):
        model.add_hint(xs[v], value)
    model.add_hint(z, hint_z)
    model.minimize(z)

    best_x, best_z, proven, bound, notes = hint_x, hint_z, False, None, []
    remaining = deadline - time.perf_counter()
    if low_z < hint_z and remaining > 0:
        status, values, solver = _run(model, remaining, seed)
        if values is not None:
            best_x = values[[x.index for x in xs]]
            best_z = int(values[z.index])
        proven = status == cp_model.OPTIMAL and exact
        if exact and status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            bound = float(solver.best_objective_bound) * unit
        notes.append(f"min-max {_status(status)}")
    elif low_z >= hint_z:
        proven, bound = exact, proof
        notes.append("min-max: hint meets the bound")

    remaining = deadline - time.perf_counter()
    if secondary and remaining > 0 and best_z > 0:
        model.add(z <= best_z)
        at_max = [model.new_bool_var("") for _ in loads]
        for expr, b in zip(loads, at_max, strict=True):
            model.add(expr <= best_z - 1).only_enforce_if(~b)
        kept: list[cp_model.IntVar] = []
        kept_hint: list[tuple[cp_model.IntVar, int]] = []
        if previous is not None and np.any(previous >= 0):
            has = previous >= 0
            prev_x = np.bincount(first_var[group[has]] + previous[has], minlength=len(xs))
            for v in np.flatnonzero(prev_x).tolist():
                keep = model.new_int_var(0, int(prev_x[v]), "")
                model.add(keep <= xs[v])
                kept.append(keep)
                kept_hint.append((keep, int(min(prev_x[v], best_x[v]))))
        model.clear_hints()  # type: ignore[no-untyped-call]
        for v, value in enumerate(best_x.tolist()):
            model.add_hint(xs[v], value)
        model.add_hint(z, best_z)
        best_load = np.zeros(len(starts), dtype=np.int64)
        np.add.at(
            best_load, np.repeat(np.arange(len(starts)), ends - starts), coef * best_x[var_all]
        )
        for b, value in zip(at_max, (best_load >= best_z).tolist(), strict=True):
            model.add_hint(b, int(value))
        for keep, value in kept_hint:
            model.add_hint(keep, value)
        # Each flow kept outweighs every link at the maximum (moves first, then links).
        model.minimize(
            cp_model.LinearExpr.weighted_sum(
                [*at_max, *kept], [1] * len(at_max) + [-(len(loads) + 1)] * len(kept)
            )
        )
        status, values, _ = _run(model, remaining, seed)
        if values is not None:
            best_x = values[[x.index for x in xs]]
        notes.append(f"secondary {_status(status)}")

    preferred = hint.copy()
    if previous is not None:
        preferred = np.where(previous >= 0, previous, hint)
    choice = _hand_out(best_x, first_var, group, preferred)
    return CpOutcome(choice, proven, bound, time.perf_counter() - start, "; ".join(notes))


def _run(
    model: cp_model.CpModel, time_limit: float, seed: int
) -> tuple[object, IntArray | None, cp_model.CpSolver]:
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = 2
    params.interleave_search = True
    # Symmetry detection and probing cost seconds on the wide, symmetric candidate sets of a
    # Clos (1,024 paths per pair at 3 tiers) and rarely pay off here: measured, 0.6 s instead
    # of > 6 s (no solution) on 16 flows of a 4,096-GPU fat-tree.
    params.symmetry_level = 0
    params.cp_model_probing_level = 0
    params.random_seed = seed
    params.max_time_in_seconds = max(time_limit, 0.001)
    params.max_deterministic_time = max(time_limit * DTIME_PER_SECOND, 0.001)
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return status, np.asarray(solver.response_proto.solution, dtype=np.int64), solver
    return status, None, solver


def _status(status: object) -> str:
    from ortools.sat.python import cp_model

    if status == cp_model.OPTIMAL:
        return "optimal"
    if status == cp_model.FEASIBLE:
        return "feasible (time limit)"
    return "no solution in time (hint kept)"


def _hand_out(x: IntArray, first_var: IntArray, group: IntArray, preferred: IntArray) -> IntArray:
    """Flows of each group onto its counts, each keeping its preferred candidate if it can."""
    choice = np.full(len(group), -1, dtype=np.int64)
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(len(first_var)))
    for g in range(len(first_var) - 1):
        members = order[bounds[g] : bounds[g + 1]]
        room = x[first_var[g] : first_var[g + 1]].copy()
        waiting: list[int] = []
        for f, k in zip(members.tolist(), preferred[members].tolist(), strict=True):
            if 0 <= k < len(room) and room[k] > 0:
                room[k] -= 1
                choice[f] = k
            else:
                waiting.append(f)
        slots = np.repeat(np.arange(len(room)), room)
        choice[waiting] = slots[: len(waiting)]
    return choice
