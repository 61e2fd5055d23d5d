"""Greedy on a fat-tree by load levels chooses exactly as the greedy rule, one flow at a time.

Why a reference written here: the greedy is a defined baseline (the comparison table, CP-SAT's
hint), so its fast form must give the same paths, not merely as good ones. The reference below
spells the rule out over the enumerated candidate rows, in plain Python: heaviest flow first
(ties keep flow order); the least peak utilization ``(load + w) * scale`` after adding the flow;
among candidates within the tolerance of that peak, the least sum of utilizations (added in
path order); among those within the tolerance of that sum, the first in candidate order.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import flow_sets, make_flows, ports, switch_links

from solver.search.greedy import greedy_order, place_greedy
from solver.search.greedytree import place_by_levels, reason_not
from solver.space.problem import TOLERANCE, Problem, build_problem
from topology.generators import FatTreeParams, fat_tree
from topology.index import FloatArray, IntArray
from topology.model import LinkStatus

TREES = {
    "k4": fat_tree(FatTreeParams.model_validate({"k": 4})),
    "k6": fat_tree(FatTreeParams.model_validate({"k": 6})),
}


def reference_greedy(problem: Problem, flows: IntArray, load: FloatArray) -> list[int]:
    """The greedy rule over a dense table's rows, one flow at a time (module doc)."""
    order = sorted(flows.tolist(), key=lambda f: -float(problem.weight[f]))  # a stable sort
    chosen: dict[int, int] = {}
    for f in order:
        w = float(problem.weight[f])
        rows = problem.candidates(int(problem.pair[f])).tolist()
        utils = [[(float(load[r]) + w) * float(problem.scale[r]) for r in row] for row in rows]
        peaks = [max(u) for u in utils]
        best = min(peaks)
        near = [k for k, peak in enumerate(peaks) if peak <= best + abs(best) * TOLERANCE]
        k = near[0]
        if len(near) > 1:
            totals = {k: sum(utils[k]) for k in near}
            low = min(totals.values())
            k = min(k for k in near if totals[k] <= low + abs(low) * TOLERANCE)
        for r in set(rows[k]):  # a padded row names the pad twice: numpy adds once
            load[r] += w
        chosen[f] = k
    return [chosen[f] for f in flows.tolist()]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_levels_choose_as_the_plain_rule(data: st.DataObject) -> None:
    """Links down or drained (positions and cores lost, pod pairs that differ), rates 1..3
    (flows reordered), whole loads already on the links (ties everywhere): the level form
    runs and chooses as the reference. Weights of 3/4 are outside its conditions:
    greedy's grid pass runs and chooses as the reference too."""
    fabric = TREES[data.draw(st.sampled_from(sorted(TREES)))]
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), max_size=6, unique=True))
    status = data.draw(st.sampled_from([LinkStatus.DOWN, LinkStatus.DRAINED]))
    snapshot = fabric.with_link_status(dict.fromkeys(links, status))
    flows = data.draw(flow_sets(snapshot, max_flows=80, rates=data.draw(st.booleans())))
    whole = data.draw(st.booleans())
    weights = np.array([f.rate for f in flows]) * (1.0 if whole else 0.75)
    lazy = build_problem(snapshot, flows, weights)
    dense = build_problem(snapshot, flows, weights, lazy=False)
    assert lazy.tree is not None and dense.tree is None and lazy.pad == dense.pad
    cross = lazy.cross
    seed = data.draw(st.integers(0, 2**16))
    start = np.random.default_rng(seed).integers(0, 4, lazy.pad + 1).astype(np.float64)
    start[lazy.pad] = 0.0
    assert (reason_not(lazy, lazy.tree, cross, start) is None) == (whole or not len(cross))
    slow = start.copy()
    expected = reference_greedy(dense, cross, slow)
    fast = start.copy()
    assert place_greedy(lazy, cross, fast).tolist() == expected  # levels or grids by size
    assert np.array_equal(fast, slow)
    levels = start.copy()
    order = greedy_order(lazy, cross)
    found = place_by_levels(lazy, lazy.tree, order, levels)
    if not whole and len(cross):
        assert found is None and np.array_equal(levels, start)
    else:
        assert found is not None
        chosen = np.empty(len(cross), dtype=np.int64)
        chosen[np.searchsorted(cross, order)] = found
        assert chosen.tolist() == expected
        assert np.array_equal(levels, slow)


