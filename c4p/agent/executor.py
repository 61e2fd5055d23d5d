"""The agent's probe executor: checks every probe of a batch, paces them, runs the prober.

Why the checks live here and not only in the controller: the controller plans probes, but the
agent is the process that puts packets on a GPU host's NICs, so it enforces the safety rules
itself, whatever it is asked:

* **source**: a probe leaves only from one of this host's own NIC addresses (from the config,
  checked against the OS at start-up);
* **destination**: only to an address in the fabric's address book, which the controller sent
  at the start of the session (switch loopbacks and interface addresses, NIC ports);
* **TTL and size**: TTLs within the agent's ``max_ttl``, batches within ``max_batch``;
* **rate**: a token bucket at the lower of the agent's and the controller's ``max_probes_per_s``
  (tokens are packets: one per TTL sent), with ``burst`` packets back to back. A batch is paced
  through the bucket for at most ``max_wait_s``; the probes the bucket cannot admit in that time
  are refused (``REASON_RATE``), not queued without bound.

Anything refused is logged (one line per batch with the counts and a sample) and counted in
:attr:`ProbeExecutor.refused` by reason. The executor never probes on its own: it runs only what
a live session hands it; the daemon drops the session's terms when the controller goes away.

The prober is a seam (``prober_factory``): the real socket prober on a host, a modelled one in
tests of the service plumbing.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from c4p.agent.config import AgentConfig
from c4p.agent.probe_wire import probe_of, trace_message
from c4p.api.v1 import agent_pb2 as pb
from southbound.probing import Probe, Prober, Trace

log = logging.getLogger("c4p.agent")

ProberFactory = Callable[[], Prober]
Reason = pb.ProbeRefusal.Reason


class TokenBucket:
    """Packets per second with a burst; ``clock`` and ``sleep`` injected for tests."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self, count: int, deadline: float) -> bool:
        """Take ``count`` tokens, sleeping until they accrue, unless that passes ``deadline``
        (a ``clock`` time): then take none and return ``False``."""
        if count > self.burst:
            return False
        self._refill()
        if self._tokens < count:
            wait = (count - self._tokens) / self.rate
            if self._clock() + wait > deadline:
                return False
            self._sleep(wait)
            self._refill()
        self._tokens -= count
        return True


@dataclass(frozen=True)
class SessionTerms:
    """What the controller said at the start of a session."""

    address_book: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address]
    max_probes_per_s: float


class ProbeExecutor:
    """Runs probe batches for one host under its safety rules (see the module docstring)."""

    def __init__(
        self,
        config: AgentConfig,
        prober_factory: ProberFactory,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.own = frozenset(p.address for p in config.ports)
        self._factory = prober_factory
        self._prober: Prober | None = None
        self._clock = clock
        self._sleep = sleep
        self._terms: SessionTerms | None = None
        self._bucket: TokenBucket | None = None
        self._lock = threading.Lock()
        self.refused: Counter[str] = Counter()
        self.probes_run = 0
        self.packets_sent = 0
        self.batches = 0

    @property
    def active(self) -> bool:
        """True while a session's terms are in force (a controller is connected)."""
        return self._terms is not None

    def begin(self, terms: SessionTerms) -> float:
        """A session started: its address book and the effective rate (returned)."""
        limits = self.config.probing
        rate = min(limits.max_probes_per_s, terms.max_probes_per_s or limits.max_probes_per_s)
        with self._lock:
            self._terms = terms
            self._bucket = TokenBucket(rate, limits.burst, clock=self._clock, sleep=self._sleep)
        return rate

    def end(self) -> None:
        """The session ended: nothing runs until the next one begins, and a batch running
        now stops sending (a prober with a ``cancel`` event, as the socket prober has)."""
        with self._lock:
            self._terms = None
            self._bucket = None
            cancel = getattr(self._prober, "cancel", None)
        if isinstance(cancel, threading.Event):
            cancel.set()

    def _prober_now(self) -> Prober:
        if self._prober is None:
            self._prober = self._factory()
        return self._prober

    def _check(self, probe: Probe, terms: SessionTerms) -> tuple[int, str] | None:
        if probe.src not in self.own:
            return Reason.REASON_SOURCE, f"source {probe.src} is not one of this host's addresses"
        if probe.dst not in terms.address_book:
            return Reason.REASON_DESTINATION, f"destination {probe.dst} is not in the address book"
        if probe.max_ttl > self.config.probing.max_ttl:
            return Reason.REASON_INVALID, (
                f"max_ttl {probe.max_ttl} is over this agent's {self.config.probing.max_ttl}"
            )
        return None

    def run(self, batch: pb.ProbeBatch) -> pb.ProbeResults:
        """Check, pace and run one batch; every probe is either traced or refused."""
        started = self._clock()
        with self._lock:
            terms, bucket = self._terms, self._bucket
        refusals: list[pb.ProbeRefusal] = []

        def refuse(index: int, reason: int, detail: str) -> None:
            refusals.append(pb.ProbeRefusal(index=index, reason=reason, detail=detail))  # type: ignore[arg-type]
            self.refused[Reason.Name(reason)] += 1

        accepted: list[tuple[int, Probe]] = []
        limits = self.config.probing
        if terms is None or bucket is None:
            for i in range(len(batch.probes)):
                refuse(
                    i, Reason.REASON_INVALID, "no session: the agent probes only for a controller"
                )
        elif len(batch.probes) > limits.max_batch:
            for i in range(len(batch.probes)):
                refuse(i, Reason.REASON_RATE, f"batch of {len(batch.probes)} > {limits.max_batch}")
        else:
            deadline = started + limits.max_wait_s
            for i, spec in enumerate(batch.probes):
                try:
                    probe = probe_of(spec)
                except ValueError as exc:
                    refuse(i, Reason.REASON_INVALID, str(exc))
                    continue
                problem = self._check(probe, terms)
                if problem is not None:
                    refuse(i, *problem)
                elif not bucket.take(probe.packets, deadline):
                    refuse(i, Reason.REASON_RATE, f"over {bucket.rate:g} probes/s")
                else:
                    accepted.append((i, probe))
        traces: list[Trace] = []
        if accepted:
            traces = self._prober_now().trace_many([p for _, p in accepted])
        self.batches += 1
        self.probes_run += len(accepted)
        self.packets_sent += sum(p.packets for _, p in accepted)
        if refusals:
            self._log_refusals(batch.batch, refusals)
        return pb.ProbeResults(
            batch=batch.batch,
            traces=[trace_message(i, t) for (i, _), t in zip(accepted, traces, strict=True)],
            refused=refusals,
            seconds=self._clock() - started,
        )

    def _log_refusals(self, batch: int, refusals: Iterable[pb.ProbeRefusal]) -> None:
        items = list(refusals)
        counts = Counter(Reason.Name(r.reason) for r in items)
        log.warning(
            "probes refused",
            extra={
                "event": "probes-refused",
                "batch": batch,
                "refused": dict(counts),
                "sample": items[0].detail,
            },
        )
