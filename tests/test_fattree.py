"""Fat-tree path choice: valid paths, loads at the bound where proved, within one of it always.

Loads and the bound are recounted here from the returned paths and the fabric's own switches,
not trusted from the module; the optimum is checked with CP-SAT on instances small enough.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from solver import JobsGenParams, flows_for_jobs, generate_jobs
from solver.exact.fattree import analyse, applies, assign_fat_tree, lower_bound
from topology.generators import FatTreeParams, fat_tree, generate
from topology.index import IntArray
from topology.model import Fabric, LinkStatus, SwitchRole

Flows = tuple[IntArray, IntArray]


def leaves(fabric: Fabric) -> list[int]:
    index = fabric.index
    return [index.node(s.name) for s in fabric.switches if s.role is SwitchRole.LEAF]


def pod_of(fabric: Fabric) -> dict[int, int]:
    return {fabric.index.node(s.name): s.pod for s in fabric.switches if s.pod is not None}


def loads(fabric: Fabric, paths: list[tuple[int, ...]]) -> Counter[int]:
    """Flows per directed switch link, counted path by path."""
    count: Counter[int] = Counter()
    for path in paths:
        count.update(path)
    assert all(fabric.index.is_switch(int(fabric.index.res_src[r])) for r in count)
    return count


def expected_bound(fabric: Fabric, src: IntArray, dst: IntArray) -> int:
    """``max(ceil(leaf degree / aggs), ceil(pod degree / cores))``, from the switch records."""
    pod = pod_of(fabric)
    aggs = sum(1 for s in fabric.switches if s.role is SwitchRole.SPINE and s.pod == 0)
    cores = sum(1 for s in fabric.switches if s.role is SwitchRole.CORE)
    degree: Counter[tuple[str, int]] = Counter()
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        if s != d:
            degree.update([("out", s), ("in", d)])
        if pod[s] != pod[d]:
            degree.update([("pod out", pod[s]), ("pod in", pod[d])])
    leaf = max((v for (k, _), v in degree.items() if k in ("out", "in")), default=0)
    far = max((v for (k, _), v in degree.items() if k.startswith("pod")), default=0)
    return max(-(-leaf // aggs), -(-far // cores))


def proved_exact(fabric: Fabric, src: IntArray, dst: IntArray, bound: int) -> bool:
    """Whether Theorem 1 or Theorem 2 of the module promises a plan at the bound."""
    pod = pod_of(fabric)
    aggs = sum(1 for s in fabric.switches if s.role is SwitchRole.SPINE and s.pod == 0)
    group = sum(1 for s in fabric.switches if s.role is SwitchRole.CORE) // aggs
    cross: Counter[tuple[int, int]] = Counter()
    intra: Counter[tuple[int, int]] = Counter()
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        if s != d:
            (cross if pod[s] != pod[d] else intra).update([(0, s), (1, d)])
    saturating: Counter[tuple[int, int]] = Counter()
    for (side, leaf), c in cross.items():
        saturating[side, pod[leaf]] += min(c, bound)
    theorem1 = all(v <= group * bound for v in saturating.values())
    theorem2 = all(
        -(-cross[key] // aggs) + -(-intra[key] // aggs) <= bound for key in set(cross) | set(intra)
    )
    return theorem1 or theorem2


def check(fabric: Fabric, src: IntArray, dst: IntArray) -> tuple[int, int]:
    """Assign, check every path and the figures; return (max load, bound)."""
    result = assign_fat_tree(fabric, src, dst)
    routing = fabric.index.routing
    for s, d, path in zip(src.tolist(), dst.tolist(), result.paths, strict=True):
        assert path in routing.switch_paths(s, d)
    peak = max(loads(fabric, result.paths).values(), default=0)
    bound = expected_bound(fabric, src, dst)
    assert result.max_load == peak and result.lower_bound == bound
    assert bound == lower_bound(fabric, src, dst) <= peak <= bound + 1
    if proved_exact(fabric, src, dst, bound):
        assert peak == bound, result.method
    return peak, bound


@st.composite
def fabrics(draw: st.DrawFn) -> Fabric:
    aggs, group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return fat_tree(
        FatTreeParams(
            pods=draw(st.integers(1, 3)),
            leaves_per_pod=draw(st.integers(1, 4)),
            aggs_per_pod=aggs,
            cores=aggs * group,
            hosts_per_leaf=1,
        )
    )


@st.composite
def instances(draw: st.DrawFn, max_flows: int = 60) -> tuple[Fabric, IntArray, IntArray]:
    """A random fat-tree shape and flows: random pairs, or a ring over the leaves, repeated."""
    fabric = draw(fabrics())
    ids = leaves(fabric)
    leaf = st.sampled_from(ids)
    if draw(st.booleans()):
        n = draw(st.integers(0, max_flows))
        src = draw(st.lists(leaf, min_size=n, max_size=n))
        dst = draw(st.lists(leaf, min_size=n, max_size=n))
    else:
        order = draw(st.permutations(ids))
        src = order * draw(st.integers(1, 3))
        dst = (order[1:] + order[:1]) * (len(src) // len(order))
    return fabric, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(instances())
def test_paths_valid_and_load_within_the_guarantee(case: tuple[Fabric, IntArray, IntArray]) -> None:
    check(*case)


@pytest.mark.parametrize("k", [4, 6])
@pytest.mark.parametrize("seed", range(4))
def test_k_ary_random_flows_reach_the_bound(k: int, seed: int) -> None:
    fabric = generate("fat-tree", k=k)
    rng = np.random.default_rng(seed)
    ids = np.array(leaves(fabric))
    src, dst = rng.choice(ids, 40 * (seed + 1)), rng.choice(ids, 40 * (seed + 1))
    peak, bound = check(fabric, src, dst)
    assert peak == bound  # k-ary trees are non-blocking: Theorem 1 always applies


@pytest.mark.parametrize(
    ("shape", "hosts"), [(dict(k=4), 8), (dict(k=6, nics_per_host=3), 12), (dict(k=8), 64)]
)
def test_ring_collectives_reach_the_bound(shape: dict[str, int], hosts: int) -> None:
    fabric = generate("fat-tree", **shape)
    jobs = JobsGenParams(hosts_per_job=hosts, qps_per_connection=2, placement="fragmented", run=1)
    flows = flows_for_jobs(fabric, generate_jobs(fabric, jobs))
    index = fabric.index
    src = np.array([index.leaf_of(index.node(f.src)) for f in flows])
    dst = np.array([index.leaf_of(index.node(f.dst)) for f in flows])
    peak, bound = check(fabric, src, dst)
    assert peak == bound


def cp_sat_optimum(fabric: Fabric, src: IntArray, dst: IntArray) -> int:
    """The least possible max load over the equal-cost paths, proved by CP-SAT."""
    routing, model = fabric.index.routing, cp_model.CpModel()
    z = model.new_int_var(0, len(src), "z")
    users: dict[int, list[cp_model.IntVar]] = {}
    for f, (s, d) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        paths = routing.switch_paths(s, d) if s != d else ()
        pick = [model.new_bool_var(f"x{f}_{i}") for i in range(len(paths))]
        if pick:
            model.add_exactly_one(pick)
        for path, x in zip(paths, pick, strict=True):
            for r in path:
                users.setdefault(r, []).append(x)
    for xs in users.values():
        model.add(sum(xs) <= z)
    model.minimize(z)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 60
    assert solver.solve(model) == cp_model.OPTIMAL
    return int(solver.objective_value)


@settings(max_examples=150, deadline=None)
@given(instances(max_flows=14))
def test_against_the_cp_sat_optimum(case: tuple[Fabric, IntArray, IntArray]) -> None:
    fabric, src, dst = case
    peak, bound = check(fabric, src, dst)
    optimum = cp_sat_optimum(fabric, src, dst)
    assert bound <= optimum <= peak
    if proved_exact(fabric, src, dst, bound):
        assert peak == optimum


def test_the_bound_is_not_always_attainable() -> None:
    """The module's counterexample: K = 1, yet every plan puts two flows on some link."""
    fabric = generate(
        "fat-tree", pods=2, leaves_per_pod=2, aggs_per_pod=2, cores=2, hosts_per_leaf=1
    )
    a, b, c, d = leaves(fabric)
    src = np.array([a, b, c, d, a, b, c, d])
    dst = np.array([b, a, d, c, c, d, b, a])
    assert lower_bound(fabric, src, dst) == 1
    assert cp_sat_optimum(fabric, src, dst) == 2 == check(fabric, src, dst)[0]


