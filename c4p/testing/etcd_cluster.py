"""A real etcd cluster on loopback for tests and measurements (Debian's ``etcd-server``).

Why real etcd: the guarantees the HA controller relies on (a transaction that compares before it
writes, a lease that expires, a quorum that is lost and comes back) are etcd's, not ours; a fake
would only check our reading of them. Each cluster gets its own ports (found by binding to port
0, then released for etcd: a small race with other processes, retried by the caller if etcd
fails to bind) and its own data directories under a temporary directory carrying a per-run
token; :meth:`EtcdCluster.stop` kills every member and removes the directory, also after a
failure (use it as a context manager).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from c4p.testing.processes import Supervised, alive, free_port, kill, spawn

ETCD = "etcd"
__all__ = ["ETCD", "EtcdCluster", "Member", "etcd_binary", "free_port"]


def etcd_binary() -> str | None:
    """The ``etcd`` server binary, or ``None`` where the package is not installed."""
    return shutil.which(ETCD)


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def running(self) -> bool:
        return alive(self.process)


@dataclass
class EtcdCluster(Supervised):
    """``size`` etcd members on loopback (see the module docstring)."""

    size: int = 3
    token: str = field(default_factory=lambda: f"{os.getpid()}-{os.urandom(3).hex()}")
    members: list[Member] = field(default_factory=list)
    root: Path | None = None

    def start(self, wait_s: float = 30.0) -> Self:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed (Debian package etcd-server)")
        self.root = Path(tempfile.mkdtemp(prefix=f"c4p-etcd-{self.token}-"))
        self.members = [
            Member(f"m{i}", free_port(), free_port(), self.root / f"m{i}") for i in range(self.size)
        ]
        try:
            for m in self.members:
                self._spawn(m, "new")
            self.wait_healthy(wait_s)
        except BaseException:
            self.stop()  # nothing of a failed start outlives it
            raise
        return self

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def _spawn(self, m: Member, state: str) -> None:
        assert self.root is not None
        m.log = self.root / f"{m.name}.log"
        args = [
            etcd_binary() or ETCD,
            "--name", m.name,
            "--data-dir", str(m.data_dir),
            "--listen-client-urls", f"http://{m.endpoint}",
            "--advertise-client-urls", f"http://{m.endpoint}",
            "--listen-peer-urls", m.peer_url,
            "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-state", state,
            "--initial-cluster-token", f"c4p-{self.token}",
            "--heartbeat-interval", "100",
            "--election-timeout", "1000",
            "--logger", "zap",
            "--log-level", "warn",
        ]  # fmt: skip
        m.process = spawn(args, m.log)

    def wait_healthy(self, wait_s: float = 30.0) -> None:
        """Until every running member answers and one leader is known (bounded)."""
        from c4p.store.etcdclient import EtcdClient, EtcdError

        deadline = time.monotonic() + wait_s
        running = [m for m in self.members if m.running]
        client = EtcdClient([m.endpoint for m in running], timeout=1.0)
        try:
            while time.monotonic() < deadline:
                try:
                    leaders = {client.status(i).leader for i in range(len(running))}
                    if len(leaders) == 1 and 0 not in leaders:
                        return
                except EtcdError:
                    pass
                for m in running:
                    if not m.running:
                        raise RuntimeError(f"etcd {m.name} exited; see {m.log}")
                time.sleep(0.1)
        finally:
            client.close()
        raise TimeoutError(f"etcd cluster not healthy after {wait_s} s (logs in {self.root})")

    def kill(self, index: int) -> None:
        """``kill -9`` one member (its data stays: :meth:`restart` brings it back)."""
        kill(self.members[index].process, 10)

    def restart(self, index: int) -> None:
        m = self.members[index]
        self.kill(index)
        self._spawn(m, "existing")

    def stop(self) -> None:
        for i in range(len(self.members)):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self.kill(i)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
