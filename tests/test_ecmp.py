"""The ECMP baseline: kernel source ports, forwarded by the switches' hashes, and its collisions."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from solver import (
    JobsGenParams,
    derive_workload,
    ecmp_paths,
    evaluate,
    flows_for_jobs,
    generate_jobs,
)
from topology.forwarding import forward
from topology.generators import (
    FatTreeParams,
    RailOptimizedParams,
    fat_tree,
    rail_optimized,
)
from topology.model import Fabric, LinkStatus
from topology.roce import FiveTuple, rdma_calc_flow_label, rdma_flow_label_to_udp_sport


def rail_fabric() -> Fabric:
    return rail_optimized(RailOptimizedParams(units=4, hosts_per_unit=8, rails=4, spines=8))


def busy_jobs(fabric: Fabric, seed: int = 0) -> JobsGenParams:
    """Eight 4-host jobs scattered over the units: most ring hops cross the spines."""
    return JobsGenParams(
        jobs=8, hosts_per_job=4, placement="fragmented", run=1, channels=2, seed=seed
    )


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return rail_fabric()


def test_same_seed_same_ports_and_paths(fabric: Fabric) -> None:
    flows = flows_for_jobs(fabric, generate_jobs(fabric, busy_jobs(fabric)))
    first, again = ecmp_paths(fabric, flows, seed=5), ecmp_paths(fabric, flows, seed=5)
    assert first.paths == again.paths
    assert (first.sports == again.sports).all() and (first.lqpn == again.lqpn).all()
    other = ecmp_paths(fabric, flows, seed=6)
    assert (other.sports != first.sports).any()


def test_ports_are_the_kernels_for_the_drawn_qpns(fabric: Fabric) -> None:
    flows = flows_for_jobs(fabric, generate_jobs(fabric, busy_jobs(fabric)))
    result = ecmp_paths(fabric, flows, seed=1)
    assert len(result) == len(flows)
    assert int(result.sports.min()) >= 0xC000 and int(result.sports.max()) <= 0xFFFF
    assert int(result.lqpn.min()) >= 2 and int(result.rqpn.max()) < 1 << 24
    for i in range(0, len(flows), 17):
        label = rdma_calc_flow_label(int(result.lqpn[i]), int(result.rqpn[i]))
        assert int(result.flow_labels[i]) == label
        assert int(result.sports[i]) == rdma_flow_label_to_udp_sport(label)


@pytest.mark.parametrize(
    "make",
    [
        rail_fabric,
        lambda: fat_tree(FatTreeParams(k=4)),
    ],
)
def test_every_ecmp_path_is_an_equal_cost_path_and_matches_forward(make: object) -> None:
    fabric: Fabric = make()  # type: ignore[operator]
    index = fabric.index
    hosts_per_job = max(2, len(fabric.hosts) // 4)
    jobs = generate_jobs(
        fabric, JobsGenParams(jobs=2, hosts_per_job=hosts_per_job, pattern="all-to-all")
    )
    flows = flows_for_jobs(fabric, jobs)
    result = ecmp_paths(fabric, flows, seed=3)
    assert result.unreachable == ()
    for i, (flow, path) in enumerate(zip(flows, result.paths, strict=True)):
        src, dst = index.node(flow.src), index.node(flow.dst)
        assert index.routing.is_equal_cost_path(src, dst, path), flow.id
        if i % 7 == 0:
            packet = FiveTuple(
                src_ip=index.port(flow.src).port.address,
                dst_ip=index.port(flow.dst).port.address,
                src_port=int(result.sports[i]),
            )
            assert forward(fabric, packet).resources == path


def cross_leaf_lower_bound(fabric: Fabric, paths: list[tuple[int, ...]]) -> int:
    """ceil(max over leaves of cross-leaf flows out of or into it / its uplinks) (2-tier)."""
    index = fabric.index
    out: Counter[int] = Counter()
    into: Counter[int] = Counter()
    for path in paths:
        src_leaf, dst_leaf = int(index.res_dst[path[0]]), int(index.res_src[path[-1]])
        if src_leaf != dst_leaf:
            out[src_leaf] += 1
            into[dst_leaf] += 1
    uplinks = {
        leaf: sum(1 for r in index.out_resources[leaf] if index.res_dst[r] < index.num_switches)
        for leaf in set(out) | set(into)
    }
    return max(math.ceil(max(out[x], into[x]) / uplinks[x]) for x in uplinks)


def test_ecmp_collides_where_a_plan_need_not(fabric: Fabric) -> None:
    workload = derive_workload(fabric, generate_jobs(fabric, busy_jobs(fabric)))
    worse = 0
    for seed in range(5):
        result = ecmp_paths(fabric, workload.flows, seed=seed)
        bound = cross_leaf_lower_bound(fabric, list(result.paths))
        evaluation = evaluate(fabric, workload, result.paths)
        assert evaluation.max_link_load >= bound
        if evaluation.max_link_load > bound:
            worse += 1
            assert evaluation.min_busbw_fraction is not None
            assert evaluation.min_busbw_fraction < 1.0
    assert worse >= 4  # that is the point of c4p


def test_flows_over_a_down_nic_link_are_unreachable(fabric: Fabric) -> None:
    flows = flows_for_jobs(fabric, generate_jobs(fabric, busy_jobs(fabric)))
    cut = fabric.with_link_status({fabric.index.link_number(flows[0].src): LinkStatus.DOWN})
    result = ecmp_paths(cut, flows, seed=0)
    lost = {i for i, f in enumerate(flows) if f.src == flows[0].src or f.dst == flows[0].src}
    assert set(result.unreachable) == lost
    assert all(result.paths[i] == () for i in lost)
    evaluation = evaluate(
        cut, derive_workload(cut, generate_jobs(cut, busy_jobs(cut))), result.paths
    )
    assert len(evaluation.unreachable) == len(lost)


def test_no_flows() -> None:
    result = ecmp_paths(rail_fabric(), [], seed=0)
    assert result.paths == () and result.unreachable == () and len(result.sports) == 0
    assert np.asarray(result.lqpn).dtype == np.uint64


def test_a_flow_keeps_its_port_when_other_jobs_come(fabric: Fabric) -> None:
    jobs = generate_jobs(fabric, busy_jobs(fabric))
    alone = flows_for_jobs(fabric, jobs.model_copy(update={"jobs": jobs.jobs[:1]}))
    together = flows_for_jobs(fabric, jobs)
    first, second = ecmp_paths(fabric, alone, seed=4), ecmp_paths(fabric, together, seed=4)
    assert (second.sports[: len(alone)] == first.sports).all()
    assert second.paths[: len(alone)] == first.paths
