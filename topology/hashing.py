"""ECMP hash functions: how a switch turns a packet's header fields into a next-hop choice.

Why a model of the hash: a controller that wants a queue pair on a planned path must pick a UDP
source port that every switch on the way hashes onto the planned member of its ECMP group. Where a
switch's hash is known this module *predicts* the choice; where it is not, probing is the truth
(``southbound``) and this model is still what the ECMP baseline and the tests use. Each function
comes twice: a scalar one for one packet and a numpy one that hashes a whole ``(N, L)`` matrix of
keys at once, looping over the ``L <= 13`` key bytes and never over the ``N`` flows.

The algorithms (:class:`~topology.model.HashAlgorithm`), with their published check values for
``b"123456789"`` at seed 0:

* ``crc16-bisync``: CRC-16/ARC (a.k.a. CRC-16/BISYNC or CRC-16/IBM): polynomial ``0x8005``
  processed reflected (``0xA001``), initial register 0, no final XOR. Check ``0xBB3D``.
* ``crc16-ccitt``: CRC-16/CCITT-FALSE: polynomial ``0x1021`` MSB first, initial register
  ``0xFFFF``, no final XOR. Check ``0x29B1``.
* ``crc32-lo`` / ``crc32-hi``: the low / high 16 bits of CRC-32 (IEEE 802.3: ``0xEDB88320``
  reflected, initial and final XOR ``0xFFFFFFFF``). Check of the full CRC ``0xCBF43926``.
* ``xor-fold``: XOR of the key's big-endian 16-bit words (an odd last byte is padded with a zero
  byte on its right), i.e. the key folded to 16 bits.

**Seed.** Vendors let an operator seed the hash so that two tiers do not make correlated choices
(hash polarisation). Here the seed is XORed into the CRC's *initial register*, masked to the
register's width (16 bits for the CRC16s and the fold, 32 for CRC-32), or into the fold's
accumulator. Seed 0 therefore gives the textbook CRC and the check values above hold; a CRC32
seed ``s`` starts the register at ``0xFFFFFFFF ^ s``.

**Key.** The key is the selected :class:`~topology.model.HashField` values, always in
``HashField`` order whatever order the profile lists them in, packed big-endian: addresses 4
bytes, protocol 1 byte, ports 2 bytes. **Next hop** is member ``hash % group_size`` of the group,
members in the switch's interface order (see ``topology.routing``).

Hash values are Python ``int`` (scalar) or ``numpy.uint32`` arrays (vectorized), all below
``2**16`` for the algorithms above.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from topology.model import HashAlgorithm, HashField, HashProfile

if TYPE_CHECKING:
    from topology.roce import FiveTuple

KeyMatrix = npt.NDArray[np.uint8]
HashArray = npt.NDArray[np.uint32]
IPv4Like = ipaddress.IPv4Address | int | str

FIELD_WIDTHS: Mapping[HashField, int] = {
    HashField.SRC_IP: 4,
    HashField.DST_IP: 4,
    HashField.PROTOCOL: 1,
    HashField.SRC_PORT: 2,
    HashField.DST_PORT: 2,
}
"""Bytes each field takes in the key."""

_MASK16 = 0xFFFF
_MASK32 = 0xFFFFFFFF


# -- tables (built once, at import) --------------------------------------------------------------


def _reflected_table(poly: int) -> tuple[int, ...]:
    """Table for a CRC processed LSB first: entry ``b`` is ``b`` shifted out through ``poly``."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


def _msb_first_table16(poly: int) -> tuple[int, ...]:
    """Table for a 16-bit CRC processed MSB first."""
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ poly) if crc & 0x8000 else crc << 1
            crc &= _MASK16
        table.append(crc)
    return tuple(table)


_ARC = _reflected_table(0xA001)
_CCITT = _msb_first_table16(0x1021)
_CRC32 = _reflected_table(0xEDB88320)
_ARC_NP = np.array(_ARC, dtype=np.uint32)
_CCITT_NP = np.array(_CCITT, dtype=np.uint32)
_CRC32_NP = np.array(_CRC32, dtype=np.uint32)


def _seed(seed: int) -> int:
    if not 0 <= seed <= _MASK32:
        raise ValueError(f"seed: {seed} is outside 0..{_MASK32:#x}")
    return seed


def _matrix(keys: npt.ArrayLike) -> KeyMatrix:
    array = np.asarray(keys)
    if array.ndim != 2 or array.dtype != np.uint8:
        raise ValueError(f"keys: expected a uint8 matrix (N, L), got {array.dtype} {array.shape}")
    return array


# -- scalar ------------------------------------------------------------------------------------


def crc16_bisync(data: bytes, seed: int = 0) -> int:
    """CRC-16/ARC (BISYNC) of ``data``, register seeded with ``seed & 0xFFFF``."""
    crc = _seed(seed) & _MASK16
    for byte in data:
        crc = (crc >> 8) ^ _ARC[(crc ^ byte) & 0xFF]
    return crc


