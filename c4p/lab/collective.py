"""The lab's collective workload: one ``c4p_ring`` rank (libc4p/examples) per host namespace.

Why a C program and not Python: the point of ``c4p lab detect`` is that the *real* sensor path
works -- a rank linked with libc4p gets its QPs' source ports with ``c4p_lookup`` from the host's
``c4p agent``, sends its ring traffic on them through the lab's kernels, and reports every
transfer, arrival and completion with ``c4p_report_*``; the agent folds them into per-step
summaries for the controller's detector. Nothing here reports on a rank's behalf.

:class:`Ring` starts the ranks (rank ``i`` on ``hosts[i]``, sending to rank ``i+1`` and, with
``both_ways``, to rank ``i-1`` too: see :func:`ring_connections`), reads the
line each prints per step (its CLOCK_MONOTONIC end time and iteration time, the same clock as
:func:`time.monotonic_ns` here) and controls them by signal: compute-slow (SIGUSR1/SIGUSR2),
message size (SIGHUP), hung (SIGSTOP/SIGCONT). Every rank is killed on the way out, also on
failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from c4p.errors import C4pError
from c4p.lab.build import Lab

RING_BINARY = Path(__file__).resolve().parents[2] / "libc4p" / "build" / "c4p_ring"


class RingError(C4pError):
    """The ranks could not be started or stopped making progress before they were told to."""


def ring_missing() -> str | None:
    """Why the rank program cannot run here (``make libc4p`` builds it), or ``None``."""
    if not RING_BINARY.exists():
        return f"{RING_BINARY} is not built (make libc4p)"
    return None


@dataclass
class RingSettings:
    """The workload's shape (the rank program's flags)."""

    qps: int = 4
    bytes: int = 32768  # per round, split over the QPs
    rounds: int = 4
    compute_ms: int = 20
    slow_ms: int = 150
    gap_ms: int = 60
    quiet_steps: int = 20  # warm-up steps not reported (connections, ARP, first lookups)
    both_ways: bool = True  # a second ring the other way (--prev): see ring_connections


def ring_connections(ranks: int, both_ways: bool) -> list[tuple[int, int]]:
    """The job's directed rank pairs, as the controller must plan them for the ranks' lookups.

    Why both ways: in a one-way ring a host's downlink carries exactly the QPs its
    predecessor's uplink carries, so no timing of them tells the two links apart (a slowed host
    link was named with its twin as a candidate, docs/lab.md). NCCL runs rings over several
    channels and trees both ways; with a second ring the other way every host link is crossed
    in each direction by QPs of its own, and the detector's tomography can name it."""
    pairs = [(r, (r + 1) % ranks) for r in range(ranks)]
    if both_ways:  # with 2 ranks the one way is already both
        pairs += [(r, (r - 1) % ranks) for r in range(ranks)]
    return sorted(set(pairs))