@settings(max_examples=60, deadline=None)
@given(instances(), st.randoms(use_true_random=False))
def test_replanning_keeps_a_good_plan_and_repairs_a_bad_one(
    case: tuple[Fabric, IntArray, IntArray], rng: random.Random
) -> None:
    fabric, src, dst = case
    first = assign_fat_tree(fabric, src, dst)
    again = assign_fat_tree(fabric, src, dst, previous=first.paths)
    assert again.paths == first.paths and again.moved == 0
    routing = fabric.index.routing
    pairs = zip(src.tolist(), dst.tolist(), strict=True)
    arbitrary = [
        rng.choice(routing.switch_paths(s, d)) if rng.random() < 0.8 else () for s, d in pairs
    ]
    result = assign_fat_tree(fabric, src, dst, previous=arbitrary)
    for s, d, path in zip(src.tolist(), dst.tolist(), result.paths, strict=True):
        assert path in routing.switch_paths(s, d)
    peak = max(loads(fabric, result.paths).values(), default=0)
    assert peak == result.max_load <= result.lower_bound + 1
    if proved_exact(fabric, src, dst, result.lower_bound):
        assert peak == result.lower_bound
    moved = sum(1 for old, path in zip(arbitrary, result.paths, strict=True) if old and old != path)
    assert moved == result.moved


