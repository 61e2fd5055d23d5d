"""The ECMP hash model: published CRC check values, scalar == numpy, seeds, fields, spread."""

from __future__ import annotations

import ipaddress
import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.hashing import (
    FIELD_WIDTHS,
    SCALAR,
    VECTORIZED,
    crc16_bisync,
    crc16_bisync_many,
    crc16_ccitt,
    crc16_ccitt_many,
    crc32,
    crc32_many,
    ecmp_hash,
    ecmp_hash_many,
    hash_key,
    hash_keys,
    key_length,
    pack_key,
    pack_keys,
    select_member,
    select_members,
    xor_fold,
    xor_fold_many,
)
from topology.model import ALL_HASH_FIELDS, HashAlgorithm, HashField, HashProfile
from topology.roce import SPORT_MAX, SPORT_MIN, FiveTuple

CHECK = b"123456789"
ALGORITHMS = list(HashAlgorithm)

profiles = st.builds(
    HashProfile,
    algorithm=st.sampled_from(ALGORITHMS),
    seed=st.integers(0, 0xFFFFFFFF),
    fields=st.lists(st.sampled_from(ALL_HASH_FIELDS), min_size=1, max_size=5, unique=True).map(
        tuple
    ),
)
five_tuples = st.builds(
    FiveTuple,
    src_ip=st.ip_addresses(v=4),
    dst_ip=st.ip_addresses(v=4),
    protocol=st.integers(0, 255),
    src_port=st.integers(0, 0xFFFF),
    dst_port=st.integers(0, 0xFFFF),
)


def _row(data: bytes) -> npt.NDArray[np.uint8]:
    return np.frombuffer(data, dtype=np.uint8).reshape(1, -1)


# -- check values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scalar", "vectorized", "check"),
    [
        (crc16_bisync, crc16_bisync_many, 0xBB3D),  # CRC-16/ARC
        (crc16_ccitt, crc16_ccitt_many, 0x29B1),  # CRC-16/CCITT-FALSE
        (crc32, crc32_many, 0xCBF43926),  # CRC-32/ISO-HDLC
        (xor_fold, xor_fold_many, 0x3908),  # 0x3132^0x3334^0x3536^0x3738^0x3900
    ],
)
def test_published_check_values(scalar: object, vectorized: object, check: int) -> None:
    assert scalar(CHECK) == check  # type: ignore[operator]
    assert int(vectorized(_row(CHECK))[0]) == check  # type: ignore[operator]


def test_crc32_halves_and_dispatch() -> None:
    assert hash_key(HashAlgorithm.CRC32_LO, CHECK) == 0x3926
    assert hash_key(HashAlgorithm.CRC32_HI, CHECK) == 0xCBF4
    assert hash_key(HashAlgorithm.CRC16_BISYNC, CHECK) == 0xBB3D
    assert hash_keys(HashAlgorithm.CRC32_HI, _row(CHECK)).tolist() == [0xCBF4]
    assert set(SCALAR) == set(VECTORIZED) == set(HashAlgorithm)


def test_empty_input_is_the_initial_register_through_the_output_step() -> None:
    assert crc16_bisync(b"") == 0
    assert crc16_ccitt(b"") == 0xFFFF
    assert crc32(b"") == 0
    assert xor_fold(b"") == 0
    assert crc16_bisync(b"", seed=0x1234) == 0x1234


# -- scalar == vectorized ----------------------------------------------------------------------


@given(
    st.sampled_from(ALGORITHMS),
    st.integers(0, 0xFFFFFFFF),
    st.integers(0, 13).flatmap(lambda n: st.lists(st.binary(min_size=n, max_size=n), max_size=20)),
)
def test_vectorized_equals_scalar(algorithm: HashAlgorithm, seed: int, keys: list[bytes]) -> None:
    width = len(keys[0]) if keys else 5
    matrix = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), width)
    got = hash_keys(algorithm, matrix, seed)
    assert got.dtype == np.uint32
    assert got.tolist() == [hash_key(algorithm, k, seed) for k in keys]


@given(profiles, st.lists(five_tuples, min_size=1, max_size=20))
def test_ecmp_hash_many_equals_ecmp_hash(profile: HashProfile, tuples: list[FiveTuple]) -> None:
    got = ecmp_hash_many(
        profile,
        np.array([int(t.src_ip) for t in tuples], dtype=np.uint32),
        np.array([int(t.dst_ip) for t in tuples], dtype=np.uint32),
        np.array([t.protocol for t in tuples]),
        np.array([t.src_port for t in tuples]),
        np.array([t.dst_port for t in tuples]),
    )
    assert got.tolist() == [ecmp_hash(profile, t) for t in tuples]


