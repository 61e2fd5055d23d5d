"""RoCEv2 transport facts: how a queue pair's UDP source port, and so its path, is chosen.

Why this module: ECMP switches hash the RoCEv2 5-tuple, and of its fields only the UDP source
port varies between the queue pairs (QPs) of one NIC pair. Linux derives that port from the GRH
flow label (``include/rdma/ib_verbs.h``), and when the flow label is 0 it first derives the flow
label from the two QP numbers. The controller steers a QP by giving it a flow label (or a source
port) whose hash lands on the planned path; the ECMP baseline predicts what the kernel would
have picked on its own. Both need exactly the kernel's arithmetic, reproduced here in scalar form
and in numpy form (``uint64`` arithmetic, like the kernel's ``u64``) for the baseline's many
flows.

Kernel facts mirrored here:

* ``rdma_flow_label_to_udp_sport(fl)`` folds the 20-bit flow label into 14 bits and sets the two
  top bits, so every port lies in ``0xC000..0xFFFF`` (16,384 values).
* ``rdma_calc_flow_label(lqpn, rqpn)`` multiplies the QP numbers in 64 bits and folds the product
  to 20 bits. It is symmetric, so both ends of a connection agree.
* Drivers (mlx5, irdma, rxe) call ``rdma_calc_flow_label`` only when the flow label is **0**: a
  flow label of 0 means "unset". That is why :func:`flow_label_for_sport` never returns 0.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import Field

from topology.base import Frozen

ROCE_UDP_DPORT = 4791
"""IANA destination port of RoCEv2."""

UDP_PROTOCOL = 17
"""IP protocol number of UDP."""

SPORT_MIN = 0xC000
"""Smallest UDP source port the kernel gives a RoCEv2 QP (``IB_ROCE_UDP_ENCAP_VALID_PORT_MIN``)."""

SPORT_MAX = 0xFFFF
"""Largest UDP source port the kernel gives a RoCEv2 QP."""

SPORT_COUNT = SPORT_MAX - SPORT_MIN + 1
"""How many source ports a QP can be steered onto (16,384)."""

FLOW_LABEL_MASK = 0xFFFFF
"""The GRH flow label is 20 bits (``IB_GRH_FLOWLABEL_MASK``)."""

QPN_MAX = 0xFFFFFFFF
"""QP numbers are 24 bits on the wire; the kernel's helpers take ``u32``, so accept that range."""

_U64 = (1 << 64) - 1
_LOW14 = 0x3FFF
_HIGH6 = 0xFC000
_ZERO_SPORT_LABEL = 0x4001
"""A non-zero flow label that maps to port ``0xC000``: low bits 1, folded high bits 1, XOR 0."""

U64Array = npt.NDArray[np.uint64]

Port = Annotated[int, Field(ge=0, le=0xFFFF)]


class FiveTuple(Frozen):
    """The header fields an ECMP switch hashes, with RoCEv2's protocol and destination port."""

    src_ip: ipaddress.IPv4Address
    dst_ip: ipaddress.IPv4Address
    protocol: int = Field(default=UDP_PROTOCOL, ge=0, le=255)
    src_port: Port
    dst_port: Port = ROCE_UDP_DPORT


def _check(name: str, value: int, high: int) -> int:
    value = int(value)
    if not 0 <= value <= high:
        raise ValueError(f"{name}: {value:#x} is outside 0..{high:#x}")
    return value


def _check_array(name: str, values: npt.ArrayLike, high: int) -> U64Array:
    raw = np.asarray(values)
    if raw.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integers, got dtype {raw.dtype}")
    if raw.size and (int(raw.min()) < 0 or int(raw.max()) > high):
        bad = raw[(raw < 0) | (raw > high)].reshape(-1)[0]
        raise ValueError(f"{name}: {int(bad):#x} is outside 0..{high:#x}")
    # Always at least 1-d during arithmetic: numpy scalars warn on (intended) u64 overflow.
    return raw.astype(np.uint64).reshape(-1)


# -- scalar, exactly as the kernel ---------------------------------------------------------------


def rdma_flow_label_to_udp_sport(fl: int) -> int:
    """The UDP source port the kernel uses for a (non-zero) 20-bit flow label."""
    fl = _check("flow_label", fl, FLOW_LABEL_MASK)
    fl_low = fl & _LOW14
    fl_high = fl & _HIGH6
    fl_low ^= fl_high >> 14
    return fl_low | SPORT_MIN


