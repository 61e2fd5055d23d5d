"""The fewest moves that reach a utilization: exact, by an LP (then CP-SAT) on a growing
neighbourhood.

Why: a re-plan must move as few live QPs as the utilization it reaches allows, and say how close
it is. :func:`solver.repair.evict.min_moves` is a cheap counting bound and the repair a fast
heuristic; where they disagree the truth lies between. But almost every flow is far from the
failure, and a flow far from it has no reason to move. This module makes that precise.

**Relaxation.** Keep the capacity constraints of a set ``W`` of resources only. A flow whose
previous path avoids ``W`` loses nothing by staying (it loads nothing that is constrained) and
moving it costs one, so some optimum of the relaxation keeps it. What remains is small: the
flows that must be placed (their path is gone, or they are new) and the flows whose previous
path crosses ``W``; of each one's candidates only the *footprint* on ``W`` matters, so
candidates with the same footprint are one option (a flow far from ``W`` on one side has a
handful). Flows of one pair with the same previous footprint are interchangeable: one count
per (group, footprint), as in :mod:`solver.search.cpsat`. Any optimum of this relaxation is a
**lower bound** on the fewest moves of the real problem, for every ``W``.

**Solving a round.** First the LP of the relaxation (counts fractional), by HiGHS: its optimum
rounded up is a lower bound, and where its answer is integral (on the failure ladder's full
fabrics it is) that answer is the relaxation's integer optimum, with no branching at all. Only
a fractional answer goes on to CP-SAT, which is exact but slow to *prove* on these symmetric
models: 2-tier at 4,096 GPUs, a leaf full after its uplink failed, CP-SAT had proven 11 after
20 minutes; the LP proves the minimum, 12, in one round of about 20 s.

**Growing W** (constraint generation). The relaxation's answer is completed into real paths: a
flow whose chosen footprint holds its previous path stays, the others take the candidate of
that footprint that keeps the resources outside ``W`` least loaded. If no resource is then over
the target, the completion is a real plan whose moves equal the relaxation's optimum: the
minimum, proven. Otherwise the over-full resources join ``W`` and the model is solved again.
``W`` starts with the resources already over the target; two or three rounds usually close it
(3-tier fat-tree at 4,096 GPUs, a spine down: three rounds, the minimum proven). Where a round
does not raise the bound, the chain of conflicts is wandering across a full fabric, and the
next round takes every resource at once (the relaxation is then the problem itself).

Equal weights only (the integer capacities are then exact); for other components the caller
keeps its heuristic and counting bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solver.repair.chains import settle
from solver.space.problem import TOLERANCE, Problem
from topology.index import BoolArray, IntArray

if TYPE_CHECKING:  # OR-Tools (and the pandas CP-SAT loads) only when a model is built
    from ortools.linear_solver import pywraplp
    from ortools.sat.python import cp_model

__all__ = ["FewestMoves", "fewest_moves"]

MAX_ROUNDS = 12
"""Rounds of constraint generation before giving up on a proof."""

EVERYTHING_ENTRIES = 5_000_000
"""Largest round with every resource in ``W`` (footprint-resource entries of its model): the
2-tier 16,384-GPU ladder component is 4.2 million (its LP proves the minimum in about 30 s);
a 3-tier one, whose footprints are then whole 4-link paths, is several times that and would
need tens of GB, so fat-trees keep growing ``W`` by siblings."""


@dataclass(frozen=True)
class FewestMoves:
    """The outcome for one component: ``choice`` (aligned with its flows) reaches the target
    with ``moves`` moves when found; ``bound`` is a proven lower bound on the moves of any
    assignment reaching it; ``proven`` when the two meet."""

    choice: IntArray | None
    moves: int | None
    bound: int
    proven: bool
    note: str


def _capacity(problem: Problem, w: float, z: float) -> IntArray:
    """Flows of weight ``w`` each resource (and the pad, unbounded) may carry at ``z``."""
    limit = z * (1 + TOLERANCE) + TOLERANCE
    scale = problem.scale
    cap = np.full(problem.pad + 1, np.iinfo(np.int32).max, dtype=np.int64)
    live = scale > 0
    cap[live] = np.floor(limit / (w * scale[live]) + 1e-9).astype(np.int64)
    usable = np.ones(problem.pad + 1, dtype=bool)
    usable[:-1] = problem.index.res_usable
    cap[~usable] = 0
    return cap


class _Neighbourhood:
    """One component's data for the relaxation: flows, previous rows, capacities."""

    def __init__(self, problem: Problem, flows: IntArray, prior: IntArray, z: float) -> None:
        self.problem = problem
        self.flows = flows
        self.prior = prior
        self.w = float(problem.weight[flows[0]])
        self.cap = _capacity(problem, self.w, z)
        self.pad = problem.pad
        width = problem.width
        self.before = np.full((len(flows), width), self.pad, dtype=np.int64)
        kept = np.flatnonzero(prior >= 0)
        self.before[kept] = problem.row_paths(problem.rows(flows[kept], prior[kept]))
        self.counts = np.bincount(self.before.ravel(), minlength=self.pad + 1)
        self.counts[self.pad] = 0

    def seed(self) -> BoolArray:
        """The first ``W``: the resources over capacity now. The rest is added where the
        completed answers overload something (seeding it with every full resource the flows
        to place could use made the first model of a 3-tier fabric too large to solve)."""
        inside = self.counts > self.cap
        inside[self.pad] = False
        return inside

    def siblings(self, resources: IntArray) -> IntArray:
        """Resources leaving the same switch toward the same tier as one of ``resources``,
        or entering the same switch from the same tier: in two tiers, all the spines of a
        leaf's side. A conflict at one of them usually moves on to the next."""
        index = self.problem.index
        tier = np.asarray(index.tier, dtype=np.int64)
        src, dst = index.res_src, index.res_dst
        up = tier[src[resources]] < tier[dst[resources]]
        key_all = np.where(tier[src] < tier[dst], src * 16 + tier[dst], -(dst * 16 + tier[src]) - 1)
        key = key_all[resources]
        del up
        return np.flatnonzero(np.isin(key_all, key))

    def entries(self, inside: BoolArray) -> int:
        """Footprint-resource entries of the round for ``W = inside``, at most."""
        pairs = self.problem.pair[self.flows[self.free(inside)]]
        pairs = pairs[pairs >= 0]
        widths = np.minimum(self.problem.hops[pairs], int(inside.sum()))
        return int((self.problem.num_candidates(pairs) * widths).sum())

    def everything(self) -> BoolArray:
        """``W`` = every switch-to-switch resource (the relaxation is then the problem
        itself): where growing by siblings stalls, one LP round of this is often cheaper
        than the rounds it would take to get there."""
        inside: BoolArray = self.cap < np.iinfo(np.int32).max
        inside[self.pad] = False
        return inside

    def free(self, inside: BoolArray) -> IntArray:
        """Positions of the flows the relaxation for ``W = inside`` decides about."""
        touches = np.any(inside[self.before], axis=1)
        return np.flatnonzero((self.prior < 0) | touches)

    def options(self, inside: BoolArray) -> int:
        """Candidates of the free flows: the size of the round's model, at most."""
        pairs = self.problem.pair[self.flows[self.free(inside)]]
        return int(self.problem.num_candidates(pairs).sum())

    def movers(self, choice: IntArray) -> int:
        had = self.prior != -2
        return int(np.count_nonzero(had & (choice != self.prior)))

    def over(self, choice: IntArray) -> IntArray:
        """Resources above capacity under ``choice`` (every flow placed)."""
        problem = self.problem
        rows = problem.row_paths(problem.rows(self.flows, choice))
        counts = np.bincount(rows.ravel(), minlength=self.pad + 1)
        counts[self.pad] = 0
        return np.flatnonzero(counts > self.cap)


