"""The host agent's local socket under abuse (issue 33, items 7 and 8), with a real
``c4p agent`` process serving bindings on a Unix socket:

* memory: the agent's resident memory (VmRSS, KiB) before and after N connections that each
  send a HELLO header declaring 4 MiB and then 4 MiB minus one byte of payload
* lockout: with as many idle connections as ``bindings.max_sessions`` (none says HELLO), what
  a real rank's HELLO gets (WELCOME, or ERROR and its message)

Run: .venv/bin/python scripts/measure/measure_agent_local.py [--connections 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from libc4p_cases import agent, agent_config, free_port  # noqa: E402

from c4p.agent import wire  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def flood(sock: Path, count: int) -> list[socket.socket]:
    """``count`` connections, each a HELLO header of 4 MiB and all but the last byte of it."""
    header = b"C4PL" + struct.pack(">HHI", 1, int(wire.MsgType.HELLO), 4 << 20)
    body = b"\0" * ((4 << 20) - 1)
    conns = []
    for _ in range(count):
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(10)
        c.connect(str(sock))
        conns.append(c)
        with contextlib.suppress(OSError):  # the agent refused after the header and closed
            c.sendall(header + body)
    return conns


TOKEN = "measure-token-0123456789"


def cache_job(state_dir: Path) -> None:
    """Job ``j`` on disk with ``TOKEN``: a rank is welcomed with the controller away."""
    jobs = state_dir / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    doc = {"version": 1, "job_id": "j", "token": TOKEN, "epoch": 2, "known": True,
           "bindings": [["dp", 0, 0, 0, 1, 0, 0xC001, 1, 2]]}  # fmt: skip
    (jobs / "j.json").write_text(json.dumps(doc))


def hello(sock: Path) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(15)
        s.connect(str(sock))
        s.sendall(wire.encode(wire.Hello("j", TOKEN)))
        raw = s.recv(wire.HEADER.size, socket.MSG_WAITALL)
        header = wire.parse_header(raw)
        answer = wire.decode(header, s.recv(header.length, socket.MSG_WAITALL))
    return f"{type(answer).__name__}: {getattr(answer, 'message', '')}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="c4p-ml-") as tmp:
        config, sock = agent_config(Path(tmp) / "m", "h0", f"127.0.0.1:{free_port()}")
        with agent(config) as child:
            time.sleep(1)
            before = rss_kib(child.pid)
            conns = flood(sock, args.connections)
            time.sleep(1)
            after = rss_kib(child.pid)
            for c in conns:
                c.close()
        print(
            f"memory: {args.connections} x 4 MiB declared: VmRSS {before // 1024} MiB -> "
            f"{after // 1024} MiB (+{(after - before) // 1024} MiB)"
        )
        doc = yaml.safe_load(config.read_text())
        limit = doc["bindings"].setdefault("max_sessions", 1024)
        config.write_text(yaml.safe_dump(doc))
        cache_job(config.parent / "state")
        with agent(config):
            idle = []
            for _ in range(limit):
                c = socket.socket(socket.AF_UNIX)
                c.connect(str(sock))
                idle.append(c)
            time.sleep(0.5)
            got = hello(sock)
            for c in idle:
                c.close()
        print(f"lockout: {limit} idle connections, then a rank's HELLO gets {got}")


if __name__ == "__main__":
    main()
