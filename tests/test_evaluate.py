"""The yardstick: max-min fair rates against hand-worked cases, link loads, bus bandwidth."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solver.yardstick.fairness as fairness_module
from c4p.figures.ladder import permutation_jobs
from solver import (
    Incidence,
    JobsFile,
    Workload,
    bottleneck_certificate,
    derive_workload,
    evaluate,
    max_min_fair_rates,
)
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.fairness import _fill
from topology.generators import (
    DualPlaneParams,
    LeafSpineParams,
    RailOptimizedParams,
    dual_plane,
    generate,
    leaf_spine,
    rail_optimized,
)
from topology.model import Fabric, LinkStatus


def fair(
    paths: list[list[int]], capacity: list[float], weights: list[float] | None = None
) -> list[float]:
    incidence = Incidence.from_paths(paths)
    w = np.ones(len(paths)) if weights is None else np.asarray(weights, dtype=np.float64)
    rates = max_min_fair_rates(incidence, w, np.asarray(capacity, dtype=np.float64))
    assert bottleneck_certificate(incidence, w, np.asarray(capacity, dtype=np.float64), rates) == []
    return [round(float(r), 6) for r in rates]


# -- progressive filling, by hand -------------------------------------------------------------


def test_three_flows_share_a_link_equally() -> None:
    assert fair([[0], [0], [0]], [100.0]) == [33.333333] * 3


def test_parking_lot() -> None:
    # The long flow crosses both links, each short flow one: all get half.
    assert fair([[0, 1], [0], [1]], [1.0, 1.0]) == [0.5, 0.5, 0.5]
    # With the second link twice as big, its short flow takes what the long one cannot use.
    assert fair([[0, 1], [0], [1]], [1.0, 2.0]) == [0.5, 0.5, 1.5]


def test_three_link_parking_lot_with_a_bigger_middle() -> None:
    # long flow over links 0,1,2 (capacity 10, 30, 10); one short flow per link
    assert fair([[0, 1, 2], [0], [1], [2]], [10.0, 30.0, 10.0]) == [5.0, 5.0, 25.0, 5.0]


def test_weights_share_in_proportion() -> None:
    assert fair([[0], [0]], [90.0], [1.0, 2.0]) == [30.0, 60.0]
    # the heavy flow is frozen by link 0; the light one then fills link 1
    assert fair([[0], [0, 1], [1]], [30.0, 100.0], [2.0, 1.0, 1.0]) == [20.0, 10.0, 90.0]


def test_flow_without_path_gets_nothing_and_a_dead_link_stops_its_flows() -> None:
    assert fair([[], [0], [0, 1]], [10.0, 0.0]) == [0.0, 10.0, 0.0]


def test_no_flows() -> None:
    assert fair([], [10.0]) == []


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=6).flatmap(
        lambda r: st.tuples(
            st.lists(st.floats(min_value=0.5, max_value=400.0), min_size=r, max_size=r),
            st.lists(
                st.tuples(
                    st.sets(st.integers(min_value=0, max_value=r - 1), min_size=1),
                    st.sampled_from([0.5, 1.0, 2.0, 3.0]),
                ),
                min_size=1,
                max_size=12,
            ),
        )
    )
)
def test_max_min_certificate_on_random_instances(
    instance: tuple[list[float], list[tuple[set[int], float]]],
) -> None:
    capacity, flows = instance
    incidence = Incidence.from_paths([sorted(resources) for resources, _ in flows])
    weights = np.asarray([w for _, w in flows])
    cap = np.asarray(capacity)
    rates = max_min_fair_rates(incidence, weights, cap)
    assert (rates > 0).all()
    assert bottleneck_certificate(incidence, weights, cap, rates) == []


def test_certificate_catches_an_unfair_allocation() -> None:
    incidence = Incidence.from_paths([[0], [0]])
    ones = np.ones(2)
    assert bottleneck_certificate(incidence, ones, np.array([10.0]), np.array([3.0, 7.0]))
    assert bottleneck_certificate(incidence, ones, np.array([10.0]), np.array([6.0, 6.0]))


# -- on fabrics -------------------------------------------------------------------------------


def two_leaves(uplink: float = 400.0, nics: int = 1) -> Fabric:
    """2 leaves x 2 hosts, 2 spines: h0000, h0001 on leaf-00; h0002, h0003 on leaf-01."""
    return leaf_spine(
        LeafSpineParams(
            leaves=2, hosts_per_leaf=2, spines=2, nics_per_host=nics, uplink_speed_gbps=uplink
        )
    )


def ring(fabric: Fabric, hosts: list[str], **comm: Any) -> Workload:
    jobs = {"jobs": [{"id": "j", "hosts": hosts, "communicators": [{"id": "c", **comm}]}]}
    return derive_workload(fabric, JobsFile.model_validate(jobs))


def via_spine(
    fabric: Fabric, workload: Workload, spine_of: dict[int, str]
) -> list[tuple[int, ...]]:
    """Each flow's equal-cost path, through ``spine_of[flow]`` where it has a choice."""
    index = fabric.index
    out = []
    for i, flow in enumerate(workload.flows):
        paths = index.routing.equal_cost_paths(index.node(flow.src), index.node(flow.dst))
        if len(paths) > 1:
            paths = [p for p in paths if spine_of[i] in index.path_nodes(p)]
        out.append(paths[0])
    return out


