"""Learned path tables: read from traces alone, trusted by the confidence rule, and invalidated
exactly where an ECMP group changed."""

from __future__ import annotations

import ipaddress

import pytest
from southbound_cases import KINDS, busiest_switch_link, fabric_pair, node_pairs, ring_routes

from southbound import (
    ConfidenceRule,
    HopReply,
    ModeledProber,
    Outcome,
    PathTable,
    Probe,
    ProbePlanner,
    Trace,
)
from southbound.routes import middle_of
from topology.errors import PathError
from topology.forwarding import forward
from topology.model import Fabric, LinkStatus
from topology.roce import FiveTuple


def _learned(kind: str, rule: ConfidenceRule | None = None) -> tuple[Fabric, Fabric, PathTable]:
    public, truth = fabric_pair(kind)
    table = PathTable(public, rule=rule)
    ProbePlanner(table, ModeledProber(truth)).cover(node_pairs(public, ring_routes(public)))
    return public, truth, table


def _truth_middle(truth: Fabric, src: int, dst: int, sport: int) -> tuple[int, ...]:
    ports = truth.index.port_by_node
    five = FiveTuple(src_ip=ports[src].port.address, dst_ip=ports[dst].port.address, src_port=sport)
    return middle_of(forward(truth, five).resources)


def _trace(fabric: Fabric, src: int, dst: int, sport: int, answers: list[str | None]) -> Trace:
    """A hand-made trace: ``answers[t-1]`` names the node that answered TTL ``t``."""
    index = fabric.index
    ports = index.port_by_node

    def address(name: str | None) -> ipaddress.IPv4Address | None:
        if name is None:
            return None
        node = index.node(name)
        if node in ports:
            return ports[node].port.address
        return fabric.switch(name).mgmt_address

    probe = Probe(ports[src].port.address, ports[dst].port.address, sport, 1, len(answers))
    return Trace(probe, tuple(HopReply(t + 1, address(a)) for t, a in enumerate(answers)))


@pytest.mark.parametrize("kind", KINDS)
def test_every_trusted_entry_is_what_the_hidden_hash_does(kind: str) -> None:
    _, truth, table = _learned(kind)
    checked = 0
    for key in table.known_keys():
        assert not table.unstable(key)  # the modelled hash is a function of the 5-tuple
        for sport, entry in table.entries(key).items():
            assert _truth_middle(truth, *key, sport) == entry.middle
            if not table.trusted(entry):
                # A fresh port that landed on a path already learned is not confirmed (a
                # second probe would buy nothing) and is never used.
                assert entry.probes == 1 and key in table.known_keys()
                assert table.middle_of_port(key, sport) is None
                assert entry.middle not in table.missing(key)
                continue
            assert entry.probes >= 2
            assert table.middle_of_port(key, sport) == entry.middle
            assert sport in table.ports_of_middle(key, entry.middle)
            checked += 1
    assert checked > 0


def test_reading_a_trace_needs_only_the_answers_after_choices() -> None:
    public, truth = fabric_pair("leaf-spine")
    index = public.index
    src = index.node("h0000:nic0p0")  # on leaf-00
    dst = index.node("h0011:nic0p0")  # on leaf-03
    table = PathTable(public, rule=ConfidenceRule(probes_per_port=1))
    # Only TTL 2 (the spine) answered: the leaves are known from the topology.
    trace = _trace(public, src, dst, 0xC123, [None, "spine-02", None, None])
    assert table.record(trace) is Outcome.NEW
    expected = index.path_resources(
        ["h0000:nic0p0", "leaf-00", "spine-02", "leaf-03", "h0011:nic0p0"]
    )
    assert table.path_of(src, dst, 0xC123) == expected
    assert table.ports_for(src, dst, expected) == (0xC123,)
    # Silent where there was a choice: nothing learned.
    assert table.record(_trace(public, src, dst, 0xC124, ["leaf-00", None])) is Outcome.INCOMPLETE
    # An answer from a switch that is not a member: the topology view is wrong.
    odd = _trace(public, src, dst, 0xC125, ["leaf-00", "leaf-01"])
    assert table.record(odd) is Outcome.UNEXPECTED
    wrong_end = _trace(public, src, dst, 0xC126, ["leaf-00", "spine-01", "leaf-03", "h0010:nic0p0"])
    assert table.record(wrong_end) is Outcome.UNEXPECTED
    # An answer from an address no node of the fabric owns (leaf-00 is node 0: not "falsy").
    foreign = _trace(public, src, dst, 0xC127, [None, "spine-01"])
    foreign = Trace(
        foreign.probe, (HopReply(1, ipaddress.IPv4Address("203.0.113.9")), foreign.hops[1])
    )
    assert index.node("leaf-00") == 0 and table.record(foreign) is Outcome.UNEXPECTED
    stranger = Trace(
        Probe(ipaddress.IPv4Address("192.0.2.1"), ipaddress.IPv4Address("192.0.2.2"), 0xC000), ()
    )
    assert table.record(stranger) is Outcome.UNKNOWN_ENDPOINT
    assert table.path_of(src, dst, 0xC124) is None


