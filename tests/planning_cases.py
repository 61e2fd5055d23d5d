"""Shared fabrics, flows and checks for the planner tests (not a test module itself).

Checks are made against the fabric, not the planner's internals: a path is valid when routing
says it is an equal-cost path of the snapshot and every link on it is up; utilization is
recounted flow by flow; the brute-force optimum enumerates routing's paths directly.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

from solver.planning.result import Plan
from solver.workload.flows import Flow
from topology.generators import (
    FatTreeParams,
    LeafSpineParams,
    RailOptimizedParams,
    fat_tree,
    leaf_spine,
    rail_optimized,
)
from topology.model import Fabric, LinkStatus

SMALL_TWO_TIER = leaf_spine(LeafSpineParams(leaves=4, spines=3, hosts_per_leaf=3))
SMALL_FAT_TREE = fat_tree(FatTreeParams.model_validate({"k": 4}))
SMALL = {"two-tier": SMALL_TWO_TIER, "fat-tree": SMALL_FAT_TREE}
"""Small fabrics by name (hypothesis draws the name: a fabric's repr is pages long)."""

TWO_TIER_FABRICS = {
    "small": SMALL_TWO_TIER,
    "leaf-spine": leaf_spine(LeafSpineParams(leaves=6, spines=4, hosts_per_leaf=4)),
    "rail": rail_optimized(RailOptimizedParams(units=2, hosts_per_unit=4, rails=4, spines=3)),
}
"""Two-tier fabrics of a few shapes, by name, for the tests of two-tier shortcuts."""


@st.composite
def small_fabrics(draw: st.DrawFn, most_down: int = 3) -> Fabric:
    """One of :data:`SMALL` with up to ``most_down`` switch links down or drained."""
    fabric = SMALL[draw(st.sampled_from(sorted(SMALL)))]
    links = draw(st.lists(st.sampled_from(switch_links(fabric)), max_size=most_down, unique=True))
    status = draw(
        st.lists(
            st.sampled_from([LinkStatus.DOWN, LinkStatus.DRAINED]),
            min_size=len(links),
            max_size=len(links),
        )
    )
    return fabric.with_link_status(dict(zip(links, status, strict=True))) if links else fabric


def ports(fabric: Fabric) -> list[str]:
    """Every cabled NIC port, as ``host:port`` node names, in fabric order."""
    index = fabric.index
    return [f"{p.host.name}:{p.port.name}" for p in index.ports if index.out_resources[p.node]]


def make_flows(
    fabric: Fabric, pairs: Sequence[tuple[int, int]], rates: Sequence[float] | None = None
) -> list[Flow]:
    """One flow per ``(source port number, destination port number)``, jobs ``j<k % 3>``."""
    names = ports(fabric)
    return [
        Flow(f"j{k % 3}", "c", k, 0, names[a], names[b], 1.0 if rates is None else rates[k])
        for k, (a, b) in enumerate(pairs)
    ]


def switch_links(fabric: Fabric) -> list[int]:
    """Numbers of the links between two switches."""
    index = fabric.index
    return [
        li
        for li in range(len(fabric.links))
        if index.is_switch(int(index.res_src[2 * li]))
        and index.is_switch(int(index.res_dst[2 * li]))
    ]


@st.composite
def flow_sets(
    draw: st.DrawFn, fabric: Fabric, max_flows: int = 12, rates: bool = False
) -> list[Flow]:
    """Random flows between distinct ports of ``fabric`` (some same-leaf), rates 1..3 or 1."""
    n_ports = len(ports(fabric))
    port = st.integers(0, n_ports - 1)
    raw = draw(st.lists(st.tuples(port, port), min_size=1, max_size=max_flows))
    pairs = [(a, b) for a, b in raw if a != b] or [(0, n_ports - 1)]
    values = None
    if rates:
        values = draw(
            st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=len(pairs), max_size=len(pairs))
        )
    return make_flows(fabric, pairs, values)


def utilization(fabric: Fabric, flows: Sequence[Flow], paths: Sequence[Sequence[int]]) -> float:
    """Max over switch-to-switch links of load x reference / capacity, recounted here."""
    index = fabric.index
    speeds = [index.line_rate(p.node) for p in index.ports if index.out_resources[p.node]]
    reference = max(set(speeds), key=speeds.count)
    load: dict[int, float] = {}
    for flow, path in zip(flows, paths, strict=True):
        for r in path:
            if index.is_switch(int(index.res_src[r])) and index.is_switch(int(index.res_dst[r])):
                load[r] = load.get(r, 0.0) + flow.rate
    return max((v * reference / index.res_capacity[r] for r, v in load.items()), default=0.0)


def assert_valid(plan: Plan, fabric: Fabric) -> None:
    """Every reachable flow on one of routing's equal-cost paths over usable links only."""
    index = fabric.index
    routing = index.routing
    assert len(plan.paths) == len(plan.flows)
    for flow, path in zip(plan.flows, plan.paths, strict=True):
        src, dst = index.node(flow.src), index.node(flow.dst)
        if not path:
            assert flow.id in plan.unreachable
            try:
                routing.equal_cost_paths(src, dst)
            except Exception:
                continue
            raise AssertionError(f"{flow.id} has no path but the fabric has some")
        assert all(index.res_usable[r] for r in path), f"{flow.id} crosses a link not up"
        assert routing.is_equal_cost_path(src, dst, tuple(path)), f"{flow.id}: not equal-cost"


def brute_force_optimum(fabric: Fabric, flows: Sequence[Flow]) -> float:
    """The least max utilization over every combination of routing's paths (small inputs)."""
    index = fabric.index
    options: list[list[tuple[int, ...]]] = []
    for f in flows:
        try:
            options.append(index.routing.equal_cost_paths(index.node(f.src), index.node(f.dst)))
        except Exception:
            options.append([()])
    best = np.inf
    for combo in itertools.product(*options):
        best = min(best, utilization(fabric, flows, combo))
    return float(best)


def combinations(fabric: Fabric, flows: Sequence[Flow]) -> int:
    index = fabric.index
    total = 1
    for f in flows:
        with contextlib.suppress(Exception):
            total *= len(index.routing.equal_cost_paths(index.node(f.src), index.node(f.dst)))
    return total
