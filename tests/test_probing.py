"""Probing: Paris-traceroute probes answered by the modelled data plane, and the probe planner
that covers every equal-cost path with as few probes as it can."""

from __future__ import annotations

import ipaddress

import pytest
from southbound_cases import KINDS, MAKERS, SECRET, fabric_pair, node_pairs, ring_routes

from southbound import (
    AddressBook,
    ConfidenceRule,
    ModeledProber,
    PathTable,
    Probe,
    ProbePlanner,
    Scope,
    bindings_for_paths,
    detect_scope,
    verify,
)
from southbound.routes import middle_of
from topology.errors import UnknownNameError
from topology.forwarding import forward
from topology.generators import HashProfiles
from topology.model import Fabric, HashField, HashProfile, SwitchAddress
from topology.roce import SPORT_COUNT


def _probe(fabric: Fabric, src: int, dst: int, sport: int, **kw: int) -> Probe:
    ports = fabric.index.port_by_node
    return Probe(ports[src].port.address, ports[dst].port.address, sport, **kw)


def test_probe_refuses_bad_ttls_and_ports() -> None:
    a, b = ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv4Address("10.0.0.2")
    with pytest.raises(ValueError, match="first_ttl"):
        Probe(a, b, 0xC000, first_ttl=3, max_ttl=2)
    with pytest.raises(ValueError, match="sport"):
        Probe(a, b, 70000)
    assert Probe(a, b, 0xC000, first_ttl=2, max_ttl=4).packets == 3


@pytest.mark.parametrize("kind", KINDS)
def test_modeled_prober_answers_hop_by_hop_along_the_forwarded_path(kind: str) -> None:
    _, truth = fabric_pair(kind)
    index = truth.index
    prober = ModeledProber(truth)
    book = AddressBook(truth)
    src = index.ports[0].node
    dst = next(p.node for p in reversed(index.ports) if index.plane[p.node] == index.plane[src])
    probes = [_probe(truth, src, dst, sport, max_ttl=8) for sport in range(0xC000, 0xC010)]
    for probe, trace in zip(probes, prober.trace_many(probes), strict=True):
        path = forward(truth, probe.five_tuple)
        answered = [book.node(h.address) for h in trace.hops if h.address is not None]
        expected = [index.node(n) for n in path.nodes[1:]]  # switches, then the destination
        assert answered == expected
        assert [h.ttl for h in trace.hops] == list(range(1, 9))
    assert prober.traces == 16 and prober.packets == 16 * 8


def test_modeled_prober_can_stay_silent_and_lose_answers() -> None:
    fabric = MAKERS["leaf-spine"]()
    index = fabric.index
    src, dst = index.ports[0].node, index.ports[-1].node
    quiet = ModeledProber(fabric, destination_answers=False)
    (trace,) = quiet.trace_many([_probe(fabric, src, dst, 0xC000, max_ttl=4)])
    assert [h.address is None for h in trace.hops] == [False, False, False, True]
    lossy = ModeledProber(fabric, loss=0.5, seed=1)
    traces = lossy.trace_many(
        [_probe(fabric, src, dst, s, max_ttl=3) for s in range(0xC000, 0xC100)]
    )
    lost = sum(h.address is None for t in traces for h in t.hops)
    assert 0.4 < lost / (256 * 3) < 0.6


def test_switches_without_addresses_cannot_answer() -> None:
    fabric = MAKERS["leaf-spine"]()
    switches = tuple(s.model_copy(update={"mgmt_address": None}) for s in fabric.switches)
    bare = Fabric(name="bare", switches=switches, hosts=fabric.hosts, links=fabric.links)
    with pytest.raises(UnknownNameError, match="without an address"):
        ModeledProber(bare)
    extra = {s.name: f"172.16.0.{i + 1}" for i, s in enumerate(bare.switches)}
    assert ModeledProber(bare, addresses=extra).fabric is bare