@given(profiles, five_tuples)
def test_pack_keys_equals_pack_key(profile: HashProfile, t: FiveTuple) -> None:
    key = pack_key(profile, t.src_ip, t.dst_ip, t.protocol, t.src_port, t.dst_port)
    assert len(key) == key_length(profile)
    keys = pack_keys(profile, [int(t.src_ip)], int(t.dst_ip), t.protocol, t.src_port, t.dst_port)
    assert keys.shape == (1, len(key))
    assert keys.tobytes() == key


@given(profiles, five_tuples)
def test_hash_is_deterministic_and_16_bits(profile: HashProfile, t: FiveTuple) -> None:
    value = ecmp_hash(profile, t)
    assert value == ecmp_hash(profile, t.model_copy())
    assert 0 <= value <= 0xFFFF


# -- key layout and field selection ------------------------------------------------------------


def test_key_layout_is_big_endian_in_field_order() -> None:
    every = HashProfile()
    key = pack_key(every, "10.1.2.3", "192.168.0.9", 17, 0xC0DE, 4791)
    assert key == bytes([10, 1, 2, 3, 192, 168, 0, 9, 17, 0xC0, 0xDE, 0x12, 0xB7])
    assert key_length(every) == sum(FIELD_WIDTHS.values()) == 13
    listed_backwards = HashProfile(fields=(HashField.SRC_PORT, HashField.SRC_IP))
    assert listed_backwards.fields == (HashField.SRC_IP, HashField.SRC_PORT)
    assert pack_key(listed_backwards, "10.1.2.3", 0, 0, 0xC0DE, 0) == bytes(
        [10, 1, 2, 3, 0xC0, 0xDE]
    )


@given(profiles, five_tuples, five_tuples)
def test_fields_not_selected_do_not_change_the_hash(
    profile: HashProfile, a: FiveTuple, b: FiveTuple
) -> None:
    # b keeps a's values in every selected field; the rest come from an unrelated tuple.
    names = {
        HashField.SRC_IP: "src_ip",
        HashField.DST_IP: "dst_ip",
        HashField.PROTOCOL: "protocol",
        HashField.SRC_PORT: "src_port",
        HashField.DST_PORT: "dst_port",
    }
    mixed = b.model_copy(update={names[f]: getattr(a, names[f]) for f in profile.fields})
    assert ecmp_hash(profile, mixed) == ecmp_hash(profile, a)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_selected_field_changes_the_hash(algorithm: HashAlgorithm) -> None:
    profile = HashProfile(algorithm=algorithm)
    base = FiveTuple.model_validate({"src_ip": "10.0.0.1", "dst_ip": "10.0.1.1", "src_port": 50000})
    changed = [
        base.model_copy(update={"src_ip": ipaddress.IPv4Address("10.0.0.2")}),
        base.model_copy(update={"dst_ip": ipaddress.IPv4Address("10.0.1.2")}),
        base.model_copy(update={"protocol": 6}),
        base.model_copy(update={"src_port": 50001}),
        base.model_copy(update={"dst_port": 4792}),
    ]
    for other in changed:
        assert ecmp_hash(profile, other) != ecmp_hash(profile, base)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("10.0.0.1", "10.0.0.2", 256, 1, 1), "protocol"),
        (("10.0.0.1", "10.0.0.2", 17, 65536, 1), "src_port"),
        (("10.0.0.1", "10.0.0.2", 17, 1, -1), "dst_port"),
    ],
)
def test_pack_key_refuses_out_of_range_fields(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pack_key(HashProfile(), *args)  # type: ignore[arg-type]


def test_pack_keys_refuses_out_of_range_and_non_integers() -> None:
    with pytest.raises(ValueError, match="src_ports"):
        pack_keys(HashProfile(), [1], [2], 17, [0x10000], 4791)
    with pytest.raises(TypeError, match="dst_ips"):
        pack_keys(HashProfile(), [1], [2.0], 17, [1], 4791)
    with pytest.raises(ValueError, match="keys"):
        crc32_many(np.zeros(5, dtype=np.uint8))


# -- seed --------------------------------------------------------------------------------------


@given(
    st.sampled_from(
        [HashAlgorithm.CRC16_BISYNC, HashAlgorithm.CRC16_CCITT, HashAlgorithm.XOR_FOLD]
    ),
    st.binary(max_size=13),
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
)
def test_a_different_16_bit_seed_always_changes_a_16_bit_hash(
    algorithm: HashAlgorithm, key: bytes, s1: int, s2: int
) -> None:
    # The register update is an invertible linear map, so distinct initial registers never meet.
    assert (hash_key(algorithm, key, s1) == hash_key(algorithm, key, s2)) == (s1 == s2)


@given(st.binary(max_size=13), st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF))
def test_a_different_seed_always_changes_crc32(key: bytes, s1: int, s2: int) -> None:
    assert (crc32(key, s1) == crc32(key, s2)) == (s1 == s2)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_seed_changes_the_ecmp_hash(algorithm: HashAlgorithm) -> None:
    t = FiveTuple.model_validate({"src_ip": "10.0.0.1", "dst_ip": "10.0.1.1", "src_port": 50000})
    values = {ecmp_hash(HashProfile(algorithm=algorithm, seed=s), t) for s in (0, 1, 0x5A5A)}
    assert len(values) == 3