def rdma_calc_flow_label(lqpn: int, rqpn: int) -> int:
    """The flow label the kernel derives from the local and remote QP numbers."""
    v = (_check("lqpn", lqpn, QPN_MAX) * _check("rqpn", rqpn, QPN_MAX)) & _U64
    v ^= v >> 20
    v ^= v >> 40
    return v & FLOW_LABEL_MASK


def rdma_get_udp_sport(fl: int, lqpn: int, rqpn: int) -> int:
    """The port a QP actually uses: its flow label's, or the QPN-derived one when ``fl == 0``.

    With upstream NCCL (flow label 0) this is the ECMP baseline's source port.
    """
    if _check("flow_label", fl, FLOW_LABEL_MASK) == 0:
        fl = rdma_calc_flow_label(lqpn, rqpn)
    return rdma_flow_label_to_udp_sport(fl)


def flow_label_for_sport(sport: int) -> int:
    """A flow label that makes the kernel use UDP source port ``sport`` (``0xC000..0xFFFF``).

    ``sport & 0x3FFF`` (below ``0x4000``, so nothing is folded in) except for ``0xC000``, whose
    low bits are 0: flow label 0 means "derive from the QPNs", so ``0x4001`` is returned instead
    (``1 ^ (0x4000 >> 14) == 0``).
    """
    sport = _check("sport", sport, SPORT_MAX)
    if sport < SPORT_MIN:
        raise ValueError(f"sport: {sport:#x} is below {SPORT_MIN:#x}; the kernel never uses it")
    low = sport & _LOW14
    return low if low else _ZERO_SPORT_LABEL


# -- vectorized --------------------------------------------------------------------------------


def rdma_flow_label_to_udp_sport_many(fl: npt.ArrayLike) -> U64Array:
    """:func:`rdma_flow_label_to_udp_sport` over an array of flow labels (same shape)."""
    shape = np.shape(fl)
    v = _check_array("flow_label", fl, FLOW_LABEL_MASK)
    low = (v & np.uint64(_LOW14)) ^ ((v & np.uint64(_HIGH6)) >> np.uint64(14))
    return (low | np.uint64(SPORT_MIN)).reshape(shape)


def rdma_calc_flow_label_many(lqpn: npt.ArrayLike, rqpn: npt.ArrayLike) -> U64Array:
    """:func:`rdma_calc_flow_label` over arrays of QP numbers (broadcast together)."""
    shape = np.broadcast_shapes(np.shape(lqpn), np.shape(rqpn))
    a = _check_array("lqpn", np.broadcast_to(lqpn, shape), QPN_MAX)
    b = _check_array("rqpn", np.broadcast_to(rqpn, shape), QPN_MAX)
    v = a * b  # uint64 arithmetic wraps modulo 2**64, like the kernel's u64
    v ^= v >> np.uint64(20)
    v ^= v >> np.uint64(40)
    return (v & np.uint64(FLOW_LABEL_MASK)).reshape(shape)


def rdma_get_udp_sport_many(
    fl: npt.ArrayLike, lqpn: npt.ArrayLike, rqpn: npt.ArrayLike
) -> U64Array:
    """:func:`rdma_get_udp_sport` over arrays (broadcast together)."""
    shape = np.broadcast_shapes(np.shape(fl), np.shape(lqpn), np.shape(rqpn))
    labels = _check_array("flow_label", np.broadcast_to(fl, shape), FLOW_LABEL_MASK)
    derived = rdma_calc_flow_label_many(
        np.broadcast_to(lqpn, shape).reshape(-1), np.broadcast_to(rqpn, shape).reshape(-1)
    )
    chosen = np.where(labels == 0, derived, labels)
    return rdma_flow_label_to_udp_sport_many(chosen).reshape(shape)


def flow_label_for_sport_many(sport: npt.ArrayLike) -> U64Array:
    """:func:`flow_label_for_sport` over an array of source ports."""
    shape = np.shape(sport)
    v = _check_array("sport", sport, SPORT_MAX)
    if v.size and int(v.min()) < SPORT_MIN:
        raise ValueError(
            f"sport: {int(v.min()):#x} is below {SPORT_MIN:#x}; the kernel never uses it"
        )
    low = v & np.uint64(_LOW14)
    return np.where(low == 0, np.uint64(_ZERO_SPORT_LABEL), low).astype(np.uint64).reshape(shape)