def test_address_book_knows_every_loopback_and_interface_address_of_a_switch() -> None:
    fabric = MAKERS["leaf-spine"]()
    first = fabric.switches[0]
    owned = (
        SwitchAddress(address=ipaddress.IPv4Address("198.18.255.1")),
        SwitchAddress(address=ipaddress.IPv4Address("198.18.128.1"), interface="Ethernet1"),
        SwitchAddress(address=ipaddress.IPv6Address("2001:db8::1"), interface="Ethernet1"),
    )
    switches = (first.model_copy(update={"addresses": owned}), *fabric.switches[1:])
    rich = Fabric(name="rich", switches=switches, hosts=fabric.hosts, links=fabric.links)
    book = AddressBook(rich)
    number = rich.index.node(first.name)
    assert book.node(ipaddress.IPv4Address("198.18.255.1")) == number
    assert book.node(ipaddress.IPv4Address("198.18.128.1")) == number
    assert first.mgmt_address is None or book.node(first.mgmt_address) == number
    clash = (
        first.model_copy(update={"addresses": owned}),
        fabric.switches[1].model_copy(update={"addresses": owned[:1]}),
        *fabric.switches[2:],
    )
    with pytest.raises(ValueError, match="198.18.255.1 already used"):
        Fabric(name="clash", switches=clash, hosts=fabric.hosts, links=fabric.links)


@pytest.mark.parametrize("kind", KINDS)
def test_cover_learns_every_equal_cost_path_of_every_pair(kind: str) -> None:
    public, truth = fabric_pair(kind)
    routes = ring_routes(public)
    table = PathTable(public)
    report = ProbePlanner(table, ModeledProber(truth)).cover(node_pairs(public, routes))
    assert report.complete and not report.unreachable and not report.inconsistent
    index = public.index
    for src, dst in node_pairs(public, routes):
        key = table.key_of(src, dst)
        if table.is_trivial(key):
            continue
        paths = index.routing.equal_cost_paths(src, dst)
        for path in paths:
            ports = table.ports_for(src, dst, path)
            assert ports, (kind, key, path)
            five = _probe(truth, src, dst, ports[0]).five_tuple
            assert forward(truth, five).resources == path  # the truth agrees


def test_probes_send_only_the_informative_ttls() -> None:
    """2-tier: only TTL 2 (the spine); fat-tree: TTL 2 and, between pods, TTL 3 (the core)."""
    for kind in ("leaf-spine", "fat-tree"):
        public, truth = fabric_pair(kind)
        index = public.index
        pairs = node_pairs(public, ring_routes(public))
        prober = ModeledProber(truth)
        report = ProbePlanner(PathTable(public), prober).cover(pairs)
        sent = [p for p in pairs if index.leaf_of(p[0]) != index.leaf_of(p[1])]
        assert report.traces >= len(set(sent)) and report.packets <= 2 * report.traces
        if kind == "leaf-spine":
            assert report.packets == report.traces
        else:
            assert report.traces < report.packets
        full = ProbePlanner(PathTable(public), ModeledProber(truth), full_traces=True)
        assert full.cover(pairs).packets > report.packets


def test_budget_stops_probing_and_reports_what_is_missing() -> None:
    public, truth = fabric_pair("fat-tree")
    pairs = node_pairs(public, ring_routes(public))
    report = ProbePlanner(PathTable(public), ModeledProber(truth)).cover(pairs, budget=10)
    assert report.traces == 10
    assert report.uncovered and not report.exhausted and not report.complete


def test_lost_answers_are_retried_until_the_table_is_complete() -> None:
    public, truth = fabric_pair("rail-optimized")
    pairs = node_pairs(public, ring_routes(public))
    table = PathTable(public, rule=ConfidenceRule(probes_per_port=2))
    report = ProbePlanner(table, ModeledProber(truth, loss=0.2, seed=3)).cover(pairs)
    assert report.complete
    assert report.outcomes["incomplete"] > 0 and report.outcomes["agreed"] > 0


