"""A highly available controller: ``c4p serve`` replicas as real processes on a real 3-member etcd
cluster (loopback). A follower names the leader and clients move to it; the leader killed with
SIGKILL under load (jobs registering, streams open, a link draining) is replaced, no
acknowledged intent is lost and no binding that did not have to changes; a stopped (partitioned)
old leader is refused when it writes; one etcd member lost changes nothing; with etcd's quorum
lost the leader keeps serving its bindings, says so in health, and writes again when the quorum
returns.

Times are asserted only as generous liveness bounds; the measured failover time is printed
(``pytest -s``) and measured properly by ``scripts/measure/ha_failover.py``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from service_cases import hosts, wait_until

from c4p.client import (
    AdminClient,
    ApiError,
    AsyncFlowIntentClient,
    BindingWatch,
    FlowIntentClient,
    JobSession,
    communicator,
)
from c4p.client.emulated import EmulatedTransport
from c4p.service.replica import STORE_HEALTH, Replica, Role
from c4p.service.serve import ServeConfig
from c4p.testing.etcd_cluster import EtcdCluster, etcd_binary, free_port
from c4p.testing.replicas import ADMIN_TOKEN, ReplicaGroup
from topology.generators import generate

pytestmark = pytest.mark.skipif(
    etcd_binary() is None, reason="etcd not installed (Debian etcd-server)"
)

FABRIC = generate("leaf-spine", leaves=8, spines=4, hosts_per_leaf=1, nics_per_host=2)
"""As ``service_cases.spread_fabric`` with room for four two-host jobs: jobs on disjoint leaves
share no link, and a leaf has twice the uplinks its NICs need (a drain forces no other move)."""
HOSTS = hosts(FABRIC)
FAILOVER_BOUND_S = 30.0
"""Liveness only (the issue's figure is 5 s; measured by the script, reported, not asserted)."""


@pytest.fixture
def etcd() -> Iterator[EtcdCluster]:
    with EtcdCluster(3) as cluster:
        yield cluster


def _health(address: str, service: str) -> int:
    """The health status of ``service`` (1 SERVING, 2 NOT_SERVING; -1: no answer)."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        except grpc.RpcError:
            return -1
        return int(reply.status)


def _metric(log: Path, name: str) -> float | None:
    """``name`` from the /metrics of the runtime a replica's log says is serving (the newest)."""
    lines = [json.loads(x) for x in log.read_text().splitlines() if '"event": "serving"' in x]
    if not lines or not lines[-1].get("metrics"):
        return None
    try:
        with urllib.request.urlopen(f"http://{lines[-1]['metrics']}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _bound(session: JobSession) -> tuple[BindingWatch, EmulatedTransport]:
    reply = session.submit([communicator("dp", qps_per_connection=2)])
    transport = EmulatedTransport()
    watch = session.watch(on_change=transport)
    assert watch.wait_revision(reply.revision, 60)
    return watch, transport


def test_a_follower_names_the_leader_and_clients_move_to_it(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    with ReplicaGroup(tmp_path, FABRIC, etcd.endpoints, count=2) as group:
        leader = group.by_name(group.wait_leader())
        follower = next(r for r in group.replicas if r is not leader)
        assert wait_until(lambda: _health(leader.address, "c4p.v1.FlowIntentService") == 1, 30)
        assert _health(follower.address, "c4p.v1.FlowIntentService") == 2  # NOT_SERVING
        refusals: list[ApiError] = []

        def refused() -> bool:
            with FlowIntentClient(follower.address, attempts=1) as alone:
                try:
                    alone.register_job("x", hosts=HOSTS[:2])
                except ApiError as exc:
                    refusals.append(exc)
            return bool(refusals[-1].leader)

        assert wait_until(refused, 30, 0.1)  # it names the leader (within a campaign period)
        assert all(r.code is grpc.StatusCode.UNAVAILABLE for r in refusals)
        assert refusals[-1].leader == leader.address
        with FlowIntentClient([follower.address, leader.address], attempts=5) as flow:
            session = flow.register_job("x", hosts=HOSTS[:2])
            assert flow.endpoints.current == leader.address and flow.endpoints.moves == 1
            watch, _ = _bound(session)
            watch.stop()

        async def from_asyncio() -> tuple[str, str]:
            client = AsyncFlowIntentClient([follower.address, leader.address], attempts=5)
            try:
                session = await client.register_job("y", hosts=HOSTS[2:4])
                return session.job_id, client.endpoints.current
            finally:
                await client.close()

        assert asyncio.run(from_asyncio()) == ("y", leader.address)
        admin = AdminClient([follower.address, leader.address], ADMIN_TOKEN)
        try:
            assert sorted(j.job_id for j in admin.jobs().jobs) == ["x", "y"]
        finally:
            admin.close()


def test_kill_9_of_the_leader_under_load_loses_nothing(etcd: EtcdCluster, tmp_path: Path) -> None:
    with ReplicaGroup(tmp_path, FABRIC, etcd.endpoints, count=2) as group:
        first = group.by_name(group.wait_leader())
        flow = FlowIntentClient(group.addresses, attempts=60)
        admin = AdminClient(group.addresses, ADMIN_TOKEN)
        watches: dict[str, BindingWatch] = {}
        transports: dict[str, EmulatedTransport] = {}
        stop = threading.Event()
        registered: list[str] = []
        released: list[str] = []
        uncertain: list[str] = []
        submitted: list[tuple[str, int]] = []
        acked_after_kill: list[float] = []
        killed_at = [0.0]
        errors: list[ApiError] = []
        try:
            for k, name in enumerate(("a", "b")):
                session = flow.register_job(name, hosts=[HOSTS[2 * k], HOSTS[2 * k + 1]])
                watches[name], transports[name] = _bound(session)
            before = {n: dict(t.ports) for n, t in transports.items()}
            applied = {n: t.applied for n, t in transports.items()}
            d = flow.register_job("d", hosts=[HOSTS[4], HOSTS[5]])
            d_watch, d_transport = _bound(d)
            # an uplink of d's leaf: jobs a and b (on leaves 0-3) never cross it
            drained = next(x.id for x in FABRIC.links if x.id.startswith("leaf-04:Ethernet3--"))

            def register_forever() -> None:  # jobs come and go on hosts 6 and 7
                for i in range(10_000):
                    if stop.is_set():
                        return
                    try:
                        e = flow.register_job(f"e{i}", hosts=[HOSTS[6], HOSTS[7]])
                    except ApiError as exc:
                        errors.append(exc)
                        return
                    registered.append(e.job_id)
                    if killed_at[0]:
                        acked_after_kill.append(time.monotonic())
                    for _ in range(60):  # a release is not retried blind by the client
                        try:
                            e.release()
                            released.append(e.job_id)
                            break
                        except ApiError as exc:
                            if not exc.retryable:
                                uncertain.append(e.job_id)  # an earlier try may have landed
                                break
                            time.sleep(0.2)
                    else:
                        return

            def submit_forever() -> None:
                for i in range(2, 10_000):
                    if stop.is_set():
                        return
                    try:
                        d.submit([communicator(f"c{i % 5}", version=i, channels=1 + i % 2)])
                    except ApiError as exc:
                        errors.append(exc)
                        return
                    submitted.append((f"c{i % 5}", i))

            workers = [threading.Thread(target=f) for f in (register_forever, submit_forever)]
            for w in workers:
                w.start()
            assert wait_until(lambda: len(registered) >= 5 and len(submitted) >= 5, 60, 0.01), (
                errors
            )
            admin.drain(drained, reason="suspect optics", wait=False)  # acknowledged
            first.kill()  # SIGKILL in the middle of it all
            killed_at[0] = time.monotonic()
            served = wait_until(lambda: bool(acked_after_kill), FAILOVER_BOUND_S, 0.01)
            failover_s = (acked_after_kill[0] if served else time.monotonic()) - killed_at[0]
            print(f"\nfailover: first registration acknowledged {failover_s:.2f} s after kill -9")
            assert served, "no replica took over"
            assert wait_until(lambda: len(registered) >= len(acked_after_kill) + 5, 60, 0.01)
            stop.set()
            for w in workers:
                w.join(60)
            second = group.wait_leader(other_than=first.name)
            assert second != first.name
            promoted = [
                json.loads(line)
                for line in group.by_name(second).log.read_text().splitlines()
                if '"event": "leading"' in line
            ]
            assert promoted[-1]["warm"] is True  # loaded from its Watch copy, not a read of etcd
            jobs = {j.job_id: j for j in admin.jobs().jobs}
            kept = set(registered) - set(released) - set(uncertain)
            assert kept <= set(jobs)  # every acknowledged registration survived
            assert not set(released) & set(jobs)  # and every acknowledged release
            versions = {c.id: c.version for c in jobs["d"].communicators}
            for comm, version in submitted:  # every acknowledged intent survived
                assert versions[comm] >= version
            fabric = admin.fabric()
            assert any(
                link.id == drained and link.effective == "drained" for link in fabric.links
            )  # the acknowledged drain too
            for watch in watches.values():  # streams resumed on the new leader
                assert wait_until(lambda w=watch: w.reconnects > 0, 60)  # type: ignore[misc]
            time.sleep(1.0)  # let any (wrong) change arrive before comparing
            for name, transport in transports.items():
                assert transport.ports == before[name]  # no binding moved that did not have to
                assert transport.applied == applied[name]  # nothing re-applied
            fresh = flow.session("a", watches["a"].session.token).watch()
            try:
                assert fresh.wait(lambda m: len(m.bindings) == len(before["a"]), 30)
                assert {k: b.udp_sport for k, b in fresh.mirror.snapshot().items()} == before["a"]
            finally:
                fresh.stop()
            d_watch.stop()
            assert d_transport.applied > 0
        finally:
            stop.set()
            for watch in watches.values():
                watch.stop()
            flow.close()
            admin.close()


def test_a_stopped_old_leader_is_refused_when_it_writes(etcd: EtcdCluster, tmp_path: Path) -> None:
    with ReplicaGroup(tmp_path, FABRIC, etcd.endpoints, count=2) as group:
        old = group.by_name(group.wait_leader())
        with FlowIntentClient(group.addresses, attempts=30) as flow:
            flow.register_job("a", hosts=HOSTS[:2])
        old.signal(signal.SIGSTOP)  # a partition: it cannot renew; its lease expires
        try:
            new = group.wait_leader(timeout=FAILOVER_BOUND_S, other_than=old.name)
        finally:
            old.signal(signal.SIGCONT)
        # the old leader still believes it leads until it checks: its first write is fenced,
        # or it has already stepped down and redirects; either way nothing of it is stored
        with (
            FlowIntentClient(old.address, attempts=1, timeout=10) as stale,
            pytest.raises(ApiError) as refused,
        ):
            stale.register_job("late", hosts=HOSTS[2:4])
        # UNAVAILABLE (fenced, or its follower face); CANCELLED if it stepped down mid-call
        assert refused.value.retryable and refused.value.code is not grpc.StatusCode.OK
        leader = group.by_name(new).address  # it won the key; its runtime may still be starting
        assert wait_until(lambda: _health(leader, "c4p.v1.AdminService") == 1, 30)
        admin = AdminClient(leader, ADMIN_TOKEN)
        try:
            assert [j.job_id for j in admin.jobs().jobs] == ["a"]
        finally:
            admin.close()
        assert wait_until(lambda: "step-down" in old.log.read_text(), 30)
        log = old.log.read_text()
        fenced = "leadership lost" in log  # its write reached etcd and was refused
        assert fenced or "lease lost" in log  # or its keep-alive told it first
        print(f"\nold leader: {'write fenced by etcd' if fenced else 'stepped down on TTL 0'}")


def test_member_lost_then_quorum_lost_keeps_serving_bindings_and_recovers(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    metrics = {"metrics": {"address": "127.0.0.1:0"}}
    with ReplicaGroup(
        tmp_path, FABRIC, etcd.endpoints, count=1, lease_ttl_s=4, extra=metrics
    ) as group:
        leader = group.by_name(group.wait_leader())
        flow = FlowIntentClient(leader.address, attempts=3, timeout=5)
        try:
            session = flow.register_job("a", hosts=HOSTS[:2])
            watch, transport = _bound(session)
            before = dict(transport.ports)
            etcd.kill(2)  # 2 of 3 left: quorum kept, writes go on (after an etcd election)
            with FlowIntentClient(leader.address, attempts=30, timeout=5) as patient:
                m = patient.register_job("m", hosts=HOSTS[6:8])
                m.submit([communicator("dp", version=1)])
            assert wait_until(lambda: _health(leader.address, STORE_HEALTH) == 1, 30)
            etcd.kill(1)  # 1 of 3 left: no quorum
            assert wait_until(lambda: _health(leader.address, STORE_HEALTH) == 2, 30)
            assert _metric(leader.log, "c4p_store_writable") == 0.0
            assert _metric(leader.log, "c4p_leader") == 1.0
            assert _health(leader.address, "c4p.v1.FlowIntentService") == 1  # still serving
            with pytest.raises(ApiError) as refused:
                flow.register_job("b", hosts=HOSTS[2:4])  # a write: refused, not hung
            assert refused.value.code is grpc.StatusCode.UNAVAILABLE
            fresh = session.watch()  # the bindings it has are still served
            try:
                assert fresh.wait(lambda m: len(m.bindings) == len(before), 30)
                assert {k: b.udp_sport for k, b in fresh.mirror.snapshot().items()} == before
            finally:
                fresh.stop()
            etcd.restart(1)
            etcd.restart(2)
            etcd.wait_healthy(30)
            assert wait_until(lambda: _health(leader.address, STORE_HEALTH) == 1, 60, 0.1)
            assert wait_until(lambda: _metric(leader.log, "c4p_store_writable") == 1.0, 30)
            again = FlowIntentClient(leader.address, attempts=30)
            try:
                c = again.register_job("c", hosts=HOSTS[4:6])  # writes again
                _, c_transport = _bound(c)
                assert c_transport.ports
            finally:
                again.close()
            assert watch.wait(lambda m: len(m.bindings) == len(before), 30)
            assert transport.ports == before
            watch.stop()
        finally:
            flow.close()


def test_a_keep_alive_failing_after_a_commit_sets_the_store_health_again(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    """The store's health has two witnesses: a step's commit (SERVING) and the replica's
    keep-alive (NOT_SERVING when it fails). A commit between two failed keep-alives must not
    leave the health SERVING while etcd has no quorum: seen in CI as a quorum-loss test waiting
    30 s for NOT_SERVING. The sequence is driven in process, on a real etcd, in that order."""
    config = ServeConfig.model_validate(
        {
            "fabric": {"path": str(tmp_path / "unused.json")},
            "listen": {"address": f"127.0.0.1:{free_port()}", "grace_s": 0.5},
            "store": {
                "kind": "etcd",
                "endpoints": etcd.endpoints,
                "prefix": "/c4p-health/",
                "lease_ttl_s": 4,
                "timeout_s": 1.0,
            },  # fmt: skip
            "replica": {"name": "solo", "poll_s": 0.1},
            "auth": {"admin": [{"value": ADMIN_TOKEN}]},
            "metrics": {"address": None},
        }
    )

    async def scenario() -> list[float | None]:
        replica = Replica(config, fabric=FABRIC)
        await replica.start()
        try:
            for _ in range(300):  # bounded: 30 s
                if replica.role is Role.LEADER and replica.runtime is not None:
                    break
                await asyncio.sleep(0.1)
            runtime = replica.runtime
            assert runtime is not None
            seen = []
            replica._set_writable(False, "keep-alive failed (test)")
            seen.append(runtime.metrics.registry.get_sample_value("c4p_store_writable"))
            runtime._set_health(health_pb2.HealthCheckResponse.SERVING)  # a step committed
            seen.append(runtime.metrics.registry.get_sample_value("c4p_store_writable"))
            replica._set_writable(False, "keep-alive failed again (test)")
            seen.append(runtime.metrics.registry.get_sample_value("c4p_store_writable"))
            return seen
        finally:
            await replica.stop()

    assert asyncio.run(scenario()) == [0.0, 1.0, 0.0]
