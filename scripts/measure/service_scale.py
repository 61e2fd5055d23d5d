"""Measure: ``c4p serve`` at scale (issue 31): start-up, submit -> bindings, link-down -> push, RSS.

    .venv/bin/python scripts/measure/service_scale.py --gpus 131072 --jobs 64
    .venv/bin/python scripts/measure/service_scale.py --gpus 16384 --jobs 8

Generates the fat-tree of ``--gpus`` GPUs with ``c4p fabric generate`` (the 131,072 one with the
``--set`` keys docs/benchmarks-scale.md names; once, into ``--dir``, default
/work/scratch/svc, reused if there), starts ``c4p serve`` on it as a child process (fabric
from the file, no switches, a fresh SQLite store in ``--dir``, gRPC on 127.0.0.1 only) and,
from this process over gRPC:

* **start-up**: from spawning ``c4p serve`` to its ready file (written once health is SERVING;
  a gRPC health check then confirms SERVING);
* **submit -> all bindings**: ``--jobs`` jobs of ``--ranks`` ranks each (whole hosts, every NIC
  a rank; the hosts shuffled with seed 0, so a job spreads over pods) are registered and each
  starts its WatchBindings; once a step covered the registrations (an admin Replan that
  waits), each submits one ring (rail layout: one ring per rail over NIC r of each host) with
  2 QPs per connection, all at once from a thread each. Reported: the submits' time, and from the first submit until every job's watch holds bindings covering its submit
  (``intent_revision``), with the bindings counted;
* **link-down -> new bindings pushed**: an admin DrainLink of ``--fail`` (with a fabric from a
  file there are no switches to report a link down; a drain is the operator's word for the same
  thing: it takes the link out of the effective fabric the planner reads and enqueues a key for
  the reconcile loop, which re-plans and pushes the differences exactly as for a link-down
  event). Reported: until the drain's decision is committed, and until every job the decision
  changed has received its new epoch on its watch;
* **memory**: the server's resident set after each phase and its peak (``VmHWM``);
* **stalls**: the slowest of the health Checks sent every 50 ms during each phase (how long the
  service's event loop, which answers every call and feeds every stream, was held).

``--debounce`` widens the controller's debounce (``max_delay_s`` 30 s) so the burst of submits
is planned in one step; with the defaults it lands in several, and a step that adds many new
flows to a previous plan pays the fat-tree repair's search over orders of them
(``solver.repair.treemoves._orders``), which at 131,072 GPUs grew the server past 20 GB
(docs/benchmarks-scale.md, "The service at scale"). ``--rss-limit-gb`` kills the server
beyond that resident size (the machine is shared).

Load matters on a shared machine: ``uptime`` is printed before and after. Results as one JSON
line at the end (``--json FILE`` also writes them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from c4p.client import AdminClient, FlowIntentClient, communicator
from c4p.client.sync import BindingWatch, JobSession
from c4p.testing.processes import alive, kill, spawn

ADMIN = "measure-admin-token-0123456789"
BIG = [
    "--set", "pods=128", "--set", "leaves_per_pod=32", "--set", "aggs_per_pod=32",
    "--set", "cores=1024", "--set", "hosts_per_leaf=32", "--set", "nics_per_host=8",
]  # fmt: skip
FAIL = {131_072: "spine-p086-15--core-0488", 16_384: "spine-p00-00--core-0000"}

parser = argparse.ArgumentParser()
parser.add_argument("--gpus", type=int, default=131_072)
parser.add_argument("--jobs", type=int, default=64)
parser.add_argument("--ranks", type=int, default=2048)
parser.add_argument("--qps", type=int, default=2)
parser.add_argument("--fail", default="", help="The link to drain (default: per --gpus).")
parser.add_argument("--dir", type=Path, default=Path("/work/scratch/svc"))
parser.add_argument("--budget", type=float, default=2.0, help="planner.budget_s")
parser.add_argument("--timeout", type=float, default=900.0, help="Per phase, seconds.")
parser.add_argument("--json", type=Path, default=None)
parser.add_argument(
    "--c4p", type=Path, default=None, help="Serve this checkout's code (PYTHONPATH) to compare."
)
parser.add_argument(
    "--debounce",
    type=float,
    default=0.0,
    help="controller.debounce_s (max_delay_s 30 s) so the burst of submits is one plan; 0: the "
    "defaults (0.05 / 0.2 s: the burst lands in several plans).",
)
parser.add_argument(
    "--rss-limit-gb", type=float, default=10.0, help="Kill the server beyond this (shared machine)."
)
args = parser.parse_args()
ROOT = Path(__file__).resolve().parents[2]
C4P = [sys.executable, "-P", "-m", "c4p"]  # -P: not the cwd's checkout first (--c4p)


def status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def fabric_file() -> Path:
    path: Path = args.dir / f"fat-tree-{args.gpus}.json"
    if not path.exists():
        extra = BIG if args.gpus == 131_072 else []
        cmd = [*C4P, "fabric", "generate", "fat-tree", "--gpus", str(args.gpus), *extra]
        t = time.monotonic()
        subprocess.run([*cmd, "-o", str(path), "-q"], check=True, cwd=ROOT)  # noqa: S603
        print(f"generated {path} in {time.monotonic() - t:.1f} s", flush=True)
    return path


def hosts_of(path: Path) -> tuple[list[str], int]:
    """The fabric's hosts (in file order) and NICs per host, read without building a Fabric."""
    data = json.loads(path.read_text())
    hosts = [h["name"] for h in data["hosts"]]
    nics = len(data["hosts"][0]["nics"])
    return hosts, nics


