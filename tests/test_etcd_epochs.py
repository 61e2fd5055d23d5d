"""Per-epoch binding differences in the etcd store, on a real 3-member etcd cluster (loopback):
a re-plan writes one small difference in one transaction; compaction bounds the differences and
reads back the same state; the same commits read back equal to the SQLite store's; a store
written in the format before differences reads and grows; and a writer killed (``kill -9``)
between any two steps of a commit, a compaction included, leaves a state a reader reconstructs
as the last acknowledged epoch or the one after it, never anything else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_store import decision, held, job

from c4p.store import EpochCommit, SqliteStore, etcd_epochs
from c4p.store.base import HeldBinding
from c4p.store.etcd import EtcdStore, Fence
from c4p.store.etcd_epochs import pack, seq
from c4p.store.etcdclient import EtcdClient
from c4p.store.etcdpb.etcd_rpc_pb2 import RequestOp
from c4p.testing.etcd_cluster import EtcdCluster, etcd_binary
from southbound.routes import QpKey

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(
    etcd_binary() is None, reason="etcd not installed (Debian etcd-server)"
)

QPS = 200
_prefixes = iter(range(1_000_000))


@pytest.fixture(scope="module")
def cluster() -> Iterator[EtcdCluster]:
    with EtcdCluster(3) as c:
        yield c


@pytest.fixture
def prefix() -> str:
    return f"/e{next(_prefixes)}/"


def fenced(endpoints: list[str], prefix: str, revision: int) -> EtcdStore:
    """A store fenced by a leader key the test made (no election: nobody waits for a lease)."""
    store = EtcdStore(EtcdClient(endpoints, timeout=5.0), prefix)
    store.fence = Fence(store.leader_key, revision)
    store.load()
    return store


def leader_key(cluster: EtcdCluster, prefix: str) -> int:
    client = EtcdClient(cluster.endpoints)
    try:
        return int(client.put(prefix.encode() + b"leader", b"test").header.revision)
    finally:
        client.close()


def epoch_commit(epoch: int) -> EpochCommit:
    """Epoch ``epoch`` of a deterministic history: 1 sets every QP, later ones move three and
    withdraw one (so bindings, re-bindings and tombstones all occur)."""
    if epoch == 1:
        return EpochCommit(decision(1, 1), tuple(held(q, 1) for q in range(QPS)))
    moved = sorted({(epoch * 7 + i) % QPS for i in range(3)})
    ups = tuple(held(q, epoch, 0xC000 + (epoch * 97) % 0x3000) for q in moved)
    gone = (epoch * 11) % QPS
    removals: tuple[QpKey, ...] = () if gone in moved else (("a", "dp", 0, gone),)
    return EpochCommit(decision(epoch, epoch), ups, removals)


def expected(last: int) -> tuple[dict[QpKey, HeldBinding], dict[QpKey, int]]:
    """The state after epochs 1..``last`` of :func:`epoch_commit`, replayed in memory."""
    bindings: dict[QpKey, HeldBinding] = {}
    stones: dict[QpKey, int] = {}
    for e in range(1, last + 1):
        c = epoch_commit(e)
        for h in c.upserts:
            bindings[h.key] = h
            stones.pop(h.key, None)
        for k in c.removals:
            bindings.pop(k, None)
            stones[k] = e
    return bindings, stones


def test_a_replan_writes_one_difference_in_one_transaction(
    cluster: EtcdCluster, prefix: str
) -> None:
    store = fenced(cluster.endpoints, prefix, leader_key(cluster, prefix))
    store.register_job(job(), 1)
    for e in (1, 2, 3):
        store.commit_epoch(epoch_commit(e))
    txns: list[int] = []
    real = store._txn
    store._txn = lambda ops, absent=None: txns.append(len(ops)) or real(ops, absent)  # type: ignore[method-assign,func-returns-value]
    store.commit_epoch(epoch_commit(4))
    assert len(txns) == 1  # the difference, the manifest and the decision together
    assert [d.version for d in store._manifest.diffs["a"]] == [2, 3, 4]
    assert store._manifest.bindings["a"].version == 1  # the base is not rewritten
    state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
    assert (state.bindings["a"], state.tombstones["a"]) == expected(4)


def test_compaction_bounds_the_differences_and_reads_the_same(
    cluster: EtcdCluster, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(etcd_epochs, "MAX_DIFFS", 4)
    store = fenced(cluster.endpoints, prefix, leader_key(cluster, prefix))
    store.register_job(job(), 1)
    bases = set()
    for e in range(1, 16):
        store.commit_epoch(epoch_commit(e))
        assert len(store._manifest.diffs.get("a", [])) <= 4
        bases.add(store._manifest.bindings["a"].version)
        state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
        assert (state.bindings["a"], state.tombstones.get("a", {})) == expected(e), e
    assert len(bases) >= 3  # compacted more than once
    # what is left in etcd is exactly what the manifest names
    m = store._manifest
    _, kvs = store.client.scan(store.prefix + b"blob/bdiff/a/")
    assert {kv.key.rsplit(b"/", 2)[1] for kv in kvs} == {
        seq(d.version).encode() for d in m.diffs.get("a", [])
    }
    _, kvs = store.client.scan(store.prefix + b"blob/bindings/a/")
    assert {kv.key.rsplit(b"/", 2)[1] for kv in kvs} == {seq(m.bindings["a"].version).encode()}
    store.release_job("a")
    assert not store.client.scan(store.prefix + b"blob/")[1]
    assert EtcdStore(EtcdClient(cluster.endpoints), prefix).load().bindings == {}


def test_the_same_commits_read_back_as_from_sqlite(
    cluster: EtcdCluster, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs, re-binds, withdrawals, a job emptied and refilled, tombstone pruning: etcd
    (bases + differences, compacting every 3) and SQLite (rows) read back the same state."""
    monkeypatch.setattr(etcd_epochs, "MAX_DIFFS", 3)
    etcd = fenced(cluster.endpoints, prefix, leader_key(cluster, prefix))
    sqlite = SqliteStore(tmp_path / "c4p.db")
    sqlite.load()
    for store in (etcd, sqlite):
        store.register_job(job(), 1)
        store.register_job(job("b"), 2)
    for e in range(1, 25):
        ups = [held(q, e, 0xC000 + 64 * e, "a") for q in range(e % 5)]
        ups += [held(q, e, 0xD000 + 32 * e, "b") for q in range(e % 3, 6)]
        gone: list[QpKey] = [("a", "dp", 0, q) for q in range(e % 5, 5) if e % 4 == 0]
        gone += [("b", "dp", 0, q) for q in range(e % 3) if e % 2]
        commit = EpochCommit(decision(e, e), tuple(ups), tuple(gone), max(0, e - 6))
        etcd.commit_epoch(commit)
        sqlite.commit_epoch(commit)
    mine, theirs = EtcdStore(EtcdClient(cluster.endpoints), prefix).load(), sqlite.load()
    assert mine.bindings == theirs.bindings and mine.bindings
    assert mine.tombstones == theirs.tombstones and mine.tombstones
    assert (mine.epoch, mine.compacted_epoch) == (theirs.epoch, theirs.compacted_epoch)
    sqlite.close()


