"""Running commands in network namespaces, and whether this process may create them.

Why subprocesses of ``ip``: the lab must be built by the same tool a user would use to inspect
it (``ip -n NS ...``), and Python 3.11 has no ``setns``. Every command is bounded in time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from c4p.lab.addressing import LabError

TIMEOUT = 30.0
"""Seconds any one command may take (a hung command fails the lab, it never hangs it)."""


def missing_tools(extra: Sequence[str] = ()) -> list[str]:
    return [t for t in ("ip", *extra) if shutil.which(t) is None]


def namespaces_possible() -> str | None:
    """``None`` if this process can build a lab; otherwise the one-line reason why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, raw sockets)"
    missing = missing_tools()
    if missing:
        return f"missing tools: {', '.join(missing)} (Debian package iproute2)"
    return None


def run(
    args: Sequence[str],
    *,
    ns: str | None = None,
    stdin: str | None = None,
    check: bool = True,
    timeout: float = TIMEOUT,
) -> str:
    """Run ``args`` (inside ``ns`` when given) and return its standard output."""
    full = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    try:
        done = subprocess.run(
            full, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"command timed out after {timeout:g} s: {' '.join(full)}") from exc
    if check and done.returncode != 0:
        raise LabError(
            f"command failed ({done.returncode}): {' '.join(full)}: {done.stderr.strip()}"
        )
    return done.stdout


def ip_batch(lines: Sequence[str], ns: str | None = None, *, family: int = 0) -> None:
    """Many ``ip`` commands in one process (``ip -batch -``), inside ``ns`` when given;
    ``family`` 6 runs them as ``ip -6`` (``ip rule`` assumes IPv4 otherwise)."""
    if not lines:
        return
    prefix = ["ip", "-n", ns] if ns else ["ip"]
    if family == 6:
        prefix.append("-6")
    run([*prefix, "-batch", "-"], stdin="\n".join(lines) + "\n")


def ip_json(args: Sequence[str], ns: str) -> Any:
    return json.loads(run(["ip", "-n", ns, "-j", *args]) or "[]")


def sysctl(ns: str, values: dict[str, str | int]) -> None:
    run(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())], ns=ns)


def existing_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def delete_namespace(ns: str) -> None:
    """Delete ``ns`` and kill whatever still runs in it (its veths go with it)."""
    pids = run(["ip", "netns", "pids", ns], check=False).split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)
    run(["ip", "netns", "del", ns], check=False)
