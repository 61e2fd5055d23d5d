"""The embedded SQLite store: everything written comes back, a write is all or nothing, and a
process killed with SIGKILL mid-writes loses nothing it had committed."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from c4p.store import (
    CommunicatorRecord,
    DecisionRecord,
    DecisionResult,
    EpochCommit,
    HeldBinding,
    JobRecord,
    LinkOverride,
    SqliteStore,
    StoreError,
)
from c4p.store import sqlite as sqlite_store
from solver.workload.jobs import CommunicatorSpec, RankSpec
from southbound.bindings import Binding
from topology.roce import flow_label_for_sport

ROOT = Path(__file__).resolve().parents[1]


def job(job_id: str = "a", incarnation: int = 1, revision: int = 0) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        tenant="t",
        ranks=(RankSpec(rank=0, host="h0", nic="nic0"), RankSpec(rank=1, host="h1", nic="nic0")),
        incarnation=incarnation,
        digest="d",
        registered_at=1.0,
        registered_epoch=0,
        revision=revision,
    )


def comm(comm_id: str, version: int = 1, **spec: object) -> CommunicatorRecord:
    return CommunicatorRecord(
        spec=CommunicatorSpec.model_validate({"id": comm_id, **spec}),
        version=version,
        digest=f"{comm_id}{version}",
        accepted_at=2.0,
        connections=2,
        flows=4,
    )


def held(qp: int, epoch: int, sport: int = 0xC000, job_id: str = "a") -> HeldBinding:
    return HeldBinding(
        binding=Binding(
            job=job_id,
            communicator="dp",
            connection=0,
            qp=qp,
            src="h0:p0",
            dst="h1:p0",
            sport=sport + qp,
            flow_label=flow_label_for_sport(sport + qp),
            path=("h0:p0", "leaf", "h1:p0"),
            epoch=epoch,
        ),
        src_rank=0,
        dst_rank=1,
        channel=0,
    )


def decision(sequence: int, epoch: int, **extra: object) -> DecisionRecord:
    fields: dict[str, object] = {
        "sequence": sequence,
        "epoch": epoch,
        "at": 3.0,
        "reason": "test",
        "result": DecisionResult.PLANNED,
        "fingerprint": f"fp{epoch}",
    }
    return DecisionRecord.model_validate({**fields, **extra})


def test_everything_written_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "c4p.db"
    store = SqliteStore(path)
    secret = store.token_secret()
    store.register_job(job(), 1)
    store.put_intents(job(revision=1), [comm("dp", pattern="tree", trees=1), comm("x")], [])
    store.put_intents(job(revision=2), [], ["x"])
    store.commit_epoch(EpochCommit(decision(1, 1), (held(0, 1), held(1, 1), held(2, 1))))
    store.commit_epoch(EpochCommit(decision(2, 2), (held(1, 2, 0xD000),), (("a", "dp", 0, 2),)))
    store.set_link_override(LinkOverride(link_id="l1--l2", reason="optics", at=4.0))
    store.close()

    again = SqliteStore(path)
    state = again.load()
    assert again.token_secret() == secret and len(secret) == 32
    assert state.epoch == 2 and state.fingerprint == "fp2" and state.incarnation == 1
    assert state.jobs["a"] == job(revision=2)
    assert list(state.intents["a"]) == ["dp"]
    assert state.intents["a"]["dp"].spec.trees == 1
    bindings = state.bindings["a"]
    assert sorted(k[3] for k in bindings) == [0, 1]
    assert bindings[("a", "dp", 0, 1)].binding.sport == 0xD001
    assert bindings[("a", "dp", 0, 1)].binding.epoch == 2
    assert bindings[("a", "dp", 0, 0)].binding.epoch == 1
    assert state.tombstones["a"] == {("a", "dp", 0, 2): 2}
    assert state.overrides["l1--l2"].reason == "optics"
    assert state.last_decision is not None and state.last_decision.sequence == 2
    assert (path.stat().st_mode & 0o777) == 0o600
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    again.release_job("a")
    state = again.load()
    assert not state.jobs and not state.bindings and not state.tombstones and not state.intents
    again.close()


def test_a_failed_commit_changes_nothing() -> None:
    store = SqliteStore(":memory:")
    store.register_job(job(), 1)
    store.commit_epoch(EpochCommit(decision(1, 1), (held(0, 1),)))
    with pytest.raises(StoreError):  # the same decision sequence again: the insert fails last
        store.commit_epoch(EpochCommit(decision(1, 2), (held(0, 2, 0xE000), held(5, 2))))
    state = store.load()
    assert state.epoch == 1
    assert set(state.bindings["a"]) == {("a", "dp", 0, 0)}
    assert state.bindings["a"][("a", "dp", 0, 0)].binding.sport == 0xC000
    with pytest.raises(StoreError):
        store.register_job(job(), 2)  # a job id that exists
    assert store.load().incarnation == 1


def test_tombstones_are_compacted_and_decisions_pruned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "DECISIONS_KEPT", 3)
    store = SqliteStore(":memory:")
    store.commit_epoch(EpochCommit(decision(1, 1), (held(0, 1), held(1, 1))))
    store.commit_epoch(EpochCommit(decision(2, 2), (), (("a", "dp", 0, 0),)))
    store.commit_epoch(EpochCommit(decision(3, 3), (), (("a", "dp", 0, 1),), compacted_epoch=2))
    store.log_decision(decision(4, 3, result=DecisionResult.FAILED, error="boom"))
    state = store.load()
    assert state.tombstones["a"] == {("a", "dp", 0, 1): 3}
    assert state.compacted_epoch == 2 and state.epoch == 3
    assert [d.sequence for d in store.decisions(10)] == [4, 3, 2]
    assert [d.sequence for d in store.decisions(10, before_sequence=4)] == [3, 2]
    assert store.decisions(1)[0].error == "boom"


def test_a_store_of_another_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = 'c4p-store-0' WHERE key = 'schema'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema"):
        SqliteStore(path)


WRITER = textwrap.dedent(
    """
    import sys
    from c4p.store import SqliteStore
    from test_store import comm, job
    store = SqliteStore(sys.argv[1])
    for i in range(1, 100_000):
        name = f"j{i}"
        store.register_job(job(name, incarnation=i), i)
        store.put_intents(job(name, incarnation=i, revision=1), [comm("dp", version=i)], [])
        print(i, flush=True)
    """
)


def test_sigkill_mid_writes_loses_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"},
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged = 0
    try:
        assert child.stdout is not None
        while line := child.stdout.readline():  # readline: no read-ahead on the pipe
            acknowledged = int(line)
            if acknowledged >= 40:
                child.kill()  # SIGKILL: no cleanup, no close
                break
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    state = SqliteStore(path).load()
    for i in range(1, acknowledged + 1):  # every write that returned is there, whole
        assert state.jobs[f"j{i}"].revision == 1
        assert state.intents[f"j{i}"]["dp"].version == i
    assert state.incarnation >= acknowledged
