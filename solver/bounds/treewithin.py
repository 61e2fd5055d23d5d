"""The fewest moves of a fat-tree re-plan among plans that move only the flows at some leaves:
a plan, and so an upper bound on the minimum, from the aggregated model restricted to them.

Why: :mod:`solver.bounds.treefewest` bounds the fewest moves from below, over every flow (at 16,384
GPUs HiGHS never finished its LP; with generated rows it stopped at 13 for the 3-tier light
uplink, and PDLP's duals now prove 15 there). The searches that bound it from above
(:mod:`solver.repair.evict`) grow chains move by move. Between the two, the 3-tier 16,384-GPU
light-uplink row read "13-17" against the re-plan's 18, and whether the re-plan was within 10%
of the minimum could not be said; this module's 15-move plan and that bound of 15 now say it.

**Restriction.** Fix every flow that has no end at the given leaves on its previous path, and
take its load off the capacities; let the others (and every flow whose path is gone) choose.
The fewest moves of that smaller problem is the fewest of the plans moving only those flows:
never below the minimum, so an upper bound on it. The model is :mod:`solver.bounds.treefewest`'s per
flow instead of per pair (an agg index per flow, core counts per pod pair, agg index and core,
kept flows within both), without the options that a fixed flow's load already fills.

**Integral answers are plans.** Where the LP's answer is integral it is an integer optimum of
the restriction, and the module docstring of :mod:`solver.bounds.treefewest` shows how counts become
paths: each flow's agg index is read off, and per pod pair and agg index the kept flows take
their previous cores first and the rest fill the other core counts. The plan built is checked
against every capacity before it is returned; a fractional answer returns nothing.

Measured (3-tier 16,384 GPUs, a light uplink lost, the re-plan moving 18; wall time of the
call, model building included, the other core busy): the 24 leaves at the ends of the
re-plan's moved flows, 2,954 flows free: 18 again, integral, in 0.9 s (so a better plan moves
flows elsewhere). With the 32 leaves of pod 15 added (6,384 flows free): **15**, in 3.4 s; pod
0's instead: 16 (2.8 s); both: 15 (9.9 s). Offline figures, for the benchmark: far from a
re-plan's 500 ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from solver.bounds.treefewest import capacities, previous_options
from solver.exact.fattree import FatTreeShape
from solver.space.problem import Problem
from topology.index import IntArray

if TYPE_CHECKING:
    from ortools.linear_solver import pywraplp

__all__ = ["Within", "fewest_within"]


class Within(NamedTuple):
    """A plan moving only flows at the leaves asked about: the candidate per flow (aligned
    with the flows given) and how many flows it moves."""

    choice: IntArray
    moves: int


class _Model:
    """The restricted LP as it is built: variables by flow, core count and link."""

    def __init__(self, solver: pywraplp.Solver) -> None:
        self.solver = solver
        self.aggs: dict[int, dict[int, pywraplp.Variable]] = {}
        """Per free flow, its agg-index variables (only where both leaf links have room)."""
        self.kept: dict[int, pywraplp.Variable] = {}
        self.cores: dict[tuple[int, int, int, int], pywraplp.Variable] = {}
        """Per pod pair ``(p, q)``, agg index ``j`` and core ``g``: its core count."""
        self.links: dict[int, list[pywraplp.Variable]] = {}

    def at_most(self, terms: list[tuple[pywraplp.Variable, float]], bound: float) -> None:
        row = self.solver.Constraint(-self.solver.infinity(), bound)
        for v, a in terms:
            row.SetCoefficient(v, a)


def fewest_within(
    problem: Problem,
    flows: IntArray,
    prior: IntArray,
    shape: FatTreeShape,
    z: float,
    leaves: IntArray,
    time_limit: float,
) -> Within | None:
    """The fewest of ``flows`` (one component, equal weights; ``prior`` as for
    :func:`solver.bounds.treefewest.tree_moves_bound`) that must move for every switch link to be at
    utilization ``<= z`` when only flows with an end at ``leaves`` (and those that must be
    placed) may move; ``None`` where the restricted LP's answer is fractional, it is not solved
    in ``time_limit``, or no such plan exists. See the module docstring."""
    weights = problem.weight[flows]
    if not len(flows) or np.any(weights != weights[0]) or np.any(problem.pair[flows] < 0):
        return None
    from ortools.linear_solver import pywraplp

    cap = capacities(problem, float(weights[0]), z)
    s, t, agg, core = previous_options(problem, flows, prior, shape)
    free = np.isin(s, leaves) | np.isin(t, leaves) | (prior < 0)
    fixed = np.flatnonzero(~free)
    paths = problem.row_paths(problem.rows(flows[fixed], prior[fixed]))
    room = cap - np.bincount(paths.ravel(), minlength=problem.pad + 1)[: problem.pad]
    if np.any(room < 0):  # the fixed flows alone are over ``z``
        return None
    solver = pywraplp.Solver.CreateSolver("HIGHS_LP")
    if solver is None:
        return None
    solver.SetSolverSpecificParametersAsString("output_flag=false")  # see solver.repair.moves._lp
    model = _Model(solver)
    chosen = np.flatnonzero(free).tolist()
    if not _build(model, shape, room, chosen, s, t, agg, core, prior):
        return None
    objective = solver.Objective()
    for v in model.kept.values():
        objective.SetCoefficient(v, 1.0)
    objective.SetMaximization()
    solver.SetTimeLimit(max(1, int(time_limit * 1000)))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    choice = _plan(problem, flows, prior, shape, model, s, t, agg, core)
    if choice is None:
        return None
    rows = problem.row_paths(problem.rows(flows, choice))
    counts = np.bincount(rows.ravel(), minlength=problem.pad + 1)[: problem.pad]
    if np.any(counts > cap):  # cannot happen for an integral answer; checked, not assumed
        return None
    return Within(choice, int(np.count_nonzero((prior != -2) & (choice != prior))))


def _build(
    model: _Model,
    shape: FatTreeShape,
    room: IntArray,
    chosen: list[int],
    s: IntArray,
    t: IntArray,
    agg: IntArray,
    core: IntArray,
    prior: IntArray,
) -> bool:
    """Rows and columns of the restricted LP; ``False`` where a free flow has no option."""
    solver, pod = model.solver, shape.pod
    split: dict[tuple[int, int, int], list[pywraplp.Variable]] = {}
    kept_at: dict[tuple[int, int, int, int], list[pywraplp.Variable]] = {}
    for f in chosen:
        a, b = int(s[f]), int(t[f])
        open_ = np.flatnonzero((room[shape.up[a]] > 0) & (room[shape.down[b]] > 0)).tolist()
        if not open_:
            return False
        mine = model.aggs[f] = {j: solver.NumVar(0.0, 1.0, "") for j in open_}
        one = solver.Constraint(1.0, 1.0)
        for j, v in mine.items():
            one.SetCoefficient(v, 1.0)
            model.links.setdefault(int(shape.up[a, j]), []).append(v)
            model.links.setdefault(int(shape.down[b, j]), []).append(v)
            if pod[a] != pod[b]:
                split.setdefault((int(pod[a]), int(pod[b]), j), []).append(v)
        was = int(agg[f])
        if prior[f] >= 0 and was in mine:  # kept only on the previous agg index
            k = model.kept[f] = solver.NumVar(0.0, 1.0, "")
            model.at_most([(k, 1.0), (mine[was], -1.0)], 0.0)
            if pod[a] != pod[b]:
                kept_at.setdefault((int(pod[a]), int(pod[b]), was, int(core[f])), []).append(k)
    for (p, q, j), users in split.items():  # sum over cores = the pod pair's flows on j
        row = solver.Constraint(0.0, 0.0)
        for v in users:
            row.SetCoefficient(v, -1.0)
        for g in range(shape.cores_per_group):
            up, down = int(shape.agg_up[p, j, g]), int(shape.agg_down[q, j, g])
            most = min(int(room[up]), int(room[down]), len(users))
            if most > 0:
                c = model.cores[p, q, j, g] = solver.NumVar(0.0, float(most), "")
                row.SetCoefficient(c, 1.0)
                model.links.setdefault(up, []).append(c)
                model.links.setdefault(down, []).append(c)
    for key, ks in kept_at.items():
        c_or_none = model.cores.get(key)
        if c_or_none is None:  # no room left on the previous core: none can be kept there
            for k in ks:
                k.SetUb(0.0)
        else:
            model.at_most([(k, 1.0) for k in ks] + [(c_or_none, -1.0)], 0.0)
    for r, users in model.links.items():
        model.at_most([(v, 1.0) for v in users], float(room[r]))
    return True


def _plan(
    problem: Problem,
    flows: IntArray,
    prior: IntArray,
    shape: FatTreeShape,
    model: _Model,
    s: IntArray,
    t: IntArray,
    agg: IntArray,
    core: IntArray,
) -> IntArray | None:
    """The LP's answer as candidates, or ``None`` if it is fractional: agg indices read off,
    cores completed per pod pair and agg index (kept flows on their previous core first)."""
    pod = shape.pod
    values = {key: v.solution_value() for key, v in model.cores.items()}
    if any(abs(x - round(x)) > 1e-6 for x in values.values()):
        return None
    left = {key: round(x) for key, x in values.items()}
    picked: dict[int, int] = {}
    for f, mine in model.aggs.items():
        on = [j for j, v in mine.items() if v.solution_value() > 1 - 1e-6]
        if len(on) != 1 or any(1e-6 < v.solution_value() < 1 - 1e-6 for v in mine.values()):
            return None
        picked[f] = on[0]
    kept = {f for f, k in model.kept.items() if k.solution_value() > 0.5}
    if any(1e-6 < k.solution_value() < 1 - 1e-6 for k in model.kept.values()):
        return None
    cores: dict[int, int] = {}
    order = sorted(model.aggs, key=lambda f: f not in kept)  # kept flows take their core first
    for f in order:
        a, b = int(s[f]), int(t[f])
        if pod[a] == pod[b]:
            continue
        p, q, j = int(pod[a]), int(pod[b]), picked[f]
        if f in kept:
            g = int(core[f])
        else:
            free_g = [g for g in range(shape.cores_per_group) if left.get((p, q, j, g), 0) > 0]
            if not free_g:
                return None
            g = free_g[0]
        if left.get((p, q, j, g), 0) <= 0:
            return None
        left[p, q, j, g] -= 1
        cores[f] = g
    choice = prior.copy()
    for f, j in picked.items():
        if f in kept:
            choice[f] = prior[f]
            continue
        rows = problem.candidates(int(problem.pair[flows[f]]))
        match = shape.choice[rows[:, 0]] == j
        if f in cores:
            match &= shape.choice[rows[:, 1]] == cores[f]
        hits = np.flatnonzero(match)
        if len(hits) != 1:
            return None
        choice[f] = int(hits[0])
    return choice
