"""Lower bounds: hand-worked values, and never above an optimum found by brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import brute_force_optimum, combinations, flow_sets, make_flows, small_fabrics

import solver.bounds.combinatorial as bounds_module
from solver.bounds.combinatorial import (
    as_integers,
    combinatorial_bounds,
    integral_units,
    lp_bound,
    round_up,
)
from solver.space.problem import Problem, build_problem
from solver.workload.flows import Flow
from topology.generators import FatTreeParams, LeafSpineParams, fat_tree, leaf_spine
from topology.model import Fabric

PAIR = leaf_spine(LeafSpineParams(leaves=2, spines=2, hosts_per_leaf=6))


def compile_(fabric: Fabric, flows: list[Flow]) -> Problem:
    return build_problem(fabric, flows, np.array([f.rate for f in flows]))


def best_bound(problem: Problem, with_lp: bool = True) -> float:
    value = 0.0
    comb = combinatorial_bounds(problem)
    units = integral_units(problem)
    for k, (pairs, flows) in enumerate(
        zip(problem.components(), problem.component_flows(), strict=True)
    ):
        part = round_up(float(comb[k]), float(units[k]))
        if with_lp:
            lp, _ = lp_bound(problem, pairs, flows, 5.0)
            if lp is not None:
                part = max(part, round_up(lp, float(units[k])))
        value = max(value, part)
    return value


def test_equal_flows_over_spines_round_up() -> None:
    flows = make_flows(PAIR, [(i, 6 + i) for i in range(5)])
    problem = compile_(PAIR, flows)
    assert combinatorial_bounds(problem).tolist() == [3.0]  # ceil(5 / 2)
    lp, note = lp_bound(problem, problem.components()[0], problem.cross, 1.0)
    assert lp == pytest.approx(2.5, rel=1e-6) and "solved" in note
    assert best_bound(problem) == 3.0


def test_a_heavy_flow_is_its_own_bound() -> None:
    flows = make_flows(PAIR, [(0, 6), (1, 7), (2, 8)], [3.0, 1.0, 1.0])
    problem = compile_(PAIR, flows)
    # average 5 / 2 = 2.5, but the weight-3 flow is somewhere whole
    assert combinatorial_bounds(problem).tolist() == [3.0]
    assert brute_force_optimum(PAIR, flows) == 3.0


def test_common_divisor_of_weights_rounds_bounds() -> None:
    flows = make_flows(PAIR, [(0, 6), (1, 7), (2, 8)], [2.0, 4.0, 2.0])
    problem = compile_(PAIR, flows)
    assert integral_units(problem).tolist() == [2.0]
    assert round_up(4.0001, 2.0) == 6.0 and round_up(4.0, 2.0) == 4.0
    assert round_up(4.3, float("nan")) == 4.3
    assert as_integers(np.array([0.5, 1.5, 2.0]))[1:] == (2, True)


def test_pod_uplinks_bind_in_a_three_tier_tree() -> None:
    # 2 pods of 2 leaves and 2 aggs, one core per agg: a pod has 2 links to the cores but
    # its leaves have 4 to the aggs, so 4 flows out of a pod need 2 per core link.
    fabric = fat_tree(
        FatTreeParams(pods=2, leaves_per_pod=2, aggs_per_pod=2, cores=2, hosts_per_leaf=2)
    )
    flows = make_flows(fabric, [(0, 4), (1, 5), (2, 6), (3, 7)])
    problem = compile_(fabric, flows)
    assert combinatorial_bounds(problem).max() == 2.0
    assert brute_force_optimum(fabric, flows) == 2.0


def test_lp_is_skipped_when_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    flows = make_flows(PAIR, [(i, 6 + i) for i in range(3)])
    problem = compile_(PAIR, flows)
    monkeypatch.setattr(bounds_module, "LP_MAX_ENTRIES", 3)
    value, note = lp_bound(problem, problem.components()[0], problem.cross, 1.0)
    assert value is None and "skipped" in note
    value, note = bounds_module.lp_bound(problem, problem.components()[0], problem.cross, 0.0)
    assert value is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bounds_never_exceed_the_brute_force_optimum(data: st.DataObject) -> None:
    fabric = data.draw(small_fabrics(most_down=3))
    flows = data.draw(flow_sets(fabric, max_flows=6, rates=data.draw(st.booleans())))
    if combinations(fabric, flows) > 20_000:
        return
    problem = compile_(fabric, flows)
    assert best_bound(problem) <= brute_force_optimum(fabric, flows) + 1e-9


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), nfam=st.integers(1, 40), width=st.integers(1, 300))
def test_family_resource_pairs_by_grid_and_by_sort_are_the_same(
    seed: int, nfam: int, width: int
) -> None:
    """The bound's distinct (family, resource) pairs, marked on a grid or sorted (which one
    depends on the grid's size per entry): the same pairs, in the same order."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 500))
    fam, res = rng.integers(0, nfam, n), rng.integers(0, width, n)
    want = sorted(set(zip(fam.tolist(), res.tolist(), strict=True)))
    for cells in (0, 1 << 40):  # every grid too large per entry; none
        old = bounds_module._GRID_PER_ENTRY
        bounds_module._GRID_PER_ENTRY = cells
        try:
            got = bounds_module._distinct(fam, res, nfam, width)
        finally:
            bounds_module._GRID_PER_ENTRY = old
        assert list(zip(got[0].tolist(), got[1].tolist(), strict=True)) == want
