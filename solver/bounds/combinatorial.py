"""Lower bounds on the maximum utilization: what no plan can beat, reported with every plan.

Why: a planner that says "max utilization 1.5" means little until it can say "and nothing
below 1.5 exists" (or how far from that it may be). The bounds also stop the search: a plan
that meets a bound is optimal, and CP-SAT proves optimality far sooner when told the bound.

**Combinatorial.** Every candidate path of a pair crosses exactly one resource at each hop
position, so for a *family* of pairs and a hop position, the family's flows put their whole
weight ``W`` on the union ``R`` of the resources its candidates use there; some resource of
``R`` carries at least its capacity share, so ``max util >= W / sum over R of (capacity /
reference)``. Families: hop 0 grouped by source leaf (leaf uplinks), the last hop by destination
leaf (downlinks), and the hops in between by source (climbing) or destination (descending) pod,
e.g. a pod's aggregation-core links in a 3-tier fat-tree. Any grouping gives a valid bound; these
are the ones that bind in a Clos. When every flow of a family has one weight ``w`` and every
resource of ``R`` one scale ``σ``, loads are multiples of ``w`` and the bound is
``w * ceil(n / |R|) * σ``: the 2-tier bound ``ceil(Δ / S)`` is this family at a leaf. Pairs with a
single candidate (after failures) add their forced load, and no plan beats the heaviest flow
alone on its least-scaled candidate (what makes a few large flows' bounds tight). Cost: one
pass over the candidate table (a bitmap of families x resources), for every component at
once; on a lazy fat-tree table (:mod:`solver.space.treecandidates`) a pass over pairs and agg
positions instead, the core hops read once per pod pair and set of usable aggs. Where all
utilizations of a component are multiples of one ``unit`` (one scale, weights with a common
divisor), every bound is rounded up to a multiple of it: 7.5 becomes 8 when
loads are integers.

**LP relaxation** (GLOP): each pair splits its weight over its candidates fractionally; minimize
``z`` with every resource's scaled load ``<= z``. Its optimum is a lower bound (fractional plans
include every integer plan) and captures what the families miss (failed links that leave pairs
only some spines). It is skipped above :data:`LP_MAX_ENTRIES` path-resource entries, where GLOP
would eat the time budget; the plan says so. CP-SAT's own proven bound is the third source.
"""

from __future__ import annotations

import math
import weakref
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from solver.space.problem import Problem
from topology.arrays import distinct
from topology.index import FloatArray, IntArray

if TYPE_CHECKING:  # GLOP is loaded only when an LP bound is computed
    from ortools.linear_solver import pywraplp

__all__ = [
    "LP_MAX_ENTRIES",
    "as_integers",
    "combinatorial_bounds",
    "component_bounds",
    "integral_units",
    "lp_bound",
    "round_up",
]

LP_MAX_ENTRIES = 400_000
"""Largest LP (candidate paths x hops) worth building; above it the LP bound is skipped."""

_SLACK = 1e-7
"""Relative slack taken off LP optima (solver tolerances) and used when rounding up."""


def _pod_or_leaf(problem: Problem, leaves: IntArray) -> IntArray:
    """Pod number of each leaf (offset past the node numbers), or the leaf itself without one."""
    pods = np.array(
        [-1 if s.pod is None else s.pod for s in problem.fabric.switches], dtype=np.int64
    )
    pod = pods[leaves]
    return np.where(pod >= 0, problem.index.num_nodes + pod, leaves)


def _pair_weights(problem: Problem) -> tuple[FloatArray, ...]:
    """Per pair: total weight, flow count, least and largest weight of its flows."""
    cross = problem.cross
    pair = problem.pair[cross]
    w = problem.weight[cross]
    n = problem.num_pairs
    total = np.bincount(pair, weights=w, minlength=n).astype(np.float64)
    count = np.bincount(pair, minlength=n).astype(np.float64)
    low = np.full(n, np.inf)
    high = np.full(n, -np.inf)
    np.minimum.at(low, pair, w)
    np.maximum.at(high, pair, w)
    return total, count, low, high


