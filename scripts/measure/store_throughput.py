"""Measure: write throughput of the etcd store vs the SQLite store for one 1,024-rank job.

    .venv/bin/python scripts/measure/store_throughput.py [--ranks 1024] [--rounds 30]

The job: 1,024 ranks on 128 hosts x 8 NICs, a ring communicator with 8 channels and 2 QPs per
connection (16,384 bindings, each with a 5-hop path), plus three smaller communicators. Each
store, side by side on the same disk: register the job, put its intents, commit the first epoch
(every binding), then ``--rounds`` re-plans that each change 1% of the bindings, and
``--rounds`` intent updates; then the etcd store is loaded as a promotion loads it, by a read
of etcd and from a follower's warm copy (Watch). SQLite runs with ``synchronous: full`` (fsync
per commit); etcd is a real 3-member cluster on loopback (each member fsyncs its WAL), fenced
by a real election.
The machine is shared: compare the ratio, not the absolute times.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from c4p.store import (
    CommunicatorRecord,
    DecisionRecord,
    DecisionResult,
    EpochCommit,
    HeldBinding,
    JobRecord,
    SqliteStore,
)
from c4p.store.base import Store
from c4p.store.election import Election, LeaderInfo
from c4p.store.etcd import EtcdStore
from c4p.store.etcd_watch import WarmCopy
from c4p.store.etcdclient import EtcdClient
from c4p.testing.etcd_cluster import EtcdCluster
from solver.workload.jobs import CommunicatorSpec, RankSpec
from southbound.bindings import Binding
from topology.roce import flow_label_for_sport

parser = argparse.ArgumentParser()
parser.add_argument("--ranks", type=int, default=1024)
parser.add_argument("--rounds", type=int, default=30)
args = parser.parse_args()

N = args.ranks
CHANNELS, QPS = 8, 2


def host(rank: int) -> str:
    return f"h{rank // 8:04d}"


def job(revision: int) -> JobRecord:
    return JobRecord(
        job_id="big",
        ranks=tuple(RankSpec(rank=r, host=host(r), nic=f"nic{r % 8}") for r in range(N)),
        incarnation=1,
        digest="d",
        registered_at=1.0,
        registered_epoch=0,
        revision=revision,
    )


def comms(version: int) -> list[CommunicatorRecord]:
    specs = [{"id": "dp", "pattern": "ring", "channels": CHANNELS, "qps_per_connection": QPS}]
    specs += [{"id": f"tp{i}", "pattern": "ring", "ranks": list(range(i * 8, i * 8 + 8))}
              for i in range(3)]  # fmt: skip
    return [
        CommunicatorRecord(
            spec=CommunicatorSpec.model_validate(s),
            version=version,
            digest=f"{s['id']}{version}",
            accepted_at=2.0,
            connections=N * CHANNELS,
            flows=N * CHANNELS * QPS,
        )
        for s in specs
    ]


def binding(conn: int, qp: int, epoch: int, salt: int) -> HeldBinding:
    src = conn % N
    dst = (src + 1) % N
    sport = 0xC000 + (conn * 31 + qp * 7 + salt) % 0x4000
    s_nic, d_nic = f"{host(src)}:nic{src % 8}p0", f"{host(dst)}:nic{dst % 8}p0"
    path = (s_nic, f"leaf-{src // 64:02d}-r{src % 8}", f"spine-{(conn + qp) % 16:02d}",
            f"leaf-{dst // 64:02d}-r{dst % 8}", d_nic)  # fmt: skip
    return HeldBinding(
        binding=Binding(
            job="big",
            communicator="dp",
            connection=conn,
            qp=qp,
            src=s_nic,
            dst=d_nic,
            sport=sport,
            flow_label=flow_label_for_sport(sport),
            path=path,
            epoch=epoch,
        ),
        src_rank=src,
        dst_rank=dst,
        channel=conn // N,
    )


def decision(sequence: int, epoch: int) -> DecisionRecord:
    return DecisionRecord(
        sequence=sequence, epoch=epoch, at=3.0, reason="measure", result=DecisionResult.PLANNED
    )


def run(name: str, store: Store) -> dict[str, float]:
    store.load()
    out: dict[str, float] = {}
    t = time.perf_counter()
    store.register_job(job(0), 1)
    store.put_intents(job(1), comms(1), [])
    out["register+intents s"] = time.perf_counter() - t
    full = tuple(binding(c, q, 1, 0) for c in range(N * CHANNELS) for q in range(QPS))
    t = time.perf_counter()
    store.commit_epoch(EpochCommit(decision(1, 1), full))
    out["first epoch s"] = time.perf_counter() - t
    out["bindings"] = len(full)
    step = len(full) // 100
    t = time.perf_counter()
    for r in range(args.rounds):
        epoch = r + 2
        changed = tuple(
            binding(c, q, epoch, epoch)
            for i in range(step)
            for c, q in [divmod((r * step + i) % len(full), QPS)]
        )
        store.commit_epoch(EpochCommit(decision(epoch, epoch), changed))
    out["re-plan (1%) commits/s"] = args.rounds / (time.perf_counter() - t)
    t = time.perf_counter()
    for r in range(args.rounds):
        store.put_intents(job(r + 2), comms(r + 2)[:1], [])
    out["intent updates/s"] = args.rounds / (time.perf_counter() - t)
    state = store.load()
    assert len(state.bindings["big"]) == len(full), name
    print(name, {k: round(v, 3) for k, v in out.items()})
    return out


root = Path(tempfile.mkdtemp(prefix="c4p-store-measure-"))
sqlite = run("sqlite", SqliteStore(root / "c4p.db"))
with EtcdCluster(3) as cluster:
    client = EtcdClient(cluster.endpoints, timeout=30.0)
    store = EtcdStore(client, "/measure/")
    election = Election(client, store.leader_key, LeaderInfo("m", "127.0.0.1:1"), 30)
    store.fence = election.campaign()
    etcd = run("etcd (3 members)", store)
    # What a promotion costs at this size: a read of etcd vs the follower's warm copy.
    revision = client.range(b"/measure/manifest").header.revision
    copy = WarmCopy(EtcdClient(cluster.endpoints, timeout=30.0), b"/measure/").start()
    assert copy.snapshot(revision, 60.0) is not None
    t = time.perf_counter()
    EtcdStore(EtcdClient(cluster.endpoints, timeout=30.0), "/measure/").load()
    cold = time.perf_counter() - t
    t = time.perf_counter()
    kv = copy.snapshot(revision, 0.0)
    assert kv is not None
    EtcdStore(EtcdClient(cluster.endpoints, timeout=30.0), "/measure/").load_from(
        kv, copy.bindings()
    )
    warm = time.perf_counter() - t
    copy.stop()
    print(f"promotion load: read from etcd {cold:.3f} s, from the warm copy {warm:.3f} s")
print("\netcd / sqlite:")
for key in sqlite:
    if key != "bindings":
        print(f"  {key}: sqlite {sqlite[key]:.3f}, etcd {etcd[key]:.3f}, "
              f"ratio {etcd[key] / sqlite[key]:.2f}")  # fmt: skip
