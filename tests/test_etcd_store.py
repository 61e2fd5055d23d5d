"""The etcd store on a real 3-member etcd cluster (loopback): everything written comes back, large
binding sets are split below etcd's request limit, history is compacted, a write is all or
nothing, an old leader's write is refused (fencing), one member lost changes nothing, and a lost
quorum stops writes until it returns."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import pytest
from service_cases import hosts, spread_fabric
from test_store import comm, decision, held, job

from c4p.controller import (
    ControllerState,
    FlapSettings,
    Intake,
    IntakeLimits,
    Key,
    KeyKind,
    PlannerSettings,
    Reconciler,
)
from c4p.store import EpochCommit, LinkOverride, StoreError
from c4p.store import etcd as etcd_store
from c4p.store.base import ControlMode, ModeSource, RollbackRecord
from c4p.store.election import Election, LeaderInfo
from c4p.store.etcd import EtcdStore, FencedError
from c4p.store.etcdclient import EtcdClient, EtcdError, EtcdUnavailable
from c4p.store.etcdpb.etcd_rpc_pb2 import RequestOp, TxnResponse
from c4p.testing.etcd_cluster import EtcdCluster, etcd_binary

FABRIC = spread_fabric()
FABRIC_HOSTS = hosts(FABRIC)

pytestmark = pytest.mark.skipif(
    etcd_binary() is None, reason="etcd not installed (Debian etcd-server)"
)

_prefixes = iter(range(1_000_000))


@pytest.fixture(scope="module")
def cluster() -> Iterator[EtcdCluster]:
    with EtcdCluster(3) as c:
        yield c


@pytest.fixture
def prefix() -> str:
    return f"/t{next(_prefixes)}/"


def leading(
    cluster: EtcdCluster, prefix: str, name: str = "r0", ttl: int = 5
) -> tuple[EtcdStore, Election]:
    """A store fenced by a leadership this test won (through the real election)."""
    client = EtcdClient(cluster.endpoints, timeout=2.0)
    store = EtcdStore(client, prefix)
    election = Election(client, store.leader_key, LeaderInfo(name, "127.0.0.1:1"), ttl)
    store.fence = election.campaign()
    assert store.fence is not None
    store.load()
    return store, election


def eventually(write: Callable[[], None], timeout: float = 30.0) -> None:
    """``write()`` until it succeeds (bounded): etcd may be electing a leader meanwhile; a
    fenced write is never retried."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            write()
            return
        except FencedError:
            raise
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_everything_written_comes_back(cluster: EtcdCluster, prefix: str) -> None:
    store, _ = leading(cluster, prefix)
    secret = store.token_secret()
    store.register_job(job(), 1)
    store.put_intents(job(revision=1), [comm("dp", pattern="tree", trees=1), comm("x")], [])
    store.put_intents(job(revision=2), [], ["x"])
    store.commit_epoch(EpochCommit(decision(1, 1), (held(0, 1), held(1, 1), held(2, 1))))
    store.commit_epoch(EpochCommit(decision(2, 2), (held(1, 2, 0xD000),), (("a", "dp", 0, 2),)))
    store.set_link_override(LinkOverride(link_id="l1--l2", reason="optics", at=4.0))
    with pytest.raises(StoreError, match="exists"):
        store.register_job(job(), 2)  # a job id that exists

    again = EtcdStore(EtcdClient(cluster.endpoints), prefix)  # another replica reads it all
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
    assert [d.sequence for d in again.decisions(10)] == [2, 1]
    # only the current version of each blob is left
    _, kvs = store.client.scan(store.prefix + b"blob/")
    versions = {kv.key.rsplit(b"/", 1)[0] for kv in kvs}
    assert versions == {
        store.prefix + b"blob/intents/a/" + b"%016d" % 2,
        store.prefix + b"blob/bindings/a/" + b"%016d" % 2,
    }
    store.release_job("a")
    state = again.load()
    assert not state.jobs and not state.bindings and not state.tombstones and not state.intents
    assert not store.client.scan(store.prefix + b"blob/")[1]


def test_control_mode_pins_and_the_rollback_come_back(cluster: EtcdCluster, prefix: str) -> None:
    store, _ = leading(cluster, prefix)
    store.register_job(job(), 1)
    store.put_intents(job(revision=1), [comm("dp")], [])
    pinned = job(revision=1).model_copy(
        update={"control": ControlMode.SHADOW, "control_by": ModeSource.OPERATOR}
    )
    store.put_job(pinned)
    store.set_rollback(RollbackRecord(reason="incident 42", at=9.0))
    state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
    assert state.jobs["a"].control is ControlMode.SHADOW
    assert state.jobs["a"].control_by is ModeSource.OPERATOR
    assert list(state.intents["a"]) == ["dp"]  # the pin kept the job's intents
    assert state.rollback == RollbackRecord(reason="incident 42", at=9.0)
    store.set_rollback(None)
    assert EtcdStore(EtcdClient(cluster.endpoints), prefix).load().rollback is None


