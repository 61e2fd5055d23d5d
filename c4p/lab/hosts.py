"""The lab's hosts at work: one helper process per host namespace, and a prober over them.

:class:`Helpers` starts ``python -m c4p.lab.helper`` in every host namespace of a lab (lazily)
and talks JSON lines to it; :class:`NamespaceProber` is a :class:`southbound.probing.Prober`
that hands each probe to the helper of the host owning its source address, all hosts at once.

Pacing across hosts: an answering switch's ICMP budget is shared by every host probing through
it, so the switch rate is divided among the hosts probing in the same batch: however many hosts
probe at once, no switch is asked for more than ``rate`` answers per second.

This is where the lead can later switch to ``c4p serve`` + host agents: the demo and the tests
only use the ``Prober`` seam and :meth:`Helpers.send`.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from c4p.files import save_fabric
from c4p.lab.addressing import LabError, as_ipv4, as_ipv6
from c4p.lab.build import Lab
from southbound.netprobe import ProbeStats
from southbound.pacing import DEFAULT_BURST, DEFAULT_RATE
from southbound.probing import HopReply, IPAddress, Probe, Prober, Trace

REPLY_TIMEOUT = 300.0
"""Seconds a helper may take for one request before the lab gives up on it."""


class _Helper:
    def __init__(self, lab: Lab, host: str, privilege: str) -> None:
        fabric_file = lab.workdir / "fabric.json"
        if not fabric_file.exists():
            save_fabric(lab.fabric, fabric_file)
        args = [
            "ip", "netns", "exec", lab.ns(host), sys.executable, "-m", "c4p.lab.helper",
            "--fabric", str(fabric_file), "--privilege", privilege,
        ]  # fmt: skip
        self.host = host
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.lock = threading.Lock()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = _readline(self.proc, REPLY_TIMEOUT)
        if not line:
            raise LabError(f"helper on {self.host}: exited without an answer")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise LabError(f"helper on {self.host}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    """One line of the helper's output, waiting at most ``timeout`` seconds."""
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        proc.kill()
        raise LabError(f"helper: no answer within {timeout:g} s")
    return out[0] if out else ""


class Helpers:
    """One helper per host namespace of ``lab``, started on first use; close them with
    :meth:`close` (or use as a context)."""

    def __init__(self, lab: Lab, privilege: str = "auto") -> None:
        self.lab = lab
        self.privilege = privilege
        self._helpers: dict[str, _Helper] = {}
        self._owner = {lab.address(p.address): h.name for h, _, p in lab.fabric.nic_ports()}

    def __enter__(self) -> Helpers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def host_of(self, address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
        host = self._owner.get(str(address))
        if host is None:
            raise LabError(f"address: {address} is no NIC port address of the lab")
        return host

    def helper(self, host: str) -> _Helper:
        found = self._helpers.get(host)
        if found is None:
            found = self._helpers[host] = _Helper(self.lab, host, self.privilege)
        return found

    def start_all(self) -> None:
        """Start every host's helper at once and wait until each answers (so that later
        timings measure probing and traffic, not Python starting)."""
        hosts = [h.name for h in self.lab.fabric.hosts]
        for host in hosts:
            self.helper(host)
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
            list(pool.map(lambda h: self.helper(h).ask({"op": "ping"}), hosts))

    def send(self, src: str, sport: int, dst: str, count: int, *, connected: bool = False) -> int:
        """``count`` datagrams of one QP's 5-tuple, from its source host's namespace, from an
        unconnected socket as a NIC would (``connected``: a connected one, to show the
        difference under hash policy 1; see ``c4p.lab.build``)."""
        request = {"op": "send", "src": src, "sport": sport, "dst": dst, "count": count}
        if connected:
            request["connected"] = True
        answer = self.helper(self.host_of(src)).ask(request)
        return int(answer["sent"])

    def close(self) -> None:
        for helper in self._helpers.values():
            helper.close()
        self._helpers.clear()


class NamespaceProber:
    """A :class:`southbound.probing.Prober` whose probes leave from the lab's host namespaces.

    ``rate`` (per answering switch, shared by all hosts; ``None``: no pacing), ``burst``,
    ``timeout`` and ``rounds`` go to :class:`southbound.netprobe.SocketProber` in each helper.
    ``stats`` adds up what every helper reported; ``privilege`` is what the helpers used.
    """

    def __init__(
        self,
        helpers: Helpers,
        *,
        rate: float | None = DEFAULT_RATE,
        burst: float = DEFAULT_BURST,
        timeout: float = 0.5,
        rounds: int = 3,
    ) -> None:
        self.helpers = helpers
        self.rate = rate
        self.burst = burst
        self.timeout = timeout
        self.rounds = rounds
        self.stats = ProbeStats()
        self.privilege = ""

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        by_host: dict[str, list[int]] = {}
        for i, probe in enumerate(probes):
            by_host.setdefault(self.helpers.host_of(probe.src), []).append(i)
        share = None if self.rate is None else self.rate / max(1, len(by_host))
        burst = max(1.0, self.burst / max(1, len(by_host)))

        def run(host: str) -> dict[str, Any]:
            members = by_host[host]
            return self.helpers.helper(host).ask(
                {
                    "op": "trace",
                    "probes": [
                        [str(p.src), str(p.dst), p.sport, p.first_ttl, p.max_ttl]
                        for p in (probes[i] for i in members)
                    ],
                    "rate": share,
                    "burst": burst,
                    "timeout": self.timeout,
                    "rounds": self.rounds,
                }
            )

        results: list[Trace | None] = [None] * len(probes)
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(by_host)))) as pool:
            answers = dict(zip(by_host, pool.map(run, list(by_host)), strict=True))
        for host, answer in answers.items():
            self.privilege = answer.get("privilege", self.privilege)
            stats = answer["stats"]
            for name in ("traces", "packets", "answered", "lost", "retried", "first_round_lost"):
                setattr(self.stats, name, getattr(self.stats, name) + int(stats[name]))
            self.stats.rounds = max(self.stats.rounds, int(stats["rounds"]))
            for i, hops in zip(by_host[host], answer["traces"], strict=True):
                results[i] = Trace(
                    probes[i],
                    tuple(
                        HopReply(ttl, None if a is None else ipaddress.ip_address(a), kind, code)
                        for ttl, a, kind, code in hops
                    ),
                )
        return [t for t in results if t is not None]


class TwinProber:
    """Probes an IPv6 lab (``Lab(family=6)``) for a path table of the lab's fabric: each probe
    goes out between the IPv6 twins of its IPv4 addresses, each answer comes back under the
    IPv4 name of its IPv6 address (the fabric model addresses NIC ports in IPv4; see
    :mod:`c4p.lab.addressing`). What is probed, hashed and answered is IPv6 only."""

    def __init__(self, inner: Prober) -> None:
        self.inner = inner

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        sent = [replace(p, src=_twin(p.src), dst=_twin(p.dst)) for p in probes]
        return [
            Trace(probe, tuple(replace(h, address=_name(h.address)) for h in trace.hops))
            for probe, trace in zip(probes, self.inner.trace_many(sent), strict=True)
        ]


def _twin(address: IPAddress) -> IPAddress:
    return as_ipv6(address) if isinstance(address, ipaddress.IPv4Address) else address


def _name(address: IPAddress | None) -> IPAddress | None:
    if not isinstance(address, ipaddress.IPv6Address):
        return address
    try:
        return as_ipv4(address)
    except LabError:
        return address  # not the lab's: the path table reads it as unexpected
