"""Measure: failover of a highly available controller, ``--kills`` times (default 20).

    .venv/bin/python scripts/measure/ha_failover.py [--kills 20] [--replicas 3] [--ttl 3]

A real 3-member etcd cluster and ``--replicas`` ``c4p serve`` processes on loopback. Three jobs
hold bindings (streams open, an emulated transport applies them); a fourth job's intents change
continuously (the load). Each round: kill -9 the leader; time until a new leader answers an admin
read ("serves") and until the next write is acknowledged; then compare, before and after, every
job's intents (ids and versions: none acknowledged may be lost) and the three jobs' ports (from
the open streams and from a fresh full set: none may change), then restart the killed replica.
Prints one line per round and the median and worst.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from c4p.client import AdminClient, ApiError, FlowIntentClient, communicator
from c4p.client.emulated import EmulatedTransport
from c4p.testing.etcd_cluster import EtcdCluster
from c4p.testing.replicas import ADMIN_TOKEN, ReplicaGroup
from topology.generators import generate

parser = argparse.ArgumentParser()
parser.add_argument("--kills", type=int, default=20)
parser.add_argument("--replicas", type=int, default=3)
parser.add_argument("--ttl", type=int, default=3, help="leader lease TTL (the product default)")
args = parser.parse_args()

fabric = generate("leaf-spine", leaves=8, spines=4, hosts_per_leaf=1, nics_per_host=2)
hosts = [h.name for h in fabric.hosts]
root = Path(tempfile.mkdtemp(prefix="c4p-ha-measure-"))


def leading_at(log: Path) -> float:
    """Wall-clock time of the newest "leading" line of a replica's JSON log."""
    for line in reversed(log.read_text().splitlines()):
        if '"event": "leading"' in line:
            return datetime.fromisoformat(json.loads(line)["ts"]).timestamp()
    return float("nan")


def intents(admin: AdminClient) -> dict[str, dict[str, int]]:
    return {j.job_id: {c.id: c.version for c in j.communicators} for j in admin.jobs().jobs}


with (
    EtcdCluster(3) as etcd,
    ReplicaGroup(root, fabric, etcd.endpoints, count=args.replicas, lease_ttl_s=args.ttl) as group,
):
    group.wait_leader()
    flow = FlowIntentClient(group.addresses, attempts=200, timeout=10)
    admin = AdminClient(group.addresses, ADMIN_TOKEN, timeout=10)
    transports: dict[str, EmulatedTransport] = {}
    watches = {}
    sessions = {}
    for k, name in enumerate(("a", "b", "c")):
        s = flow.register_job(name, hosts=[hosts[2 * k], hosts[2 * k + 1]])
        reply = s.submit([communicator("dp", qps_per_connection=2, channels=2)])
        transports[name] = EmulatedTransport()
        watches[name] = s.watch(on_change=transports[name])
        assert watches[name].wait_revision(reply.revision, 60)
        sessions[name] = s
    d = flow.register_job("d", hosts=[hosts[6], hosts[7]])
    acked: list[tuple[float, float, str, int]] = []  # sent, acknowledged, communicator, version
    stop = threading.Event()

    def load() -> None:
        for i in range(1, 10**9):
            if stop.is_set():
                return
            comm = f"c{i % 4}"
            sent = time.monotonic()
            try:
                d.submit([communicator(comm, version=i)])
            except ApiError as exc:
                print(f"load stopped: {exc}", file=sys.stderr)
                return
            acked.append((sent, time.monotonic(), comm, i))
            time.sleep(0.01)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    served_s: list[float] = []
    elected_s: list[float] = []
    write_s: list[float] = []
    problems = 0
    for round_ in range(1, args.kills + 1):
        time.sleep(1.0)
        leader = group.by_name(group.wait_leader())
        ports_before = {n: dict(t.ports) for n, t in transports.items()}
        applied_before = {n: t.applied for n, t in transports.items()}
        before = intents(admin)
        killed = time.monotonic()
        killed_wall = time.time()
        leader.kill()
        served = None
        for _ in range(10_000):
            try:
                admin.jobs()
                if group.leader() not in (None, leader.name):
                    served = time.monotonic()
                    break
            except ApiError:
                pass
            time.sleep(0.01)
        assert served is not None
        first_write = None
        for _ in range(10_000):
            later = [t for sent, t, _, _ in acked if sent > killed]
            if later:
                first_write = later[0]
                break
            time.sleep(0.01)
        assert first_write is not None
        served_s.append(served - killed)
        new = group.by_name(group.wait_leader(other_than=leader.name))
        elected_s.append(leading_at(new.log) - killed_wall)
        write_s.append(first_write - killed)
        time.sleep(0.5)
        after = intents(admin)
        acked_now = {}
        for _, t, comm, version in acked:
            if t < killed:
                acked_now[comm] = max(acked_now.get(comm, 0), version)
        lost = [c for c, v in acked_now.items() if after["d"].get(c, 0) < v]
        jobs_same = set(before) == set(after) and all(
            before[j] == after[j] for j in ("a", "b", "c")
        )
        ports_same = all(transports[n].ports == ports_before[n] for n in transports)
        reapplied = sum(transports[n].applied - applied_before[n] for n in transports)
        fresh = sessions["a"].watch()
        want = len(ports_before["a"])
        full_same = (
            fresh.wait(lambda m, n=want: len(m.bindings) == n, 30)
            and {k: b.udp_sport for k, b in fresh.mirror.snapshot().items()} == ports_before["a"]
        )
        fresh.stop()
        ok = not lost and jobs_same and ports_same and reapplied == 0 and full_same
        problems += 0 if ok else 1
        print(
            f"kill {round_:2d}: {leader.name} -> {group.leader()}: leading (its log) after "
            f"{elected_s[-1]:.2f} s, serving (a client) after {served_s[-1]:.2f} s, "
            "a write sent after the kill acknowledged after "
            f"{write_s[-1]:.2f} s; "
            f"intents lost {len(lost)}, jobs/intents equal {jobs_same}, ports equal "
            f"{ports_same} (re-applied {reapplied}), full set equal {full_same}"
        )
        leader.start()  # back as a follower
    stop.set()
    worker.join(30)
    for w in watches.values():
        w.stop()
    flow.close()
    admin.close()

print(
    f"\n{args.kills} kills, {args.replicas} replicas, lease TTL {args.ttl} s: leading after "
    f"median {statistics.median(elected_s):.2f} s, worst {max(elected_s):.2f} s; serving after "
    f"median {statistics.median(served_s):.2f} s, worst {max(served_s):.2f} s; first write "
    f"acknowledged after median {statistics.median(write_s):.2f} s, worst {max(write_s):.2f} s; "
    f"rounds with a difference: {problems}"
)