# ring h0000 -> h0002 -> h0001 -> h0003 -> h0000: two flows leave each leaf
CROSSING = ["h0000", "h0002", "h0001", "h0003"]


def test_collision_free_ring_predicts_full_line_rate() -> None:
    fabric = two_leaves()
    workload = ring(fabric, CROSSING, ring="flat")
    paths = via_spine(
        fabric, workload, {0: "spine-00", 1: "spine-00", 2: "spine-01", 3: "spine-01"}
    )
    result = evaluate(fabric, workload, paths)
    assert result.max_link_load == 1.0 and result.max_link_utilization == 1.0
    assert result.links_over_capacity == 0
    (job,) = result.jobs
    assert job.busbw_gbps == pytest.approx(400.0) and job.busbw_fraction == pytest.approx(1.0)
    assert (result.flow_rates_gbps == 400.0).all()


def test_one_collision_halves_the_ring() -> None:
    fabric = two_leaves()
    workload = ring(fabric, CROSSING, ring="flat")
    # flows 0 (h0000->h0002) and 2 (h0001->h0003) both leave leaf-00 via spine-00
    paths = via_spine(
        fabric, workload, {0: "spine-00", 1: "spine-01", 2: "spine-00", 3: "spine-00"}
    )
    result = evaluate(fabric, workload, paths)
    assert result.max_link_load == 2.0 and result.max_link_utilization == 2.0
    assert result.links_over_capacity == 2  # leaf-00 -> spine-00 and spine-00 -> leaf-01
    assert result.hottest[0].utilization == 2.0
    (comm,) = result.communicators
    assert comm.busbw_fraction == pytest.approx(0.5)
    assert comm.slowest_rate_gbps == pytest.approx(200.0)


def test_utilization_is_relative_to_the_reference_line_rate() -> None:
    fabric = two_leaves(uplink=800.0)
    workload = ring(fabric, CROSSING, ring="flat")
    paths = via_spine(
        fabric, workload, {0: "spine-00", 1: "spine-01", 2: "spine-00", 3: "spine-00"}
    )
    result = evaluate(fabric, workload, paths)
    assert result.reference_line_rate_gbps == 400.0
    assert result.max_link_load == 2.0 and result.max_link_utilization == 1.0
    assert result.links_over_capacity == 0
    assert result.jobs[0].busbw_fraction == pytest.approx(1.0)


