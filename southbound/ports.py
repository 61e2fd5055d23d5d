"""Source-port synthesis by prediction: which UDP source ports the switches' hashes send along a
planned path, for tens of thousands of paths at once.

Why prediction is cheap enough: between two NIC ports the RoCEv2 5-tuple differs only in the
UDP source port, so a path is taken by exactly the ports whose hash, at every switch that has a
choice, selects the planned member (``hash % group_size == member``). Searching 16,384 ports
per path with a generic hash would be ~10^9 CRC steps for 32k flows. Instead this module uses a
property every modelled algorithm has: CRC16, CRC32 (either half) and XOR folds are *affine*
over GF(2) in the key bits, whatever the seed. With the source port's bytes split off,

    hash(src, dst, sport) = hash(src, dst, 0) XOR offset(sport),
    offset(sport)         = hash(0, 0, sport) XOR hash(0, 0, 0)   (other fields zero)

so a switch profile needs one 16,384-entry ``offset`` table, built once with the numpy hash, and
a NIC pair needs one scalar ``hash(src, dst, 0)`` per profile. Each profile is checked against
the direct hash at start-up; one that is not affine (a future algorithm) is hashed directly,
block by block, which is slower but exact. Ports are searched in :data:`PORT_ORDER` (a stride
permutation, not ascending: see there), in blocks that start near the expected need (the product
of the group sizes) and double, and a request stops as soon as it has its ports: a path that one
port in 32 takes costs ~50 comparisons, not 16,384. The first matching port in that order is
the one bound, so the choice is deterministic.

The :class:`PortSource` protocol is what binding code asks, so the learned tables of
``southbound.pathtable`` answer the same questions: ports for a middle, the middles known
between two NIC ports (for the fallback), and the middle a given port takes. Every answer here is
checked end to end by ``southbound.verify`` with ``topology.forwarding.forward_many``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from southbound.routes import Middle, middle_of
from topology.forwarding import forward_many
from topology.hashing import HashArray, ecmp_hash_many
from topology.model import Fabric, HashProfile
from topology.roce import ROCE_UDP_DPORT, SPORT_COUNT, SPORT_MIN, UDP_PROTOCOL

PORT_STRIDE = 10007
"""Ports are tried in the order ``SPORT_MIN + (k * PORT_STRIDE) % 16384``, k = 0, 1, ...

Why not ascending: CRC-16/ARC and XOR folds hardly mix the *low* bits of the source port into
the *low* bits of the hash (which ``hash mod n`` keeps): over the lowest 1,024 ports CRC-16/ARC
reaches only 4 of 32 members, so some paths' lowest port is ~12,000 ports up, and a probe walk
in ascending order needs thousands of probes. An odd multiplicative stride visits high and low
bits alike; 10,007 was the best of the strides tried against every modelled algorithm and group
sizes 4..64 (covering all members in 0.6-0.9 x the coupon-collector expectation on average).
Only efficiency depends on it: every port found is checked, whatever the order."""

PORT_ORDER: tuple[int, ...] = tuple(
    SPORT_MIN + (k * PORT_STRIDE) % SPORT_COUNT for k in range(SPORT_COUNT)
)
"""Every usable source port, in preference order (see :data:`PORT_STRIDE`)."""

_ORDER = np.asarray(PORT_ORDER, dtype=np.int64)
_RANK = np.empty(SPORT_COUNT, dtype=np.int64)
_RANK[_ORDER - SPORT_MIN] = np.arange(SPORT_COUNT)


def port_rank(port: int) -> int:
    """Position of a port in :data:`PORT_ORDER` (lower is preferred)."""
    return int(_RANK[port - SPORT_MIN])


FIRST_BLOCK = 32
"""Fewest ports a request's search starts with (it starts near its expected need, doubling)."""

CHUNK_CELLS = 1 << 22
"""Largest (requests x ports) matrix built at once (a few tens of MB)."""