@dataclass
class _Rank:
    host: str
    proc: subprocess.Popen[bytes]
    steps: list[tuple[int, int, int]] = field(default_factory=list)  # (step, end_ns, iter_ns)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Ring:
    """The ranks of one job (a context manager; see the module docstring)."""

    def __init__(
        self,
        lab: Lab,
        job: str,
        token: str,
        hosts: list[str],
        sockets: dict[str, Path],
        settings: RingSettings | None = None,
        communicator: str = "dp",
    ) -> None:
        self.lab, self.job, self.token, self.hosts = lab, job, token, hosts
        self.sockets = sockets
        self.settings = settings or RingSettings()
        self.communicator = communicator
        self.ranks: list[_Rank] = []
        self.step0 = 0

    def address(self, host: str) -> str:
        nic = next(h for h in self.lab.fabric.hosts if h.name == host).nics[0].ports[0]
        return self.lab.address(nic.address)

    def __enter__(self) -> Ring:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, step0: int = 0) -> None:
        """Start every rank (from step ``step0``) and wait until each has done a step."""
        s = self.settings
        self.step0 = step0
        n = len(self.hosts)
        for rank, host in enumerate(self.hosts):
            back = self.address(self.hosts[(rank - 1) % n])
            prev = ["--prev", back] if s.both_ways and n > 2 else []
            log = open(self.lab.workdir / f"rank-{rank}.log", "ab")  # noqa: SIM115 (the child's)
            argv = [
                "ip", "netns", "exec", self.lab.ns(host), str(RING_BINARY),
                "--socket", str(self.sockets[host]), "--job", self.job, "--token", self.token,
                "--comm", self.communicator, "--rank", str(rank), "--ranks", str(n),
                "--src", self.address(host), "--next", self.address(self.hosts[(rank + 1) % n]),
                *prev,
                "--qps", str(s.qps), "--bytes", str(s.bytes), "--rounds", str(s.rounds),
                "--compute-ms", str(s.compute_ms), "--slow-ms", str(s.slow_ms),
                "--gap-ms", str(s.gap_ms), "--step0", str(step0),
                "--quiet-steps", str(s.quiet_steps),
            ]  # fmt: skip
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
            log.close()
            r = _Rank(host, proc)
            self.ranks.append(r)
            threading.Thread(target=self._read, args=(r,), daemon=True).start()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if all(r.steps for r in self.ranks):
                return
            dead = [n for n, r in enumerate(self.ranks) if r.proc.poll() is not None]
            if dead:
                raise RingError(f"ranks {dead} exited: {self._log_tail(dead[0])}")
            time.sleep(0.1)
        raise RingError(f"ranks made no step within 90 s: {self._log_tail(0)}")

    def _log_tail(self, rank: int) -> str:
        path = self.lab.workdir / f"rank-{rank}.log"
        return path.read_text(errors="replace")[-300:] if path.exists() else ""

    @staticmethod
    def _read(rank: _Rank) -> None:
        assert rank.proc.stdout is not None
        for line in rank.proc.stdout:
            words = line.split()
            if len(words) == 4 and words[0] == b"step":
                with rank.lock:
                    rank.steps.append((int(words[1]), int(words[2]), int(words[3])))
                    del rank.steps[:-20_000]

    def stop(self) -> None:
        """SIGCONT (a stopped rank cannot die of SIGTERM), SIGTERM, then SIGKILL: all ranks."""
        for r in self.ranks:
            if r.proc.poll() is None:
                self._signal(r, signal.SIGCONT)
                self._signal(r, signal.SIGTERM)
        for r in self.ranks:
            try:
                r.proc.wait(10)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait(5)
            if r.proc.stdout is not None:
                r.proc.stdout.close()
        self.ranks = []

    def restart(self) -> None:
        """The job restarted by its scheduler: the same ranks, new processes, steps go on."""
        last = self.last_step()
        self.stop()
        self.start(step0=last + 1)

    # -- control ------------------------------------------------------------------------------

    @staticmethod
    def _signal(rank: _Rank, sig: int) -> None:
        # ``ip netns exec`` execs the program: the child is the rank itself.
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank.proc.pid, sig)

    def signal(self, rank: int, sig: int) -> None:
        self._signal(self.ranks[rank], sig)

    def signal_all(self, sig: int) -> None:
        for r in self.ranks:
            self._signal(r, sig)

    def compute_slow(self, rank: int, on: bool) -> None:
        self.signal(rank, signal.SIGUSR1 if on else signal.SIGUSR2)

    def hang(self, rank: int, on: bool) -> None:
        self.signal(rank, signal.SIGSTOP if on else signal.SIGCONT)

    # -- measuring ----------------------------------------------------------------------------

    def last_step(self) -> int:
        return max((r.steps[-1][0] for r in self.ranks if r.steps), default=self.step0)

    def step_time(self, start_ns: int, end_ns: int) -> float | None:
        """Median iteration time (s) of the steps every rank ended in ``[start_ns, end_ns)``."""
        times: list[int] = []
        for r in self.ranks:
            with r.lock:
                times.extend(i for _, t, i in r.steps if start_ns <= t < end_ns and i > 0)
        return round(statistics.median(times) / 1e9, 4) if times else None

    def wait_steps(self, count: int, seconds: float) -> bool:
        """Wait until the slowest rank has done ``count`` more steps (bounded by ``seconds``)."""
        target = min((r.steps[-1][0] for r in self.ranks if r.steps), default=0) + count
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if all(r.steps and r.steps[-1][0] >= target for r in self.ranks):
                return True
            time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return all(r.proc.poll() is None for r in self.ranks)


__all__ = ["Ring", "RingError", "RingSettings", "ring_connections", "ring_missing"]
