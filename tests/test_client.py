"""The flow-intent client: the binding mirror's contract with a plugin (parts, full sets,
differences, callbacks only for real changes), reconnect and resume across a controller restart,
and the asyncio client end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from service_cases import hosts, serving, spread_fabric

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.client import (
    Action,
    ApiError,
    AsyncFlowIntentClient,
    Backoff,
    BindingChange,
    BindingMirror,
    FlowIntentClient,
    communicator,
    connection,
)
from c4p.service.embedded import EmbeddedService

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)


def _binding(
    qp: int, sport: int, epoch: int, path: tuple[str, ...] = ("a", "s", "b")
) -> pb.Binding:
    return pb.Binding(
        qp=pb.QpRef(communicator="dp", connection=0, qp=qp),
        src_port="a",
        dst_port="b",
        udp_sport=sport,
        flow_label=sport & 0x3FFF,
        epoch=epoch,
        path=list(path),
    )


def _update(kind: int, epoch: int, bindings: list[pb.Binding], **extra: object) -> fi.BindingUpdate:
    return fi.BindingUpdate(epoch=epoch, kind=kind, bindings=bindings, **extra)  # type: ignore[arg-type]


def test_the_mirror_applies_parts_fulls_and_deltas_and_calls_back_only_for_changes() -> None:
    seen: list[BindingChange] = []
    mirror = BindingMirror(seen.append)
    full = fi.BindingUpdate.KIND_FULL
    delta = fi.BindingUpdate.KIND_DELTA
    assert mirror.feed(_update(full, 3, [_binding(0, 0xC000, 2)], more=True)) == []
    assert mirror.epoch == 0 and not mirror.bindings  # nothing applied until the last part
    mirror.feed(_update(full, 3, [_binding(1, 0xC001, 3)], intent_revision=4))
    assert mirror.epoch == 3 and mirror.intent_revision == 4 and len(seen) == 2
    # A path change under the same port: stored, but the plugin has nothing to do.
    mirror.feed(_update(delta, 4, [_binding(0, 0xC000, 4, ("a", "t", "b"))]))
    assert len(seen) == 2 and mirror.bindings[("dp", 0, 0)].path == ("a", "t", "b")
    removed = [pb.QpRef(communicator="dp", connection=0, qp=1)]
    mirror.feed(_update(delta, 5, [_binding(0, 0xC009, 5)], removed=removed))
    assert [(c.action, c.binding.qp) for c in seen[2:]] == [(Action.WITHDRAW, 1), (Action.APPLY, 0)]
    # After a reconnect, a full set that matches calls nothing; one that drops a QP withdraws it.
    mirror.feed(_update(full, 6, [_binding(0, 0xC009, 5)]))
    assert len(seen) == 4
    mirror.feed(_update(full, 7, []))
    assert seen[-1].action is Action.WITHDRAW and not mirror.bindings
    mirror.feed(fi.BindingUpdate(epoch=8, kind=delta, state=pb.INTENT_STATE_WITHDRAWN))
    assert mirror.withdrawn


def test_backoff_stays_within_its_bounds() -> None:
    backoff = Backoff(base=0.1, cap=1.0, seed=7)
    delays = [backoff.next() for _ in range(20)]
    assert all(0.05 <= d <= 1.0 for d in delays) and max(delays) > 0.2
    backoff.reset()
    assert backoff.next() <= 0.1


def test_intent_helpers_leave_out_what_is_not_given() -> None:
    c = communicator("dp", pattern="all-to-all", rail_only=True)
    assert c.pattern == pb.PATTERN_ALL_TO_ALL and c.HasField("rail_only")
    assert not c.HasField("qps_per_connection") and not c.HasField("trees")
    k = connection("h0:nic0", 3, qps=2)
    assert k.WhichOneof("src") == "src_nic" and k.dst_rank == 3 and k.qps == 2


def test_a_watch_survives_a_controller_restart_and_resumes_without_reapplying(
    tmp_path: Path,
) -> None:
    with serving(FABRIC, tmp_path) as first:
        address = first.address
        config = first.config.model_copy(
            update={"listen": first.config.listen.model_copy(update={"address": address})}
        )
        client = FlowIntentClient(address)
        job = client.register_job("survivor", hosts=HOSTS[:2])
        reply = job.submit([communicator("dp", qps_per_connection=2)])
        seen: list[BindingChange] = []
        watch = job.watch(on_change=seen.append)
        assert watch.wait_revision(reply.revision, 20)
        held, applied, epoch = watch.mirror.snapshot(), len(seen), watch.mirror.epoch
    try:
        assert watch.wait(lambda m: watch.reconnects > 0, 20)  # the stream broke
        assert watch.mirror.snapshot() == held  # fail-static: nothing was withdrawn
        second = EmbeddedService(config)  # same port, same store
        second.start()
        try:
            job.submit([communicator("dp", qps_per_connection=2)])  # same intents: unchanged
            assert watch.wait(lambda m: m.updates >= 2, 30)  # resumed: one (empty) update
            assert watch.mirror.epoch == epoch and watch.mirror.snapshot() == held
            assert len(seen) == applied and watch.error is None
            update = job.submit([communicator("dp", version=2, qps_per_connection=1)])
            assert watch.wait_revision(update.revision, 20)
            assert len(watch.mirror.bindings) == 4
            assert [c.action for c in seen[applied:]].count(Action.WITHDRAW) == 4
        finally:
            watch.stop()
            second.stop()
    finally:
        client.close()


def test_the_asyncio_client_end_to_end(tmp_path: Path) -> None:
    """Runs on the embedded service's event loop: grpc.aio wants one loop per process."""
    with serving(FABRIC, tmp_path) as service:

        async def main() -> None:
            async with AsyncFlowIntentClient(service.address) as client:
                job = await client.register_job("async", hosts=HOSTS[2:4])
                reply = await job.submit([communicator("dp", channels=2)])
                seen: list[BindingChange] = []
                mirror = await job.watch_until(
                    lambda m: m.intent_revision >= reply.revision,
                    20,
                    on_change=seen.append,
                )
                assert len(mirror.bindings) == reply.flows == 8 and len(seen) == 8
                with pytest.raises(ApiError) as caught:
                    await job.submit([communicator("dp", version=0)])
                assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
                assert ("communicators[0].version", "must be >= 1") in caught.value.problems

                async def follow() -> None:
                    async for _ in job.changes(mirror):
                        pass  # ends when the job is released

                following = asyncio.create_task(follow())
                await asyncio.sleep(0.05)
                assert await job.release() >= mirror.epoch
                await asyncio.wait_for(following, 20)
                assert mirror.withdrawn and not mirror.bindings
                assert [c.action for c in seen[8:]] == [Action.WITHDRAW] * 8

        service.call(main())