def test_a_large_binding_set_is_split_below_the_request_limit(
    cluster: EtcdCluster, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = leading(cluster, prefix)
    with pytest.raises(EtcdError, match="request is too large"):  # etcd's limit: 1.5 MiB
        store.client.put(store.prefix + b"big", b"x" * (1600 * 1024))
    monkeypatch.setattr(etcd_store, "CHUNK_BYTES", 64 * 1024)  # compressed, 20k bindings ~ 300 KiB
    store.register_job(job(), 1)
    many = tuple(held(qp, 1, sport=0xC000 + (qp * 7919) % 0x3000 - qp) for qp in range(20_000))
    store.commit_epoch(EpochCommit(decision(1, 1), many))
    ref = store._manifest.bindings["a"]
    assert ref.chunks >= 2
    _, kvs = store.client.scan(store.prefix + b"blob/bindings/a/")
    assert len(kvs) == ref.chunks
    assert max(len(kv.value) for kv in kvs) <= 64 * 1024
    state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
    assert len(state.bindings["a"]) == 20_000
    assert state.bindings["a"][("a", "dp", 0, 4321)] == many[4321]


def test_history_is_compacted(cluster: EtcdCluster, prefix: str) -> None:
    store, _ = leading(cluster, prefix)
    store.compact_every = 3
    store.register_job(job(), 1)
    first = store.client.range(store.prefix + b"manifest").header.revision
    for epoch in range(1, 4):
        store.commit_epoch(EpochCommit(decision(epoch, epoch), (held(0, epoch, 0xC000 + epoch),)))
    with pytest.raises(EtcdError, match="compacted"):
        store.client.range(store.prefix + b"manifest", revision=first)


def test_a_failed_commit_changes_nothing(cluster: EtcdCluster, prefix: str) -> None:
    store, election = leading(cluster, prefix)
    store.register_job(job(), 1)
    store.commit_epoch(EpochCommit(decision(1, 1), (held(0, 1),)))

    real_txn = store._txn
    calls: list[int] = []

    def txn(ops: Sequence[RequestOp], absent: bytes | None = None) -> TxnResponse:
        calls.append(1)
        if len(calls) == 2:  # after the blob's chunks, before the manifest switches to them
            election.resign()
        return real_txn(ops, absent)

    store._txn = txn  # type: ignore[method-assign]
    with pytest.raises(FencedError):
        store.commit_epoch(EpochCommit(decision(2, 2), (held(0, 2, 0xE000), held(5, 2))))
    state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
    assert state.epoch == 1
    assert set(state.bindings["a"]) == {("a", "dp", 0, 0)}
    assert state.bindings["a"][("a", "dp", 0, 0)].binding.sport == 0xC000
    assert store.fenced.is_set()


def test_an_old_leader_is_refused_after_its_lease_expired(
    cluster: EtcdCluster, prefix: str
) -> None:
    old, _ = leading(cluster, prefix, "old", ttl=2)  # never renewed from here on: as if stopped
    old.register_job(job("before"), 1)
    deadline = time.monotonic() + 30
    new: EtcdStore | None = None
    while new is None and time.monotonic() < deadline:  # the lease runs out on etcd's clock
        client = EtcdClient(cluster.endpoints)
        candidate = EtcdStore(client, prefix)
        election = Election(client, candidate.leader_key, LeaderInfo("new", "127.0.0.1:2"), 5)
        candidate.fence = election.campaign()
        if candidate.fence is None:
            assert election.leader == LeaderInfo("old", "127.0.0.1:1")
            client.close()
            time.sleep(0.2)
            continue
        new = candidate
    assert new is not None, "the old leader's lease did not expire"
    new.load()
    with pytest.raises(FencedError, match="leadership lost"):
        old.register_job(job("late"), 2)  # the partitioned old leader wakes up and writes
    assert old.fenced.is_set()
    new.register_job(job("after"), 2)
    state = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
    assert set(state.jobs) == {"before", "after"}


def test_a_replica_that_is_not_the_leader_does_not_write(cluster: EtcdCluster, prefix: str) -> None:
    store = EtcdStore(EtcdClient(cluster.endpoints), prefix)
    store.load()
    with pytest.raises(FencedError, match="not the leader"):
        store.register_job(job(), 1)


def test_one_member_lost_then_quorum_lost_then_back() -> None:
    with EtcdCluster(3) as own:  # its own cluster: members are killed here
        store, election = leading(own, "/q/", ttl=30)
        store.register_job(job("a"), 1)
        own.kill(2)  # quorum kept: 2 of 3 (if it led, the others elect a leader first)
        eventually(lambda: store.register_job(job("b"), 2))
        own.kill(1)  # quorum lost: 1 of 3
        with pytest.raises(StoreError) as lost:
            store.register_job(job("c"), 3)
        assert not isinstance(lost.value, FencedError) and lost.value.retryable
        with pytest.raises(EtcdUnavailable):
            election.renew()
        assert store.uncertain.is_set()  # it may land when the quorum returns: reload then
        own.restart(1)
        own.wait_healthy(30)
        assert election.renew()  # etcd could not expire the lease without a quorum
        store.load()
        eventually(lambda: store.register_job(job("d"), 4))
        state = EtcdStore(EtcdClient(own.endpoints), "/q/").load()
        assert set(state.jobs) - {"c"} == {"a", "b", "d"}  # "c" was never acknowledged


def _takeover(cluster: EtcdCluster, prefix: str) -> dict[str, dict[object, int]]:
    """A new leader on ``prefix``: load, rebuild the controller, run its first (startup) step;
    the bindings it then holds (job -> QP -> UDP source port)."""
    store, election = leading(cluster, prefix, name=f"new{prefix}")
    state = ControllerState(FABRIC, store.load(), FlapSettings(), 2000.0)
    Reconciler(state, store, PlannerSettings(budget_s=1.0), None).step(
        2000.0, (Key(KeyKind.STARTUP),)
    )
    election.resign()
    with state.lock:
        return {j: {k: h.binding.sport for k, h in b.items()} for j, b in state.held.items()}


def test_two_takeovers_from_the_same_state_plan_the_same(cluster: EtcdCluster, prefix: str) -> None:
    """Deterministic planning: an intent the old leader acknowledged but never planned is
    planned identically by whichever replica takes over, and nothing planned before moves."""
    store, election = leading(cluster, prefix)
    state = ControllerState(FABRIC, store.load(), FlapSettings(), 1000.0)
    intake = Intake(state, store, IntakeLimits(), lambda: 1000.0)
    reconciler = Reconciler(state, store, PlannerSettings(budget_s=1.0), None)
    for name, (a, b) in (("x", (0, 1)), ("y", (2, 3)), ("z", (4, 5))):
        done = intake.register({"job_id": name, "hosts": [FABRIC_HOSTS[a], FABRIC_HOSTS[b]]})
        if name != "z":
            dp = {"id": "dp", "version": 1, "qps_per_connection": 2}
            intake.submit(name, done.record.incarnation, [dp], [])
    reconciler.step(1000.0, (Key(KeyKind.JOB, "test"),))
    with state.lock:
        planned = {j: {k: h.binding.sport for k, h in b.items()} for j, b in state.held.items()}
    z = state.jobs["z"].record.incarnation
    intake.submit("z", z, [{"id": "dp", "version": 1, "qps_per_connection": 2, "channels": 2}], [])
    election.resign()  # the leader dies before planning z's intents
    twin = prefix.rstrip("/") + "twin/"  # the same state under a second prefix
    _, kvs = store.client.scan(store.prefix)
    for kv in kvs:
        if not kv.key.endswith(b"/leader"):
            store.client.put(twin.encode() + kv.key[len(store.prefix) :], kv.value)
    first, second = _takeover(cluster, prefix), _takeover(cluster, twin)
    assert first == second  # the same plan from the same state
    assert first["z"] and set(first) == {"x", "y", "z"}
    for name in ("x", "y"):
        assert first[name] == planned[name]  # nothing that did not have to moved


def test_held_writes_are_refused_retryably_and_taken_again(
    cluster: EtcdCluster, prefix: str
) -> None:
    """While a replica reloads from etcd its old store refuses writes (a retryable error, so a
    client tries again and reaches the reloaded runtime); released, it writes as before."""
    store, election = leading(cluster, prefix)
    try:
        store.hold_writes("reloading from etcd")
        with pytest.raises(StoreError, match="writes held") as refused:
            store.register_job(job(), 1)
        assert refused.value.retryable
        reader = EtcdStore(EtcdClient(cluster.endpoints), prefix)
        assert reader.load().jobs == {}  # nothing reached etcd
        store.hold_writes(None)
        store.register_job(job(), 1)
        assert list(reader.load().jobs) == [job().job_id]
    finally:
        election.resign()