def test_a_port_is_learned_by_spaced_agreement_and_unstable_on_disagreement() -> None:
    public, _ = fabric_pair("leaf-spine")
    index = public.index
    src, dst = index.node("h0000:nic0p0"), index.node("h0011:nic0p0")
    now = [100.0]
    rule = ConfidenceRule(probes_per_port=2, ports_per_path=2, spacing_s=0.5)
    table = PathTable(public, rule=rule, clock=lambda: now[0])
    key = table.key_of(src, dst)
    via = [None, "spine-01"]
    assert table.record(_trace(public, src, dst, 0xC001, via)) is Outcome.NEW
    assert table.path_of(src, dst, 0xC001) is None  # one probe is not enough
    assert table.due_in(key, 0xC001) == 0.5
    now[0] += 0.1
    assert table.record(_trace(public, src, dst, 0xC001, via)) is Outcome.AGREED
    assert table.path_of(src, dst, 0xC001) is None  # too soon: not a second opinion
    now[0] += 0.5
    assert table.record(_trace(public, src, dst, 0xC001, via)) is Outcome.AGREED
    assert table.path_of(src, dst, 0xC001) is not None
    assert table.confirmation() == (1, 3)
    middle = table.entries(key)[0xC001].middle
    assert middle in table.missing(key)  # a path wants two trusted ports
    # A later probe of the same 5-tuple on another path: not a function of the 5-tuple.
    now[0] += 1
    other = [None, "spine-03"]
    assert table.record(_trace(public, src, dst, 0xC001, other)) is Outcome.UNSTABLE
    entry = table.entries(key)[0xC001]
    assert not table.trusted(entry) and table.path_of(src, dst, 0xC001) is None
    assert 0xC001 not in table.ports_of_middle(key, middle)
    assert dict(table.unstable(key)) == {0xC001: (middle, entry.unstable)}
    assert not table.pending(key)  # never probed again for agreement
    assert table.record(_trace(public, src, dst, 0xC001, via)) is Outcome.UNSTABLE
    assert table.confirmation() == (0, 0)
    # A disagreement on a pending entry is just as unstable.
    assert table.record(_trace(public, src, dst, 0xC002, via)) is Outcome.NEW
    now[0] += 1
    assert table.record(_trace(public, src, dst, 0xC002, other)) is Outcome.UNSTABLE
    # A topology change on its groups explains it: the entry is stale, learned anew.
    link = index.link_number("leaf-00--spine-03")
    invalidation = table.invalidate(public.with_link_status({link: LinkStatus.DOWN}))
    assert (key, 0xC001) in invalidation.stale and not table.unstable(key)
    with pytest.raises(ValueError, match="counts >= 1"):
        ConfidenceRule(probes_per_port=0)
    with pytest.raises(ValueError, match="spacing_s"):
        ConfidenceRule(spacing_s=-1)


@pytest.mark.parametrize("kind", KINDS)
def test_a_link_failure_makes_stale_exactly_the_entries_whose_groups_changed(kind: str) -> None:
    public, truth, table = _learned(kind)
    routes = ring_routes(public)
    link = busiest_switch_link(public, routes)
    before = public.index.routing
    broken = public.with_link_status({link: LinkStatus.DOWN})
    invalidation = table.invalidate(broken)
    after = broken.index.routing
    changed = set(invalidation.changed_groups)
    assert changed and all(before.next_hops(*g) != after.next_hops(*g) for g in changed)
    stale = set(invalidation.stale)
    truth_broken = truth.with_link_status({link: LinkStatus.DOWN})
    for key in table.known_keys():
        src_leaf, dst_leaf = table.leaves(key)
        for sport, entry in table.entries(key).items():
            consulted = set()
            node, descending = src_leaf, False
            for res in entry.middle:
                consulted.add((node, dst_leaf, descending))
                descending = descending or before.is_down(res)
                node = int(public.index.res_dst[res])
            assert ((key, sport) in stale) == bool(consulted & changed)
            if (key, sport) not in stale:  # an untouched entry is still the truth
                assert _truth_middle(truth_broken, *key, sport) == entry.middle
    assert table.fabric is broken
    assert all(not table.trusted(table.entries(k)[s]) for k, s in stale)


def test_reprobe_after_failure_and_recovery_brings_the_table_back_to_the_truth() -> None:
    public, truth, table = _learned("fat-tree")
    routes = ring_routes(public)
    prober = ModeledProber(truth)
    planner = ProbePlanner(table, prober)
    link = busiest_switch_link(public, routes)
    for status in (LinkStatus.DOWN, LinkStatus.UP):
        view = public.with_link_status({link: status})
        real = truth.with_link_status({link: status})
        prober.set_fabric(real)
        invalidation = table.invalidate(view)
        report = planner.reprobe(invalidation)
        assert report.reprobed + report.settled == len(invalidation.stale) > 0
        assert report.traces >= report.reprobed > 0 and report.complete
        for key in table.known_keys():
            assert not table.missing(key)
            for sport, entry in table.entries(key).items():
                if table.trusted(entry):
                    assert _truth_middle(real, *key, sport) == entry.middle


def test_invalidate_refuses_another_topology() -> None:
    public, _, table = _learned("leaf-spine")
    other, _ = fabric_pair("rail-optimized")
    with pytest.raises(PathError, match="not the same topology"):
        table.invalidate(other)