def _tie_case() -> tuple[Problem, IntArray, FloatArray, list[tuple[int, ...]]]:
    """One cross-pod flow on an intact k=4 fat-tree (2 agg positions x 2 cores) over loads
    where every cell peaks at 2: cells (0, 0), (0, 1) and (1, 0) sum to 6, cell (1, 1) to 5;
    and the cells' paths in candidate order."""
    fabric = TREES["k4"]
    flows = make_flows(fabric, [(0, len(ports(fabric)) - 1)], None)
    problem = build_problem(fabric, flows, np.ones(1))
    tree = problem.tree
    assert tree is not None and tree.far[0]
    shape = tree.layout.shape
    u, v = int(tree.u[0]), int(tree.v[0])
    pu, pv = int(tree.pod_pairs[0, 0]), int(tree.pod_pairs[0, 1])
    j0, j1 = (int(j) for j in tree.jord[0])
    g0, g1 = (int(g) for g in tree.layout.gorder[pu, j0])
    load = np.zeros(problem.pad + 1)
    load[shape.up[u, j0]] = 1  # position 0: peak 2 through every core
    load[shape.agg_up[pu, j0, g0]] = 1  # cell (0, 0): sum 2 + 2 + 1 + 1
    load[shape.agg_up[pu, j0, g1]] = 1  # cell (0, 1): the same
    h0, h1 = (int(g) for g in tree.layout.gorder[pu, j1])
    load[shape.agg_up[pu, j1, h0]] = 1  # cell (1, 0): 1 + 2 + 2 + 1
    load[shape.agg_down[pv, j1, h0]] = 1
    load[shape.agg_up[pu, j1, h1]] = 1  # cell (1, 1): 1 + 2 + 1 + 1
    paths = [
        (int(shape.up[u, j]), int(shape.agg_up[pu, j, g]), int(shape.agg_down[pv, j, g]),
         int(shape.down[v, j]))
        for j, g in ((j0, g0), (j0, g1), (j1, h0), (j1, h1))
    ]  # fmt: skip
    return problem, problem.cross, load, paths


def _choose(problem: Problem, cross: IntArray, load: FloatArray) -> int:
    """The one flow's candidate by levels, checked equal to greedy's (its grid pass here)."""
    assert problem.tree is not None
    found = place_by_levels(problem, problem.tree, cross, load.copy())
    assert found is not None
    assert found.tolist() == place_greedy(problem, cross, load.copy()).tolist()
    return int(found[0])


def test_ties_go_to_the_least_sum_then_candidate_order() -> None:
    """Fails if the tie-break differs: with every cell at the same peak, the least sum wins
    over candidate order; with two cells at the least sum too, the first in order wins; a
    lesser peak wins over a lesser sum. Each case is asked of the level form (its conditions
    hold) and of greedy's grid pass, which must agree."""
    problem, cross, load, paths = _tie_case()
    tree = problem.tree
    assert tree is not None and reason_not(problem, tree, cross, load) is None
    rows = [tuple(r) for r in problem.candidates(0).tolist()]
    assert rows == paths  # candidate order: position, then core
    chosen = _choose(problem, cross, load)
    assert rows[chosen] == paths[3]  # the least sum, not the first cell
    level = load.copy()
    level[paths[1][1]] = 0  # cell (0, 1) now sums to 5 as well: first in order of the two
    assert rows[_choose(problem, cross, level)] == paths[1]
    peak = np.zeros_like(load)  # the least peak wins over a lesser sum
    peak[paths[0][0]] = 2  # position 0: peak 3, sums 3 + 1 + 1 + 1 = 6
    peak[paths[2][0]] = peak[paths[2][3]] = 1  # position 1: leaf links at 1
    peak[paths[2][1]] = peak[paths[2][2]] = 1  # cell (1, 0): peak 2, sum 8
    peak[paths[3][1]] = 2  # cell (1, 1): peak 3
    assert rows[_choose(problem, cross, peak)] == paths[2]


def test_outside_its_conditions_it_says_why() -> None:
    """Halves, loads the tolerance cannot separate, weights of 1.5 on links the flows may
    take: the level form declines (and greedy's grid pass places the flows)."""
    problem, cross, load, paths = _tie_case()
    tree = problem.tree
    assert tree is not None
    assert reason_not(problem, tree, cross, load) is None
    half = load.copy()
    half[paths[1][2]] = 0.5  # a link the flow may take
    assert reason_not(problem, tree, cross, half) == "loads are not whole numbers >= 0"
    huge = load.copy()
    huge[paths[2][0]] = 1e9
    assert "tolerance" in str(reason_not(problem, tree, cross, huge))
    heavy = build_problem(TREES["k4"], make_flows(TREES["k4"], [(0, 9)], None), np.full(1, 1.5))
    assert heavy.tree is not None
    assert reason_not(heavy, heavy.tree, heavy.cross, np.zeros(heavy.pad + 1)) == (
        "weights are not whole numbers"
    )
