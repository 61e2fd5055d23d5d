"""The service at scale (issue 31): answers built off the event loop; waits as long as the caller.

Why it matters: the event loop answers every call and feeds every stream. At 131,072 GPUs a
plan pushes 64 full sets of 4,096 bindings; converting them to protobuf on the loop held the
health check, admin calls and the other streams for the whole conversion, and a 2,048-rank
job's registration held them while its ports were written out as text. The real service on
loopback, a real job and stream; ``convert.updates`` and ``convert.resolved_ranks`` are wrapped
only to note the thread they run on (they still do the conversion).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from service_cases import clients, hosts, serving, spread_fabric

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.client import AdminClient, communicator
from c4p.controller.state import JobUpdate
from c4p.service import convert
from solver.workload.jobs import RankNic
from topology.model import Fabric

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)


def test_binding_messages_are_built_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = convert.updates

    def noting(
        update: JobUpdate, chunk: int = convert.MAX_BINDINGS_PER_MESSAGE
    ) -> Iterator[fi.BindingUpdate]:
        for message in real(update, chunk):
            threads.append(threading.current_thread().name)
            yield message

    monkeypatch.setattr(convert, "updates", noting)
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, _):
        job = flow.register_job("train", hosts=HOSTS[:2])
        watch = job.watch()
        try:
            reply = job.submit([communicator("dp", qps_per_connection=2)])
            assert watch.wait_revision(reply.revision, 20)
            assert len(watch.mirror.snapshot()) == 8
        finally:
            watch.stop()
    assert threads, "no binding message was converted"
    assert "c4p-embedded" not in threads  # the event loop's thread (c4p.service.embedded)


def test_registered_ranks_are_resolved_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = convert.resolved_ranks

    def noting(fabric: Fabric, ranks: Sequence[RankNic]) -> list[pb.ResolvedRank]:
        threads.append(threading.current_thread().name)
        return real(fabric, ranks)

    monkeypatch.setattr(convert, "resolved_ranks", noting)
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, _):
        job = flow.register_job("train", hosts=HOSTS[:2])
        assert [r.rank for r in job.ranks] == [0, 1, 2, 3]
        assert all(p.address for r in job.ranks for p in r.ports)
    assert threads and "c4p-embedded" not in threads


def test_a_drain_that_waits_answers_before_the_callers_deadline(tmp_path: Path) -> None:
    """A drain with ``wait`` waits for its plan as long as the caller does, not a fixed time
    (a step at 131k GPUs outlasts it); with no step to come (the reconcile loop stopped
    here), a caller with a 3 s deadline gets its answer without a decision, not
    DEADLINE_EXCEEDED after the server's own wait (62 s)."""
    with serving(FABRIC, tmp_path) as service:
        runtime = service.runtime
        assert runtime is not None
        link = FABRIC.links[-1].id
        service.call(runtime.loop.stop())  # no step will cover the drain
        admin = AdminClient(service.address, service.admin_token, timeout=3.0)
        try:
            reply = admin.drain(link, "test", wait=True)
        finally:
            admin.close()
        assert reply.link_id == link and reply.effective == "drained" and reply.changed
        assert not reply.HasField("decision")