def test_a_store_written_before_differences_reads_and_grows(
    cluster: EtcdCluster, prefix: str
) -> None:
    """The layout before differences, written key by key as that version wrote it: a manifest
    whose binding refs have no size and no ``diffs``, one base blob per job."""
    client = EtcdClient(cluster.endpoints)
    p = prefix.encode()
    before, stones = expected(5)
    body = {
        "bindings": [json.loads(h.model_dump_json(exclude_defaults=True)) for h in before.values()],
        "tombstones": [[k[1], k[2], k[3], e] for k, e in sorted(stones.items())],
    }
    client.put(p + b"meta/schema", b"c4p-etcd-1")
    client.put(p + b"meta/secret", b"00" * 32)
    client.put(p + b"meta/incarnation", b"1")
    client.put(p + b"jobs/a", json.dumps({"record": json.loads(job().model_dump_json())}).encode())
    client.put(
        p + b"blob/bindings/a/" + seq(5).encode() + b"/00000", pack(json.dumps(body).encode())
    )
    manifest = {"epoch": 5, "fingerprint": "fp5", "bindings": {"a": {"version": 5, "chunks": 1}}}
    client.put(p + b"manifest", json.dumps(manifest).encode())
    state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
    assert (state.epoch, state.bindings["a"], state.tombstones["a"]) == (5, before, stones)
    store = fenced(cluster.endpoints, prefix, leader_key(cluster, prefix))
    for e in range(6, 9):
        store.commit_epoch(epoch_commit(e))
    assert store._manifest.bindings["a"].version == 5 and len(store._manifest.diffs["a"]) == 3
    state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
    assert (state.bindings["a"], state.tombstones["a"]) == expected(8)


