"""Fabric generators: shapes, cabling, names, addresses and equal-cost path counts per kind.

The counts are checked against closed formulas over many small shapes (hypothesis), and the
path counts through the real routing (``fabric.index.routing``), so a generator and the
routing it feeds cannot drift apart unnoticed.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from topology.errors import UnreachableError
from topology.formats import TextFormat, parse_fabric
from topology.generators import (
    GENERATORS,
    AddressPlan,
    DualPlaneParams,
    FabricKind,
    FabricParams,
    FatTreeParams,
    HashProfiles,
    LeafSpineParams,
    RailOptimizedParams,
    dual_plane,
    dual_plane_for_gpus,
    fat_tree,
    fat_tree_for_gpus,
    generate,
    leaf_spine,
    leaf_spine_for_gpus,
    rail_optimized,
    rail_optimized_for_gpus,
    sized_for_gpus,
)
from topology.model import (
    Fabric,
    HashAlgorithm,
    HashProfile,
    SwitchRole,
    split_end,
)

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SETTINGS = settings(max_examples=25, deadline=None)
speeds = st.sampled_from([100.0, 200.0, 400.0, 800.0])


# -- strategies ---------------------------------------------------------------------------------


@st.composite
def leaf_spine_params(draw: st.DrawFn) -> LeafSpineParams:
    return LeafSpineParams(
        leaves=draw(st.integers(1, 5)),
        spines=draw(st.integers(1, 4)),
        hosts_per_leaf=draw(st.integers(1, 4)),
        host_speed_gbps=draw(speeds),
        uplink_speed_gbps=draw(speeds),
    )


@st.composite
def rail_params(draw: st.DrawFn) -> RailOptimizedParams:
    return RailOptimizedParams(
        units=draw(st.integers(1, 3)),
        hosts_per_unit=draw(st.integers(1, 4)),
        rails=draw(st.integers(1, 4)),
        spines=draw(st.integers(1, 4)),
        host_speed_gbps=draw(speeds),
        uplink_speed_gbps=draw(speeds),
    )


@st.composite
def dual_plane_params(draw: st.DrawFn) -> DualPlaneParams:
    return DualPlaneParams(
        units=draw(st.integers(1, 2)),
        hosts_per_unit=draw(st.integers(1, 3)),
        rails=draw(st.integers(1, 3)),
        spines=draw(st.integers(1, 3)),
        host_speed_gbps=draw(speeds),
        uplink_speed_gbps=draw(speeds),
    )


@st.composite
def fat_tree_params(draw: st.DrawFn) -> FatTreeParams:
    nics = draw(st.integers(1, 3))
    aggs = draw(st.integers(1, 3))
    return FatTreeParams(
        pods=draw(st.integers(1, 3)),
        leaves_per_pod=nics * draw(st.integers(1, 2)),
        aggs_per_pod=aggs,
        cores=aggs * draw(st.integers(1, 3)),
        hosts_per_leaf=draw(st.integers(1, 3)),
        nics_per_host=nics,
        host_speed_gbps=draw(speeds),
        leaf_uplink_speed_gbps=draw(speeds),
        spine_uplink_speed_gbps=draw(speeds),
    )


# -- checks shared by every kind ----------------------------------------------------------------


def port_nodes(fabric: Fabric) -> list[str]:
    return [f"{host.name}:{port.name}" for host, _, port in fabric.nic_ports()]


def check_common(fabric: Fabric, params: FabricParams) -> None:
    """Cabling, names, addresses, interface order and counts every generator promises."""
    ports = port_nodes(fabric)
    assert len(fabric.hosts) == params.host_count
    assert sum(len(h.nics) for h in fabric.hosts) == params.gpus
    assert len(ports) == params.gpus * params.ports_per_nic
    assert len(fabric.switches) == params.switch_count

    # Every NIC port is cabled exactly once, to a leaf, at the host speed.
    ends = Counter(end for link in fabric.links for end in link.ends)
    assert all(ends[p] == 1 for p in ports)
    role = {s.name: s.role for s in fabric.switches}
    for link in fabric.links:
        if link.a in set(ports):
            assert role[split_end(link.b)[0]] is SwitchRole.LEAF
            assert link.speed_gbps == params.host_speed_gbps

    # Unique names and addresses, in disjoint networks; GIDs are IPv4-mapped.
    names = [s.name for s in fabric.switches] + [h.name for h in fabric.hosts]
    assert len(set(names)) == len(names)
    addresses = [port.address for _, _, port in fabric.nic_ports()]
    assert len(set(addresses)) == len(addresses)
    assert all(a in params.addresses.nic_network for a in addresses)
    mgmt = [s.mgmt_address for s in fabric.switches]
    assert None not in mgmt and len(set(mgmt)) == len(mgmt)
    assert all(m in params.addresses.mgmt_network for m in mgmt if m is not None)
    for _, _, port in fabric.nic_ports():
        assert port.gid is not None and port.gid.ipv4_mapped == port.address
    assert all(re.fullmatch(r"h\d{4,}", h.name) for h in fabric.hosts)

    # Each tier hashes with its own profile.
    for s in fabric.switches:
        assert s.hash == params.hash_profiles.for_role(s.role)

    # Interfaces Ethernet1..n per switch, downlinks (to a lower tier) before uplinks.
    tier_of = {s.name: s.tier for s in fabric.switches}
    by_switch: dict[str, list[tuple[int, bool]]] = {s.name: [] for s in fabric.switches}
    for link in fabric.links:
        for mine, other in ((link.a, link.b), (link.b, link.a)):
            device, interface = split_end(mine)
            if device in by_switch:
                number = int(interface.removeprefix("Ethernet"))
                down = tier_of.get(split_end(other)[0], 0) < tier_of[device]
                by_switch[device].append((number, down))
        assert tier_of.get(split_end(link.a)[0], 0) < tier_of[split_end(link.b)[0]]
    for members in by_switch.values():
        members.sort()
        assert [n for n, _ in members] == list(range(1, len(members) + 1))
        downs = [d for _, d in members]
        assert downs == sorted(downs, reverse=True)


def leaf_ratio(fabric: Fabric, leaf: str) -> float:
    """Host-facing over spine-facing capacity of one leaf, from the links themselves."""
    down = up = 0.0
    for link in fabric.links:
        a, b = split_end(link.a)[0], split_end(link.b)[0]
        if b == leaf:
            down += link.speed_gbps
        elif a == leaf:
            up += link.speed_gbps
    return down / up


def path_counts(fabric: Fabric) -> dict[tuple[str, str], int]:
    """Number of equal-cost NIC-to-NIC paths between one port on each pair of leaves.

    Every pair with a NIC port each is counted twice: by enumerating (``equal_cost_paths``)
    and by ``path_count``, which must agree.
    """
    index = fabric.index
    routing = index.routing
    first_port: dict[int, int] = {}
    for p in index.ports:
        first_port.setdefault(index.leaf_of(p.node), p.node)
    out: dict[tuple[str, str], int] = {}
    for la, pa in first_port.items():
        for lb, pb in first_port.items():
            if pa == pb:  # a port to itself is no flow; same-leaf pairs: see below
                count = routing.path_count(la, lb)
            else:
                try:
                    count = len(routing.equal_cost_paths(pa, pb))
                except UnreachableError:
                    count = 0
                assert count == (routing.path_count(la, lb) if count else 0)
            out[(index.node_names[la], index.node_names[lb])] = count
    return out


def check_same_leaf_single_path(fabric: Fabric) -> None:
    index = fabric.index
    by_leaf: dict[int, list[int]] = {}
    for p in index.ports:
        by_leaf.setdefault(index.leaf_of(p.node), []).append(p.node)
    for nodes in by_leaf.values():
        for other in nodes[1:]:
            (path,) = index.routing.equal_cost_paths(nodes[0], other)
            assert len(path) == 2


# -- leaf-spine ---------------------------------------------------------------------------------


@SETTINGS
@given(leaf_spine_params())
def test_leaf_spine_shape_and_paths(params: LeafSpineParams) -> None:
    fabric = leaf_spine(params)
    check_common(fabric, params)
    p = params
    assert len(fabric.links) == p.leaves * p.hosts_per_leaf * p.nics_per_host + p.leaves * p.spines
    assert sum(s.role is SwitchRole.SPINE for s in fabric.switches) == p.spines
    for leaf in (s.name for s in fabric.switches if s.role is SwitchRole.LEAF):
        assert leaf_ratio(fabric, leaf) == pytest.approx(p.oversubscription)
    for (a, b), count in path_counts(fabric).items():
        assert count == (1 if a == b else p.spines)
    check_same_leaf_single_path(fabric)


def test_leaf_spine_puts_all_nics_of_a_host_on_its_leaf() -> None:
    params = LeafSpineParams(leaves=2, spines=2, hosts_per_leaf=2, nics_per_host=2)
    fabric = leaf_spine(params)
    check_common(fabric, params)
    index = fabric.index
    for p in index.ports:
        host = int(p.host.name[1:])
        assert index.node_names[index.leaf_of(p.node)] == f"leaf-{host // 2:02d}"
    # 2 hosts x 2 NICs of 400G down, 2 spines x 400G up.
    assert params.oversubscription == pytest.approx(2.0)
    assert leaf_ratio(fabric, "leaf-00") == pytest.approx(2.0)


# -- rail-optimized -----------------------------------------------------------------------------


@SETTINGS
@given(rail_params())
def test_rail_optimized_shape_and_paths(params: RailOptimizedParams) -> None:
    fabric = rail_optimized(params)
    check_common(fabric, params)
    p = params
    leaves = p.units * p.rails
    assert len(fabric.links) == p.gpus + leaves * p.spines
    index = fabric.index
    for port in index.ports:
        unit = int(port.host.name[1:]) // p.hosts_per_unit
        leaf = index.node_names[index.leaf_of(port.node)]
        assert leaf == f"leaf-su{unit:02d}-r{port.rail}"
        assert port.nic.name == f"nic{port.rail}"
    for leaf in (s.name for s in fabric.switches if s.role is SwitchRole.LEAF):
        assert leaf_ratio(fabric, leaf) == pytest.approx(p.oversubscription)
    for (a, b), count in path_counts(fabric).items():
        assert count == (1 if a == b else p.spines)
    check_same_leaf_single_path(fabric)


# -- fat-tree -----------------------------------------------------------------------------------


@SETTINGS
@given(fat_tree_params())
def test_fat_tree_shape_and_paths(params: FatTreeParams) -> None:
    fabric = fat_tree(params)
    check_common(fabric, params)
    p = params
    assert len(fabric.links) == (
        p.gpus
        + p.pods * p.leaves_per_pod * p.aggs_per_pod
        + p.pods * p.aggs_per_pod * p.cores_per_group
    )
    switches = {s.name: s for s in fabric.switches}
    assert all(s.pod is not None for s in switches.values() if s.role is not SwitchRole.CORE)
    index = fabric.index
    for port in index.ports:
        leaf = switches[index.node_names[index.leaf_of(port.node)]]
        host = int(port.host.name[1:])
        position = int(leaf.name.rsplit("-", 1)[1])
        assert leaf.pod == host // p.hosts_per_pod
        assert position % p.nics_per_host == port.rail
    # Agg j of every pod reaches exactly the cores of group j.
    for link in fabric.links:
        lower, upper = switches.get(split_end(link.a)[0]), switches[split_end(link.b)[0]]
        if upper.role is SwitchRole.CORE:
            assert lower is not None
            j = int(lower.name.rsplit("-", 1)[1])
            assert int(upper.name.removeprefix("core-")) // p.cores_per_group == j
    for s in switches.values():
        if s.role is SwitchRole.LEAF:
            assert leaf_ratio(fabric, s.name) == pytest.approx(p.leaf_oversubscription)
        elif s.role is SwitchRole.SPINE:
            assert leaf_ratio(fabric, s.name) == pytest.approx(p.spine_oversubscription)
    for (a, b), count in path_counts(fabric).items():
        if a == b:
            assert count == 1
        elif switches[a].pod == switches[b].pod:
            assert count == p.aggs_per_pod
        else:
            assert count == p.cores
    check_same_leaf_single_path(fabric)


@settings(max_examples=4, deadline=None)
@given(st.sampled_from([2, 4, 6]))
def test_k_ary_fat_tree_path_counts(k: int) -> None:
    params = FatTreeParams.k_ary(k)
    fabric = fat_tree(params)
    check_common(fabric, params)
    assert len(fabric.hosts) == k**3 // 4
    assert len(fabric.switches) == 5 * k * k // 4
    pods = {s.name: s.pod for s in fabric.switches}
    for (a, b), count in path_counts(fabric).items():
        if a == b:
            assert count == 1
        elif pods[a] == pods[b]:
            assert count == k // 2
        else:
            assert count == k * k // 4


def test_fat_tree_k_convenience_and_errors() -> None:
    assert FatTreeParams.model_validate({"k": "4"}) == FatTreeParams.k_ary(4)
    assert FatTreeParams.k_ary(4, nics_per_host=2).leaves_per_pod == 2
    with pytest.raises(ValidationError, match="k must be an even integer"):
        FatTreeParams.k_ary(5)
    with pytest.raises(ValidationError, match="do not also give pods"):
        FatTreeParams.k_ary(4, pods=3)
    with pytest.raises(ValidationError, match=r"cores \(6\) must be a multiple of aggs_per_pod"):
        FatTreeParams(pods=2, leaves_per_pod=2, aggs_per_pod=4, cores=6, hosts_per_leaf=2)
    with pytest.raises(ValidationError, match=r"leaves_per_pod \(3\) must be a multiple"):
        FatTreeParams(
            pods=2, leaves_per_pod=3, aggs_per_pod=2, cores=2, hosts_per_leaf=2, nics_per_host=2
        )


# -- dual-plane ---------------------------------------------------------------------------------


@SETTINGS
@given(dual_plane_params())
def test_dual_plane_planes_never_meet(params: DualPlaneParams) -> None:
    fabric = dual_plane(params)
    check_common(fabric, params)
    p = params
    assert len(fabric.links) == 2 * (p.gpus + p.units * p.rails * p.spines)
    switches = {s.name: s for s in fabric.switches}
    assert all(s.name.endswith(f"-pl{s.plane}") for s in switches.values())
    index = fabric.index
    for port in index.ports:
        assert port.port.name == f"nic{port.rail}p{port.port_number}"
        leaf = switches[index.node_names[index.leaf_of(port.node)]]
        unit = int(port.host.name[1:]) // p.hosts_per_unit
        assert leaf.name == f"leaf-su{unit:02d}-r{port.rail}-pl{port.port_number}"
        assert leaf.plane == port.port_number
    for name in (s.name for s in switches.values() if s.role is SwitchRole.LEAF):
        assert leaf_ratio(fabric, name) == pytest.approx(p.oversubscription)

    # Connected components of the cabling: each holds switches of one plane only.
    parent = list(range(index.num_nodes))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for res in range(0, index.num_resources, 2):
        parent[find(int(index.res_src[res]))] = find(int(index.res_dst[res]))
    planes_of: dict[int, set[int]] = {}
    for node in range(index.num_nodes):
        planes_of.setdefault(find(node), set()).add(int(index.plane[node]))
    assert all(len(planes) == 1 for planes in planes_of.values())

    routing = index.routing
    for src in index.ports:
        for dst in index.ports:
            if src.port_number != dst.port_number:
                with pytest.raises(UnreachableError):
                    routing.equal_cost_paths(src.node, dst.node)
            elif src.node != dst.node and src.host.name <= dst.host.name:
                for path in routing.equal_cost_paths(src.node, dst.node):
                    nodes = {int(index.res_dst[r]) for r in path[:-1]}
                    assert {int(index.plane[n]) for n in nodes} == {src.port_number}
                    assert all(index.is_switch(n) for n in nodes)
    for (a, b), count in path_counts(fabric).items():
        if switches[a].plane != switches[b].plane:
            assert count == 0
        else:
            assert count == (1 if a == b else p.spines)


# -- registry, parameters, sizing ---------------------------------------------------------------


def test_registry_names_every_kind() -> None:
    assert list(GENERATORS) == [k.value for k in FabricKind]
    assert set(GENERATORS) == {"leaf-spine", "rail-optimized", "fat-tree", "dual-plane"}
    for kind, generator in GENERATORS.items():
        assert generator.kind == kind


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("leaf-spine", {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}),
        ("rail-optimized", {"units": 2, "hosts_per_unit": 2, "rails": 2, "spines": "2"}),
        ("fat-tree", {"k": 4}),
        ("dual-plane", {"units": 1, "hosts_per_unit": 2, "rails": 2, "spines": 2}),
    ],
)
def test_generate_is_deterministic_and_validates(kind: str, params: dict[str, object]) -> None:
    fabric = generate(kind, **params)
    assert fabric == generate(FabricKind(kind), **params)
    assert fabric.name == f"{kind}-{sum(len(h.nics) for h in fabric.hosts)}gpu"
    assert generate(kind, **params, name="lab").name == "lab"
    with pytest.raises(ValidationError, match="bogus"):
        generate(kind, **params, bogus=1)


def test_generate_refuses_unknown_kind_and_bad_fields() -> None:
    with pytest.raises(ValueError, match="unknown fabric kind 'torus'.*leaf-spine"):
        generate("torus")
    with pytest.raises(ValidationError, match="spines"):
        generate("leaf-spine", leaves=2, spines=0, hosts_per_leaf=1)
    with pytest.raises(ValidationError, match="hosts_per_leaf"):
        generate("leaf-spine", leaves=2, spines=1)


def test_hash_profiles_differ_per_tier_and_are_configurable() -> None:
    defaults = HashProfiles()
    tiers = [defaults.leaf, defaults.spine, defaults.core]
    assert len({t.algorithm for t in tiers}) == 3 and len({t.seed for t in tiers}) == 3
    custom = HashProfiles(spine=HashProfile(algorithm=HashAlgorithm.XOR_FOLD, seed=99))
    fabric = fat_tree(FatTreeParams.k_ary(2, hash_profiles=custom))
    for s in fabric.switches:
        assert s.hash == custom.for_role(s.role)
    spines = [s for s in fabric.switches if s.role is SwitchRole.SPINE]
    assert spines and all(s.hash.algorithm is HashAlgorithm.XOR_FOLD for s in spines)


def test_address_plan_layout_and_limits() -> None:
    fabric = dual_plane(DualPlaneParams(units=1, hosts_per_unit=2, rails=2, spines=1))
    h1 = fabric.hosts[1]
    assert [str(port.address) for nic in h1.nics for port in nic.ports] == [
        "10.0.1.1",
        "10.0.1.2",
        "10.0.1.3",
        "10.0.1.4",
    ]
    assert str(fabric.switches[0].mgmt_address) == "192.168.0.1"
    plan = AddressPlan()
    assert str(plan.nic_address(16383, 15)) == "10.63.255.16"  # 16,384 hosts x 16 ports fit
    assert str(plan.mgmt_address(254)) == "192.168.1.1"
    with pytest.raises(ValidationError, match="overlaps"):
        AddressPlan(nic_network=ipaddress.IPv4Network("10.0.0.0/8"), mgmt_network="10.1.0.0/16")
    small = AddressPlan(nic_network=ipaddress.IPv4Network("10.0.0.0/22"))
    with pytest.raises(ValidationError, match="5 hosts do not fit"):
        LeafSpineParams(leaves=5, spines=1, hosts_per_leaf=1, addresses=small)
    no_gids = AddressPlan(gids=False)
    fabric = leaf_spine(LeafSpineParams(leaves=1, spines=1, hosts_per_leaf=1, addresses=no_gids))
    assert all(port.gid is None for _, _, port in fabric.nic_ports())


def test_sizing_for_the_largest_fabrics() -> None:
    rail = rail_optimized_for_gpus(16384)
    assert (rail.units, rail.hosts_per_unit, rail.rails, rail.spines) == (64, 32, 8, 32)
    assert rail.gpus == 16384 and rail.oversubscription == 1.0
    dual = dual_plane_for_gpus(16384)
    assert dual.gpus == 16384 and dual.switch_count == 2 * (512 + 32)
    tree = fat_tree_for_gpus(16384)
    assert (tree.pods, tree.leaves_per_pod, tree.aggs_per_pod, tree.cores) == (16, 32, 32, 1024)
    assert tree.gpus == 16384
    assert tree.leaf_oversubscription == tree.spine_oversubscription == 1.0
    assert leaf_spine_for_gpus(16384).gpus == 16384
    with pytest.raises(ValueError, match="need 65 pods"):
        fat_tree_for_gpus(65 * 1024, radix=64)
    assert fat_tree_for_gpus(65 * 1024).gpus >= 65 * 1024  # without a radix: the next that fits


sizers: list[Callable[[int], FabricParams]] = [
    leaf_spine_for_gpus,
    rail_optimized_for_gpus,
    dual_plane_for_gpus,
    fat_tree_for_gpus,
]


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(sizers), st.integers(1, 40_000))
def test_sizing_covers_the_gpus_non_blocking(
    sizer: Callable[[int], FabricParams], gpus: int
) -> None:
    params = sizer(gpus)
    assert params.gpus >= gpus
    if isinstance(params, FatTreeParams):
        assert params.leaf_oversubscription == params.spine_oversubscription == 1.0
        assert max(params.leaves_per_pod, params.hosts_per_leaf, params.pods) <= 64
        assert params.pods >= min(2, params.host_count)
        assert params.gpus < gpus + params.pods * params.leaves_per_pod * 8
    else:
        assert isinstance(params, LeafSpineParams | RailOptimizedParams | DualPlaneParams)
        assert params.oversubscription == 1.0
    if isinstance(params, RailOptimizedParams | DualPlaneParams) and gpus % (32 * 8) == 0:
        assert params.gpus == gpus


def test_sized_for_gpus_takes_command_line_strings() -> None:
    fabric = sized_for_gpus("rail-optimized", 64, hosts_per_unit="4", rails="4", spines="2")
    assert sum(len(h.nics) for h in fabric.hosts) == 64
    assert sum(s.role is SwitchRole.SPINE for s in fabric.switches) == 2
    tree = sized_for_gpus("fat-tree", 16, nics_per_host="1", radix="4")
    assert tree == fat_tree(FatTreeParams.k_ary(4))
    with pytest.raises(ValueError, match="radix must be an integer"):
        sized_for_gpus("fat-tree", 16, radix="four")
    with pytest.raises(ValueError, match="unknown fabric kind"):
        sized_for_gpus("torus", 16)


# -- example files ------------------------------------------------------------------------------

EXAMPLES: dict[str, dict[str, object]] = {
    "leaf-spine": {"leaves": 4, "spines": 2, "hosts_per_leaf": 4},
    "rail-optimized": {"units": 2, "hosts_per_unit": 4, "rails": 4, "spines": 4},
    "fat-tree": {"k": 4},
    "dual-plane": {"units": 2, "hosts_per_unit": 2, "rails": 4, "spines": 2},
}


@pytest.mark.parametrize("kind", list(EXAMPLES))
def test_example_configs_are_what_the_generators_make(kind: str) -> None:
    path = CONFIGS / f"{kind}.yaml"
    loaded = parse_fabric(path.read_text(encoding="utf-8"), TextFormat.YAML, str(path))
    assert loaded == generate(kind, **EXAMPLES[kind])
