"""The ECMP data-plane model: where packets go, hop by hop, and that the fast path agrees.

Fabrics are built by hand here so that these tests depend only on the model and routing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.errors import PathError, UnknownNameError, UnreachableError
from topology.forwarding import ForwardedPath, forward, forward_many, forward_tuples
from topology.hashing import ecmp_hash
from topology.model import (
    Fabric,
    HashAlgorithm,
    HashProfile,
    Host,
    Link,
    LinkStatus,
    Nic,
    NicPort,
    Switch,
    SwitchRole,
)
from topology.roce import SPORT_MAX, SPORT_MIN, FiveTuple

ProfileOf = Callable[[str], HashProfile]


def _default(_: str) -> HashProfile:
    return HashProfile()


def _host(name: str, address: str) -> Host:
    return Host(name=name, nics=(Nic(name="nic0", ports=(NicPort(name="p0", address=address),)),))


def leaf_spine(
    leaves: int = 3, spines: int = 2, hosts_per_leaf: int = 2, profile: ProfileOf = _default
) -> Fabric:
    """Every leaf to every spine; host ``h<leaf>-<n>`` at 10.0.<leaf>.<n+1>."""
    switches = [
        Switch(name=f"leaf{i}", role=SwitchRole.LEAF, hash=profile(f"leaf{i}"))
        for i in range(leaves)
    ] + [
        Switch(name=f"spine{j}", role=SwitchRole.SPINE, hash=profile(f"spine{j}"))
        for j in range(spines)
    ]
    hosts, links = [], []
    for i in range(leaves):
        for j in range(spines):
            links.append(
                Link(a=f"leaf{i}:Ethernet{j + 1}", b=f"spine{j}:Ethernet{i + 1}", speed_gbps=400)
            )
        for n in range(hosts_per_leaf):
            hosts.append(_host(f"h{i}-{n}", f"10.0.{i}.{n + 1}"))
            links.append(Link(a=f"h{i}-{n}:p0", b=f"leaf{i}:Ethernet{100 + n}", speed_gbps=400))
    return Fabric(name="ls", switches=tuple(switches), hosts=tuple(hosts), links=tuple(links))


def three_tier(profile: ProfileOf = _default) -> Fabric:
    """2 pods x (2 leaves, 2 aggregation switches), 4 cores; agg ``j`` joins cores 2j and 2j+1."""
    switches = [
        Switch(name=f"core{c}", role=SwitchRole.CORE, hash=profile(f"core{c}")) for c in range(4)
    ]
    hosts, links = [], []
    for p in range(2):
        for j in range(2):
            agg = f"p{p}-agg{j}"
            switches.append(Switch(name=agg, role=SwitchRole.SPINE, pod=p, hash=profile(agg)))
            for k in range(2):
                core = 2 * j + k
                links.append(
                    Link(
                        a=f"{agg}:Ethernet{10 + k}", b=f"core{core}:Ethernet{p + 1}", speed_gbps=400
                    )
                )
        for i in range(2):
            leaf = f"p{p}-leaf{i}"
            switches.append(Switch(name=leaf, role=SwitchRole.LEAF, pod=p, hash=profile(leaf)))
            for j in range(2):
                links.append(
                    Link(
                        a=f"{leaf}:Ethernet{j + 1}",
                        b=f"p{p}-agg{j}:Ethernet{i + 1}",
                        speed_gbps=400,
                    )
                )
            for n in range(2):
                host = f"h{p}{i}{n}"
                hosts.append(_host(host, f"10.{p}.{i}.{n + 1}"))
                links.append(Link(a=f"{host}:p0", b=f"{leaf}:Ethernet{100 + n}", speed_gbps=400))
    return Fabric(name="clos3", switches=tuple(switches), hosts=tuple(hosts), links=tuple(links))


def _mixed(name: str) -> HashProfile:
    """A different hash per tier and a seed per switch, as an operator would configure."""
    algorithm = (
        HashAlgorithm.CRC16_BISYNC
        if "leaf" in name
        else HashAlgorithm.CRC32_HI
        if "agg" in name or "spine" in name
        else HashAlgorithm.CRC16_CCITT
    )
    return HashProfile(algorithm=algorithm, seed=sum(name.encode()))


FABRICS = {
    "leaf-spine": leaf_spine(leaves=3, spines=2),
    "leaf-spine-4": leaf_spine(leaves=4, spines=4, profile=_mixed),
    "three-tier": three_tier(),
    "three-tier-mixed": three_tier(profile=_mixed),
}


def _tuple(fabric: Fabric, src: int, dst: int, sport: int) -> FiveTuple:
    index = fabric.index
    return FiveTuple(
        src_ip=index.port_by_node[src].port.address,
        dst_ip=index.port_by_node[dst].port.address,
        src_port=sport,
    )


def _port_nodes(fabric: Fabric) -> list[int]:
    return [p.node for p in fabric.index.ports]


def _forward_or_empty(fabric: Fabric, ft: FiveTuple) -> tuple[int, ...]:
    try:
        return forward(fabric, ft).resources
    except PathError:
        return ()


sports = st.integers(SPORT_MIN, SPORT_MAX)


@st.composite
def flows(draw: st.DrawFn, fabric: Fabric, max_size: int = 30) -> list[tuple[int, int, int]]:
    ports = _port_nodes(fabric)
    return draw(
        st.lists(
            st.tuples(st.sampled_from(ports), st.sampled_from(ports), sports),
            min_size=1,
            max_size=max_size,
        )
    )


# -- single packets ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FABRICS))
@given(data=st.data())
def test_forwarded_paths_are_equal_cost_paths(name: str, data: st.DataObject) -> None:
    fabric = FABRICS[name]
    ports = _port_nodes(fabric)
    src = data.draw(st.sampled_from(ports))
    dst = data.draw(st.sampled_from([p for p in ports if p != src]))
    path = forward(fabric, _tuple(fabric, src, dst, data.draw(sports)))
    assert path.resources in fabric.index.routing.equal_cost_paths(src, dst)
    assert path.nodes == fabric.index.path_nodes(path.resources)
    assert path.nodes[0] == fabric.index.node_names[src]
    assert path.nodes[-1] == fabric.index.node_names[dst]


def test_each_choice_is_the_switch_hash_modulo_its_group() -> None:
    fabric = FABRICS["three-tier-mixed"]
    index, routing = fabric.index, fabric.index.routing
    ft = FiveTuple.model_validate({"src_ip": "10.0.0.1", "dst_ip": "10.1.1.2", "src_port": 0xC0DE})
    path = forward(fabric, ft)
    # Every switch but the destination leaf chooses, even from a group of one (going down).
    assert [hop.switch for hop in path.hops] == list(path.nodes[1:-2])
    assert [hop.group_size for hop in path.hops] == [2, 2, 1, 1]
    assert len(path.resources) == 6  # NIC, up, up, down, down, NIC
    leaf = index.node("p1-leaf1")
    descending = False
    for hop, res in zip(path.hops, path.resources[1:], strict=False):
        switch = index.node(hop.switch)
        group = routing.next_hops(switch, leaf, descending)
        assert hop.group_size == len(group)
        assert hop.hash_value == ecmp_hash(fabric.switch(hop.switch).hash, ft)
        assert hop.member == hop.hash_value % hop.group_size
        assert group[hop.member] == hop.resource == res
        descending = descending or routing.is_down(res)
    explanation = path.explain()
    for hop in path.hops:
        assert f"{hop.switch}: hash" in explanation
    assert "10.0.0.1:49374 -> 10.1.1.2:4791" in explanation


def test_same_leaf_traffic_turns_at_the_leaf() -> None:
    fabric = FABRICS["leaf-spine"]
    ft = FiveTuple.model_validate({"src_ip": "10.0.1.1", "dst_ip": "10.0.1.2", "src_port": 50000})
    path = forward(fabric, ft)
    assert path.nodes == ("h1-0:p0", "leaf1", "h1-1:p0")
    assert path.hops == ()


def test_unknown_address_and_same_port_are_refused() -> None:
    fabric = FABRICS["leaf-spine"]
    with pytest.raises(UnknownNameError, match="10.9.9.9"):
        forward(
            fabric,
            FiveTuple.model_validate({"src_ip": "10.9.9.9", "dst_ip": "10.0.0.1", "src_port": 1}),
        )
    same = FiveTuple.model_validate({"src_ip": "10.0.0.1", "dst_ip": "10.0.0.1", "src_port": 1})
    with pytest.raises(PathError, match="same NIC port"):
        forward(fabric, same)


# -- failures ----------------------------------------------------------------------------------


def _with_down(fabric: Fabric, *link_ids: str) -> Fabric:
    return fabric.with_link_status({fabric.index.link_number(i): LinkStatus.DOWN for i in link_ids})


def test_a_down_link_leaves_its_group_and_is_never_used() -> None:
    base = leaf_spine(leaves=3, spines=3)
    fabric = _with_down(base, "leaf0:Ethernet2")  # leaf0 -- spine1
    index = fabric.index
    dead = {2 * index.link_number("leaf0:Ethernet2"), 2 * index.link_number("leaf0:Ethernet2") + 1}
    src, dst = index.node("h0-0:p0"), index.node("h2-0:p0")
    used: Counter[str] = Counter()
    for sport in range(SPORT_MIN, SPORT_MIN + 300):
        path = forward(fabric, _tuple(fabric, src, dst, sport))
        assert not dead & set(path.resources)
        assert path.hops[0].group_size == 2
        used[path.nodes[2]] += 1
    assert set(used) == {"spine0", "spine2"}
    # Toward leaf0, spine1 can no longer descend, so leaf2 drops it from its group too.
    back = forward(fabric, _tuple(fabric, dst, src, SPORT_MIN))
    assert back.hops[0].group_size == 2
    assert "spine1" not in back.nodes


def test_unreachable_destinations_raise_and_forward_many_reports_them() -> None:
    base = FABRICS["leaf-spine"]
    cut_off = _with_down(base, "leaf2:Ethernet1", "leaf2:Ethernet2")  # leaf2 has no uplink
    index = cut_off.index
    src, dst = index.node("h0-0:p0"), index.node("h2-0:p0")
    with pytest.raises(UnreachableError, match="leaf0 has no usable next hop toward leaf2"):
        forward(cut_off, _tuple(cut_off, src, dst, 50000))
    nic_down = _with_down(base, "h0-0:p0")
    with pytest.raises(UnreachableError, match="source NIC link h0-0:p0->leaf0 is not up"):
        forward(nic_down, _tuple(nic_down, src, dst, 50000))
    with pytest.raises(UnreachableError, match="destination NIC link"):
        forward(nic_down, _tuple(nic_down, dst, src, 50000))
    local = index.node("h2-1:p0")
    got = forward_many(cut_off, [src, dst, src], [dst, local, src], [50000, 50001, 50002])
    assert got[0] == () and got[2] == ()
    assert cut_off.index.path_nodes(got[1]) == ("h2-0:p0", "leaf2", "h2-1:p0")


# -- spread and polarisation -------------------------------------------------------------------


@pytest.mark.parametrize("spines", [2, 3, 4])
def test_source_ports_spread_one_nic_pair_over_every_spine(spines: int) -> None:
    fabric = leaf_spine(leaves=2, spines=spines)
    index = fabric.index
    ports = np.arange(SPORT_MIN, SPORT_MAX + 1)
    src, dst = index.node("h0-0:p0"), index.node("h1-0:p0")
    paths = forward_many(fabric, np.full(ports.size, src), np.full(ports.size, dst), ports)
    used = Counter(index.node_names[index.res_dst[p[1]]] for p in paths)
    assert set(used) == {f"spine{j}" for j in range(spines)}
    fair = ports.size / spines
    assert all(fair / 2 <= n <= 2 * fair for n in used.values()), used


def _cores_used(fabric: Fabric) -> set[str]:
    index = fabric.index
    ports = np.arange(SPORT_MIN, SPORT_MIN + 2048)
    src, dst = index.node("h000:p0"), index.node("h110:p0")
    paths = forward_many(fabric, np.full(ports.size, src), np.full(ports.size, dst), ports)
    return {index.node_names[index.res_dst[p[2]]] for p in paths}


def test_one_linear_hash_at_two_tiers_polarises_and_another_algorithm_does_not() -> None:
    # Leaf and aggregation both pick among 2 members. With the same CRC the seed only XORs a
    # constant into the hash, so the aggregation switch repeats the leaf's choice: half the cores
    # stay idle. A different algorithm at the aggregation tier breaks the correlation.
    def seeded(name: str) -> HashProfile:
        return HashProfile(seed=0x1234 if "agg" in name else 0)

    def other_algorithm(name: str) -> HashProfile:
        return HashProfile(algorithm=HashAlgorithm.CRC32_HI if "agg" in name else "crc16-bisync")

    assert len(_cores_used(three_tier())) == 2
    assert len(_cores_used(three_tier(profile=seeded))) == 2
    assert _cores_used(three_tier(profile=other_algorithm)) == {f"core{c}" for c in range(4)}


# -- the vectorized walk -----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FABRICS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_forward_many_equals_forward(name: str, data: st.DataObject) -> None:
    base = FABRICS[name]
    failed = data.draw(st.sets(st.integers(0, len(base.links) - 1), max_size=4))
    fabric = base.with_link_status(dict.fromkeys(failed, LinkStatus.DOWN))
    rows = data.draw(flows(fabric))
    src, dst, sport = (np.array(column, dtype=np.int64) for column in zip(*rows, strict=True))
    got = forward_many(fabric, src, dst, sport)
    want = [_forward_or_empty(fabric, _tuple(fabric, s, d, p)) for s, d, p in rows]
    assert got == want
    for (s, d, _), resources in zip(rows, got, strict=True):
        if resources:
            assert fabric.index.routing.is_equal_cost_path(s, d, resources)


def test_forward_tuples_equals_forward() -> None:
    fabric = FABRICS["three-tier-mixed"]
    ports = _port_nodes(fabric)
    tuples = [
        _tuple(fabric, s, d, SPORT_MIN + 37 * k)
        for k, (s, d) in enumerate((s, d) for s in ports for d in ports if s != d)
    ]
    assert forward_tuples(fabric, tuples) == [forward(fabric, t).resources for t in tuples]
    assert forward_tuples(fabric, []) == []
    with pytest.raises(ValueError, match="one protocol"):
        forward_tuples(fabric, [tuples[0], tuples[1].model_copy(update={"dst_port": 1})])


def test_forward_many_refuses_bad_arguments() -> None:
    fabric = FABRICS["leaf-spine"]
    port = fabric.index.node("h0-0:p0")
    switch = fabric.index.node("spine0")
    assert forward_many(fabric, [], [], []) == []
    with pytest.raises(UnknownNameError, match="src_ports: node 3 is not a NIC port"):
        forward_many(fabric, [switch], [port], [50000])
    with pytest.raises(UnknownNameError, match="dst_ports"):
        forward_many(fabric, [port], [fabric.index.num_nodes], [50000])
    with pytest.raises(ValueError, match="differ in length"):
        forward_many(fabric, [port, port], [port], [50000])
    with pytest.raises(TypeError, match="src_ports"):
        forward_many(fabric, [1.5], [port], [50000])
    with pytest.raises(ValueError, match="src_udp_ports"):
        forward_many(fabric, [port], [port], [70000])
    with pytest.raises(TypeError, match="src_udp_ports"):
        forward_many(fabric, [port], [port], [1.0])


def test_forwarded_path_is_frozen() -> None:
    fabric = FABRICS["leaf-spine"]
    path = forward(
        fabric,
        FiveTuple.model_validate({"src_ip": "10.0.0.1", "dst_ip": "10.0.2.1", "src_port": 1}),
    )
    assert isinstance(path, ForwardedPath)
    with pytest.raises(AttributeError):
        path.resources = ()  # type: ignore[misc]