WRITER = """
import os, sys
sys.path.insert(0, {tests!r})
from test_etcd_epochs import epoch_commit, fenced, step_kind
from test_store import job
from c4p.store import etcd_epochs
etcd_epochs.MAX_DIFFS = 3
store = fenced({endpoints!r}, {prefix!r}, {revision})
if not store._jobs:
    store.register_job(job(), 1)
real, seen = store._txn, []
def txn(ops, absent=None):
    seen.append(step_kind(ops))
    if seen.count({kind!r}) == {nth}:
        os.kill(os.getpid(), 9)  # kill -9 of the writer before this transaction
    return real(ops, absent)
store._txn = txn
for e in range({first}, {first} + 12):
    store.commit_epoch(epoch_commit(e))
    print(e, flush=True)
"""


def step_kind(ops: list[RequestOp]) -> str:
    """Which step of a commit a transaction is: a base's chunks written ahead (``base``), the
    switch (``manifest``: with a difference, or naming a new base), or the cleanup after a
    compaction (``drop``)."""
    if all(op.HasField("request_delete_range") for op in ops):
        return "drop"
    if any(op.request_put.key.endswith(b"/manifest") for op in ops):
        return "manifest"
    if all(b"/blob/bindings/" in op.request_put.key for op in ops):
        return "base"
    return "other"  # the job's registration


@pytest.mark.parametrize("kind", ["base", "manifest", "drop"])
def test_a_writer_killed_between_any_two_steps_loses_nothing_acknowledged(
    cluster: EtcdCluster, prefix: str, kind: str
) -> None:
    """A writer process commits epochs (compacting every 3 differences) and is ``kill -9``'d
    right before its n-th transaction of one kind, in three runs: before a base is written,
    after a base is written and before the manifest names it (or before a difference lands;
    the third run's n=4 is the manifest of the compaction that replaces three differences),
    after a compaction committed and before what it replaced is deleted. After each kill a
    reader gets the last acknowledged epoch or the one after it (etcd may have committed the
    transaction whose answer the dead writer never read), exactly as committed."""
    revision = leader_key(cluster, prefix)
    acked = 0
    root = str(HERE.parent)
    kills = 0
    for nth in (1, 2, 4) if kind == "manifest" else (1, 2, 3):
        script = WRITER.format(
            tests=str(HERE), endpoints=cluster.endpoints, prefix=prefix, revision=revision,
            kind=kind, nth=nth, first=acked + 1,
        )  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
            cwd=root, env={**os.environ, "PYTHONPATH": root},
        )  # fmt: skip
        assert done.returncode in (0, -signal.SIGKILL), done.stderr
        kills += done.returncode == -signal.SIGKILL
        lines = done.stdout.split()
        acked = int(lines[-1]) if lines else acked
        state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
        assert state.epoch in (acked, acked + 1), (nth, state.epoch, acked)
        if state.epoch:
            assert (state.bindings["a"], state.tombstones.get("a", {})) == expected(state.epoch)
        acked = state.epoch  # the next writer goes on from what etcd holds
    assert kills == 3 and acked >= 2