def start_server(directory: Path, fabric: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    config: dict[str, Any] = {
        "fabric": {"path": str(fabric)},
        "listen": {"address": "127.0.0.1:0", "grace_s": 0.5},
        "store": {"path": str(directory / "c4p.db"), "synchronous": "normal"},
        "auth": {"admin": [{"value": ADMIN}]},
        "metrics": {"address": None},
        "logging": {"level": "info"},
        "planner": {"budget_s": args.budget},
    }
    if args.debounce:
        config["controller"] = {"debounce_s": args.debounce, "max_delay_s": 30.0}
    (directory / "c.yaml").write_text(yaml.safe_dump(config))
    ready = directory / "ready"
    ready.unlink(missing_ok=True)
    t = time.monotonic()
    child = spawn(
        [*C4P, "serve", "-c", str(directory / "c.yaml"), "--ready-file", str(ready)],
        directory / "log",
    )
    deadline = t + args.timeout
    while not ready.exists() or not ready.read_text().strip():
        if child.poll() is not None or time.monotonic() > deadline:
            kill(child, 10)
            raise SystemExit(f"c4p serve did not start: see {directory / 'log'}")
        time.sleep(0.02)
    took = time.monotonic() - t
    address = ready.read_text().strip()
    with grpc.insecure_channel(address) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert answer.status == health_pb2.HealthCheckResponse.SERVING, answer
    return child, address, took


class Stalls:
    """A health Check every 50 ms on a channel of its own while a phase runs: the slowest
    answer says how long the service's event loop was held (every call and stream waits)."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = health_pb2_grpc.HealthStub(self.channel)
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            t = time.monotonic()
            try:
                self.stub.Check(health_pb2.HealthCheckRequest(), timeout=args.timeout)
            except grpc.RpcError:
                return
            self.worst = max(self.worst, time.monotonic() - t)

    def __enter__(self) -> Stalls:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(args.timeout)
        self.channel.close()


SERVER: subprocess.Popen[bytes] | None = None
"""The ``c4p serve`` being measured (waits end early when it is gone)."""


def wait_all(
    watches: list[BindingWatch], done: Any, start: float, timeout: float
) -> list[float | None]:
    """Poll every watch's mirror until ``done(i, mirror)`` holds for all (or ``timeout``): the
    seconds from ``start`` at which each first held (``None``: never)."""
    seen: list[float | None] = [None] * len(watches)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(s is None for s in seen) and alive(SERVER):
        for i, w in enumerate(watches):
            if seen[i] is None and done(i, w.mirror):
                seen[i] = time.monotonic() - start
        time.sleep(0.01)
    return seen


def main() -> dict[str, Any]:
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.c4p is not None:  # the child inherits it (c4p.testing.processes.spawn)
        os.environ["PYTHONPATH"] = str(args.c4p.resolve())
    fabric = fabric_file()
    hosts, nics = hosts_of(fabric)
    per_job = args.ranks // nics
    if per_job * args.jobs > len(hosts):
        raise SystemExit(f"{args.jobs} x {per_job} hosts > the fabric's {len(hosts)}")
    random.Random(0).shuffle(hosts)
    run = args.dir / f"run-{args.gpus}"
    run.mkdir(exist_ok=True)
    for name in ("c4p.db", "c4p.db-wal", "c4p.db-shm", "log"):
        (run / name).unlink(missing_ok=True)
    out: dict[str, Any] = {"gpus": args.gpus, "jobs": args.jobs, "ranks": args.ranks}
    out["debounce_s"] = args.debounce
    out["c4p"] = str(args.c4p or ROOT)
    out["load_before"] = load()
    print(f"load {out['load_before']}", flush=True)
    child, address, out["startup_s"] = start_server(run, fabric)
    pid = child.pid
    global SERVER
    SERVER = child
    guard = threading.Event()

    def watchdog() -> None:
        """The machine is shared: a server past ``--rss-limit-gb`` is killed, and said so."""
        while not guard.wait(0.2) and child.poll() is None:
            rss = status_mb(pid, "VmRSS")
            if rss > args.rss_limit_gb * 1024:
                print(f"KILLED: server RSS {rss:.0f} MB > {args.rss_limit_gb} GB", flush=True)
                out["killed_at_rss_mb"] = round(rss)
                kill(child, 10)
                return

    threading.Thread(target=watchdog, daemon=True).start()
    out["rss_serving_mb"] = round(status_mb(pid, "VmRSS"))
    out["cpu_startup_s"] = round(cpu_s(pid), 2)
    print(f"serving at {address} after {out['startup_s']:.2f} s, RSS {out['rss_serving_mb']} MB")
    flow = FlowIntentClient(address, timeout=args.timeout)
    admin = AdminClient(address, ADMIN, timeout=args.timeout)
    watches: list[BindingWatch] = []
    try:
        t = time.monotonic()
        sessions: list[JobSession] = []
        for j in range(args.jobs):
            mine = hosts[j * per_job : (j + 1) * per_job]
            sessions.append(flow.register_job(f"job-{j:02d}", hosts=mine))
            watches.append(sessions[-1].watch())
        out["register_s"] = round(time.monotonic() - t, 2)
        # A step that covers the registrations first: the submits then open a debounce window
        # of their own (else the registrations' window may close on part of the submits).
        admin.replan("service_scale: registrations", wait=True)
        ring = communicator("dp", pattern="ring", qps_per_connection=args.qps)
        cpu0 = cpu_s(pid)
        t0 = time.monotonic()
        with ThreadPoolExecutor(len(sessions)) as pool:  # the jobs submit independently
            revisions = list(pool.map(lambda s: s.submit([ring]).revision, sessions))
        out["submit_calls_s"] = round(time.monotonic() - t0, 2)
        with Stalls(address) as stalls:
            seen = wait_all(
                watches, lambda i, m: m.intent_revision >= revisions[i], t0, args.timeout
            )
        out["health_check_worst_s"] = round(stalls.worst, 2)
        if any(s is None for s in seen):
            raise SystemExit(f"{sum(s is None for s in seen)} jobs got no bindings in time")
        out["submit_to_all_bindings_s"] = round(max(s for s in seen if s is not None), 2)
        out["submit_to_first_bindings_s"] = round(min(s for s in seen if s is not None), 2)
        out["cpu_plan_s"] = round(cpu_s(pid) - cpu0, 2)
        out["bindings"] = sum(len(w.mirror.bindings) for w in watches)
        out["rss_bound_mb"] = round(status_mb(pid, "VmRSS"))
        plan = admin.plan()
        out["epoch_after_submit"] = int(plan.epoch)
        out["plan_flows"] = int(plan.decision.flows)
        out["plan_max_utilization"] = round(plan.decision.max_utilization, 3)
        out["plan_bound"] = round(plan.decision.bound, 3)
        out["plan_solve_s"] = round(plan.decision.solve_seconds, 2)
        print(
            f"{args.jobs} submits in {out['submit_calls_s']} s; all {out['bindings']} bindings"
            f" after {out['submit_to_all_bindings_s']} s (first job {out['submit_to_first_bindings_s']} s),"
            f" a health check waited up to {out['health_check_worst_s']} s,"
            f" RSS {out['rss_bound_mb']} MB",
            flush=True,
        )
        link = args.fail or FAIL[args.gpus]
        before = [w.mirror.epoch for w in watches]
        cpu0 = cpu_s(pid)
        t0 = time.monotonic()
        changed: list[float | None] = [None] * len(watches)
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                for i, w in enumerate(watches):
                    if changed[i] is None and w.mirror.epoch > before[i]:
                        changed[i] = time.monotonic() - t0
                stop.wait(0.01)

        poller = threading.Thread(target=poll)
        poller.start()
        with Stalls(address) as stalls:
            answer = admin.drain(link, "service_scale measurement", wait=True)
            decision = answer.decision
            deadline = time.monotonic() + args.timeout
            while decision.epoch <= out["epoch_after_submit"] and time.monotonic() < deadline:
                time.sleep(0.5)  # the drain's wait (budget + 60 s) ran out: ask for the plan
                decision = admin.plan().decision
            out["drain_decided_s"] = round(time.monotonic() - t0, 2)
            names = [s.job_id for s in sessions]
            expect = [names.index(j) for j in decision.jobs_changed if j in names]
            deadline = time.monotonic() + args.timeout
            while (
                any(changed[i] is None for i in expect)
                and time.monotonic() < deadline
                and alive(child)
            ):
                time.sleep(0.01)
            stop.set()
            poller.join()
        out["drain_health_check_worst_s"] = round(stalls.worst, 2)
        pushed = [changed[i] for i in expect]
        out["drain_jobs_changed"] = len(expect)
        out["drain_bindings_changed"] = int(decision.bindings_changed + decision.bindings_added)
        out["drain_moved"] = int(decision.moved)
        out["drain_solve_s"] = round(decision.solve_seconds, 2)
        out["drain_to_all_pushed_s"] = (
            round(max(p for p in pushed if p is not None), 2)
            if pushed and all(p is not None for p in pushed)
            else None
        )
        out["cpu_drain_s"] = round(cpu_s(pid) - cpu0, 2)
        out["rss_after_drain_mb"] = round(status_mb(pid, "VmRSS"))
        out["peak_rss_mb"] = round(status_mb(pid, "VmHWM"))
        print(
            f"drain {link}: decided after {out['drain_decided_s']} s, {len(expect)} jobs /"
            f" {out['drain_bindings_changed']} bindings changed, all pushed after"
            f" {out['drain_to_all_pushed_s']} s; peak RSS {out['peak_rss_mb']} MB",
            flush=True,
        )
    finally:
        guard.set()
        for w in watches:
            w.stop(5)
        flow.close()
        admin.close()
        child.terminate()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            kill(child, 10)
    out["load_after"] = load()
    return out


if __name__ == "__main__":
    result = main()
    print(json.dumps(result), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
