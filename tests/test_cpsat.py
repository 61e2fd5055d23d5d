"""The CP-SAT model on its own: exact integers, optima, anytime behaviour, fewest moves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import (
    brute_force_optimum,
    combinations,
    flow_sets,
    make_flows,
    small_fabrics,
    utilization,
)

from solver.search.cpsat import integer_scales, solve_cpsat
from solver.search.greedy import place_greedy
from solver.space.problem import Problem, build_problem
from solver.workload.flows import Flow
from topology.generators import LeafSpineParams, leaf_spine
from topology.index import IntArray
from topology.model import Fabric


def compile_(fabric: Fabric, flows: list[Flow]) -> Problem:
    return build_problem(fabric, flows, np.array([f.rate for f in flows]))


def greedy_hint(problem: Problem, flows: IntArray) -> IntArray:
    return place_greedy(problem, flows, np.zeros(problem.pad + 1))


def full_paths(problem: Problem, flows: IntArray, choice: IntArray) -> tuple[tuple[int, ...], ...]:
    everything = np.where(problem.pair == -1, 0, -1)
    everything[flows] = choice
    return problem.paths(everything)


def test_integer_scales_are_exact_for_small_rationals() -> None:
    fabric = leaf_spine(
        LeafSpineParams(leaves=2, spines=2, hosts_per_leaf=2, uplink_speed_gbps=800)
    )
    flows = make_flows(fabric, [(0, 2), (1, 3)], [0.5, 1.5])
    problem = compile_(fabric, flows)
    weights, scales, unit, exact = integer_scales(problem, problem.cross, problem.inner)
    assert exact
    assert weights.tolist() == [1, 3]
    # 800G uplinks against 400G NICs: scale 1/2
    assert scales.tolist() == [1] * len(problem.inner)
    assert unit == pytest.approx(0.25)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_solves_small_instances_to_the_optimum(data: st.DataObject) -> None:
    fabric = data.draw(small_fabrics(most_down=2))
    flows = data.draw(flow_sets(fabric, max_flows=7, rates=True))
    if combinations(fabric, flows) > 20_000:
        return
    problem = compile_(fabric, flows)
    for pairs, members in zip(problem.components(), problem.component_flows(), strict=True):
        outcome = solve_cpsat(
            problem,
            pairs,
            members,
            greedy_hint(problem, members),
            lower_bound=0.0,
            time_limit=5.0,
            seed=1,
        )
        assert outcome.proven
        got = utilization(
            fabric, [flows[i] for i in members], _paths(problem, members, outcome.choice)
        )
        sub = [flows[i] for i in members]
        assert got == pytest.approx(brute_force_optimum(fabric, sub))
        assert outcome.bound is not None and outcome.bound <= got + 1e-9


def _paths(problem: Problem, members: IntArray, choice: IntArray) -> list[tuple[int, ...]]:
    paths = full_paths(problem, members, choice)
    return [paths[i] for i in members.tolist()]


def crowded() -> tuple[Fabric, list[Flow], Problem]:
    fabric = leaf_spine(LeafSpineParams(leaves=3, spines=3, hosts_per_leaf=6))
    rng = np.random.default_rng(3)
    pairs = [(int(a), int(b)) for a, b in rng.integers(0, 18, size=(40, 2)) if a // 6 != b // 6]
    flows = make_flows(fabric, pairs, [float(x) for x in rng.choice([1.0, 2.0, 5.0], len(pairs))])
    return fabric, flows, compile_(fabric, flows)


def test_no_time_gives_back_the_hint() -> None:
    _, _, problem = crowded()
    members = problem.cross
    hint = greedy_hint(problem, members)
    outcome = solve_cpsat(
        problem, problem.components()[0], members, hint, lower_bound=0.0, time_limit=0.0, seed=0
    )
    assert np.array_equal(outcome.choice, hint)
    assert not outcome.proven


def test_previous_assignment_is_kept_when_it_is_optimal() -> None:
    _, _, problem = crowded()
    members, pairs = problem.cross, problem.components()[0]
    best = solve_cpsat(
        problem,
        pairs,
        members,
        greedy_hint(problem, members),
        lower_bound=0.0,
        time_limit=5.0,
        seed=0,
    )
    assert best.proven
    # Renaming the spines gives another optimum (every pair has every spine, in one order);
    # hinted with the first, CP-SAT must come back to the renamed one, the previous plan.
    previous = np.array([1, 2, 0])[best.choice]
    assert not np.array_equal(previous, best.choice)
    again = solve_cpsat(
        problem,
        pairs,
        members,
        best.choice,
        lower_bound=0.0,
        time_limit=5.0,
        seed=0,
        previous=previous,
    )
    assert np.array_equal(again.choice, previous)


def test_same_seed_same_answer() -> None:
    _, _, problem = crowded()
    members, pairs = problem.cross, problem.components()[0]
    hint = greedy_hint(problem, members)
    runs = [
        solve_cpsat(problem, pairs, members, hint, lower_bound=0.0, time_limit=3.0, seed=7).choice
        for _ in range(2)
    ]
    assert np.array_equal(runs[0], runs[1])