def crc16_ccitt(data: bytes, seed: int = 0) -> int:
    """CRC-16/CCITT-FALSE of ``data``, register ``0xFFFF ^ (seed & 0xFFFF)``."""
    crc = _MASK16 ^ (_seed(seed) & _MASK16)
    for byte in data:
        crc = ((crc << 8) & _MASK16) ^ _CCITT[((crc >> 8) ^ byte) & 0xFF]
    return crc


def crc32(data: bytes, seed: int = 0) -> int:
    """CRC-32 (IEEE 802.3) of ``data``, register ``0xFFFFFFFF ^ seed``; all 32 bits."""
    crc = _MASK32 ^ _seed(seed)
    for byte in data:
        crc = (crc >> 8) ^ _CRC32[(crc ^ byte) & 0xFF]
    return crc ^ _MASK32


def xor_fold(data: bytes, seed: int = 0) -> int:
    """XOR of the big-endian 16-bit words of ``data`` (zero-padded), into ``seed & 0xFFFF``."""
    acc = _seed(seed) & _MASK16
    padded = data + b"\x00" if len(data) % 2 else data
    for i in range(0, len(padded), 2):
        acc ^= (padded[i] << 8) | padded[i + 1]
    return acc


def _crc32_lo(data: bytes, seed: int = 0) -> int:
    return crc32(data, seed) & _MASK16


def _crc32_hi(data: bytes, seed: int = 0) -> int:
    return crc32(data, seed) >> 16


# -- vectorized --------------------------------------------------------------------------------


def crc16_bisync_many(keys: npt.ArrayLike, seed: int = 0) -> HashArray:
    """:func:`crc16_bisync` of every row of a ``uint8`` ``(N, L)`` key matrix."""
    rows = _matrix(keys)
    crc = np.full(rows.shape[0], _seed(seed) & _MASK16, dtype=np.uint32)
    for column in rows.T:
        crc = (crc >> 8) ^ _ARC_NP[(crc ^ column) & 0xFF]
    return crc


def crc16_ccitt_many(keys: npt.ArrayLike, seed: int = 0) -> HashArray:
    """:func:`crc16_ccitt` of every row of a key matrix."""
    rows = _matrix(keys)
    crc = np.full(rows.shape[0], _MASK16 ^ (_seed(seed) & _MASK16), dtype=np.uint32)
    for column in rows.T:
        crc = ((crc << 8) & _MASK16) ^ _CCITT_NP[((crc >> 8) ^ column) & 0xFF]
    return crc


def crc32_many(keys: npt.ArrayLike, seed: int = 0) -> HashArray:
    """:func:`crc32` of every row of a key matrix; all 32 bits."""
    rows = _matrix(keys)
    crc = np.full(rows.shape[0], _MASK32 ^ _seed(seed), dtype=np.uint32)
    for column in rows.T:
        crc = (crc >> 8) ^ _CRC32_NP[(crc ^ column) & 0xFF]
    return crc ^ np.uint32(_MASK32)


def xor_fold_many(keys: npt.ArrayLike, seed: int = 0) -> HashArray:
    """:func:`xor_fold` of every row of a key matrix."""
    rows = _matrix(keys)
    acc = np.full(rows.shape[0], _seed(seed) & _MASK16, dtype=np.uint32)
    for j, column in enumerate(rows.T):
        acc ^= column.astype(np.uint32) << (0 if j % 2 else 8)
    return acc


def _crc32_lo_many(keys: npt.ArrayLike, seed: int = 0) -> HashArray:
    return crc32_many(keys, seed) & np.uint32(_MASK16)


def _crc32_hi_many(keys: npt.ArrayLike, seed: int = 0) -> HashArray:
    return crc32_many(keys, seed) >> np.uint32(16)


SCALAR: Mapping[HashAlgorithm, Callable[[bytes, int], int]] = {
    HashAlgorithm.CRC16_BISYNC: crc16_bisync,
    HashAlgorithm.CRC16_CCITT: crc16_ccitt,
    HashAlgorithm.CRC32_LO: _crc32_lo,
    HashAlgorithm.CRC32_HI: _crc32_hi,
    HashAlgorithm.XOR_FOLD: xor_fold,
}
"""The scalar function of each algorithm: ``f(key, seed) -> hash``."""

VECTORIZED: Mapping[HashAlgorithm, Callable[[npt.ArrayLike, int], HashArray]] = {
    HashAlgorithm.CRC16_BISYNC: crc16_bisync_many,
    HashAlgorithm.CRC16_CCITT: crc16_ccitt_many,
    HashAlgorithm.CRC32_LO: _crc32_lo_many,
    HashAlgorithm.CRC32_HI: _crc32_hi_many,
    HashAlgorithm.XOR_FOLD: xor_fold_many,
}
"""The vectorized function of each algorithm: ``f(keys (N, L), seed) -> hashes (N,)``."""