def test_nic_link_is_a_bottleneck_too() -> None:
    fabric = two_leaves()
    # all-to-all over 3 hosts: each NIC sends two flows, one per peer
    workload = ring(fabric, ["h0000", "h0001", "h0002"], pattern="all-to-all")
    index = fabric.index
    paths = [
        index.routing.equal_cost_paths(index.node(f.src), index.node(f.dst))[0]
        for f in workload.flows
    ]
    result = evaluate(fabric, workload, paths)
    # h0002 receives from two hosts through one spine link and its NIC link: 200 each
    assert sorted(result.flow_rates_gbps) == [200.0] * 6
    (comm,) = result.communicators
    assert comm.busbw_gbps == pytest.approx(2 * 200.0)  # (n-1) x slowest pair
    assert comm.busbw_fraction == pytest.approx(1.0)


def test_tree_busbw_uses_the_tree_factor() -> None:
    fabric = two_leaves()
    workload = ring(fabric, ["h0000", "h0001", "h0002"], pattern="tree", trees=1)
    index = fabric.index
    paths = [
        index.routing.equal_cost_paths(index.node(f.src), index.node(f.dst))[0]
        for f in workload.flows
    ]
    result = evaluate(fabric, workload, paths)
    # root h0000 sends to and receives from two children: 200 Gb/s on each tree edge
    (comm,) = result.communicators
    assert comm.slowest_rate_gbps == pytest.approx(200.0)
    assert comm.busbw_gbps == pytest.approx(2 * 2 / 3 * 200.0)


def test_unreachable_flows_count_and_stop_the_job() -> None:
    fabric = two_leaves()
    workload = ring(fabric, CROSSING, ring="flat")
    paths: list[tuple[int, ...] | None] = list(
        via_spine(fabric, workload, {0: "spine-00", 1: "spine-00", 2: "spine-01", 3: "spine-01"})
    )
    paths[1] = None
    result = evaluate(fabric, workload, paths)
    assert result.unreachable == ("j/c/1/0",)
    assert result.jobs[0].unreachable == 1 and result.jobs[0].busbw_fraction == 0.0


def test_a_down_link_on_the_path_gives_zero() -> None:
    fabric = two_leaves()
    workload = ring(fabric, CROSSING, ring="flat")
    paths = via_spine(
        fabric, workload, {0: "spine-00", 1: "spine-00", 2: "spine-01", 3: "spine-01"}
    )
    broken = fabric.with_link_status(
        {fabric.index.link_number("leaf-00:Ethernet3"): LinkStatus.DOWN}
    )
    result = evaluate(broken, workload, paths)
    assert result.jobs[0].busbw_fraction == 0.0


def test_qps_split_evenly_so_one_colliding_qp_slows_its_pair() -> None:
    fabric = rail_optimized(RailOptimizedParams(units=2, hosts_per_unit=3, rails=1, spines=2))
    spec = {
        "jobs": [
            {
                "id": "a",
                "hosts": ["h0000", "h0003"],
                "communicators": [{"id": "c", "qps_per_connection": 2}],
            },
            {"id": "b", "hosts": ["h0001", "h0004"], "communicators": [{"id": "c"}]},
            {"id": "c", "hosts": ["h0002", "h0005"], "communicators": [{"id": "c"}]},
        ]
    }
    workload = derive_workload(fabric, JobsFile.model_validate(spec))
    # a's first QP shares leaf-su00-r0 -> spine-00 with b and c; its second QP goes alone
    spines = ["spine-00", "spine-01", "spine-00", "spine-01"] + ["spine-00", "spine-00"] * 2
    result = evaluate(fabric, workload, via_spine(fabric, workload, dict(enumerate(spines))))
    a_out = next(p for p in result.pairs if (p.job, p.src_rank) == ("a", 0))
    # progressive filling: the shared uplink freezes three flows at 400/3; a's lone QP then
    # takes the rest of a's NIC (800/3). Data is split evenly over the QPs, so the pair moves
    # at 2 x 400/3, not at the 400 its QPs sum to.
    assert a_out.sum_gbps == pytest.approx(400.0)
    assert a_out.rate_gbps == pytest.approx(800.0 / 3)
    assert result.jobs[0].busbw_fraction == pytest.approx(2 / 3)
    assert result.jobs[1].busbw_fraction == pytest.approx(1 / 3)