def test_replanning_after_a_job_change_moves_few_flows() -> None:
    fabric = generate("fat-tree", k=6)
    rng = np.random.default_rng(3)
    ids = np.array(leaves(fabric))
    src, dst = rng.choice(ids, 200), rng.choice(ids, 200)
    first = assign_fat_tree(fabric, src, dst)
    keep = np.arange(150)  # 50 flows leave, 30 new ones arrive
    src2 = np.concatenate([src[keep], rng.choice(ids, 30)])
    dst2 = np.concatenate([dst[keep], rng.choice(ids, 30)])
    previous = [first.paths[i] for i in keep] + [()] * 30
    result = assign_fat_tree(fabric, src2, dst2, previous=previous)
    assert result.max_load == result.lower_bound == expected_bound(fabric, src2, dst2)
    assert result.moved <= 15, result.moved  # a fresh plan would move most of the 150
    fresh = assign_fat_tree(fabric, src2, dst2)
    assert sum(a != b for a, b in zip(fresh.paths[:150], previous[:150], strict=True)) > 50


def test_applies_to_fat_trees_only_with_every_switch_link_up_at_one_speed() -> None:
    fabric = generate("fat-tree", k=4)
    assert applies(fabric) is None and not isinstance(analyse(fabric), str)
    assert "no core" in str(applies(generate("leaf-spine", leaves=2, spines=2, hosts_per_leaf=2)))
    index = fabric.index
    switches = index.res_src < index.num_switches
    up = next(i for i in range(len(fabric.links)) if switches[2 * i] and switches[2 * i + 1])
    for status in (LinkStatus.DOWN, LinkStatus.DRAINED):
        reason = applies(fabric.with_link_status({up: status}))
        assert reason is not None and status.value in reason
    mixed = generate("fat-tree", k=4, spine_uplink_speed_gbps=800)
    assert "speed" in str(applies(mixed))
    with pytest.raises(ValueError, match="speed"):
        assign_fat_tree(mixed, np.array([0]), np.array([1]))


def test_flow_ends_must_be_leaves() -> None:
    fabric = generate("fat-tree", k=4)
    spine = fabric.index.node("spine-p00-00")
    with pytest.raises(ValueError, match="not a leaf"):
        assign_fat_tree(fabric, np.array([0, spine]), np.array([1, 0]))
    with pytest.raises(ValueError, match="1-D"):
        assign_fat_tree(fabric, np.array([0, 1]), np.array([1]))
    empty = assign_fat_tree(fabric, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert empty.paths == [] and empty.max_load == empty.lower_bound == 0