@dataclass
class _Option:
    """One group of interchangeable free flows (same pair, same previous candidate) and the
    footprints on ``W`` its candidates collapse to."""

    members: list[int]
    k0: int
    rows: IntArray
    inverse: IntArray
    keys: int


@dataclass
class _Round:
    """The relaxation for one ``W``, as data both solvers read."""

    free: IntArray
    constant: int
    options: list[_Option]
    load: dict[int, list[tuple[int, int]]]
    """Per constrained resource: the (option, footprint) variables that load it."""

    @property
    def size(self) -> int:
        return sum(o.keys for o in self.options)


def _build_round(hood: _Neighbourhood, inside: BoolArray) -> _Round:
    problem = hood.problem
    flows, prior, pad = hood.flows, hood.prior, hood.pad
    free = hood.free(inside)
    groups: dict[tuple[int, int], list[int]] = {}
    for i in free.tolist():
        groups.setdefault((int(problem.pair[flows[i]]), int(prior[i])), []).append(i)
    options: list[_Option] = []
    load: dict[int, list[tuple[int, int]]] = {}
    for (p, k0), members in groups.items():
        rows = problem.candidates(p)
        foot = np.where(inside[rows], rows, pad)
        keys, inverse = np.unique(foot, axis=0, return_inverse=True)
        o = len(options)
        for c, key in enumerate(keys.tolist()):
            for r in key:
                if r != pad:
                    load.setdefault(r, []).append((o, c))
        options.append(_Option(members, k0, rows, inverse.ravel(), len(keys)))
    return _Round(free, int(np.count_nonzero(prior == -1)), options, load)


