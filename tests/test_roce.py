"""The kernel's RoCEv2 source-port arithmetic, as reproduced in ``topology.roce``."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from topology.roce import (
    FLOW_LABEL_MASK,
    QPN_MAX,
    ROCE_UDP_DPORT,
    SPORT_COUNT,
    SPORT_MAX,
    SPORT_MIN,
    UDP_PROTOCOL,
    FiveTuple,
    flow_label_for_sport,
    flow_label_for_sport_many,
    rdma_calc_flow_label,
    rdma_calc_flow_label_many,
    rdma_flow_label_to_udp_sport,
    rdma_flow_label_to_udp_sport_many,
    rdma_get_udp_sport,
    rdma_get_udp_sport_many,
)

flow_labels = st.integers(0, FLOW_LABEL_MASK)
qpns = st.integers(0, QPN_MAX)


def test_constants() -> None:
    assert (ROCE_UDP_DPORT, UDP_PROTOCOL) == (4791, 17)
    assert (SPORT_MIN, SPORT_MAX, SPORT_COUNT) == (0xC000, 0xFFFF, 16384)


def test_every_flow_label_maps_into_the_roce_port_range() -> None:
    sports = rdma_flow_label_to_udp_sport_many(np.arange(FLOW_LABEL_MASK + 1))
    assert int(sports.min()) == SPORT_MIN
    assert int(sports.max()) == SPORT_MAX
    # 2**20 labels fold onto 2**14 ports, 64 labels each.
    assert (np.bincount(sports.astype(np.int64) - SPORT_MIN) == 64).all()


@pytest.mark.parametrize(
    ("flow_label", "sport"),
    [
        (0x00001, 0xC001),  # below 0x4000: nothing folds in, the top bits are set
        (0x03FFF, 0xFFFF),
        (0x12345, 0xE341),  # low 0x2345, high 0x10000 >> 14 = 0x4, 0x2345 ^ 0x4 = 0x2341
        (0xFFFFF, 0xFFC0),  # low 0x3FFF, high 0xFC000 >> 14 = 0x3F, XOR = 0x3FC0
        (0x04001, 0xC000),  # low 1, high 0x4000 >> 14 = 1: the XOR cancels
    ],
)
def test_flow_label_to_sport_hand_worked(flow_label: int, sport: int) -> None:
    assert rdma_flow_label_to_udp_sport(flow_label) == sport


def test_calc_flow_label_hand_worked() -> None:
    # 3 * 5 = 15 has no bits above 20: nothing folds.
    assert rdma_calc_flow_label(3, 5) == 15
    # 0x123456 * 0x654321 = 0x7336bf94116; ^ (>> 20 = 0x7336bf) = 0x7336b8a77a9;
    # ^ (>> 40 = 0x7) = 0x7336b8a77ae; & 0xFFFFF = 0xa77ae; that label's port is 0xF787.
    assert rdma_calc_flow_label(0x123456, 0x654321) == 0xA77AE
    assert rdma_get_udp_sport(0, 0x123456, 0x654321) == 0xF787
    # The largest u32 operands: the product uses all 64 bits.
    assert rdma_calc_flow_label(QPN_MAX, QPN_MAX) == 0x1FF1


@given(qpns, qpns)
def test_calc_flow_label_matches_u64_arithmetic_and_is_symmetric(a: int, b: int) -> None:
    v = (a * b) % 2**64
    v ^= v >> 20
    v ^= v >> 40
    assert rdma_calc_flow_label(a, b) == v % 2**20 == rdma_calc_flow_label(b, a)


def test_flow_label_zero_means_derive_from_qpns() -> None:
    assert rdma_get_udp_sport(0, 7, 9) == rdma_flow_label_to_udp_sport(rdma_calc_flow_label(7, 9))
    assert rdma_get_udp_sport(0x155, 7, 9) == 0xC155  # a set label ignores the QPNs


def test_flow_label_for_sport_round_trips_every_port() -> None:
    for sport in range(SPORT_MIN, SPORT_MAX + 1):
        label = flow_label_for_sport(sport)
        assert label != 0, "flow label 0 would make the kernel derive the port from the QPNs"
        assert rdma_get_udp_sport(label, 1234, 5678) == sport
        if sport != SPORT_MIN:
            assert label == sport & 0x3FFF < 0x4000
    assert flow_label_for_sport(SPORT_MIN) == 0x4001


def test_flow_label_for_sport_many_round_trips_every_port() -> None:
    sports = np.arange(SPORT_MIN, SPORT_MAX + 1)
    labels = flow_label_for_sport_many(sports)
    assert (labels != 0).all()
    assert (rdma_flow_label_to_udp_sport_many(labels) == sports).all()
    assert labels.tolist() == [flow_label_for_sport(int(s)) for s in sports]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rdma_flow_label_to_udp_sport(FLOW_LABEL_MASK + 1), "flow_label"),
        (lambda: rdma_flow_label_to_udp_sport(-1), "flow_label"),
        (lambda: rdma_calc_flow_label(QPN_MAX + 1, 1), "lqpn"),
        (lambda: rdma_calc_flow_label(1, -5), "rqpn"),
        (lambda: flow_label_for_sport(SPORT_MIN - 1), "sport"),
        (lambda: flow_label_for_sport(0x10000), "sport"),
        (lambda: flow_label_for_sport_many([0xC000, 0x1234]), "sport"),
        (lambda: rdma_flow_label_to_udp_sport_many([1, 2**20]), "flow_label"),
        (lambda: rdma_calc_flow_label_many([1], [-1]), "rqpn"),
    ],
)
def test_out_of_range_input_names_the_argument(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_vectorized_refuses_non_integers() -> None:
    with pytest.raises(TypeError, match="flow_label"):
        rdma_flow_label_to_udp_sport_many(np.array([1.5]))


@given(st.lists(flow_labels, max_size=50))
def test_flow_label_to_sport_vectorized_equals_scalar(labels: list[int]) -> None:
    got = rdma_flow_label_to_udp_sport_many(np.array(labels, dtype=np.int64))
    assert got.tolist() == [rdma_flow_label_to_udp_sport(fl) for fl in labels]


@given(st.lists(st.tuples(flow_labels, qpns, qpns), max_size=50))
def test_calc_and_get_vectorized_equal_scalar(rows: list[tuple[int, int, int]]) -> None:
    fl = np.array([r[0] for r in rows], dtype=np.uint64)
    lq = np.array([r[1] for r in rows], dtype=np.uint64)
    rq = np.array([r[2] for r in rows], dtype=np.uint64)
    assert rdma_calc_flow_label_many(lq, rq).tolist() == [
        rdma_calc_flow_label(a, b) for _, a, b in rows
    ]
    assert rdma_get_udp_sport_many(fl, lq, rq).tolist() == [
        rdma_get_udp_sport(f, a, b) for f, a, b in rows
    ]


def test_vectorized_keeps_shape_and_broadcasts() -> None:
    assert rdma_calc_flow_label_many(3, 5).shape == ()
    assert int(rdma_calc_flow_label_many(3, 5)) == 15
    grid = rdma_calc_flow_label_many(np.arange(4).reshape(4, 1), np.arange(3))
    assert grid.shape == (4, 3)
    assert grid[3, 2] == rdma_calc_flow_label(3, 2)
    sports = rdma_get_udp_sport_many(0, np.arange(10), 77)
    assert sports.tolist() == [rdma_get_udp_sport(0, q, 77) for q in range(10)]


def test_five_tuple_defaults_to_roce() -> None:
    ft = FiveTuple.model_validate({"src_ip": "10.0.0.1", "dst_ip": "10.0.0.2", "src_port": 0xC123})
    assert ft.protocol == UDP_PROTOCOL
    assert ft.dst_port == ROCE_UDP_DPORT
    assert ft.src_ip == ipaddress.IPv4Address("10.0.0.1")
    assert hash(ft) == hash(ft.model_copy())


@pytest.mark.parametrize(
    "bad",
    [
        {"src_port": 70000},
        {"src_port": -1},
        {"protocol": 256},
        {"dst_ip": "2001:db8::1"},
        {"vlan": 3},
    ],
)
def test_five_tuple_refuses_bad_fields(bad: dict[str, object]) -> None:
    fields: dict[str, object] = {"src_ip": "10.0.0.1", "dst_ip": "10.0.0.2", "src_port": 50000}
    fields.update(bad)
    with pytest.raises(ValidationError, match=next(iter(bad))):
        FiveTuple.model_validate(fields)


def test_five_tuple_is_frozen() -> None:
    ft = FiveTuple.model_validate({"src_ip": "10.0.0.1", "dst_ip": "10.0.0.2", "src_port": 1})
    with pytest.raises(ValidationError):
        ft.src_port = 2  # type: ignore[misc]
