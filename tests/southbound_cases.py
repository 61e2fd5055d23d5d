"""Shared cases for the southbound tests: small fabrics of every kind, the same fabric with
"secret" hash profiles (what the switches really do, shown only to the prober and to
verification), and ring workloads with planned paths to bind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from solver import JobsGenParams, flows_for_jobs, generate_jobs
from solver.workload.flows import Flow
from southbound import QpRoute, round_robin_paths, routes_from_flows
from topology.generators import (
    DualPlaneParams,
    FatTreeParams,
    HashProfiles,
    LeafSpineParams,
    RailOptimizedParams,
    dual_plane,
    fat_tree,
    leaf_spine,
    rail_optimized,
)
from topology.model import Fabric, HashProfile

SECRET = HashProfiles(
    leaf=HashProfile(algorithm="crc32-hi", seed=0x5EC2E7),
    spine=HashProfile(algorithm="crc16-ccitt", seed=991),
    core=HashProfile(algorithm="xor-fold", seed=0xBEEF),
)
"""Hash profiles the path-table code never sees."""

Maker = Callable[..., Fabric]

MAKERS: dict[str, Maker] = {
    "leaf-spine": lambda **kw: leaf_spine(
        LeafSpineParams(leaves=4, spines=4, hosts_per_leaf=3, **kw)
    ),
    "rail-optimized": lambda **kw: rail_optimized(
        RailOptimizedParams(units=3, hosts_per_unit=3, rails=2, spines=4, **kw)
    ),
    "fat-tree": lambda **kw: fat_tree(FatTreeParams(k=4, **kw)),
    "dual-plane": lambda **kw: dual_plane(
        DualPlaneParams(units=2, hosts_per_unit=3, rails=2, spines=3, **kw)
    ),
}
KINDS = tuple(MAKERS)


def fabric_pair(kind: str, **kw: Any) -> tuple[Fabric, Fabric]:
    """(what the controller knows: default hashes, what the switches do: secret hashes)."""
    return MAKERS[kind](**kw), MAKERS[kind](hash_profiles=SECRET, **kw)


def ring_flows(fabric: Fabric, qps: int = 2, jobs: int = 2) -> list[Flow]:
    """Ring jobs scattered over the fabric (most hops cross switches), ``qps`` QPs each."""
    hosts = len(fabric.hosts) // jobs
    params = JobsGenParams(
        jobs=jobs, hosts_per_job=hosts, placement="fragmented", run=1, qps_per_connection=qps
    )
    return flows_for_jobs(fabric, generate_jobs(fabric, params))


def ring_routes(fabric: Fabric, qps: int = 2, jobs: int = 2) -> list[QpRoute]:
    """:func:`ring_flows` with paths spread round-robin over the equal-cost paths."""
    flows = ring_flows(fabric, qps, jobs)
    return routes_from_flows(flows, round_robin_paths(fabric, [(f.src, f.dst) for f in flows]))


def node_pairs(fabric: Fabric, routes: list[QpRoute]) -> list[tuple[int, int]]:
    index = fabric.index
    return [(index.node(r.src), index.node(r.dst)) for r in routes]


def replan(fabric: Fabric, routes: list[QpRoute]) -> list[QpRoute]:
    """Keep each planned path that is still equal-cost; give the others a round-robin path."""
    index = fabric.index
    fresh = round_robin_paths(fabric, [(r.src, r.dst) for r in routes])
    out = []
    for r, alternative in zip(routes, fresh, strict=True):
        src, dst = index.node(r.src), index.node(r.dst)
        keep = bool(r.path) and index.routing.is_equal_cost_path(src, dst, r.path)
        path = r.path if keep else alternative
        out.append(QpRoute(r.job, r.communicator, r.connection, r.qp, r.src, r.dst, path, r.rate))
    return out


def busiest_switch_link(fabric: Fabric, routes: list[QpRoute]) -> int:
    """The switch-to-switch link most planned paths cross (a good one to fail)."""
    counts: dict[int, int] = {}
    for r in routes:
        for res in r.path[1:-1]:
            counts[res // 2] = counts.get(res // 2, 0) + 1
    return max(sorted(counts), key=counts.__getitem__)
