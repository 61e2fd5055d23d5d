"""A follower's warm copy (etcd Watch) on a real 3-member etcd cluster (loopback): it follows a
leader's writes (differences, compactions, deletes) to exactly what a full read returns, loads
to the same state (its bindings parsed ahead, advanced by the new differences only), resumes on
another member when its member is killed (``kill -9``) without a full read, and falls back to a
full read when the revision it resumes from was compacted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from test_etcd_epochs import epoch_commit, expected, fenced, leader_key
from test_store import job

from c4p.store import LinkOverride, StoreError, etcd_epochs
from c4p.store.etcd import EtcdStore
from c4p.store.etcd_epochs import Manifest
from c4p.store.etcd_watch import WarmCopy
from c4p.store.etcdclient import EtcdClient
from c4p.testing.etcd_cluster import EtcdCluster, etcd_binary

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
    return f"/w{next(_prefixes)}/"


def full_read(cluster: EtcdCluster, prefix: str) -> tuple[int, dict[str, bytes]]:
    client = EtcdClient(cluster.endpoints)
    try:
        revision, kvs = client.scan(prefix.encode())
    finally:
        client.close()
    return revision, {kv.key[len(prefix) :].decode(): kv.value for kv in kvs}


def test_the_copy_follows_every_write_and_loads_the_same(
    cluster: EtcdCluster, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(etcd_epochs, "MAX_DIFFS", 3)
    copy = WarmCopy(EtcdClient(cluster.endpoints), prefix.encode()).start()
    try:
        store = fenced(cluster.endpoints, prefix, leader_key(cluster, prefix))
        store.register_job(job(), 1)
        for e in range(1, 12):  # differences and compactions (their deletes too)
            store.commit_epoch(epoch_commit(e))
        store.register_job(job("gone"), 2)
        store.release_job("gone")
        revision, expected = full_read(cluster, prefix)
        seen = copy.snapshot(revision, 30.0)
        assert seen == expected
        assert seen is not None
        cold = EtcdStore(EtcdClient(cluster.endpoints), prefix).load()
        warm = EtcdStore(EtcdClient(cluster.endpoints), prefix).load_from(seen)
        assert warm == cold
        parsed = copy.bindings()  # what the copy parsed as the manifest changed
        assert parsed["a"].held == cold.bindings["a"]
        again = EtcdStore(EtcdClient(cluster.endpoints), prefix).load_from(seen, parsed)
        assert again == cold
        assert all(again.bindings["a"][k] is h for k, h in parsed["a"].held.items())  # not reparsed
        assert warm.epoch == 11 and list(warm.jobs) == ["a"]
        assert copy.full_reads == 1  # one read at the start, then only the watch
        assert copy.snapshot(revision + 1000, 0.2) is None  # a revision not reached: no copy
    finally:
        copy.stop()


def test_a_killed_member_is_left_for_another_without_a_full_read(
    cluster: EtcdCluster, prefix: str
) -> None:
    with EtcdCluster(3) as own:  # its own cluster: a member is killed here
        client = EtcdClient(own.endpoints)
        copy = WarmCopy(client, prefix.encode()).start()
        try:
            store = fenced(own.endpoints, prefix, leader_key(own, prefix))
            store.register_job(job(), 1)
            store.commit_epoch(epoch_commit(1))
            revision, _ = full_read(own, prefix)
            assert copy.snapshot(revision, 30.0) is not None
            watched = own.endpoints.index(copy.endpoint)
            own.members[watched].process.kill()  # type: ignore[union-attr]  # kill -9 of its member
            own.members[watched].process.wait(10)  # type: ignore[union-attr]
            for e in range(2, 5):
                for _ in range(100):  # bounded: the cluster may elect a raft leader meanwhile
                    try:
                        store.commit_epoch(epoch_commit(e))
                        break
                    except StoreError:
                        time.sleep(0.2)
            revision, expected = full_read(own, prefix)
            assert copy.snapshot(revision, 30.0) == expected
            assert copy.resumed >= 1 and copy.full_reads == 1
        finally:
            copy.stop()


def test_a_compacted_revision_falls_back_to_a_full_read(cluster: EtcdCluster, prefix: str) -> None:
    client = EtcdClient(cluster.endpoints)
    copy = WarmCopy(client, prefix.encode())  # not started: it reads once, then falls behind
    store = fenced(cluster.endpoints, prefix, leader_key(cluster, prefix))
    store.register_job(job(), 1)
    copy._full_read()
    for e in range(1, 4):
        store.commit_epoch(epoch_commit(e))
    revision, expected = full_read(cluster, prefix)
    client.compact(revision)  # the history the copy would resume from is gone
    copy.start()
    try:
        assert copy.snapshot(revision, 30.0) == expected
        assert copy.full_reads == 2
    finally:
        copy.stop()


def test_parsed_bindings_advance_by_the_new_differences_only(
    cluster: EtcdCluster, prefix: str
) -> None:
    store = fenced(cluster.endpoints, prefix, leader_key(cluster, prefix))
    store.register_job(job(), 1)
    for e in (1, 2, 3):
        store.commit_epoch(epoch_commit(e))
    _, kv = full_read(cluster, prefix)
    manifest = Manifest.model_validate_json(kv["manifest"])
    before = etcd_epochs.read_bindings(kv, manifest)["a"]
    store.commit_epoch(epoch_commit(4))
    _, kv = full_read(cluster, prefix)
    manifest = Manifest.model_validate_json(kv["manifest"])
    fresh = etcd_epochs.read_bindings(kv, manifest)["a"]
    advanced = etcd_epochs.read_bindings(kv, manifest, {"a": before})["a"]
    assert (advanced.held, advanced.stones) == (fresh.held, fresh.stones)
    moved = {h.key for h in epoch_commit(4).upserts}
    kept = set(before.held) - moved - set(epoch_commit(4).removals)
    assert kept and all(advanced.held[k] is before.held[k] for k in kept)
    assert all(advanced.held[k] is not before.held.get(k) for k in moved)
    stale = etcd_epochs.JobBindings(None, (), {}, {})  # another base: read from scratch
    assert etcd_epochs.read_bindings(kv, manifest, {"a": stale})["a"].held == fresh.held


def test_a_leading_replica_parses_nothing_ahead_and_a_follower_again(
    cluster: EtcdCluster, prefix: str
) -> None:
    """While its replica leads the copy keeps raw keys only; once it follows again the next
    event of any key (here an override, not the manifest) brings the parsed bindings back."""
    copy = WarmCopy(EtcdClient(cluster.endpoints), prefix.encode()).start()
    try:
        copy.parsing = False
        store = fenced(cluster.endpoints, prefix, leader_key(cluster, prefix))
        store.register_job(job(), 1)
        store.commit_epoch(epoch_commit(1))
        revision, _ = full_read(cluster, prefix)
        assert copy.snapshot(revision, 30.0) is not None and copy.bindings() == {}
        copy.parsing = True
        store.set_link_override(LinkOverride(link_id="l1--l2", at=1.0))
        revision, _ = full_read(cluster, prefix)
        assert copy.snapshot(revision, 30.0) is not None
        assert copy.bindings()["a"].held == expected(1)[0]
    finally:
        copy.stop()