def test_dual_port_nic_needs_both_ports_for_full_rate() -> None:
    fabric = dual_plane(DualPlaneParams(units=1, hosts_per_unit=2, rails=1, spines=1))
    index = fabric.index
    for qps, fraction in ((1, 0.5), (2, 1.0)):
        workload = ring(fabric, ["h0000", "h0001"], qps_per_connection=qps)
        paths = [
            index.routing.equal_cost_paths(index.node(f.src), index.node(f.dst))[0]
            for f in workload.flows
        ]
        result = evaluate(fabric, workload, paths)
        assert result.jobs[0].line_rate_gbps == 800.0
        assert result.jobs[0].busbw_fraction == pytest.approx(fraction)


def test_evaluation_dumps_to_json() -> None:
    fabric = two_leaves()
    workload = ring(fabric, CROSSING, ring="flat")
    paths = via_spine(
        fabric, workload, {0: "spine-00", 1: "spine-01", 2: "spine-00", 3: "spine-00"}
    )
    data = json.loads(json.dumps(evaluate(fabric, workload, paths).to_dict(pairs=True)))
    assert data["jobs"][0]["busbw_fraction"] == pytest.approx(0.5)
    assert data["hottest"][0]["name"] == "leaf-00->spine-00"
    assert len(data["pairs"]) == 4 and data["flows"] == 4


def test_workload_from_flows_alone() -> None:
    fabric = two_leaves()
    workload = ring(fabric, CROSSING, ring="flat")
    bare = Workload.from_flows(fabric, workload.flows)
    paths = via_spine(
        fabric, workload, {0: "spine-00", 1: "spine-01", 2: "spine-00", 3: "spine-00"}
    )
    result = evaluate(fabric, bare, paths)
    assert result.jobs[0].busbw_fraction == pytest.approx(0.5)
    assert len(bare.connections) == 4 and bare.communicators[0].size == 4


def test_thousands_of_flows_satisfy_the_certificate() -> None:
    rng = np.random.default_rng(7)
    num_resources, num_flows = 300, 5000
    paths = [
        rng.choice(num_resources, size=int(rng.integers(1, 6)), replace=False)
        for _ in range(num_flows)
    ]
    incidence = Incidence.from_paths([p.tolist() for p in paths])
    weights = rng.choice([1.0, 2.0, 4.0], size=num_flows)
    capacity = rng.choice([100.0, 400.0, 800.0], size=num_resources)
    rates = max_min_fair_rates(incidence, weights, capacity)
    assert bottleneck_certificate(incidence, weights, capacity, rates) == []


@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.integers(0, 50), max_size=6), st.tuples(st.integers(0, 9)))
    )
)
def test_incidence_from_paths_equals_the_per_entry_reading(paths: list[Any]) -> None:
    """``from_paths`` reads paths with C iterators where none is ``None``; with or without
    ``None`` and empty paths, the same arrays as reading entry by entry."""
    incidence = Incidence.from_paths(paths)
    lengths = [len(p) if p else 0 for p in paths]
    assert incidence.indptr.tolist() == [0, *np.cumsum(lengths, dtype=np.int64).tolist()]
    assert incidence.indices.tolist() == [r for p in paths if p for r in p]
    assert incidence.indices.dtype == np.int64


