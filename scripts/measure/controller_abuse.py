"""Measure: what one abusive client costs a real ``c4p serve`` and its neighbours (issue 33).

    .venv/bin/python scripts/measure/controller_abuse.py [--seconds 8]

Starts ``c4p serve`` as a child process on 127.0.0.1 (a 6-leaf fabric, a store in a temporary
directory) and runs two scenarios against it over gRPC:

* **bomb**: one SubmitIntents of 9 (``--communicators``) explicit communicators x 65,000
  connections whose ranks are out of range (about 3.5 MB). Reported: the answer's code and problem count, the server's CPU
  seconds (``/proc/<pid>/stat`` utime+stime) and resident memory growth (``VmRSS``, and the
  peak ``VmHWM``) over the call, and how long an admin ListJobs issued meanwhile took.
* **lockout**: a released job's client retries SubmitIntents with its dead token at 10/s for
  ``--seconds`` while another job submits intents and watches its bindings and an operator
  drains and restores a link, all from 127.0.0.1. Reported: the share of the neighbours' calls
  that failed, by code.

Run it on two checkouts (``--c4p DIR`` runs that checkout's ``c4p serve``) to compare.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import yaml

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import flow_intent_pb2_grpc
from c4p.api.v1 import intents_pb2 as pb
from c4p.client import AdminClient, ApiError, FlowIntentClient, communicator
from c4p.files import save_fabric
from topology.generators import generate

ADMIN = "measure-admin-token-0123456789"

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=8.0)
parser.add_argument(
    "--communicators", type=int, default=9, help="Of the bomb (4: under the request's count cap)."
)
parser.add_argument("--c4p", type=Path, default=Path(__file__).resolve().parents[2])
args = parser.parse_args()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def start(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    fabric = generate("leaf-spine", leaves=6, spines=4, hosts_per_leaf=1, nics_per_host=2)
    save_fabric(fabric, directory / "fabric.json")
    config = {
        "fabric": {"path": "fabric.json"},
        "listen": {"address": "127.0.0.1:0", "grace_s": 0.2},
        "store": {"path": "c4p.db", "synchronous": "normal"},
        "auth": {"admin": [{"value": ADMIN}]},
        "metrics": {"address": None},
        "logging": {"level": "error"},
        "planner": {"budget_s": 0.5},
    }
    (directory / "c.yaml").write_text(yaml.safe_dump(config))
    ready = directory / "ready"
    child = subprocess.Popen(
        [sys.executable, "-m", "c4p", "serve", "-c", "c.yaml", "--ready-file", str(ready)],
        cwd=directory,
        env={**os.environ, "PYTHONPATH": str(args.c4p)},
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("c4p serve did not start")
        time.sleep(0.05)
    return child, ready.read_text().strip()


def bomb(pid: int, address: str, hosts: list[str]) -> None:
    admin = AdminClient(address, ADMIN)
    with FlowIntentClient(address, attempts=1) as flow:
        job = flow.register_job("bomb", hosts=hosts[:2])
        admin.jobs()
        comms = [
            communicator(
                f"x{c}",
                pattern="explicit",
                connections=[
                    pb.ConnectionIntent(src_rank=100 + k % 20, dst_rank=120 + k % 7)
                    for k in range(65_000)
                ],
            )
            for c in range(args.communicators)
        ]
        size = sum(c.ByteSize() for c in comms)
        cpu0, rss0 = cpu_s(pid), memory_mb(pid, "VmRSS")
        stall: list[float] = []

        def poll() -> None:
            time.sleep(0.05)
            t = time.monotonic()
            admin.jobs()
            stall.append(time.monotonic() - t)

        poller = threading.Thread(target=poll)
        poller.start()
        t0 = time.monotonic()
        try:
            job.submit(comms)
            outcome = "accepted"
        except ApiError as exc:
            outcome = f"{exc.code.name}, {len(exc.problems)} problems, first {exc.problems[:1]}"
        wall = time.monotonic() - t0
        poller.join()
        job.release()
        print(f"bomb: {size / 1e6:.1f} MB SubmitIntents -> {outcome}")
        print(
            f"bomb: server CPU {cpu_s(pid) - cpu0:.2f} s, RSS +{memory_mb(pid, 'VmRSS') - rss0:.0f}"
            f" MB (peak {memory_mb(pid, 'VmHWM'):.0f} MB), answered in {wall:.2f} s; an admin"
            f" ListJobs meanwhile took {stall[0]:.2f} s"
        )
    admin.close()


def lockout(address: str, hosts: list[str], seconds: float) -> None:
    stop = threading.Event()
    codes: Counter[str] = Counter()
    lock = threading.Lock()

    def note(kind: str, code: str) -> None:
        with lock:
            codes[f"{kind} {code}"] += 1

    admin = AdminClient(address, ADMIN)
    with FlowIntentClient(address, attempts=1) as flow:
        dead = flow.register_job("released", hosts=hosts[:2])
        dead.release()
        alive = flow.register_job("alive", hosts=hosts[2:4])

        def retry() -> None:
            for _ in range(int(seconds * 10)):  # 10/s, bounded
                if stop.is_set():
                    return
                try:
                    dead.submit([communicator("dp")])
                except ApiError as exc:
                    note("released", exc.code.name)
                time.sleep(0.1)

        channel = grpc.insecure_channel(address)
        stub = flow_intent_pb2_grpc.FlowIntentServiceStub(channel)

        def watch_once() -> None:
            """Open WatchBindings and read its first update (the job's full set)."""
            request = fi.WatchBindingsRequest(job_id=alive.job_id)
            metadata = (("authorization", f"Bearer {alive.token}"),)
            stream = stub.WatchBindings(request, metadata=metadata, timeout=5)
            try:
                next(iter(stream))
                note("watch", "OK")
            except grpc.RpcError as exc:
                note("watch", exc.code().name)
            finally:
                stream.cancel()

        threads = [threading.Thread(target=retry)]
        for t in threads:
            t.start()
        link = admin.fabric().links[0].id
        end = time.monotonic() + seconds
        k = 0
        while time.monotonic() < end:
            k += 1
            try:
                alive.submit([communicator("dp", version=k, rate=1.0 + k % 5)])
                note("submit", "OK")
            except ApiError as exc:
                note("submit", exc.code.name)
            watch_once()
            try:
                (admin.drain(link, "m", wait=False) if k % 2 else admin.restore(link, wait=False))
                note("drain", "OK")
            except ApiError as exc:
                note("drain", exc.code.name)
            try:
                flow.register_job(f"new{k}", hosts=hosts[4:6]).release()
                note("register", "OK")
            except ApiError as exc:
                note("register", exc.code.name)
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(seconds + 10)
        channel.close()
    admin.close()
    neighbours = {k: v for k, v in codes.items() if not k.startswith("released")}
    failed = sum(v for k, v in neighbours.items() if not k.endswith("OK"))
    total = sum(neighbours.values())
    print(f"lockout: {dict(sorted(codes.items()))}")
    print(f"lockout: neighbours' calls failed {failed}/{total} ({100 * failed / total:.0f}%)")


with tempfile.TemporaryDirectory() as tmp:
    child, address = start(Path(tmp))
    try:
        names = [f"h{k}" for k in range(6)]
        operator = AdminClient(address, ADMIN)
        names = sorted({x.a.split(":")[0] for x in operator.fabric().links if ":" in x.a})
        operator.close()
        bomb(child.pid, address, names)
        lockout(address, names, args.seconds)
    finally:
        child.terminate()
        child.wait(30)
