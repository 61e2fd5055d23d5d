"""Shared pieces of the host-agent tests: agent configs, agents run in a thread, a "network".

The agents run the real daemon (real gRPC to the controller over a Unix socket or loopback);
what answers their probes is the prober seam. Until the socket prober runs here, that is a
:class:`~southbound.probing.ModeledProber` over a *different* fabric snapshot than the
controller's: the same topology with other hash seeds, i.e. a network whose hash the
controller's model does not know (as with real switches). So "as planned" can only be reached
by probing, which is what these tests check.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from c4p.agent.config import AgentConfig
from c4p.agent.daemon import AgentDaemon
from c4p.testing.agents import host_agent_config
from c4p.testing.network import hidden_hash_network
from southbound.probing import HopReply, ModeledProber, Probe, Prober, Trace
from topology.model import Fabric

AGENT_TOKEN = "agent-token-0123456789abcdef"


def agents_section(hosts: Sequence[str], **extra: Any) -> dict[str, Any]:
    """The controller's ``agents:`` section: one shared test credential for ``hosts``."""
    return {"credentials": [{"hosts": list(hosts), "token": {"value": AGENT_TOKEN}}], **extra}


def agent_config(
    fabric: Fabric,
    host: str,
    endpoint: str,
    *,
    token: str = AGENT_TOKEN,
    probing: dict[str, Any] | None = None,
    ports: list[dict[str, Any]] | None = None,
) -> AgentConfig:
    """An agent of ``host`` holding every NIC port the fabric gives it (no OS check: the
    addresses are the fabric's, not configured on this machine)."""
    return host_agent_config(
        fabric,
        host,
        endpoint,
        token,
        probing=probing,
        ports=ports,
        reconnect={"initial_s": 0.05, "max_s": 0.5},
    )


def real_network(fabric: Fabric, seed: int = 0x5EED) -> Fabric:
    """The network the agents probe: the topology with hash seeds the model does not know."""
    return hidden_hash_network(fabric, seed)


@dataclass(frozen=True, slots=True)
class IcmpHop(HopReply):
    """A hop with its ICMP type and code (what the socket prober reports)."""

    icmp_type: int = 11
    icmp_code: int = 0


class BlackHoleProber:
    """The network's prober, except that ``switch`` has no route to ``towards``: a probe
    reaching it for an address behind that leaf is answered "net unreachable" (static routes
    that keep a dead spine in the remote leaves' groups)."""

    def __init__(self, inner: ModeledProber, switch: str, towards: set[str]) -> None:
        self.inner = inner
        book = inner.fabric
        self.address = next(a for s in book.switches if s.name == switch for a in s.all_addresses())
        self.towards = towards

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        out = []
        for trace in self.inner.trace_many(probes):
            if str(trace.probe.dst) in self.towards:
                hops = []
                dead = False
                for hop in trace.hops:
                    if dead:
                        hops.append(HopReply(hop.ttl, None))
                    elif hop.address == self.address:
                        hops.append(IcmpHop(hop.ttl, hop.address, 3, 0))
                        dead = True
                    else:
                        hops.append(hop)
                trace = Trace(trace.probe, tuple(hops))
            out.append(trace)
        return out


class AgentRunner:
    """Agents (real daemons) on an event loop of their own, in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agents", daemon=True)
        self.thread.start()
        self.daemons: list[AgentDaemon] = []

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def add(self, config: AgentConfig, prober: Callable[[], Prober]) -> AgentDaemon:
        daemon = AgentDaemon(config, prober, seed=len(self.daemons))
        self.call(daemon.start())
        self.daemons.append(daemon)
        return daemon

    def close(self) -> None:
        try:
            for daemon in self.daemons:
                self.call(daemon.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@contextmanager
def agents_running() -> Iterator[AgentRunner]:
    runner = AgentRunner()
    try:
        yield runner
    finally:
        runner.close()


class ScatteringProber:
    """The connected-socket prober's failure, modelled: every probe is answered as if its
    source port were a random one (a per-socket hash under Linux's policy 1), so a port's path
    is not a function of its 5-tuple."""

    def __init__(self, inner: ModeledProber, seed: int = 7) -> None:
        self.inner = inner
        self.rng = random.Random(seed)

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        shuffled = [replace(p, sport=self.rng.randrange(49152, 65536)) for p in probes]
        answered = self.inner.trace_many(shuffled)
        return [Trace(p, t.hops) for p, t in zip(probes, answered, strict=True)]