def _lp(data: _Round, cap: IntArray, time_limit: float) -> tuple[list[list[float]], float] | None:
    """The relaxation's LP (counts fractional), by HiGHS through OR-Tools: the footprint
    counts and the fewest moves of the LP (without ``constant``), or ``None`` if it is not
    solved to optimality in time. Infeasible returns an empty list and ``inf``.

    Why an LP first: on the full fabrics of the failure ladder its optimum is integral and
    equals the minimum (2-tier, 4,096 GPUs, a leaf full after its uplink failed: 12 moves,
    proven in one round with ``W`` = every link, where CP-SAT had proven only 11 after 20
    minutes); an integral LP answer is the relaxation's integer optimum too, and no
    branching is needed. HiGHS, not GLOP: GLOP had not finished that LP after 15 minutes."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("HIGHS_LP")
    if solver is None:  # an OR-Tools build without HiGHS: CP-SAT alone
        return None
    solver.SetTimeLimit(max(1, int(time_limit * 1000)))
    # HiGHS prints a banner on standard output otherwise (``SuppressOutput`` does not stop
    # it); the call returns False even when the option is taken, so its result is not read.
    solver.SetSolverSpecificParametersAsString("output_flag=false")
    objective = solver.Objective()
    offset = 0.0
    xs: list[list[pywraplp.Variable]] = []
    for o in data.options:
        n = float(len(o.members))
        row = solver.Constraint(n, n)
        vs = [solver.NumVar(0.0, n, "") for _ in range(o.keys)]
        for v in vs:
            row.SetCoefficient(v, 1.0)
        if o.k0 >= 0:  # moves = n - (flows left on the previous footprint)
            objective.SetCoefficient(vs[int(o.inverse[o.k0])], -1.0)
            offset += n
        xs.append(vs)
    for r, terms in data.load.items():
        row = solver.Constraint(-solver.infinity(), float(cap[r]))
        for g, c in terms:
            row.SetCoefficient(xs[g][c], 1.0)
    objective.SetOffset(offset)
    objective.SetMinimization()
    status = solver.Solve()
    if status == pywraplp.Solver.INFEASIBLE:
        return [], float("inf")
    if status != pywraplp.Solver.OPTIMAL:
        return None
    return [[v.solution_value() for v in vs] for vs in xs], float(objective.Value())


def _cpsat(
    data: _Round, cap: IntArray, hint: IntArray | None, time_limit: float, seed: int
) -> tuple[list[list[int]] | None, float, bool, bool]:
    """The relaxation in integers by CP-SAT: counts (or ``None``), its proven bound on the
    moves (without ``constant``), whether proven optimal, whether infeasible."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    xs: list[list[cp_model.IntVar]] = []
    cost: list[cp_model.LinearExprT] = []
    for o in data.options:
        n = len(o.members)
        vs = [model.new_int_var(0, n, "") for _ in range(o.keys)]
        model.add(sum(vs) == n)
        if o.k0 >= 0:
            cost.append(n - vs[int(o.inverse[o.k0])])
        if hint is not None:
            counts = np.bincount(o.inverse[hint[o.members]], minlength=o.keys)
            for v, h in zip(vs, counts.tolist(), strict=True):
                model.add_hint(v, h)
        xs.append(vs)
    for r, terms in data.load.items():
        model.add(sum(xs[g][c] for g, c in terms) <= int(cap[r]))
    model.minimize(sum(cost) if cost else 0)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.01)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, 0.0, False, status == cp_model.INFEASIBLE
    values = [[int(solver.value(v)) for v in vs] for vs in xs]
    return values, float(solver.best_objective_bound), status == cp_model.OPTIMAL, False


def _integral(values: list[list[float]]) -> list[list[int]] | None:
    out = []
    for vs in values:
        rounded = [round(v) for v in vs]
        if any(abs(v - r) > 1e-6 for v, r in zip(vs, rounded, strict=True)):
            return None
        out.append(rounded)
    return out


def _complete(hood: _Neighbourhood, data: _Round, want_all: list[list[int]]) -> IntArray:
    """Real paths from the relaxation's counts: members whose previous path is in the chosen
    footprint stay; the rest take the candidate of their footprint that leaves the most room
    on the path (resources outside W included), one after the other."""
    choice = hood.prior.copy()
    pad = hood.pad
    counts = hood.counts.copy()
    np.subtract.at(counts, hood.before[data.free].ravel(), 1)
    counts[pad] = 0
    leftovers: list[tuple[int, IntArray, IntArray]] = []
    for o, want in zip(data.options, want_all, strict=True):
        want = list(want)
        rest = o.members
        if o.k0 >= 0:
            c0 = int(o.inverse[o.k0])
            stay = min(want[c0], len(o.members))
            for i in o.members[:stay]:
                choice[i] = o.k0
                counts[o.rows[o.k0]] += 1
            want[c0] -= stay
            rest = o.members[stay:]
        slots = [c for c, m in enumerate(want) for _ in range(m)]
        leftovers.extend((i, o.rows, np.flatnonzero(o.inverse == c))
                         for i, c in zip(rest, slots, strict=True))  # fmt: skip
    for i, rows, same in leftovers:
        room = hood.cap[rows[same]] - counts[rows[same]]
        k = int(same[np.argmax(room.min(axis=1))])
        choice[i] = k
        counts[rows[k]] += 1
        counts[pad] = 0
    return choice


