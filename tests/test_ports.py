"""Source-port synthesis by prediction: the ports found really take the path, in every fabric
kind, fast path (affine hash split) and slow path (direct hashing) alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from southbound_cases import KINDS, MAKERS, ring_routes

from southbound import PredictedPorts, QpRoute, bindings_for_paths, verify
from southbound.ports import PORT_ORDER, PortRequest, port_rank
from southbound.routes import middle_of, nearest_middle
from topology.forwarding import forward_many
from topology.generators import HashProfiles
from topology.hashing import ecmp_hash_many
from topology.model import Fabric, HashAlgorithm, HashField, HashProfile
from topology.roce import SPORT_COUNT, SPORT_MAX, SPORT_MIN


def _requests(fabric: Fabric, routes: list[QpRoute], count: int = 1) -> list[PortRequest]:
    index = fabric.index
    return [
        PortRequest(index.node(r.src), index.node(r.dst), middle_of(r.path), count) for r in routes
    ]


def _realized(
    fabric: Fabric, requests: list[PortRequest], found: list[tuple[int, ...]]
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(wanted middle, realized middle) for every port found."""
    src, dst, sports, wanted = [], [], [], []
    for request, ports in zip(requests, found, strict=True):
        for port in ports:
            src.append(request.src)
            dst.append(request.dst)
            sports.append(port)
            wanted.append(request.middle)
    paths = forward_many(fabric, np.asarray(src), np.asarray(dst), np.asarray(sports))
    return [(w, middle_of(p)) for w, p in zip(wanted, paths, strict=True)]


def test_port_order_is_a_permutation_of_the_kernels_ports() -> None:
    assert sorted(PORT_ORDER) == list(range(SPORT_MIN, SPORT_MAX + 1))
    assert len(PORT_ORDER) == SPORT_COUNT
    assert all(port_rank(p) == k for k, p in enumerate(PORT_ORDER[:500]))


profiles = st.builds(
    HashProfile,
    algorithm=st.sampled_from(list(HashAlgorithm)),
    seed=st.integers(0, 0xFFFFFFFF),
    fields=st.lists(st.sampled_from(list(HashField)), min_size=1, unique=True).map(tuple),
)


@settings(max_examples=60, deadline=None)
@given(profile=profiles, src=st.integers(0, 2**32 - 1), dst=st.integers(0, 2**32 - 1))
def test_every_modelled_hash_splits_into_pair_base_xor_port_offset(
    profile: HashProfile, src: int, dst: int
) -> None:
    """The property the fast search stands on, checked against the direct numpy hash."""
    sports = np.asarray(PORT_ORDER[:257], dtype=np.int64)
    zero = ecmp_hash_many(profile, 0, 0, 0, 0, 0)
    offset = ecmp_hash_many(profile, 0, 0, 0, sports, 0) ^ zero
    base = ecmp_hash_many(profile, src, dst, 17, 0, 4791)
    direct = ecmp_hash_many(profile, src, dst, 17, sports, 4791)
    assert ((base ^ offset) == direct).all()


@pytest.mark.parametrize("kind", KINDS)
def test_found_ports_take_the_requested_path(kind: str) -> None:
    fabric = MAKERS[kind]()
    routes = ring_routes(fabric)
    requests = _requests(fabric, routes, count=3)
    source = PredictedPorts(fabric)
    assert all(source.linear)
    found = source.find(requests)
    assert all(len(ports) == 3 and len(set(ports)) == 3 for ports in found)
    assert all(wanted == got for wanted, got in _realized(fabric, requests, found))


@pytest.mark.parametrize("kind", ["rail-optimized", "fat-tree"])
def test_direct_hashing_finds_the_same_ports(kind: str) -> None:
    fabric = MAKERS[kind]()
    requests = _requests(fabric, ring_routes(fabric), count=2)
    fast = PredictedPorts(fabric).find(requests)
    slow = PredictedPorts(fabric, linear=False)
    assert not any(slow.linear)
    assert slow.find(requests) == fast


def test_ports_come_first_in_preference_order_and_skip_excluded() -> None:
    fabric = MAKERS["leaf-spine"]()
    route = next(r for r in ring_routes(fabric) if len(r.path) > 2)
    index = fabric.index
    src, dst = index.node(route.src), index.node(route.dst)
    source = PredictedPorts(fabric)
    every = source.alternatives(src, dst)[middle_of(route.path)]
    assert [port_rank(p) for p in every] == sorted(port_rank(p) for p in every)
    (first_four,) = source.find([PortRequest(src, dst, middle_of(route.path), 4)])
    assert first_four == every[:4]
    excluded = frozenset(every[:2])
    (rest,) = source.find([PortRequest(src, dst, middle_of(route.path), 2, excluded)])
    assert rest == every[2:4]


def test_alternatives_partition_every_port_among_the_equal_cost_paths() -> None:
    fabric = MAKERS["fat-tree"]()
    index = fabric.index
    src, dst = index.ports[0].node, index.ports[-1].node
    alternatives = PredictedPorts(fabric).alternatives(src, dst)
    paths = {middle_of(p) for p in index.routing.equal_cost_paths(src, dst)}
    assert set(alternatives) == paths  # the hash reaches every path
    assert sum(len(p) for p in alternatives.values()) == SPORT_COUNT


def test_a_hash_blind_to_the_source_port_falls_back_to_the_one_path_it_takes() -> None:
    blind = HashProfile(fields=(HashField.SRC_IP, HashField.DST_IP))
    fabric = MAKERS["leaf-spine"](hash_profiles=HashProfiles(leaf=blind, spine=blind))
    routes = [r for r in ring_routes(fabric) if len(r.path) > 2]
    bindings = bindings_for_paths(fabric, routes, epoch=3)
    assert len(bindings.bindings) == len(routes)  # every QP still gets a port
    fallbacks = {i.id for i in bindings.fallbacks}
    assert fallbacks  # most planned spines are unreachable by any port
    assert all("no source port takes the planned path" in i.reason for i in bindings.fallbacks)
    report = verify(fabric, bindings, routes)
    assert report.ok and not report.as_planned
    assert report.fallbacks == len(fallbacks)


def test_nearest_middle_keeps_the_longest_common_start() -> None:
    planned = (1, 2, 3, 4)
    assert nearest_middle(planned, [(9, 2, 3, 4), (1, 2, 8, 9), (1, 7, 3, 4)]) == (1, 2, 8, 9)
    assert nearest_middle(planned, [(9, 9, 9, 9), (9, 2, 3, 4)]) == (9, 2, 3, 4)
    assert nearest_middle(planned, []) is None
