"""Probe pacing: a token bucket per answering switch, and who may answer a probe.

Why: switches rate-limit the ICMP they generate. Linux answers at most ``icmp_msgs_per_sec``
(1,000/s) with a burst of ``icmp_msgs_burst`` (50) per network namespace, and per destination
peer ``icmp_ratelimit`` (one message per second after a burst of six, by default); hardware
switches police ICMP to their CPU far lower (control-plane policing, often a few hundred per
second). A probe whose answer was dropped by that policer is a *lost* answer, never evidence:
so the prober paces what it sends to stay under the limits, backs off when answers go missing,
and retries the silent probes in a later round.

Who answers a packet: the switch where its TTL expires. The probe planner knows the *candidates*
(TTL 1 expires at the source leaf; TTL 2 at one of the spines the leaf hashes over, and so on)
but not which one of them the hash picks: that is what is being learned. So every packet takes
a token from the bucket of *each* switch that may answer it: however the hash spreads a burst,
no switch is ever asked for more than its rate. That is conservative (a tier of ``n`` spines is
probed at one spine's rate, not ``n`` times it) and it is what makes "a burst never decides a
path" hold without knowing the hash.

:func:`candidates_from_fabric` gives those candidates from the topology; without a fabric (an
agent that knows only its own addresses), every packet of one TTL shares one bucket.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from southbound.probing import Probe
from topology.model import Fabric

Candidates = Callable[[Probe, int], tuple[Hashable, ...]]
"""``(probe, ttl) -> the switches (any hashable names) that may answer that packet``."""

DEFAULT_RATE = 200.0
"""Packets per second per answering switch: a fifth of Linux's 1,000/s, and within what
hardware switches' ICMP policers usually let through."""
DEFAULT_BURST = 20.0
"""Tokens a bucket holds: under Linux's burst of 50 and its per-peer burst window."""
MIN_RATE = 10.0
"""Back-off never goes below this (a silent switch is retried slowly, not forever fast)."""


@dataclass
class TokenBucket:
    """``rate`` tokens per second up to ``burst``; ``take`` spends one if there is one."""

    rate: float
    burst: float
    tokens: float = field(default=-1.0)
    stamp: float | None = field(default=None)
    nominal: float = field(default=0.0)

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.burst >= 1):
            raise ValueError(f"token bucket needs rate > 0 and burst >= 1, got {self}")
        if self.tokens < 0:
            self.tokens = self.burst
        self.nominal = self.nominal or self.rate

    def refill(self, now: float) -> None:
        if self.stamp is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0 if one is)."""
        self.refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self) -> None:
        self.tokens -= 1

    def back_off(self) -> None:
        """Answers went missing: halve the rate (not below :data:`MIN_RATE`), empty the bucket."""
        self.rate = max(MIN_RATE, min(self.rate, self.nominal) / 2)
        self.tokens = min(self.tokens, 0.0)

    def recover(self) -> None:
        """A round came back whole: step back up towards the nominal rate."""
        self.rate = min(self.nominal, self.rate * 1.5)


class Pacer:
    """Token buckets per answering switch (see the module docstring).

    ``rate``/``burst`` are per switch; ``None`` rate disables pacing (for measuring what the
    kernel's limits do without it). ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        candidates: Candidates | None = None,
        *,
        rate: float | None = DEFAULT_RATE,
        burst: float = DEFAULT_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate is not None and not rate > 0:
            raise ValueError(f"rate: {rate} is not a positive number of packets per second")
        if not burst >= 1:
            raise ValueError(f"burst: {burst} must be at least 1")
        self._candidates = candidates or _per_ttl
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[Hashable, TokenBucket] = {}

    @property
    def enabled(self) -> bool:
        return self.rate is not None

    def answerers(self, probe: Probe, ttl: int) -> tuple[Hashable, ...]:
        return self._candidates(probe, ttl)

    def _bucket(self, switch: Hashable) -> TokenBucket:
        bucket = self._buckets.get(switch)
        if bucket is None:
            assert self.rate is not None
            bucket = self._buckets[switch] = TokenBucket(self.rate, self.burst)
        return bucket

    def wait(self, probe: Probe, ttl: int) -> float:
        """Seconds until a packet of ``probe`` with ``ttl`` may go (0: now)."""
        if self.rate is None:
            return 0.0
        now = self._clock()
        return max((self._bucket(s).wait(now) for s in self.answerers(probe, ttl)), default=0.0)

    def take(self, probe: Probe, ttl: int) -> None:
        if self.rate is not None:
            for switch in self.answerers(probe, ttl):
                self._bucket(switch).take()

    def settle(
        self, lost: Sequence[tuple[Probe, int]], answered: Sequence[tuple[Probe, int]]
    ) -> None:
        """After a round: back off every switch that may have dropped an answer; let the
        switches whose packets were all answered recover."""
        if self.rate is None:
            return
        losers = {s for p, t in lost for s in self.answerers(p, t)}
        for switch in losers:
            self._bucket(switch).back_off()
        for p, t in answered:
            for switch in self.answerers(p, t):
                if switch not in losers:
                    self._bucket(switch).recover()

    def rates(self) -> dict[str, float]:
        """Current rate per bucket (for reports)."""
        return {str(k): b.rate for k, b in self._buckets.items()}


def _per_ttl(probe: Probe, ttl: int) -> tuple[Hashable, ...]:
    """Without a topology: one bucket per (source, TTL), i.e. per hop distance."""
    return ((str(probe.src), ttl),)


def candidates_from_fabric(fabric: Fabric) -> Candidates:
    """The switches that may answer ``(probe, ttl)`` on ``fabric``: those at hop ``ttl`` of any
    equal-cost path between the probe's NIC ports (the destination NIC past the last switch).
    Unknown addresses fall back to one bucket per (source, TTL)."""
    index = fabric.index
    routing = index.routing
    cache: dict[tuple[int, int, int], tuple[Hashable, ...]] = {}

    def candidates(probe: Probe, ttl: int) -> tuple[Hashable, ...]:
        src = index.node_of_address.get(probe.src)
        dst = index.node_of_address.get(probe.dst)
        if src is None or dst is None or src == dst:
            return _per_ttl(probe, ttl)
        key = (src, dst, ttl)
        found = cache.get(key)
        if found is None:
            src_leaf, dst_leaf = index.leaf_of(src), index.leaf_of(dst)
            names: set[str] = set()
            for path in routing.switch_paths(src_leaf, dst_leaf):
                nodes = [src_leaf, *(int(index.res_dst[r]) for r in path)]
                if ttl - 1 < len(nodes):
                    names.add(index.node_names[nodes[ttl - 1]])
                else:
                    names.add(index.node_names[dst])
            found = cache[key] = tuple(sorted(names)) or _per_ttl(probe, ttl)
        return found

    return candidates
