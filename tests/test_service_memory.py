"""The server's memory under hostile input, measured on a real ``c4p serve`` process.

Ten 3 MB ``SubmitIntents`` naming a million ranks each (and ten registrations naming a million
hosts) must be refused *before* anything is expanded: the server's resident memory may grow by
at most ``GROWTH_BOUND_MB`` over the ten (once it grew by ~0.5 GB per request). The figure is
printed (``-s``) for the benchmark notes.
"""

from __future__ import annotations

from pathlib import Path

import grpc
from service_cases import spread_fabric, wait_until
from test_serve_startup import serve, write_config

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.client import FlowIntentClient
from c4p.client.wire import auth

GROWTH_BOUND_MB = 512
"""What ten oversized submissions and ten oversized registrations, all refused, may add to the
server's RSS. Measured: +143 to +262 MB over five runs (gRPC's receive buffers and glibc keeping
freed arenas; it levels off: 80 such requests end near +400 MB), against +1,335 MB before sizes
were checked before expansion (and ~0.5 GB more per request in the report that found it)."""
HOSTS = [h.name for h in spread_fabric().hosts]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def call(channel: grpc.Channel, method: str, request: object, reply: type, token: str) -> str:
    """The status code name of one raw call (the client library would validate sizes first)."""
    stub = channel.unary_unary(
        f"/c4p.v1.FlowIntentService/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=reply.FromString,
    )
    try:
        stub(request, metadata=auth(token), timeout=120)
    except grpc.RpcError as exc:
        return str(exc.code().name)
    return "OK"


def test_oversized_requests_are_refused_before_they_cost_memory(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    config = write_config(tmp_path, listen={"address": "127.0.0.1:0", "grace_s": 0.2})
    child = serve(config, ready)
    try:
        assert wait_until(lambda: ready.exists() or child.poll() is not None, 60, 0.05)
        assert child.poll() is None
        address = ready.read_text().strip()
        with FlowIntentClient(address) as client:
            session = client.register_job("victim", hosts=HOSTS[:2])
            session.submit([pb.CommunicatorIntent(id="dp", version=1)])  # warm every path
        hostile_submit = fi.SubmitIntentsRequest(
            job_id="victim",
            communicators=[pb.CommunicatorIntent(id="big", version=1, ranks=range(1_000_000))],
        )
        hostile_register = fi.RegisterJobRequest(
            job_id="greedy", hosts=[f"h{k}" for k in range(300_000)]
        )
        assert 2_900_000 < hostile_submit.ByteSize() < 4 * 1024 * 1024  # ~3 MB
        with grpc.insecure_channel(address, options=[
            ("grpc.max_send_message_length", 8 << 20)
        ]) as channel:  # fmt: skip
            call(channel, "SubmitIntents", hostile_submit, fi.SubmitIntentsResponse, session.token)
            before = rss_mb(child.pid)
            codes = set()
            for _ in range(10):
                codes.add(
                    call(channel, "SubmitIntents", hostile_submit, fi.SubmitIntentsResponse,
                         session.token)
                )  # fmt: skip
                codes.add(
                    call(channel, "RegisterJob", hostile_register, fi.RegisterJobResponse, "")
                )
            after = rss_mb(child.pid)
        print(f"server RSS: {before:.0f} MB -> {after:.0f} MB after 10+10 oversized requests")
        assert codes <= {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}, codes
        assert after - before < GROWTH_BOUND_MB, (before, after)
    finally:
        child.kill()
        child.communicate(timeout=30)