def _solve_round(
    hood: _Neighbourhood,
    inside: BoolArray,
    hint: IntArray | None,
    time_limit: float,
    seed: int,
) -> tuple[IntArray | None, int, bool]:
    """Solve the relaxation for ``W = inside``; returns the completed choice (or ``None``),
    the proven lower bound on moves and whether the relaxation's optimum was proven.

    The LP first (:func:`_lp`): its optimum rounded up is a bound, and an integral answer is
    the relaxation's optimum. Only a fractional one goes on to CP-SAT, with the time left."""
    start = time.perf_counter()
    data = _build_round(hood, inside)
    flows = len(hood.flows)
    lp = _lp(data, hood.cap, time_limit)
    lower = 0
    if lp is not None:
        values, value = lp
        if value == float("inf"):  # no assignment reaches z even with every flow free
            return None, flows + 1, True
        lower = int(np.ceil(value - 1e-6))
        whole = _integral(values)
        if whole is not None:
            return _complete(hood, data, whole), data.constant + lower, True
    left = time_limit - (time.perf_counter() - start)
    counts, bound, optimal, infeasible = _cpsat(data, hood.cap, hint, left, seed)
    if infeasible:
        return None, flows + 1, True
    lower = max(lower, int(np.ceil(bound - 1e-6)))
    if counts is None:
        return None, data.constant + lower, False
    return _complete(hood, data, counts), data.constant + lower, optimal


def fewest_moves(
    problem: Problem,
    flows: IntArray,
    prior: IntArray,
    z: float,
    incumbent: IntArray | None = None,
    *,
    time_limit: float = 1.0,
    seed: int = 0,
    max_options: int | None = None,
    chains: bool = True,
) -> FewestMoves:
    """The fewest of ``flows`` (one component, equal weights) that must leave their previous
    candidate (``prior``: ``-1`` gone, ``-2`` none before) for every resource to be at
    utilization ``<= z``; ``incumbent`` (a full assignment reaching ``z``) hints the search.
    ``max_options`` stops before a round whose free flows have more candidates than that (a
    caller with milliseconds to spend); ``chains`` completes an answer that overloads some
    resources by chains of moves (:func:`solver.repair.chains.settle`), a better incumbent at some
    cost. See the module docstring."""
    start = time.perf_counter()
    weights = problem.weight[flows]
    if not len(flows) or np.any(weights != weights[0]):
        return FewestMoves(None, None, 0, False, "fewest moves: unequal weights, not solved")
    hood = _Neighbourhood(problem, flows, prior, z)
    inside = hood.seed()
    best: IntArray | None = None
    best_moves: int | None = None
    if incumbent is not None and not hood.over(incumbent).size:
        best, best_moves = incumbent, hood.movers(incumbent)
    bound = int(np.count_nonzero(prior == -1))
    last = bound
    rounds = 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        left = time_limit - (time.perf_counter() - start)
        if left <= 0 or (best_moves is not None and best_moves <= bound):
            break
        if max_options is not None and hood.options(inside) > max_options:
            break
        choice, lower, _ = _solve_round(hood, inside, best, left, seed)
        bound = max(bound, lower)
        if choice is None:
            break
        over = hood.over(choice)
        if over.size and chains:
            settled = settle(problem, flows, prior, choice, z)
            if settled is not None and not hood.over(settled).size:
                moves = hood.movers(settled)
                if best_moves is None or moves < best_moves:
                    best, best_moves = settled, moves
        if not over.size:
            moves = hood.movers(choice)
            if best_moves is None or moves < best_moves:
                best, best_moves = choice, moves
            break
        whole = hood.everything()
        if (
            lower <= last
            and rounds > 1
            and not inside[whole].all()
            and hood.entries(whole) <= EVERYTHING_ENTRIES
        ):
            inside = whole  # growing stalled: the whole problem, in one round
        else:
            inside[hood.siblings(over)] = True
        last = lower
    proven = best_moves is not None and best_moves <= bound
    seconds = time.perf_counter() - start
    note = (
        f"fewest moves: {best_moves} (bound {bound}, {rounds} rounds, "
        f"{int(inside.sum())} resources, {seconds:.3f} s)"
    )
    return FewestMoves(best, best_moves, bound, proven, note)