def reference_max_min(incidence: Incidence, weights: Any, capacity: Any) -> Any:
    """Progressive filling over the whole arrays every round, as ``max_min_fair_rates`` was
    before it read only the unfrozen entries and live resources (its sums must be the same
    sums, so the rates the same floats)."""
    tolerance = 1e-9
    rows, cols = incidence.rows, incidence.indices
    num_flows, num_resources = incidence.num_flows, len(capacity)
    level = np.zeros(num_flows)
    active = incidence.lengths > 0
    frozen_load = np.zeros(num_resources)
    active_weight = np.bincount(cols, weights=weights[rows] * active[rows], minlength=num_resources)
    while active.any():
        live = active_weight > tolerance * np.maximum(weights.min(), 1e-300)
        headroom = np.maximum(capacity - frozen_load, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            reach = np.where(live, headroom / np.where(live, active_weight, 1.0), np.inf)
        lowest = float(reach.min())
        saturated = reach <= lowest * (1 + tolerance) + 1e-300
        newly = np.zeros(num_flows, dtype=np.bool_)
        newly[rows[saturated[cols] & active[rows]]] = True
        level[newly] = lowest
        active &= ~newly
        entries = newly[rows]
        touched, flows_of = cols[entries], rows[entries]
        frozen_load += np.bincount(
            touched, weights=weights[flows_of] * lowest, minlength=num_resources
        )
        active_weight -= np.bincount(touched, weights=weights[flows_of], minlength=num_resources)
        active_weight[saturated] = 0.0
    return level * weights


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 12).flatmap(
        lambda resources: st.tuples(
            st.lists(
                st.sampled_from([0.0, 1.0, 3.0, 10.0, 0.3, 7.7]),
                min_size=resources,
                max_size=resources,
            ),
            st.lists(
                st.tuples(
                    st.lists(st.integers(0, resources - 1), max_size=4),
                    st.sampled_from([1.0, 2.0, 0.5, 0.1, 3.7]),
                ),
                max_size=14,
            ),
        )
    )
)
def test_max_min_rates_are_the_whole_array_rounds_bit_for_bit(
    instance: tuple[list[float], list[tuple[list[int], float]]],
) -> None:
    capacity, flows = instance
    incidence = Incidence.from_paths([path for path, _ in flows])  # repeats and empty paths too
    weights = np.asarray([w for _, w in flows], dtype=np.float64)
    cap = np.asarray(capacity, dtype=np.float64)
    got = max_min_fair_rates(incidence, weights, cap)
    want = reference_max_min(incidence, weights, cap).tobytes()
    assert got.tobytes() == want
    for window in (1, 2, 3):  # the window rebuilt often: the same floats
        assert _fill(incidence, weights, cap, window).tobytes() == want
    for dense in (0, 10**9):  # every round sorted, every round dense
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fairness_module, "DENSE", dense)
            assert max_min_fair_rates(incidence, weights, cap).tobytes() == want


def test_max_min_rates_of_an_ecmp_baseline_are_the_whole_array_rounds() -> None:
    """Many rounds (collisions at many levels): a shuffled ring's ECMP paths on a fat-tree."""
    fabric = generate("fat-tree", pods=4, leaves_per_pod=4, aggs_per_pod=4, cores=8,
                      hosts_per_leaf=4)  # fmt: skip
    workload = derive_workload(fabric, permutation_jobs(qps=2, seed=1)(fabric))
    paths = ecmp_paths(fabric, workload.flows).paths
    incidence = Incidence.from_paths(paths)
    weights = np.linspace(0.5, 2.0, len(paths))
    cap = fabric.index.res_capacity
    got = max_min_fair_rates(incidence, weights, cap)
    assert len(np.unique(got / weights)) > 3
    want = reference_max_min(incidence, weights, cap).tobytes()
    assert got.tobytes() == want
    for window in (1, 7, 64):
        assert _fill(incidence, weights, cap, window).tobytes() == want


