"""Greedy on two tiers in rounds of flows that share no leaf equals greedy one flow at a time.

Why a test of its own: the rounds are an equivalence argument (a two-tier candidate reads only
loads its own source and destination leaves' flows change), and the argument is only as good as
the code; the one-by-one loop is the reference, on fabrics with links down or drained, unequal
rates (which reorder flows) and loads already on the links (a re-plan's re-placement).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import TWO_TIER_FABRICS, flow_sets, switch_links

from solver.search import greedy
from solver.search.greedy import _rounds, place_greedy
from solver.space.problem import build_problem
from topology.generators import FatTreeParams, fat_tree
from topology.model import LinkStatus

FABRICS = TWO_TIER_FABRICS


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_rounds_choose_as_one_flow_at_a_time(data: st.DataObject) -> None:
    fabric = FABRICS[data.draw(st.sampled_from(sorted(FABRICS)))]
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), max_size=4, unique=True))
    status = data.draw(st.sampled_from([LinkStatus.DOWN, LinkStatus.DRAINED]))
    snapshot = fabric.with_link_status(dict.fromkeys(links, status))
    flows = data.draw(flow_sets(snapshot, max_flows=60, rates=data.draw(st.booleans())))
    problem = build_problem(snapshot, flows, np.array([f.rate for f in flows]))
    assert problem.two_tier
    cross = problem.cross
    seed = data.draw(st.integers(0, 2**16))
    start = np.random.default_rng(seed).integers(0, 3, problem.pad + 1).astype(np.float64)
    start[problem.pad] = 0.0
    by_rounds, one_by_one = start.copy(), start.copy()
    # The rounds' candidates are gathered a block of rounds at a time: also in blocks of a
    # single round and of a few flows, not only all at once as these small cases would be.
    cells = data.draw(st.sampled_from([greedy.GATHER_CELLS, 1, 40]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(greedy, "GATHER_CELLS", cells)
        chosen = place_greedy(problem, cross, by_rounds)
    reference = place_greedy(replace(problem, two_tier=False), cross, one_by_one)
    assert np.array_equal(chosen, reference)
    assert np.array_equal(by_rounds, one_by_one)


def test_rounds_separate_flows_sharing_a_leaf_and_keep_their_order() -> None:
    first = np.array([0, 0, 1, 2, 1, 3])
    second = np.array([5, 6, 5, 7, 8, 9])
    rounds = _rounds(first, second)
    assert rounds.tolist() == [0, 1, 1, 0, 2, 0]
    for i in range(len(first)):
        for j in range(i):
            if first[i] == first[j] or second[i] == second[j]:
                assert rounds[j] < rounds[i]


TREES = {
    "k4": fat_tree(FatTreeParams.model_validate({"k": 4})),
    "k6": fat_tree(FatTreeParams.model_validate({"k": 6})),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fat_tree_grids_choose_as_rows_one_flow_at_a_time(data: st.DataObject) -> None:
    """Greedy on a fat-tree's lazy table places cross-pod flows on shared (agg, core) grids,
    intact ones as rectangles: the reference is the row-by-row greedy on the enumerated table,
    with links down or drained (grids that are not rectangles, grids of one pod pair that
    differ), unequal rates and loads already on the links (integers: ties everywhere)."""
    fabric = TREES[data.draw(st.sampled_from(sorted(TREES)))]
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), max_size=5, unique=True))
    status = data.draw(st.sampled_from([LinkStatus.DOWN, LinkStatus.DRAINED]))
    snapshot = fabric.with_link_status(dict.fromkeys(links, status))
    flows = data.draw(flow_sets(snapshot, max_flows=80, rates=data.draw(st.booleans())))
    weights = np.array([f.rate for f in flows])
    lazy = build_problem(snapshot, flows, weights)
    dense = build_problem(snapshot, flows, weights, lazy=False)
    assert lazy.tree is not None and dense.tree is None
    cross = lazy.cross
    assert np.array_equal(cross, dense.cross)
    seed = data.draw(st.integers(0, 2**16))
    start = np.random.default_rng(seed).integers(0, 3, lazy.pad + 1).astype(np.float64)
    start[lazy.pad] = 0.0
    on_grids, on_rows = start.copy(), start[: dense.pad + 1].copy()
    assert lazy.pad == dense.pad
    chosen = place_greedy(lazy, cross, on_grids)
    reference = place_greedy(dense, cross, on_rows)
    assert np.array_equal(chosen, reference)
    assert np.array_equal(on_grids, on_rows)
