"""The controller's gRPC API over a real channel on loopback: the life of a job, what bad input
gets back, job isolation, drains reaching only the jobs they touch, health and reflection."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from service_cases import (
    ADMIN_TOKEN,
    clients,
    hosts,
    links_of,
    serving,
    spread_fabric,
    wait_until,
)

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.client import ApiError, FlowIntentClient, communicator, connection
from southbound.events import EventQueue, LinkEvent
from topology.model import LinkStatus
from topology.roce import rdma_flow_label_to_udp_sport

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)


def test_a_job_registers_submits_and_receives_every_binding(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        job = flow.register_job("train", hosts=HOSTS[:2], tenant="team-a")
        assert [r.rank for r in job.ranks] == [0, 1, 2, 3]
        assert all(p.address for r in job.ranks for p in r.ports)
        seen: list[object] = []
        watch = job.watch(on_change=seen.append)
        try:
            reply = job.submit([communicator("dp", qps_per_connection=2)])
            assert reply.flows == 8 and reply.revision == 1
            assert watch.wait_revision(reply.revision, 20)
            bindings = watch.mirror.snapshot()
            assert len(bindings) == 8 and len(seen) == 8
            for b in bindings.values():
                assert 0xC000 <= b.udp_sport <= 0xFFFF
                assert rdma_flow_label_to_udp_sport(b.flow_label) == b.udp_sport
                assert b.path[0] == b.src_port and b.path[-1] == b.dst_port
            # The same intents again: accepted as unchanged, no new revision, nothing pushed.
            again = job.submit([communicator("dp", qps_per_connection=2)])
            assert again.revision == 1
            assert again.communicators[0].outcome == fi.CommunicatorStatus.OUTCOME_UNCHANGED
            info = admin.jobs("train").jobs[0]
            # No agent saw a port and nobody chose predicted ports: bound, not installed.
            assert info.state == pb.INTENT_STATE_BOUND_UNVERIFIED and info.bound == 8
            assert (info.verified, info.unverified, info.predicted) == (0, 8, False)
            assert info.tenant == "team-a" and info.streams == 1
            plan = admin.plan()
            assert plan.decision.flows == 8 and plan.decision.gap == 0.0
            assert plan.decision.predictions[0].busbw_fraction == pytest.approx(1.0)
        finally:
            watch.stop()
        assert job.release() >= 1
        assert not admin.jobs().jobs


def test_bad_requests_name_the_field_and_change_nothing(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        job = flow.register_job("ok", hosts=HOSTS[:2])
        job.submit([communicator("dp", version=3)])
        # Let the controller plan what was accepted, so that "nothing changed" below compares
        # settled states rather than racing the reconcile loop.
        assert wait_until(lambda: admin.jobs().jobs[0].state == pb.INTENT_STATE_BOUND_UNVERIFIED)
        before = admin.jobs()
        cases = [
            ([communicator("x", qps_per_connection=0)], "INVALID_ARGUMENT", "qps_per_connection"),
            ([communicator("x", qps_per_connection=17)], "INVALID_ARGUMENT", "qps_per_connection"),
            ([communicator("x", version=0)], "INVALID_ARGUMENT", "communicators[0].version"),
            ([communicator("x", ranks=[0, 9])], "INVALID_ARGUMENT", "communicators[0].ranks[1]"),
            (
                [communicator("x", pattern="explicit", connections=[connection(0, 1)])],
                "INVALID_ARGUMENT",
                "communicators[0].connections[0]",  # ranks 0 and 1 share a host
            ),
            (
                [communicator("x", pattern="explicit", connections=[connection("h9:nic0", 2)])],
                "INVALID_ARGUMENT",
                "src_nic",
            ),
            ([communicator("bad/id")], "INVALID_ARGUMENT", "communicators[0].id"),
            ([communicator("dp", version=2)], "FAILED_PRECONDITION", "communicators[0].version"),
            (
                [communicator("dp", version=3, channels=2)],
                "FAILED_PRECONDITION",
                "communicators[0].version",
            ),
            ([], "INVALID_ARGUMENT", "communicators"),
            (
                [communicator("y"), communicator("z", rate=-1.0)],  # one bad: none accepted
                "INVALID_ARGUMENT",
                "communicators[1].rate",
            ),
        ]
        for comms, code, field in cases:
            with pytest.raises(ApiError) as caught:
                job.submit(comms)
            error = caught.value
            assert error.code.name == code, (comms, error)
            assert any(field in f for f, _ in error.problems), (field, error.problems)
            assert field.split(".")[-1] in error.details
        for kwargs, code in (
            ({"hosts": ["nope"]}, "INVALID_ARGUMENT"),
            ({"hosts": HOSTS[1:3]}, "FAILED_PRECONDITION"),  # HOSTS[1] belongs to job "ok"
            ({"ranks": [(0, HOSTS[3], "nic0"), (2, HOSTS[4], "nic0")]}, "INVALID_ARGUMENT"),
            ({}, "INVALID_ARGUMENT"),
        ):
            with pytest.raises(ApiError) as caught:
                flow.register_job("other", **kwargs)  # type: ignore[arg-type]
            assert caught.value.code.name == code, (kwargs, caught.value)
        with pytest.raises(ApiError) as caught:
            flow.register_job("ok", hosts=HOSTS[4:5])
        assert caught.value.code.name == "ALREADY_EXISTS"
        assert admin.jobs() == before


def test_a_token_opens_its_own_job_only(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        a = flow.register_job("a", hosts=HOSTS[:2])
        b = flow.register_job("b", hosts=HOSTS[2:4])
        a.submit([communicator("dp")])
        assert admin.replan("settle", wait=True).decision.epoch  # compare states at rest
        before = admin.jobs()
        intruder = flow.session("a", b.token)  # job b's token, job a's id
        calls = [
            lambda: intruder.submit([communicator("evil", version=9)]),
            lambda: intruder.submit([], withdraw=["dp"]),
            intruder.release,
            lambda: flow.session("ghost", b.token).submit([communicator("x")]),
        ]
        for call in calls:
            with pytest.raises(ApiError) as caught:
                call()
            assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
        watch = intruder.watch()
        assert watch.done.wait(10)
        assert watch.error is not None and watch.error.code == grpc.StatusCode.PERMISSION_DENIED
        assert not watch.mirror.bindings
        for token in ("", "Bearer", "c4pj1.forged"):
            with pytest.raises(ApiError) as caught:
                flow.session("a", token).submit([communicator("x")])
            assert caught.value.code in (
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.PERMISSION_DENIED,
            )
        job_admin = type(admin)(service.address, a.token)
        try:
            with pytest.raises(ApiError) as caught:
                job_admin.drain(f"{HOSTS[0]}:nic0p0")
            assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
        finally:
            job_admin.close()
        assert admin.jobs() == before


def test_a_drained_link_reaches_only_the_jobs_crossing_it(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        watches = {}
        try:
            for k, name in enumerate(("a", "b", "c")):
                job = flow.register_job(name, hosts=HOSTS[2 * k : 2 * k + 2])
                reply = job.submit([communicator("dp", qps_per_connection=2)])
                watches[name] = job.watch()
                assert watches[name].wait_revision(reply.revision, 20)
            assert wait_until(lambda: all(w.mirror.intent_revision == 1 for w in watches.values()))
            updates = {n: w.mirror.updates for n, w in watches.items()}
            before = {n: w.mirror.snapshot() for n, w in watches.items()}
            crossing = next(
                b for b in before["a"].values() if len(b.path) > 3
            )  # a leaf-to-spine hop of job a
            leaf, spine = crossing.path[1], crossing.path[2]
            reply = admin.drain(f"{leaf}--{spine}", "suspect optics", wait=True)
            assert reply.changed and reply.decision.epoch > 0
            assert list(reply.decision.jobs_on_links) == ["a"]
            assert list(reply.decision.jobs_changed) == ["a"]
            assert watches["a"].wait(lambda m: m.epoch >= reply.decision.epoch, 20)
            after = watches["a"].mirror.snapshot()
            assert all(frozenset((leaf, spine)) not in links_of(b.path) for b in after.values())
            assert after[crossing.id].epoch == reply.decision.epoch
            assert set(after) == set(before["a"])
            for name in ("b", "c"):  # never woken: same update count, same bindings
                assert watches[name].mirror.updates == updates[name]
                assert watches[name].mirror.snapshot() == before[name]
            link = next(x for x in admin.fabric(only_changed=True).links if x.drained)
            assert link.effective == "drained" and link.drain_reason == "suspect optics"
            assert link.flows == 0
            restored = admin.restore(f"{spine}--{leaf}", wait=True)
            # A restored link is held for hold_up_s like any returning link (flap damping).
            assert restored.changed and restored.effective == "held"
            assert wait_until(
                lambda: not any(x.held for x in admin.fabric(only_changed=True).links), 30, 0.1
            )
        finally:
            for w in watches.values():
                w.stop()


def test_release_ends_the_stream_and_frees_the_nics(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        job = flow.register_job("short", hosts=HOSTS[:2])
        reply = job.submit([communicator("dp")])
        watch = job.watch()
        assert watch.wait_revision(reply.revision, 20)
        job.release()
        assert watch.done.wait(10) and watch.error is None and watch.mirror.withdrawn
        again = flow.register_job("short", hosts=HOSTS[:2])  # new incarnation
        assert again.token != job.token
        with pytest.raises(ApiError) as caught:
            job.submit([communicator("dp")])  # the old token opens nothing now
        assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert [d.result for d in admin.decisions(3)][0] == pb.Decision.RESULT_PLANNED


def test_a_retried_registration_gets_the_same_token(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, _):
        first = flow.register_job("r", hosts=HOSTS[:1], request_id="launch-42")
        again = flow.register_job("r", hosts=HOSTS[:1], request_id="launch-42")
        assert again.token == first.token
        with pytest.raises(ApiError) as caught:
            flow.register_job("r", hosts=HOSTS[:1], request_id="launch-43")
        assert caught.value.code == grpc.StatusCode.ALREADY_EXISTS


def test_limits_refuse_with_resource_exhausted(tmp_path: Path) -> None:
    limits = {
        "rate": {"requests_per_s": 0.01, "burst": 3},
        "max_streams_per_job": 1,
        "intake": {"max_flows_per_job": 16},
    }
    with (
        serving(
            FABRIC,
            tmp_path,
            limits=limits,
            listen={"address": "127.0.0.1:0", "max_message_bytes": 4096},
        ) as service,  # fmt: skip
        clients(service.address, attempts=1) as (flow, _),
    ):
        job = flow.register_job("lim", hosts=HOSTS[:2])
        with pytest.raises(ApiError) as caught:
            job.submit([communicator("dp", qps_per_connection=16)])  # 64 flows > 16
        assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "flows" in caught.value.details
        with pytest.raises(ApiError) as caught:
            job.submit([communicator(f"c{i}") for i in range(200)])  # > 4 KiB message
        assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        for _ in range(4):  # the burst of 3 is spent by now
            try:
                job.submit([communicator("dp")])
            except ApiError as exc:
                assert exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "rate limit" in exc.details
                break
        else:
            pytest.fail("the rate limit never applied")


def test_one_stream_per_job_when_so_limited(tmp_path: Path) -> None:
    with (
        serving(FABRIC, tmp_path, limits={"max_streams_per_job": 1}) as service,
        clients(service.address) as (flow, _),
    ):
        job = flow.register_job("s", hosts=HOSTS[:2])
        first, second = job.watch(), None
        try:
            assert first.wait(lambda m: m.updates >= 1, 10)
            second = job.watch()  # refused (RESOURCE_EXHAUSTED, retryable): it backs off
            assert wait_until(lambda: second is not None and second.reconnects >= 1, 10)
            assert second.mirror.updates == 0
            first.stop()  # a slot frees up: the second watch gets in on a retry
            assert second.wait(lambda m: m.updates >= 1, 20)
            assert second.error is None
        finally:
            first.stop()
            if second is not None:
                second.stop()


def test_health_reflection_and_garbage(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service:
        with grpc.insecure_channel(service.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for name in ("", "c4p.v1.FlowIntentService", "c4p.v1.AdminService"):
                reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            answer = next(iter(stub.ServerReflectionInfo(iter([request]), timeout=5)))
            names = {s.name for s in answer.list_services_response.service}
            assert {"c4p.v1.FlowIntentService", "c4p.v1.AdminService"} <= names
            raw = channel.unary_unary("/c4p.v1.FlowIntentService/RegisterJob")
            with pytest.raises(grpc.RpcError) as caught:
                raw(b"\xff\xff\xff garbage", timeout=5)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with FlowIntentClient(service.address) as flow:
            job = flow.register_job("m", hosts=HOSTS[:2])
            job.submit([communicator("dp")])
        runtime = service.runtime
        assert runtime is not None
        registry = runtime.metrics.registry
        assert wait_until(lambda: (registry.get_sample_value("c4p_plan_epoch") or 0) >= 1)
        assert registry.get_sample_value("c4p_active_jobs") == 1
        ok = {"method": "SubmitIntents", "code": "OK"}
        assert registry.get_sample_value("c4p_requests_total", ok) == 1
        bad = {"method": "RegisterJob", "code": "INVALID_ARGUMENT"}
        assert registry.get_sample_value("c4p_requests_total", bad) == 1
        assert ADMIN_TOKEN  # the admin credential of the service


def test_link_events_from_a_fabric_source_drive_the_plan_with_hysteresis(tmp_path: Path) -> None:
    queue = EventQueue()
    flap = {"hold_up_s": 2.0, "half_life_s": 1.0}  # the hold is long enough to be seen
    with (
        serving(FABRIC, tmp_path, flap=flap) as service,
        clients(service.address) as (flow, admin),
    ):
        assert service.runtime is not None
        service.runtime.follow_link_events(queue.get)
        job = flow.register_job("ev", hosts=HOSTS[:2])
        reply = job.submit([communicator("dp", qps_per_connection=2)])
        watch = job.watch()
        try:
            assert watch.wait_revision(reply.revision, 20)
            crossing = next(b for b in watch.mirror.snapshot().values() if len(b.path) > 3)
            link = FABRIC.links[FABRIC.index.link_number(f"{crossing.path[1]}--{crossing.path[2]}")]
            hop = frozenset(crossing.path[1:3])

            def event(status: LinkStatus) -> LinkEvent:
                now = time.time()
                return LinkEvent(
                    link_id=link.id, status=status, at=now, received=now, target="t", interface="i"
                )

            epoch = watch.mirror.epoch
            queue(event(LinkStatus.DOWN))
            assert watch.wait(lambda m: m.epoch > epoch, 20)
            assert all(hop not in links_of(b.path) for b in watch.mirror.snapshot().values())
            assert "link" in admin.decisions(1)[0].reason
            queue(event(LinkStatus.UP))  # back, but held until it has stayed up a while
            assert wait_until(lambda: any(x.held for x in admin.fabric(True).links), 10)
            assert wait_until(lambda: not admin.fabric(True).links, 20)  # usable again
            assert wait_until(lambda: "timer held-link" in admin.decisions(1)[0].reason, 20)
        finally:
            watch.stop()