@pytest.mark.parametrize("kind", ["fat-tree", "rail-optimized"])
def test_max_min_rates_with_failed_links_are_the_whole_array_rounds(kind: str) -> None:
    """Links down (capacity 0: their flows get 0) and a drained one, on ECMP paths and
    equal weights (many flows reach the same level in one round), small windows too."""
    params = (
        {"pods": 4, "leaves_per_pod": 4, "aggs_per_pod": 4, "cores": 8, "hosts_per_leaf": 4}
        if kind == "fat-tree"
        else {"units": 4, "hosts_per_unit": 4, "rails": 4, "spines": 4}
    )
    fabric = generate(kind, **params)
    switches = {s.name for s in fabric.switches}
    inner = [
        i for i, link in enumerate(fabric.links)
        if link.a.split(":")[0] in switches and link.b.split(":")[0] in switches
    ]  # fmt: skip
    fabric = fabric.with_link_status(
        {**{i: LinkStatus.DOWN for i in inner[:40:7]}, inner[3]: LinkStatus.DRAINED}
    )
    workload = derive_workload(fabric, permutation_jobs(qps=2, seed=3)(fabric))
    paths = ecmp_paths(fabric, workload.flows).paths
    incidence = Incidence.from_paths(paths)
    weights = np.ones(len(paths))
    index = fabric.index
    cap = np.where(index.res_usable, index.res_capacity, 0.0)
    assert (cap == 0).any()
    got = max_min_fair_rates(incidence, weights, cap)
    want = reference_max_min(incidence, weights, cap).tobytes()
    assert got.tobytes() == want
    for window in (1, 5, 50):
        assert _fill(incidence, weights, cap, window).tobytes() == want
    for dense in (0, 10**9):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fairness_module, "DENSE", dense)
            assert max_min_fair_rates(incidence, weights, cap).tobytes() == want


@settings(max_examples=200, deadline=None)
@given(
    st.tuples(
        st.text(max_size=8),
        st.text(max_size=8),
        st.integers(0, 10**6),
        st.integers(0, 10**6),
        st.integers(0, 1),
        st.integers(0, 10**4),
        st.floats(allow_nan=False),
        st.floats(allow_nan=False),
    )
)
def test_pair_results_are_built_as_the_constructor_builds_them(
    values: tuple[str, str, int, int, int, int, float, float],
) -> None:
    """:func:`solver.yardstick.evaluate._pair_result` skips the frozen dataclass's ``__init__``: the
    object must be the constructor's in every way (fields, their order, equality, hash, text,
    immutability), and the class must keep the fields it writes and no ``__post_init__``."""
    import dataclasses
    import pickle

    from solver.yardstick.evaluate import PairResult, _pair_result

    assert not hasattr(PairResult, "__post_init__")
    assert [f.name for f in dataclasses.fields(PairResult)] == [
        "job", "communicator", "src_rank", "dst_rank", "tree", "flows", "rate_gbps", "sum_gbps",
    ]  # fmt: skip
    fast, ref = _pair_result(*values), PairResult(*values)
    assert type(fast) is PairResult and list(vars(fast).items()) == list(vars(ref).items())
    assert fast == ref and hash(fast) == hash(ref) and repr(fast) == repr(ref)
    assert dataclasses.asdict(fast) == dataclasses.asdict(ref)
    assert pickle.loads(pickle.dumps(fast)) == ref
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.flows = 0  # type: ignore[misc]


def test_flows_left_on_no_live_resource_are_refused_not_filled_forever() -> None:
    """A weight too small to count (5e-324, what a poisoned intent gave) leaves its flow on no
    live resource once the others froze. ``max_min_fair_rates`` refused that before the
    windowed fill (the planner then fails that job alone: test_planning_isolation); the windowed
    fill once kept the frozen resource in an infinite window and hit it again forever."""
    incidence = Incidence.from_paths([[0], [1]])
    weights = np.array([1.0, 5e-324])
    cap = np.array([100.0, 100.0])
    with pytest.raises(AssertionError, match="no live resource"):
        max_min_fair_rates(incidence, weights, cap)
    for window in (1, 2, 4096):
        with pytest.raises(AssertionError, match="no live resource"):
            _fill(incidence, weights, cap, window)
