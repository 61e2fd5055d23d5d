"""Processes a test or measurement starts and must be sure to end: spawn, check, kill.

Why apart: the etcd members (:mod:`c4p.testing.etcd_cluster`) and the controller replicas
(:mod:`c4p.testing.replicas`) are both real processes supervised the same way: each in a
session of its own (a signal to the test runner's group does not reach it, and it does not
outlive a ``kill -9`` of its own group), its output appended to a log file the failure message
names, a loopback port found by binding to port 0, and a hard kill that also ends a process
stopped by ``SIGSTOP``, and a group that is a context manager whose exit stops everything, also
after a failure (:class:`Supervised`). One home for that keeps both from drifting.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Self


def free_port() -> int:
    """A loopback TCP port free now (released for the caller: a small race, retried by it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(args: list[str], log: Path, *, stdout_to_log: bool = True) -> subprocess.Popen[bytes]:
    """``args`` in a new session, stderr (and stdout, unless ``stdout_to_log`` is off: then it
    is dropped) appended to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(  # noqa: S603
            args,
            stdout=out if stdout_to_log else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if stdout_to_log else out,
            start_new_session=True,
        )


def alive(process: subprocess.Popen[bytes] | None) -> bool:
    return process is not None and process.poll() is None


def kill(process: subprocess.Popen[bytes] | None, wait_s: float) -> None:
    """``kill -9`` (after ``SIGCONT``: a stopped process must die too) and reap it."""
    if alive(process):
        assert process is not None
        process.send_signal(signal.SIGCONT)
        process.send_signal(signal.SIGKILL)
        process.wait(wait_s)


class Supervised(ABC):
    """Processes started together and stopped together: ``with group:`` starts them and stops
    every one on the way out, whether the block ended or raised."""

    @abstractmethod
    def start(self) -> Self: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
