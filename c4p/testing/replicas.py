"""A group of ``c4p serve`` replicas as real processes on one etcd cluster (tests, measurements).

Why processes: failover is about what survives a ``kill -9`` and a ``SIGSTOP`` of a process, so
the replicas must be processes of their own, started exactly as an operator starts them
(``python -m c4p serve --config FILE``). Every replica listens on its own loopback port
(found by binding to port 0), writes its log to the group's directory, and is killed when the
group stops, also after a failure (use it as a context manager).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import yaml

from c4p.files import save_fabric
from c4p.store.etcdclient import EtcdClient, EtcdError
from c4p.testing.processes import Supervised, alive, free_port, kill, spawn
from topology.model import Fabric

ADMIN_TOKEN = "replica-admin-token-0123456789"


@dataclass
class ReplicaProcess:
    name: str
    config: Path
    ready: Path
    log: Path
    address: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return alive(self.process)

    def start(self, wait_s: float = 60.0) -> None:
        self.ready.unlink(missing_ok=True)
        self.process = spawn(
            [sys.executable, "-m", "c4p", "serve", "--config", str(self.config),
             "--ready-file", str(self.ready)],
            self.log,
            stdout_to_log=False,
        )  # fmt: skip
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.ready.exists():
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited; see {self.log}")
            time.sleep(0.05)
        raise TimeoutError(f"replica {self.name} not ready after {wait_s} s; see {self.log}")

    def signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)

    def kill(self) -> None:
        kill(self.process, 30)


@dataclass
class ReplicaGroup(Supervised):
    """``count`` replicas of one controller (see the module docstring)."""

    directory: Path
    fabric: Fabric
    etcd: list[str]
    count: int = 2
    lease_ttl_s: int = 2
    prefix: str = "/c4p/"
    extra: dict[str, Any] = field(default_factory=dict)
    replicas: list[ReplicaProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        save_fabric(self.fabric, self.directory / "fabric.json")
        for i in range(self.count):
            name = f"r{i}"
            address = f"127.0.0.1:{free_port()}"
            config = self.directory / f"{name}.yaml"
            body: dict[str, Any] = {
                "fabric": {"path": "fabric.json"},
                "listen": {"address": address, "grace_s": 0.5},
                "store": {
                    "kind": "etcd",
                    "endpoints": self.etcd,
                    "prefix": self.prefix,
                    "lease_ttl_s": self.lease_ttl_s,
                    "timeout_s": 1.0,
                },
                "replica": {"name": name, "poll_s": 0.1},
                "auth": {"admin": [{"value": ADMIN_TOKEN}]},
                "metrics": {"address": None},
                "logging": {"level": "info"},
                "controller": {"debounce_s": 0.02, "max_delay_s": 0.2, "retry_max_s": 2.0},
                "planner": {"budget_s": 1.0},
                **self.extra,
            }
            config.write_text(yaml.safe_dump(body))
            self.replicas.append(
                ReplicaProcess(
                    name,
                    config,
                    self.directory / f"{name}.ready",
                    self.directory / f"{name}.log",
                    address,
                )
            )

    @property
    def addresses(self) -> list[str]:
        return [r.address for r in self.replicas]

    def start(self) -> Self:
        try:
            for replica in self.replicas:
                replica.start()
        except BaseException:
            self.stop()
            raise
        return self

    def leader(self) -> str | None:
        """The name in etcd's leader key (``None``: nobody leads now)."""
        client = EtcdClient(self.etcd, timeout=1.0)
        try:
            found = client.get(self.prefix.rstrip("/").encode() + b"/leader")
        except EtcdError:
            return None
        finally:
            client.close()
        return None if found is None else str(json.loads(found.value)["name"])

    def wait_leader(self, timeout: float = 30.0, other_than: str | None = None) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            name = self.leader()
            if name is not None and name != other_than:
                return name
            time.sleep(0.05)
        raise TimeoutError(f"no leader (other than {other_than}) after {timeout} s")

    def by_name(self, name: str) -> ReplicaProcess:
        return next(r for r in self.replicas if r.name == name)

    def stop(self) -> None:
        for replica in self.replicas:
            replica.kill()