def test_a_hash_blind_to_the_port_exhausts_every_port_and_says_so() -> None:
    blind = HashProfile(fields=(HashField.SRC_IP, HashField.DST_IP))
    fabric = MAKERS["leaf-spine"](hash_profiles=HashProfiles(leaf=blind, spine=blind))
    index = fabric.index
    src, dst = index.ports[0].node, index.ports[-1].node
    report = ProbePlanner(PathTable(fabric), ModeledProber(fabric)).cover([(src, dst)])
    key = (src, dst)
    assert report.exhausted == [key]
    # Every port once, plus the second probe that confirmed the one path they all take.
    assert report.traces == SPORT_COUNT + report.outcomes["agreed"]
    assert 1 <= report.outcomes["agreed"] <= 4
    assert len(report.uncovered[key]) == len(index.routing.equal_cost_paths(src, dst)) - 1


def test_a_wrong_topology_view_is_reported_not_probed_forever() -> None:
    public, truth = fabric_pair("leaf-spine")
    # The controller believes one spine link is down; the fabric still uses it.
    link = next(
        i for i, k in enumerate(public.links) if k.a.startswith("leaf-00:") and "spine" in k.b
    )
    stale_view = public.with_link_status({link: "down"})  # type: ignore[dict-item]
    index = public.index
    src = next(p.node for p in index.ports if index.leaf_of(p.node) == index.node("leaf-00"))
    dst = index.ports[-1].node
    report = ProbePlanner(PathTable(stale_view), ModeledProber(truth)).cover([(src, dst)])
    assert report.inconsistent == [(src, dst)] and report.outcomes["unexpected"] > 0
    assert report.traces < 200


def test_detect_scope_tells_whether_addresses_are_hashed() -> None:
    blind = tuple(f for f in HashField if f not in (HashField.SRC_IP, HashField.DST_IP))
    profiles = HashProfiles(
        leaf=SECRET.leaf.model_copy(update={"fields": blind}),
        spine=SECRET.spine.model_copy(update={"fields": blind}),
        core=SECRET.core.model_copy(update={"fields": blind}),
    )
    for kind in ("leaf-spine", "rail-optimized"):
        hashed = MAKERS[kind]()
        evidence = detect_scope(hashed, ModeledProber(hashed))
        assert evidence.scope is Scope.PAIR and evidence.disagreements > 0
        unhashed = MAKERS[kind](hash_profiles=profiles)
        evidence = detect_scope(unhashed, ModeledProber(unhashed))
        assert evidence.scope is Scope.LEAF_PAIR and evidence.leaf_pairs > 0


def test_a_leaf_pair_table_serves_every_nic_pair_of_its_leaves() -> None:
    blind = tuple(f for f in HashField if f not in (HashField.SRC_IP, HashField.DST_IP))
    profiles = HashProfiles(
        leaf=HashProfile(algorithm="crc32-lo", seed=9, fields=blind),
        spine=HashProfile(algorithm="crc16-ccitt", seed=4, fields=blind),
    )
    truth = MAKERS["leaf-spine"](hash_profiles=profiles)
    public = MAKERS["leaf-spine"]()
    table = PathTable(public, Scope.LEAF_PAIR)
    report = ProbePlanner(table, ModeledProber(truth)).cover(keys=table.leaf_pair_keys())
    assert report.complete and report.keys == 4 * 3
    index = public.index
    for src_port in index.ports[:4]:
        for dst_port in index.ports[-4:]:
            src, dst = src_port.node, dst_port.node
            for path in index.routing.equal_cost_paths(src, dst):
                sport = table.ports_for(src, dst, path)[0]
                five = _probe(truth, src, dst, sport).five_tuple
                assert middle_of(forward(truth, five).resources) == middle_of(path)


def test_learning_only_the_planned_paths_takes_fewer_probes_and_still_binds() -> None:
    public, truth = fabric_pair("fat-tree")
    routes = ring_routes(public, qps=1)
    everything = ProbePlanner(PathTable(public), ModeledProber(truth)).cover(
        node_pairs(public, routes)
    )
    table = PathTable(public)
    planned = ProbePlanner(table, ModeledProber(truth)).cover_routes(routes)
    assert planned.complete and planned.traces < everything.traces
    bindings = bindings_for_paths(public, routes, epoch=1, mode="learned", table=table)
    assert verify(truth, bindings, routes).as_planned