def hash_key(algorithm: HashAlgorithm, key: bytes, seed: int = 0) -> int:
    """Hash one packed key."""
    return SCALAR[algorithm](key, seed)


def hash_keys(algorithm: HashAlgorithm, keys: npt.ArrayLike, seed: int = 0) -> HashArray:
    """Hash every row of a packed key matrix."""
    return VECTORIZED[algorithm](keys, seed)


# -- keys --------------------------------------------------------------------------------------


def key_length(profile: HashProfile) -> int:
    """Bytes in the key of a profile (13 with every field selected)."""
    return sum(FIELD_WIDTHS[f] for f in profile.fields)


def _field_value(name: str, value: int, width: int) -> int:
    value = int(value)
    if not 0 <= value < 1 << (8 * width):
        raise ValueError(f"{name}: {value} does not fit in {width} byte(s)")
    return value


def pack_key(
    profile: HashProfile,
    src_ip: IPv4Like,
    dst_ip: IPv4Like,
    protocol: int,
    src_port: int,
    dst_port: int,
) -> bytes:
    """The hash key of one packet: the profile's fields in ``HashField`` order, big-endian."""
    values = {
        HashField.SRC_IP: int(ipaddress.IPv4Address(src_ip)),
        HashField.DST_IP: int(ipaddress.IPv4Address(dst_ip)),
        HashField.PROTOCOL: _field_value("protocol", protocol, 1),
        HashField.SRC_PORT: _field_value("src_port", src_port, 2),
        HashField.DST_PORT: _field_value("dst_port", dst_port, 2),
    }
    return b"".join(values[f].to_bytes(FIELD_WIDTHS[f], "big") for f in profile.fields)


def pack_keys(
    profile: HashProfile,
    src_ips: npt.ArrayLike,
    dst_ips: npt.ArrayLike,
    protocols: npt.ArrayLike,
    src_ports: npt.ArrayLike,
    dst_ports: npt.ArrayLike,
) -> KeyMatrix:
    """The keys of many packets as a ``uint8`` ``(N, L)`` matrix.

    Addresses are integers (``int(IPv4Address)``); all five arguments broadcast together, so a
    scalar protocol or destination port may stand for every packet.
    """
    arrays = np.broadcast_arrays(
        *(np.asarray(a) for a in (src_ips, dst_ips, protocols, src_ports, dst_ports))
    )
    values: dict[HashField, npt.NDArray[np.uint64]] = {}
    names = ("src_ips", "dst_ips", "protocols", "src_ports", "dst_ports")
    for field, name, array in zip(HashField, names, arrays, strict=True):
        flat = array.reshape(-1)
        if flat.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected integers, got dtype {flat.dtype}")
        high = (1 << (8 * FIELD_WIDTHS[field])) - 1
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) > high):
            raise ValueError(f"{name}: values must lie in 0..{high:#x}")
        values[field] = flat.astype(np.uint64)
    count = arrays[0].size
    keys = np.empty((count, key_length(profile)), dtype=np.uint8)
    column = 0
    for field in profile.fields:
        width = FIELD_WIDTHS[field]
        for byte in range(width):
            shift = np.uint64(8 * (width - 1 - byte))
            keys[:, column] = (values[field] >> shift) & np.uint64(0xFF)
            column += 1
    return keys


# -- ECMP --------------------------------------------------------------------------------------


def ecmp_hash(profile: HashProfile, five_tuple: FiveTuple) -> int:
    """The hash a switch with ``profile`` computes for a packet of ``five_tuple``."""
    key = pack_key(
        profile,
        five_tuple.src_ip,
        five_tuple.dst_ip,
        five_tuple.protocol,
        five_tuple.src_port,
        five_tuple.dst_port,
    )
    return hash_key(profile.algorithm, key, profile.seed)


def ecmp_hash_many(
    profile: HashProfile,
    src_ips: npt.ArrayLike,
    dst_ips: npt.ArrayLike,
    protocols: npt.ArrayLike,
    src_ports: npt.ArrayLike,
    dst_ports: npt.ArrayLike,
) -> HashArray:
    """:func:`ecmp_hash` of many packets (arguments as :func:`pack_keys`)."""
    keys = pack_keys(profile, src_ips, dst_ips, protocols, src_ports, dst_ports)
    return hash_keys(profile.algorithm, keys, profile.seed)


def select_member(hash_value: int, group_size: int) -> int:
    """Index of the ECMP group member a hash selects: ``hash % group_size``."""
    if group_size < 1:
        raise ValueError(f"group_size: {group_size}; an empty group selects nothing")
    return hash_value % group_size


def select_members(hashes: npt.ArrayLike, group_size: int) -> npt.NDArray[np.int64]:
    """:func:`select_member` of many hashes."""
    if group_size < 1:
        raise ValueError(f"group_size: {group_size}; an empty group selects nothing")
    return (np.asarray(hashes, dtype=np.int64) % group_size).astype(np.int64)