_ALTERNATIVES_CACHE = 256


@dataclass(frozen=True, slots=True)
class PortRequest:
    """Up to ``count`` ports that take ``middle`` from NIC port ``src`` to ``dst`` (node
    numbers), none of them in ``exclude`` (ports already bound on that path)."""

    src: int
    dst: int
    middle: Middle
    count: int = 1
    exclude: frozenset[int] = field(default_factory=frozenset)


class PortSource(Protocol):
    """What binding code asks of a sport -> path oracle, predicted or learned."""

    @property
    def mode(self) -> str: ...

    def find(self, requests: Sequence[PortRequest]) -> list[tuple[int, ...]]:
        """Per request, up to ``count`` ports known to take its middle, first in
        :data:`PORT_ORDER` first; ``()`` if none is known."""
        ...

    def alternatives(self, src: int, dst: int) -> dict[Middle, tuple[int, ...]]:
        """Every middle some port is known to take between two NIC ports, with those ports
        (in :data:`PORT_ORDER`)."""
        ...

    def middles_of(
        self, src: Sequence[int], dst: Sequence[int], sports: Sequence[int]
    ) -> list[Middle | None]:
        """The middle each ``(src, dst, sport)`` takes, ``None`` where unknown."""
        ...


class PredictedPorts:
    """A :class:`PortSource` that predicts with the hash profiles of a fabric snapshot.

    ``linear`` (default ``None``: check each profile) may be set to ``False`` to force direct
    hashing everywhere; both give the same ports.
    """

    mode = "predicted"

    def __init__(self, fabric: Fabric, *, linear: bool | None = None) -> None:
        self.fabric = fabric
        index = fabric.index
        self._index = index
        self._routing = index.routing
        profiles: list[HashProfile] = []
        position: dict[HashProfile, int] = {}
        self._profile_of: list[int] = []
        for switch in fabric.switches:
            if switch.hash not in position:
                position[switch.hash] = len(profiles)
                profiles.append(switch.hash)
            self._profile_of.append(position[switch.hash])
        self._profiles = tuple(profiles)
        self._sports = _ORDER  # the offset tables follow the preference order
        self._offsets = np.zeros((max(len(profiles), 1), SPORT_COUNT), dtype=np.uint32)
        self.linear: tuple[bool, ...] = tuple(
            self._prepare(i, p) if linear is not False else False for i, p in enumerate(profiles)
        )
        address = np.zeros(index.num_nodes, dtype=np.int64)
        leaf = np.full(index.num_nodes, -1, dtype=np.int64)
        for port in index.ports:
            address[port.node] = int(port.port.address)
            if len(index.out_resources[port.node]) == 1:
                leaf[port.node] = index.leaf_of(port.node)
        self._address = address
        self._leaf = leaf.tolist()
        self._res_src: list[int] = index.res_src.tolist()
        self._res_dst: list[int] = index.res_dst.tolist()
        self._stages: dict[tuple[int, int, Middle], tuple[tuple[int, int, int], ...] | None] = {}
        self._alternatives: dict[tuple[int, int], dict[Middle, tuple[int, ...]]] = {}

    def _hash(
        self, profile: int, src: npt.ArrayLike, dst: npt.ArrayLike, sport: npt.ArrayLike
    ) -> HashArray:
        return ecmp_hash_many(
            self._profiles[profile], src, dst, UDP_PROTOCOL, sport, ROCE_UDP_DPORT
        )

    def _prepare(self, i: int, profile: HashProfile) -> bool:
        """Fill the offset table of profile ``i``; True if the profile proved affine."""
        zero = ecmp_hash_many(profile, 0, 0, 0, 0, 0)
        self._offsets[i] = ecmp_hash_many(profile, 0, 0, 0, self._sports, 0) ^ zero
        rng = np.random.default_rng(i)
        src = rng.integers(0, 1 << 32, 64, dtype=np.int64)
        dst = rng.integers(0, 1 << 32, 64, dtype=np.int64)
        sport = rng.integers(0, SPORT_COUNT, 64)
        direct = self._hash(i, src, dst, self._sports[sport])
        base = self._hash(i, src, dst, 0)
        return bool(((base ^ self._offsets[i, sport]) == direct).all())

    def _decisions(
        self, src: int, dst: int, middle: Middle
    ) -> tuple[tuple[int, int, int], ...] | None:
        """``(profile, group size, member)`` of every stage with a choice; None if invalid."""
        src_leaf, dst_leaf = self._leaf[src], self._leaf[dst]
        key = (src_leaf, dst_leaf, middle)
        if key in self._stages:
            return self._stages[key]
        routing, res_src, res_dst = self._routing, self._res_src, self._res_dst
        node, descending = src_leaf, False
        out: list[tuple[int, int, int]] | None = [] if src_leaf >= 0 else None
        for res in middle:
            group = routing.next_hops(node, dst_leaf, descending) if out is not None else ()
            if out is None or res_src[res] != node or res not in group:
                out = None
                break
            if len(group) > 1:
                out.append((self._profile_of[node], len(group), group.index(res)))
            descending = descending or routing.is_down(res)
            node = res_dst[res]
        result = tuple(out) if out is not None and node == dst_leaf else None
        self._stages[key] = result
        return result

    # -- PortSource -------------------------------------------------------------------------

    def find(self, requests: Sequence[PortRequest]) -> list[tuple[int, ...]]:
        count = len(requests)
        found: list[list[int]] = [[] for _ in range(count)]
        if not count:
            return []
        decisions = [self._decisions(r.src, r.dst, r.middle) for r in requests]
        width = max(1, max((len(d) for d in decisions if d), default=0))
        prof = np.zeros((count, width), dtype=np.int64)
        size = np.ones((count, width), dtype=np.uint32)
        member = np.zeros((count, width), dtype=np.uint32)
        for r, stages in enumerate(decisions):
            if stages:
                k = len(stages)
                prof[r, :k], size[r, :k], member[r, :k] = zip(*stages, strict=True)
        src = self._address[[r.src for r in requests]]
        dst = self._address[[r.dst for r in requests]]
        base = np.zeros((count, width), dtype=np.uint32)
        for p in range(len(self._profiles)):
            rows, cols = np.nonzero((prof == p) & (size > 1))
            if rows.size:
                base[rows, cols] = self._hash(p, src[rows], dst[rows], 0)
        linear = np.asarray(self.linear + (True,), dtype=np.bool_)
        direct = np.asarray(~linear[prof].all(axis=1), dtype=np.bool_)
        # Search [lo, hi) per request, starting with about as many ports as one match needs on
        # average (the product of the group sizes) and doubling: ~1.5/p ports per request.
        wanted = np.asarray([r.count for r in requests], dtype=np.float64)
        first = wanted * size.astype(np.float64).prod(axis=1)
        hi = np.minimum(SPORT_COUNT, 2 ** np.ceil(np.log2(np.maximum(first, FIRST_BLOCK))))
        hi = hi.astype(np.int64)
        lo = np.zeros(count, dtype=np.int64)
        active = np.flatnonzero(
            [d is not None and r.count > 0 for d, r in zip(decisions, requests, strict=True)]
        )
        while active.size:
            spans: dict[tuple[int, int], list[int]] = {}
            for r in active.tolist():
                spans.setdefault((int(lo[r]), int(hi[r])), []).append(r)
            for (a, b), members in spans.items():
                step = max(1, CHUNK_CELLS // (b - a))
                for start in range(0, len(members), step):
                    chunk = np.asarray(members[start : start + step], dtype=np.int64)
                    ok = self._match(chunk, a, b, prof, size, member, base, direct, src, dst)
                    self._collect(requests, chunk, ok, a, found)
            active = active[[len(found[r]) < requests[r].count for r in active.tolist()]]
            active = active[hi[active] < SPORT_COUNT]
            lo[active] = hi[active]
            hi[active] = np.minimum(SPORT_COUNT, 2 * hi[active])
        return [tuple(ports) for ports in found]

    def _match(
        self,
        chunk: npt.NDArray[np.int64],
        lo: int,
        hi: int,
        prof: npt.NDArray[np.int64],
        size: npt.NDArray[np.uint32],
        member: npt.NDArray[np.uint32],
        base: npt.NDArray[np.uint32],
        direct: npt.NDArray[np.bool_],
        src: npt.NDArray[np.int64],
        dst: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.bool_]:
        """``ok[k, i]``: port ``PORT_ORDER[lo + i]`` takes request ``chunk[k]``'s middle."""
        ok: npt.NDArray[np.bool_] | None = None
        for j in range(size.shape[1]):
            n = size[chunk, j]
            if (n == 1).all():
                continue
            hashes = base[chunk, j, None] ^ self._offsets[:, lo:hi][prof[chunk, j]]
            for k in np.flatnonzero(direct[chunk] & (n > 1)).tolist():
                r = int(chunk[k])
                hashes[k] = self._hash(int(prof[r, j]), src[r], dst[r], self._sports[lo:hi])
            stage = (hashes % n[:, None]) == member[chunk, j, None]
            ok = stage if ok is None else ok & stage
        return np.ones((chunk.size, hi - lo), dtype=np.bool_) if ok is None else ok

    @staticmethod
    def _collect(
        requests: Sequence[PortRequest],
        chunk: npt.NDArray[np.int64],
        ok: npt.NDArray[np.bool_],
        lo: int,
        found: list[list[int]],
    ) -> None:
        """Append each row's first matching ports (preference order, not excluded) to ``found``."""
        rows_of = chunk.tolist()
        for k, r in enumerate(rows_of):
            for port in requests[r].exclude:
                rank = port_rank(port) - lo
                if 0 <= rank < ok.shape[1]:
                    ok[k, rank] = False
        need = np.asarray([requests[r].count - len(found[r]) for r in rows_of], dtype=np.int64)
        rows = np.flatnonzero(need > 0)
        while rows.size:
            first = ok[rows].argmax(axis=1)
            hit = ok[rows, first]
            rows, first = rows[hit], first[hit]
            for k, port in zip(rows.tolist(), _ORDER[lo + first].tolist(), strict=True):
                found[rows_of[k]].append(port)
            ok[rows, first] = False
            need[rows] -= 1
            rows = rows[need[rows] > 0]

    def alternatives(self, src: int, dst: int) -> dict[Middle, tuple[int, ...]]:
        key = (src, dst)
        cached = self._alternatives.get(key)
        if cached is None:
            paths = forward_many(
                self.fabric,
                np.full(SPORT_COUNT, src, dtype=np.int64),
                np.full(SPORT_COUNT, dst, dtype=np.int64),
                self._sports,
            )
            grouped: dict[Middle, list[int]] = {}
            for sport, path in zip(self._sports.tolist(), paths, strict=True):
                if path:
                    grouped.setdefault(middle_of(path), []).append(sport)
            cached = {m: tuple(ports) for m, ports in grouped.items()}
            if len(self._alternatives) >= _ALTERNATIVES_CACHE:
                self._alternatives.pop(next(iter(self._alternatives)))
            self._alternatives[key] = cached
        return cached

    def middles_of(
        self, src: Sequence[int], dst: Sequence[int], sports: Sequence[int]
    ) -> list[Middle | None]:
        if not len(sports):
            return []
        paths = forward_many(
            self.fabric,
            np.asarray(src, dtype=np.int64),
            np.asarray(dst, dtype=np.int64),
            np.asarray(sports, dtype=np.int64),
        )
        return [middle_of(p) if p else None for p in paths]
