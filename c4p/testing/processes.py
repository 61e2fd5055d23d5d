"""Processes a test or measurement starts and must be sure to end: spawn, check, kill.

Why apart: the etcd members (:mod:`c4p.testing.etcd_cluster`) and the controller replicas
(:mod:`c4p.testing.replicas`) are both real processes supervised the same way: each in a
session of its own (a signal to the test runner's group does not reach it, and it does not
outlive a ``kill -9`` of its own group), its output appended to a log file the failure message
names, a loopback port found by binding to port 0, and a hard kill that also ends a process
stopped by ``SIGSTOP``. One home for that keeps both from drifting (one once forgot ``SIGCONT``).
"""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path


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
