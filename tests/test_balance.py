"""Dual-port balance: a NIC's QPs spread over its ports (planes) across all its connections,
and moved off a port whose link is down."""

from __future__ import annotations

from collections import Counter

from solver import JobsGenParams, derive_workload, generate_jobs
from solver.workload.flows import Flow
from southbound import (
    balance_ports,
    bindings_for_paths,
    port_spread,
    rebalanced,
    round_robin_paths,
    routes_from_flows,
    verify,
)
from topology.generators import DualPlaneParams, dual_plane
from topology.model import Fabric, LinkStatus


def _fabric() -> Fabric:
    return dual_plane(DualPlaneParams(units=2, hosts_per_unit=4, rails=2, spines=2))


def _flows(fabric: Fabric, pattern: str, qps: int) -> list[Flow]:
    jobs = generate_jobs(
        fabric,
        JobsGenParams(hosts_per_job=len(fabric.hosts), pattern=pattern, qps_per_connection=qps),
    )
    return list(derive_workload(fabric, jobs).flows)


def _planes(fabric: Fabric, flows: list[Flow]) -> Counter[int]:
    index = fabric.index
    return Counter(int(index.plane[index.node(f.src)]) for f in flows)


def test_one_qp_connections_no_longer_all_land_on_port_zero() -> None:
    fabric = _fabric()
    flows = _flows(fabric, "all-to-all", 1)
    assert set(_planes(fabric, flows)) == {0}  # what g mod ports gives with one QP
    result = balance_ports(fabric, flows)
    balanced = rebalanced(fabric, flows)
    assert [(f.src, f.dst) for f in balanced] == list(result.ends)
    assert all(isinstance(f, Flow) for f in balanced)
    planes = _planes(fabric, balanced)
    assert abs(planes[0] - planes[1]) <= 1
    assert result.spread_after <= 1.0 < result.spread_before
    assert result.moved > 0 and not result.stranded


def test_odd_qp_counts_alternate_the_extra_qp_between_ports() -> None:
    fabric = _fabric()
    flows = _flows(fabric, "all-to-all", 3)
    before = port_spread(fabric, [(f.src, f.dst) for f in flows], [f.rate for f in flows])
    after = balance_ports(fabric, flows)
    assert after.spread_after < before and after.spread_after <= 1.0
    for (job, comm, conn), members in _by_connection(flows).items():
        ports = Counter(after.ends[i][0] for i in members)
        assert max(ports.values()) - min(ports.values()) <= 1, (job, comm, conn)


def _by_connection(flows: list[Flow]) -> dict[tuple[str, str, int], list[int]]:
    out: dict[tuple[str, str, int], list[int]] = {}
    for i, f in enumerate(flows):
        out.setdefault((f.job, f.communicator, f.connection), []).append(i)
    return out


def test_qps_leave_a_port_whose_link_is_down_and_the_result_binds_and_verifies() -> None:
    fabric = _fabric()
    flows = _flows(fabric, "ring", 2)
    index = fabric.index
    victim = flows[0].src
    broken = fabric.with_link_status({index.link_of_end[victim]: LinkStatus.DOWN})
    moved = rebalanced(broken, flows)
    assert all(victim not in (f.src, f.dst) for f in moved)
    assert all(index.plane[index.node(f.src)] == index.plane[index.node(f.dst)] for f in moved)
    routes = routes_from_flows(moved, round_robin_paths(broken, [(f.src, f.dst) for f in moved]))
    report = verify(broken, bindings_for_paths(broken, routes, epoch=1), routes)
    assert report.as_planned and report.checked == len(flows)