def test_seed_is_masked_to_the_register_width() -> None:
    assert crc16_bisync(CHECK, seed=0x10000) == crc16_bisync(CHECK)
    assert xor_fold(CHECK, seed=0xABCD0000) == xor_fold(CHECK)
    assert crc32(CHECK, seed=0x10000) != crc32(CHECK)
    with pytest.raises(ValueError, match="seed"):
        crc32(CHECK, seed=-1)


# -- next-hop choice and spread ----------------------------------------------------------------


def test_select_member_is_hash_mod_group_size() -> None:
    assert select_member(0xBB3D, 4) == 0xBB3D % 4 == 1
    assert select_members(np.array([0, 5, 9], dtype=np.uint32), 4).tolist() == [0, 1, 1]
    with pytest.raises(ValueError, match="group_size"):
        select_member(7, 0)
    with pytest.raises(ValueError, match="group_size"):
        select_members([7], 0)


def _chi_square(members: npt.NDArray[np.int64], size: int) -> float:
    counts = np.bincount(members, minlength=size)
    expected = members.size / size
    return float(((counts - expected) ** 2 / expected).sum())


def _bound(size: int) -> float:
    # For a uniform choice the statistic has mean df = size - 1 and deviation sqrt(2 df); eight
    # deviations above the mean is far outside anything a fair hash produces.
    df = size - 1
    return df + 8 * math.sqrt(2 * df)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_random_flows_spread_evenly_over_group_sizes_2_to_64(algorithm: HashAlgorithm) -> None:
    rng = np.random.default_rng(4791)  # fixed: the test is deterministic and cannot flake
    n = 20_000
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    hashes = ecmp_hash_many(
        HashProfile(algorithm=algorithm, seed=0x1F2E),
        base + rng.integers(0, 1 << 16, n),
        base + rng.integers(0, 1 << 16, n),
        17,
        rng.integers(SPORT_MIN, SPORT_MAX + 1, n),
        4791,
    )
    for size in range(2, 65):
        assert _chi_square(select_members(hashes, size), size) < _bound(size), size


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_source_ports_alone_reach_every_member_of_groups_2_to_64(algorithm: HashAlgorithm) -> None:
    # The controller's lever: one NIC pair, only the source port varies, over all 16,384 ports.
    # A CRC or fold is linear, so the hashes form an affine subspace: injective (every port its
    # own hash), exactly uniform modulo a power of two, but *not* uniform modulo other sizes
    # (CRC-16/ARC leaves some members of a 40-way group only ~53% of the fair share). So: exact
    # for powers of two, and at least half and at most twice the fair share otherwise.
    sports = np.arange(SPORT_MIN, SPORT_MAX + 1)
    src = int(ipaddress.IPv4Address("10.0.3.7"))
    dst = int(ipaddress.IPv4Address("10.0.9.12"))
    hashes = ecmp_hash_many(HashProfile(algorithm=algorithm), src, dst, 17, sports, 4791)
    assert np.unique(hashes).size == sports.size
    for size in range(2, 65):
        counts = np.bincount(select_members(hashes, size), minlength=size)
        fair = sports.size / size
        if size & (size - 1) == 0:
            assert (counts == fair).all(), size
        assert fair / 2 <= counts.min() <= counts.max() <= 2 * fair, size
