"""The plan in force as the detector needs it: each connection's path as link numbers.

Why a sparse matrix: tomography asks "how many slow and how many healthy paths cross each
link" every step; with the paths as one CSR matrix (connections x links) that is two
``bincount`` calls, a few milliseconds for a 16,384-rank job, where a loop over paths is tens.
Connections are identified by a packed integer of (source rank, destination rank, channel, QP)
per communicator, which :mod:`c4p.detector.frame` computes the same way from summaries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from c4p.detector.summary import ConnectionKey

IntArray = npt.NDArray[np.int64]

RANK_BITS = 24  # ranks below 16.7 M
CHANNEL_BITS = 8
QP_BITS = 8


def pack(src: IntArray, dst: IntArray, channel: IntArray, qp: IntArray) -> IntArray:
    """One int64 per connection (ranks < 2^24, channels and QPs < 256)."""
    out: IntArray = ((src << RANK_BITS | dst) << CHANNEL_BITS | (channel & 0xFF)) << QP_BITS | (
        qp & 0xFF
    )
    return out


def pack_key(key: ConnectionKey) -> int:
    one = np.array([0], dtype=np.int64)
    return int(pack(one + key.src_rank, one + key.dst_rank, one + key.channel, one + key.qp)[0])


@dataclass(frozen=True)
class PathIndex:
    """One communicator's connections (sorted packed ids) and their paths (CSR over links).

    ``links`` names every link number (``a--b``) and ``switches`` every switch a link touches,
    so a finding can name what it found; ``link_switches[l]`` are the two switch numbers of
    link ``l`` (-1 for a host end).
    """

    ids: IntArray
    indptr: IntArray
    indices: IntArray
    links: Sequence[str]
    link_switches: npt.NDArray[np.int64]
    switches: Sequence[str]
    signature: IntArray  # per connection, a hash of its path: a change starts its grace

    def rows(self, packed: IntArray) -> IntArray:
        """Row of each packed id, -1 where the plan does not know the connection."""
        if len(self.ids) == 0:
            return np.full(len(packed), -1, dtype=np.int64)
        at = np.searchsorted(self.ids, packed)
        at = np.minimum(at, len(self.ids) - 1)
        found: IntArray = np.where(self.ids[at] == packed, at, -1).astype(np.int64)
        return found

    def path(self, row: int) -> IntArray:
        out: IntArray = self.indices[self.indptr[row] : self.indptr[row + 1]]
        return out

    def link_counts(self, rows: IntArray) -> IntArray:
        """How many of ``rows``' paths cross each link."""
        rows = rows[rows >= 0]
        if len(rows) == 0:
            return np.zeros(len(self.links), dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        # gather the indices of every chosen row without a Python loop
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        picked = self.indices[offsets + np.arange(int(lengths.sum()))]
        out: IntArray = np.bincount(picked, minlength=len(self.links)).astype(np.int64)
        return out


def build(
    paths: Iterable[tuple[ConnectionKey, Sequence[int]]],
    links: Sequence[str],
    link_switches: npt.NDArray[np.int64],
    switches: Sequence[str],
) -> PathIndex:
    """A path index from (connection, link numbers) pairs of one communicator."""
    items = sorted(((pack_key(k), tuple(int(x) for x in p)) for k, p in paths))
    ids = np.fromiter((i for i, _ in items), dtype=np.int64, count=len(items))
    lengths = np.fromiter((len(p) for _, p in items), dtype=np.int64, count=len(items))
    indptr = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    flat = [x for _, p in items for x in p]
    indices = np.array(flat, dtype=np.int64)
    signature = np.fromiter((hash(p) for _, p in items), dtype=np.int64, count=len(items))
    return PathIndex(ids, indptr, indices, links, link_switches, switches, signature)
