"""A lower bound on the fewest moves of a fat-tree re-plan, by an LP over aggregated counts.

Why its own model: :mod:`solver.repair.moves` bounds the fewest moves by a relaxation whose
variables are footprints of candidate paths; on a fat-tree a path is four links and a cross-pod
pair has ``A x G`` of them (1,024 at 4,096 and 16,384 GPUs), so the relaxation with every link in
it is far too large, and growing it link by link leaves the ladder's 3-tier rows with weak bounds
(4,096 GPUs, a light uplink lost: at least 9 after five minutes, 12 found). A fat-tree's
structure allows a model as exact and much smaller.

**The model.** A flow between leaves ``s`` (pod ``p``) and ``t`` (pod ``q``) takes an agg index
``j`` and, across pods, a core ``g`` of group ``j`` (:mod:`solver.exact.fattree`). Its leaf links
depend on ``j`` alone and its agg-core links on ``(p, q, j, g)`` alone, so the counts per pair
and ``j`` (``x``) and per pod pair, ``j`` and ``g`` (``z``, with ``sum_g z = sum_pairs x`` for
each ``(p, q, j)``) carry every capacity constraint. Moves need the flows *kept*: per pair and
previous option ``(j, g)`` a count ``k`` at most the flows it had there, with ``sum_g k <= x``
per pair and ``j`` and ``sum_pairs k <= z`` per ``(p, q, j, g)``.

**Exact in integers.** Given integral ``x``, ``z`` and ``k``, each ``(p, q, j)`` is a
transportation problem from its pairs (supplies ``x``) to its cores (demands ``z``, the same
total) in which ``k`` are lower bounds on some cells: the kept counts fit within both sums, and
what is left of supplies and demands has equal totals and no other restriction, so it is always
completed. Hence the integer optimum is the fewest moves, and the LP optimum rounded up is a
**lower bound** on it: ``A x pairs + A x G x pod pairs`` variables (about 0.7 million at 16,384
GPUs, where a path model has 15 million).

**Large models by a first-order method.** Over :data:`MAX_VARIABLES` the LP is too hard for
HiGHS: at 16,384 GPUs (3-tier, light uplink) it was unsolved after 25 minutes with every row,
and with its agg-core rows generated where an answer overfilled a link it never converged
(through OR-Tools: 11, 13, 13, then a fourth round unsolved after 4 minutes; through HiGHS's
own interface, dual simplex warm-started: 11, 12, 13, 14, 14, 14 in six rounds and 6 minutes,
the seventh unsolved after 9 more). OR-Tools' PDLP solves the LP with every row in about a
minute (primal and dual objective 12.0000 within 1e-6), but only to a tolerance, so the bound
is not its objective but the Lagrangian of its duals over the exported model
(:func:`solver.bounds.dualbound.lagrangian_bound`), which holds however rough they are, rounded up:
there, 15 (the 15-move plan found by :mod:`solver.bounds.treewithin` makes it the minimum).

Bound only: the caller has a plan, and an LP answer would still need its cores assigned.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from solver.bounds.dualbound import lagrangian_bound, proven_integer_bound
from solver.exact.fattree import FatTreeShape
from solver.space.problem import TOLERANCE, Problem
from topology.arrays import distinct
from topology.index import BoolArray, IntArray

if TYPE_CHECKING:
    from ortools.linear_solver import pywraplp

__all__ = ["TreeBound", "tree_moves_bound"]

MAX_VARIABLES = 300_000
"""Largest model solved by HiGHS's simplex, exactly: 3-tier 4,096 GPUs is 134,000 variables
(its LP 6-140 s here); 16,384 GPUs is about 780,000, and HiGHS had not solved that LP after 25
minutes. Larger models go to PDLP (see the module docstring)."""

MAX_FIRST_ORDER = 1_500_000
"""Largest model given to PDLP (16,384 GPUs, 3-tier: 783,572 variables and 364,169 rows, 71 s
with the model's building, the whole process peaking at 1.6 GB); beyond it no model is built."""

PDLP_PARAMETERS = (
    "num_threads: 2 termination_criteria { simple_optimality_criteria {"
    " eps_optimal_absolute: 1e-6 eps_optimal_relative: 1e-6 } }"
)
"""PDLP's settings (a PrimalDualHybridGradientParams text): this machine's two cores, and the
optimality tolerances of its documented defaults written out, so the bound's distance to the
LP optimum (far below one move) does not change with a release's defaults."""


FIRST_ORDER_GAP = 0.1
"""How far PDLP's objective may lie from the LP optimum when it reports convergence: its
tolerance is relative to the objectives, which count every kept flow (up to 32,768 here):
1e-6 of twice that is 0.066. Used only to say whether a bound is exact (PDLP's objective
rounds up to it), never in the bound."""


def previous_options(
    problem: Problem, flows: IntArray, prior: IntArray, shape: FatTreeShape
) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """Source and destination leaf of each flow, and its previous agg index and core (``-1``
    where it had none, and core ``-1`` within a pod), read off its previous candidate."""
    leaves = problem.pair_leaves[problem.pair[flows]]
    had = prior >= 0
    rows = problem.row_paths(problem.offset[problem.pair[flows]] + np.maximum(prior, 0))
    far = shape.pod[leaves[:, 0]] != shape.pod[leaves[:, 1]]
    agg = np.where(had, shape.choice[rows[:, 0]], -1)
    core = np.where(had & far, shape.choice[rows[:, min(1, rows.shape[1] - 1)]], -1)
    return leaves[:, 0], leaves[:, 1], agg, core


class TreeBound(NamedTuple):
    """A lower bound on the fewest moves (``None``: not computed), why, and whether it is the
    full LP's optimum rounded up (by PDLP: to its tolerance, see :meth:`_Lp.solve_first_order`)."""

    bound: int | None
    note: str
    exact: bool = False


def tree_moves_bound(
    problem: Problem,
    flows: IntArray,
    prior: IntArray,
    shape: FatTreeShape,
    z: float,
    time_limit: float,
) -> TreeBound:
    """A lower bound on the flows of ``flows`` (one component of a fat-tree, equal weights)
    that must leave their previous candidate (``prior``: ``-1`` gone, ``-2`` none before) for
    every switch link to be at utilization ``<= z``, and a note; ``None`` where the LP is not
    solved in ``time_limit`` (or the weights differ). See the module docstring."""
    start = time.perf_counter()
    weights = problem.weight[flows]
    if not len(flows) or np.any(weights != weights[0]):
        return TreeBound(None, "fat-tree moves bound: unequal weights, not computed")
    if np.any(problem.pair[flows] < 0):
        return TreeBound(None, "fat-tree moves bound: a flow without a switch path, not computed")
    from ortools.linear_solver import pywraplp

    cap = capacities(problem, float(weights[0]), z)
    s, t, agg, core = previous_options(problem, flows, prior, shape)
    forced = int(np.count_nonzero(prior == -1))
    had = prior >= 0
    a_count = shape.aggs
    pod = shape.pod
    pairs, pair_of, n = np.unique(np.stack([s, t], axis=1), axis=0, return_inverse=True,
                                  return_counts=True)  # fmt: skip
    pair_of = pair_of.ravel()
    pod_pairs = distinct(pod[pairs[:, 0]] * shape.pods + pod[pairs[:, 1]]).size
    variables = len(pairs) * a_count + pod_pairs * a_count * shape.cores_per_group
    if variables > MAX_FIRST_ORDER:
        return TreeBound(
            None, f"fat-tree moves bound: {variables:,} variables > {MAX_FIRST_ORDER:,}, not built"
        )
    first_order = variables > MAX_VARIABLES
    solver = pywraplp.Solver.CreateSolver("PDLP" if first_order else "HIGHS_LP")
    if solver is None:
        return TreeBound(None, "fat-tree moves bound: no HiGHS or PDLP in this OR-Tools")
    if not first_order:  # PDLP's are set on its request (_Lp.solve_first_order)
        solver.SetSolverSpecificParametersAsString(
            "output_flag=false"
        )  # see solver.repair.moves._lp
    infinity = solver.infinity()
    rows: dict[tuple[str, int, int, int], pywraplp.Constraint] = {}
    uses: dict[int, list[pywraplp.Variable]] = {}  # per agg-core link, the counts crossing it

    def row(key: tuple[str, int, int, int], bound: float) -> pywraplp.Constraint:
        found = rows.get(key)
        if found is None:
            found = rows[key] = solver.Constraint(-infinity, bound)
        return found

    x: dict[tuple[int, int], pywraplp.Variable] = {}
    for p, (a, b) in enumerate(pairs.tolist()):
        total = solver.Constraint(float(n[p]), float(n[p]))
        far = bool(pod[a] != pod[b])
        for j in range(a_count):
            up, down = int(shape.up[a, j]), int(shape.down[b, j])
            v = x[p, j] = solver.NumVar(0.0, float(min(n[p], cap[up], cap[down])), "")
            total.SetCoefficient(v, 1.0)
            row(("up", up, 0, 0), float(cap[up])).SetCoefficient(v, 1.0)
            row(("down", down, 0, 0), float(cap[down])).SetCoefficient(v, 1.0)
            if far:  # sum_g z[pq, j, g] - sum_pairs x[pair, j] = 0
                split = rows.get(("split", int(pod[a]), int(pod[b]), j))
                if split is None:
                    split = rows["split", int(pod[a]), int(pod[b]), j] = solver.Constraint(0, 0)
                    cores = _cores(solver, shape, cap, split, rows, int(pod[a]), int(pod[b]), j)
                    for r, v_rg in cores:
                        uses.setdefault(r, []).append(v_rg)
                split.SetCoefficient(v, -1.0)
    kept = _kept(solver, shape, rows, x, pair_of, pairs, agg, core, had)
    objective = solver.Objective()
    for v in kept:
        objective.SetCoefficient(v, -1.0)
    objective.SetOffset(float(np.count_nonzero(had)))
    objective.SetMinimization()
    for r, crossing in uses.items():
        _link_row(solver, float(cap[r]), crossing)
    lp = _Lp(solver, objective, forced, len(flows), z, start, time_limit)
    return lp.solve_first_order() if first_order else lp.solve()


def _link_row(
    solver: pywraplp.Solver, cap: float, crossing: list[pywraplp.Variable]
) -> pywraplp.Constraint:
    """An agg-core link's capacity over the core counts crossing it."""
    c = solver.Constraint(-solver.infinity(), cap)
    for v in crossing:
        c.SetCoefficient(v, 1.0)
    return c


@dataclass
class _Lp:
    """The built LP and what reading its answer needs."""

    solver: pywraplp.Solver
    objective: pywraplp.Objective
    forced: int
    flows: int
    z: float
    start: float
    time_limit: float

    def solve(self) -> TreeBound:
        """Solve within what is left of the time; its bound (rounded up), exact when solved."""
        from ortools.linear_solver import pywraplp

        solver = self.solver
        left = self.time_limit - (time.perf_counter() - self.start)
        solver.SetTimeLimit(max(1, int(left * 1000)))
        status = solver.Solve()
        seconds = time.perf_counter() - self.start
        size = f"{solver.NumVariables():,} variables, {solver.NumConstraints():,} rows"
        if status == pywraplp.Solver.INFEASIBLE:
            note = f"fat-tree moves bound: infeasible at {self.z:g} ({size})"
            return TreeBound(self.flows + 1, note, True)
        if status != pywraplp.Solver.OPTIMAL:
            return TreeBound(None, f"fat-tree moves bound: LP not solved ({size}, {seconds:.1f} s)")
        bound = self.forced + math.ceil(self.objective.Value() - 1e-6)
        return TreeBound(bound, f"fat-tree moves bound: {bound} ({size}, {seconds:.1f} s)", True)

    def solve_first_order(self) -> TreeBound:
        """Solve by PDLP within what is left of the time; the bound is the Lagrangian of its
        duals over the exported model (:mod:`solver.bounds.dualbound`), rounded up, also where PDLP
        ran out of time (its last duals bound the LP too, only less tightly). Exact when PDLP
        converged and its objective rounds up to the same count (the LP optimum lies between
        the two, to PDLP's tolerance).

        Solved from the exported model's request, not :meth:`pywraplp.Solver.Solve`: OR-Tools
        returns no duals through the solver object from a PDLP run that did not converge."""
        from ortools.linear_solver import linear_solver_pb2, pywraplp

        model = linear_solver_pb2.MPModelProto()
        self.solver.ExportModelToProto(model)
        size = f"{len(model.variable):,} variables, {len(model.constraint):,} rows"
        left = self.time_limit - (time.perf_counter() - self.start)
        request = linear_solver_pb2.MPModelRequest(
            model=model,
            solver_type=linear_solver_pb2.MPModelRequest.PDLP_LINEAR_PROGRAMMING,
            solver_specific_parameters=PDLP_PARAMETERS,
            solver_time_limit_seconds=max(1.0, left),
        )
        response = linear_solver_pb2.MPSolutionResponse()
        pywraplp.Solver.SolveWithProto(request, response)
        seconds = time.perf_counter() - self.start
        status = linear_solver_pb2.MPSolverResponseStatus.Name(response.status)
        if len(response.dual_value) != len(model.constraint):
            note = f"fat-tree moves bound: PDLP gave no duals ({status}; {size}, {seconds:.1f} s)"
            return TreeBound(None, note)
        lagrangian = lagrangian_bound(model, list(response.dual_value))
        if not math.isfinite(lagrangian):
            return TreeBound(None, f"fat-tree moves bound: PDLP's duals bound nothing ({size})")
        bound = self.forced + max(0, proven_integer_bound(lagrangian))
        converged = response.status == linear_solver_pb2.MPSOLVER_OPTIMAL
        solved = self.forced + math.ceil(response.objective_value - FIRST_ORDER_GAP)
        exact = converged and bound == solved
        note = (
            f"fat-tree moves bound: {bound} ({size}, {seconds:.1f} s, PDLP {status}; its duals"
            f" bound the LP at {self.forced + lagrangian:.6f}, its objective"
            f" {self.forced + response.objective_value:.6f})"
        )
        return TreeBound(bound, note, exact)


def capacities(problem: Problem, w: float, z: float) -> IntArray:
    """Flows of weight ``w`` each switch resource may carry at ``z`` (0 where unusable)."""
    limit = z * (1 + TOLERANCE) + TOLERANCE
    scale = problem.scale[:-1]
    cap = np.zeros(problem.pad, dtype=np.int64)
    live = (scale > 0) & np.asarray(problem.index.res_usable, dtype=bool)
    cap[live] = np.floor(limit / (w * scale[live]) + 1e-9).astype(np.int64)
    return cap


def _cores(
    solver: pywraplp.Solver,
    shape: FatTreeShape,
    cap: IntArray,
    split: pywraplp.Constraint,
    rows: dict[tuple[str, int, int, int], pywraplp.Constraint],
    p: int,
    q: int,
    j: int,
) -> list[tuple[int, pywraplp.Variable]]:
    """The core counts ``z[p, q, j, g]`` of one pod pair and agg index, each with the two
    agg-core links it crosses (their rows are made by the caller)."""
    out = []
    for g in range(shape.cores_per_group):
        up, down = int(shape.agg_up[p, j, g]), int(shape.agg_down[q, j, g])
        v = solver.NumVar(0.0, float(min(cap[up], cap[down])), "")
        rows["z", p * shape.pods + q, j, g] = _single(solver, v)
        split.SetCoefficient(v, 1.0)
        out += [(up, v), (down, v)]
    return out


def _single(solver: pywraplp.Solver, v: pywraplp.Variable) -> pywraplp.Constraint:
    """``sum of kept - z <= 0`` for one core count: kept flows fit in what it carries."""
    c = solver.Constraint(-solver.infinity(), 0.0)
    c.SetCoefficient(v, -1.0)
    return c


def _kept(
    solver: pywraplp.Solver,
    shape: FatTreeShape,
    rows: dict[tuple[str, int, int, int], pywraplp.Constraint],
    x: dict[tuple[int, int], pywraplp.Variable],
    pair_of: IntArray,
    pairs: IntArray,
    agg: IntArray,
    core: IntArray,
    had: BoolArray,
) -> list[pywraplp.Variable]:
    """Per pair and previous option, the flows kept there: at most those it had, within the
    pair's count on that agg index and (across pods) the pod pair's count on that core."""
    groups: dict[tuple[int, int, int], int] = {}
    for f in np.flatnonzero(had).tolist():
        key = (int(pair_of[f]), int(agg[f]), int(core[f]))
        groups[key] = groups.get(key, 0) + 1
    within: dict[tuple[int, int], pywraplp.Constraint] = {}
    out = []
    for (p, j, g), count in groups.items():
        v = solver.NumVar(0.0, float(count), "")
        out.append(v)
        fits = within.get((p, j))
        if fits is None:  # sum over cores of kept <= x[p, j]
            fits = within[p, j] = solver.Constraint(-solver.infinity(), 0.0)
            fits.SetCoefficient(x[p, j], -1.0)
        fits.SetCoefficient(v, 1.0)
        if g >= 0:
            a, b = pairs[p].tolist()
            pq = int(shape.pod[a]) * shape.pods + int(shape.pod[b])
            rows["z", pq, j, g].SetCoefficient(v, 1.0)
    return out