_BITMAP_MAX = 1 << 26
"""Largest family x resource grid marked as a bitmap (64 MiB); above it, sorting is used."""

_GRID_PER_ENTRY = 32
"""Most grid cells per entry for which the bitmap is used: a sort of ``n`` integers costs about
as much as touching some ``n log n`` bytes, a grid its every cell (see :func:`_distinct`)."""


def _spans(starts: IntArray, counts: IntArray) -> IntArray:
    """``starts[i], ..., starts[i] + counts[i] - 1`` for every ``i``, concatenated."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    first = np.cumsum(counts) - counts
    spans: IntArray = np.arange(total, dtype=np.int64) + np.repeat(starts - first, counts)
    return spans


def _distinct(fam: IntArray, res: IntArray, nfam: int, width: int) -> tuple[IntArray, IntArray]:
    """The distinct ``(fam, res)`` pairs, sorted. Why a bitmap: a whole candidate table holds
    millions of entries but only thousands of families, so marking a families x resources grid
    is linear where ``np.unique`` sorts the whole table (the bulk of a 3-tier re-plan once).
    Why not always: the lazy fat-tree and the grouped two-tier tables give tens of thousands
    of entries, and a grid of millions cells is then the cost (3-tier 4,096 GPUs: 24,576
    entries, a 6.5-million-cell grid 2.8-19 ms, a sort 0.3-0.5 ms), so entries are sorted
    where the grid has over :data:`_GRID_PER_ENTRY` cells per entry."""
    codes = fam * width + res
    if nfam * width > min(_BITMAP_MAX, _GRID_PER_ENTRY * codes.size):
        used = distinct(codes)
    else:
        seen = np.zeros(nfam * width, dtype=bool)
        seen[codes] = True
        used = np.flatnonzero(seen)
    rfam, rres = np.divmod(used, width)
    return rfam, rres


def combinatorial_bounds(problem: Problem) -> FloatArray:
    """The bound of the module docstring for every component at once (one value each)."""
    out = np.zeros(problem.num_components)
    if not problem.num_pairs:
        return out
    total, count, low, high = _pair_weights(problem)
    counts = problem.num_candidates()
    hops = problem.hops
    leaves = problem.pair_leaves
    label = problem.label
    nodes = problem.index.num_nodes + len(problem.fabric.switches) + 1
    pair_codes: list[IntArray] = []  # family of each (pair, hop position)
    pair_ids: list[IntArray] = []
    resources: list[IntArray] = []  # the resources the candidates cross at that position
    entry_pos: list[IntArray] = []  # and the (pair, position) each is of
    at = 0
    tree = problem.tree
    # Two-hop tables: a group of pairs with the same links at a hop shares its leaf there and
    # its component, so its family; its first pair's entries stand for all (a million
    # entries at 16,384 GPUs, some 35,000 this way; the same distinct family-resource pairs).
    groups = problem.two_hop_groups
    for h in distinct(hops).tolist():
        sel = np.flatnonzero(hops == h)
        whole = tree is None and groups is None
        rows = _spans(problem.offset[sel], counts[sel]) if whole else sel
        for j in range(h):
            climbing = j < h / 2
            dist = j if climbing else h - 1 - j
            leaf = leaves[sel, 0 if climbing else 1]
            key = leaf if dist == 0 else _pod_or_leaf(problem, leaf)
            code = ((int(climbing) * 64 + dist) * nodes + key) * len(out) + label[sel]
            pair_codes.append(code)
            pair_ids.append(sel)
            if groups is not None:  # sel is every pair: hops are all 2
                reps, _, links, of_link = groups[j]
                resources.append(links)
                entry_pos.append(at + reps[of_link])
            elif tree is None:
                resources.append(problem.table[rows, j])
                entry_pos.append(np.repeat(np.arange(at, at + len(sel)), counts[sel]))
            else:
                who, res_j = tree.hop_entries(sel, j, code)
                resources.append(res_j)
                entry_pos.append(at + np.searchsorted(sel, who))
            at += len(sel)
    # Families are numbered at the pair level (small), then spread over candidate entries.
    fam_keys, pair_fam = np.unique(np.concatenate(pair_codes), return_inverse=True)
    pair_fam = pair_fam.ravel()
    owner = np.concatenate(pair_ids)
    fam = pair_fam[np.concatenate(entry_pos)]
    res = np.concatenate(resources)
    nfam = len(fam_keys)
    # Weight of a family: each member pair once.
    member = distinct(pair_fam * problem.num_pairs + owner)
    mfam, mpair = np.divmod(member, problem.num_pairs)
    weight = np.bincount(mfam, weights=total[mpair], minlength=nfam)
    flows_in = np.bincount(mfam, weights=count[mpair], minlength=nfam)
    wlow, whigh = np.full(nfam, np.inf), np.full(nfam, -np.inf)
    np.minimum.at(wlow, mfam, low[mpair])
    np.maximum.at(whigh, mfam, high[mpair])
    # Resources of a family: each once.
    rfam, rres = _distinct(fam, res, nfam, problem.pad + 1)
    sigma = problem.scale[rres]
    room = np.bincount(rfam, weights=1.0 / sigma, minlength=nfam)
    size = np.bincount(rfam, minlength=nfam)
    slow, shigh = np.full(nfam, np.inf), np.full(nfam, -np.inf)
    np.minimum.at(slow, rfam, sigma)
    np.maximum.at(shigh, rfam, sigma)
    bound = weight / room
    uniform = (wlow == whigh) & (slow == shigh)
    per_link = np.ceil(flows_in[uniform] / size[uniform] - _SLACK)
    bound[uniform] = np.maximum(bound[uniform], wlow[uniform] * per_link * slow[uniform])
    np.maximum.at(out, fam_keys % len(out), bound)
    # The heaviest flow of a pair loads some link of its lightest-scaled candidate at least.
    np.maximum.at(out, label, high * problem.lightest_scale)
    single = np.flatnonzero(counts == 1)
    if single.size:
        forced = problem.cross[np.isin(problem.pair[problem.cross], single)]
        load = problem.loads(forced, np.zeros(len(forced), dtype=np.int64))
        out = np.maximum(out, problem.peaks(load))
    return out


MAX_DENOMINATOR = 1000
"""Weights and scales are read as fractions with denominators up to this, when exact."""

MAX_COMMON = 10**6
"""Largest common denominator accepted for an exact integer model."""


def as_integers(values: FloatArray) -> tuple[IntArray, int, bool]:
    """``values * d`` as integers for a common denominator ``d``; ``exact`` if no rounding
    was needed (values that are small rationals, as rates and speeds are)."""
    fractions = [Fraction(v).limit_denominator(MAX_DENOMINATOR) for v in values.tolist()]
    exact = all(
        abs(float(f) - v) <= 1e-12 * v for f, v in zip(fractions, values.tolist(), strict=True)
    )
    common = math.lcm(*(f.denominator for f in fractions)) if fractions else 1
    if exact and common <= MAX_COMMON:
        return np.array([f.numerator * common // f.denominator for f in fractions]), common, True
    scale = 1000.0 / float(values.min())
    return np.maximum(1, np.rint(values * scale)).astype(np.int64), int(scale), False


def integral_units(problem: Problem) -> FloatArray:
    """Per component, a ``unit`` every utilization is a multiple of (``nan`` if none is known):
    with one scale ``σ`` over its resources, ``σ`` times the greatest common divisor of its
    weights (``w σ`` when all weigh ``w``). A bound can then be rounded up to a multiple."""
    n = problem.num_components
    wlow, whigh = np.full(n, np.inf), np.full(n, -np.inf)
    slow, shigh = np.full(n, np.inf), np.full(n, -np.inf)
    cross = problem.cross
    flow_label = problem.label[problem.pair[cross]]
    np.minimum.at(wlow, flow_label, problem.weight[cross])
    np.maximum.at(whigh, flow_label, problem.weight[cross])
    used = np.flatnonzero(problem.resource_label[:-1] >= 0)
    np.minimum.at(slow, problem.resource_label[used], problem.scale[used])
    np.maximum.at(shigh, problem.resource_label[used], problem.scale[used])
    unit = np.where(slow == shigh, wlow * slow, np.nan)
    for k in np.flatnonzero((slow == shigh) & (wlow != whigh)).tolist():
        ints, common, exact = as_integers(distinct(problem.weight[cross[flow_label == k]]))
        unit[k] = math.gcd(*ints.tolist()) / common * slow[k] if exact else np.nan
    return unit


def round_up(value: float, unit: float) -> float:
    """``value`` rounded up to a multiple of ``unit`` (unchanged if ``unit`` is ``nan``)."""
    if math.isnan(unit) or value <= 0:
        return value
    return unit * math.ceil(value / unit - _SLACK)


def lp_bound(
    problem: Problem, pairs: IntArray, flows: IntArray, time_limit: float
) -> tuple[float | None, str]:
    """The LP relaxation's optimum (slightly lowered for solver tolerance) and a note.

    Returns ``(None, reason)`` when skipped (too large, no time) or not solved to optimality.
    """
    if not len(flows):
        return 0.0, "no cross-leaf flows"
    counts = problem.num_candidates(pairs)
    entries = int((counts * problem.hops[pairs]).sum())
    if entries > LP_MAX_ENTRIES:
        return None, f"LP skipped: {entries:,} path-link entries > {LP_MAX_ENTRIES:,}"
    if time_limit <= 0.0:
        return None, "LP skipped: no time left in the budget"
    from ortools.linear_solver import pywraplp

    total = _pair_weights(problem)[0][pairs]
    solver = pywraplp.Solver.CreateSolver("GLOP")
    solver.SetTimeLimit(max(1, int(time_limit * 1000)))
    z = solver.NumVar(0.0, solver.infinity(), "z")
    by_resource: dict[int, pywraplp.Constraint] = {}
    for p, pair in enumerate(pairs.tolist()):
        demand = solver.Constraint(float(total[p]), float(total[p]))
        for path in problem.candidates(pair)[:, : problem.hops[pair]].tolist():
            x = solver.NumVar(0.0, solver.infinity(), "")
            demand.SetCoefficient(x, 1.0)
            for r in path:
                row = by_resource.get(r)
                if row is None:
                    row = solver.Constraint(-solver.infinity(), 0.0)
                    row.SetCoefficient(z, -1.0)
                    by_resource[r] = row
                row.SetCoefficient(x, float(problem.scale[r]))
    objective = solver.Objective()
    objective.SetCoefficient(z, 1.0)
    objective.SetMinimization()
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:
        return None, f"LP not solved to optimality (GLOP status {status})"
    value = float(objective.Value())
    return max(0.0, value * (1 - _SLACK)), f"LP solved ({entries:,} entries)"


_COMPONENT_BOUNDS: weakref.WeakKeyDictionary[Problem, tuple[FloatArray, FloatArray]] = (
    weakref.WeakKeyDictionary()
)


def component_bounds(problem: Problem) -> tuple[FloatArray, FloatArray]:
    """Per component: the combinatorial bound and the unit of integral loads, once per problem.

    Why a cache beside the problem rather than on it: ``c4p plan`` plans the same problem twice
    (greedy and c4p), 0.07 s each at 16k GPUs, and the problem must not import its bounds (the
    bounds read the problem). Two threads that miss at once both compute the same value.
    """
    found = _COMPONENT_BOUNDS.get(problem)
    if found is None:
        found = (combinatorial_bounds(problem), integral_units(problem))
        _COMPONENT_BOUNDS[problem] = found
    return found
