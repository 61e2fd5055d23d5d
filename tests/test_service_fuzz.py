"""Fuzzing the API over a real channel: malformed requests (random bytes, invalid fields, wrong
credentials) get only proper status codes, never INTERNAL or UNKNOWN, and never change state."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_cases import ADMIN_TOKEN, clients, hosts, serving, spread_fabric

from c4p.api.v1 import admin_pb2 as admin
from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.client import AdminClient, FlowIntentClient, JobSession, communicator
from c4p.service.embedded import EmbeddedService

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)
PROPER = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
LIMITS = {
    "rate": {  # the fuzzing sends many wrong tokens on purpose: no limit may get in its way
        "requests_per_s": 1e6,
        "burst": 1_000_000,
        "failed_auth_per_s": 1e6,
        "failed_auth_burst": 1_000_000,
    },
    "intake": {"max_communicators_per_request": 8},
}


class World:
    """One service with one accepted job; ``state()`` is everything a request could change."""

    def __init__(self, service: EmbeddedService) -> None:
        self.service = service
        self.flow = FlowIntentClient(service.address, attempts=1)
        self.admin = AdminClient(service.address, ADMIN_TOKEN)
        self.job: JobSession = self.flow.register_job("fz", hosts=HOSTS[:2])
        self.job.submit([communicator("dp", version=5, qps_per_connection=2)])
        self.other = self.flow.register_job("other", hosts=HOSTS[2:4])
        assert self.admin.replan("settle", wait=True).decision.epoch  # planned, state at rest
        self.channel = grpc.insecure_channel(service.address)

    def state(self) -> tuple[Any, ...]:
        jobs = self.admin.jobs()
        links = self.admin.fabric(only_changed=True)
        return (jobs.SerializeToString(deterministic=True), links.SerializeToString())

    def raw(self, method: str, body: bytes, token: str | None, stream: bool = False) -> None:
        metadata = () if token is None else (("authorization", f"Bearer {token}"),)
        if stream:
            call = self.channel.unary_stream(method)(body, timeout=5, metadata=metadata)
            next(iter(call))
        else:
            self.channel.unary_unary(method)(body, timeout=5, metadata=metadata)

    def close(self) -> None:
        self.channel.close()
        self.flow.close()
        self.admin.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with serving(FABRIC, tmp_path_factory.mktemp("fuzz"), limits=LIMITS) as service:
        w = World(service)
        try:
            yield w
        finally:
            w.close()


def refused(world: World, call: Any) -> grpc.StatusCode:
    before = world.state()
    with pytest.raises(grpc.RpcError) as caught:
        call()
    code: grpc.StatusCode = caught.value.code()
    assert code in PROPER, (code, caught.value.details())
    assert world.state() == before
    return code


METHODS = [
    ("/c4p.v1.FlowIntentService/RegisterJob", False),
    ("/c4p.v1.FlowIntentService/SubmitIntents", False),
    ("/c4p.v1.FlowIntentService/WatchBindings", True),
    ("/c4p.v1.FlowIntentService/ReleaseJob", False),
    ("/c4p.v1.AdminService/DrainLink", False),
    ("/c4p.v1.AdminService/Replan", False),
]


@FUZZ
@given(
    method=st.sampled_from(METHODS),
    body=st.binary(min_size=1, max_size=300),
    who=st.sampled_from(["job", "other", "none", "garbage"]),
)
def test_random_bytes_get_proper_codes(
    world: World, method: tuple[str, bool], body: bytes, who: str
) -> None:
    token = {"job": world.job.token, "other": world.other.token, "none": None}.get(who, "c4pj1.xyz")
    if method[0].startswith("/c4p.v1.FlowIntentService/RegisterJob"):
        body = b"\xff" + body  # a registration that parses could be valid: keep it garbage
    refused(world, lambda: world.raw(method[0], body, token, method[1]))


def _bad_communicator(draw: st.DrawFn) -> pb.CommunicatorIntent:
    """A communicator with at least one definite violation and random noise elsewhere."""
    c = communicator(
        draw(st.sampled_from(["dp", "tp", "new"])),
        version=draw(st.integers(1, 2**63)),
        qps_per_connection=draw(st.none() | st.integers(1, 16)),
    )
    flaw = draw(st.integers(0, 11))
    if flaw == 0:
        c.qps_per_connection = draw(st.just(0) | st.integers(17, 2**32 - 1))
    elif flaw == 1:
        c.channels = draw(st.just(0) | st.integers(65, 2**32 - 1))
    elif flaw == 2:
        c.version = 0
    elif flaw == 3:
        c.id, c.version = "dp", draw(st.integers(1, 4))  # stale: 5 is accepted
    elif flaw == 4:
        c.pattern = draw(st.integers(5, 10_000))  # type: ignore[assignment]
    elif flaw == 5:
        c.ranks[:] = draw(st.lists(st.integers(4, 2**32 - 1), min_size=1, max_size=5))
    elif flaw == 6:
        c.id = draw(st.text(max_size=100)) + draw(st.sampled_from(["/", " ", "é", ":"]))
    elif flaw == 7:
        c.rate = draw(st.sampled_from([0.0, -1.0, math.nan, -math.inf]))
    elif flaw == 8:
        c.trees = draw(st.integers(0, 2**32 - 1))  # trees on a ring pattern
    elif flaw == 9:
        c.pattern = pb.PATTERN_EXPLICIT
        a, b = draw(st.sampled_from([(0, 2), (1, 3), (0, 9), (7, 1)]))
        conn = c.connections.add(src_rank=a, dst_rank=b)
        if (a, b) in ((0, 2), (1, 3)):  # ranks of one host: refused
            conn.dst_rank = a + 1 if a % 2 == 0 else a - 1
    elif flaw == 10:
        c.id, c.version = "dp", 5  # the accepted version with other content
        c.channels = draw(st.integers(2, 64))
    else:
        c.collective = draw(st.integers(6, 1000))  # type: ignore[assignment]
    return c


@st.composite
def bad_submits(draw: st.DrawFn) -> tuple[list[pb.CommunicatorIntent], list[str]]:
    comms = [_bad_communicator(draw) for _ in range(draw(st.integers(1, 3)))]
    if draw(st.booleans()):  # too many communicators for one request (limit 8)
        comms += [communicator(f"c{i}") for i in range(9)]
    withdraw = draw(st.lists(st.sampled_from(["dp", "x"]), max_size=2))
    return comms, withdraw


@FUZZ
@given(request=bad_submits())
def test_malformed_intents_are_refused_whole(
    world: World, request: tuple[list[pb.CommunicatorIntent], list[str]]
) -> None:
    comms, withdraw = request
    message = fi.SubmitIntentsRequest(job_id="fz", communicators=comms, withdraw=withdraw)
    refused(
        world,
        lambda: world.raw(
            "/c4p.v1.FlowIntentService/SubmitIntents",
            message.SerializeToString(),
            world.job.token,
        ),
    )


@FUZZ
@given(
    job_id=st.text(max_size=140),
    host_list=st.lists(st.sampled_from([*HOSTS, "ghost", "", "h 1"]), max_size=6),
    ranks=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.text(max_size=8), st.text(max_size=8))),
    priority=st.integers(0, 2**32 - 1),
)
def test_malformed_registrations_are_refused(
    world: World,
    job_id: str,
    host_list: list[str],
    ranks: list[tuple[int, str, str]],
    priority: int,
) -> None:
    # Always broken: a host that holds another job, or both placements, or neither.
    hosts_given = [*host_list, HOSTS[0]] if host_list or not ranks else host_list
    message = fi.RegisterJobRequest(
        job_id=job_id,
        priority=priority,
        hosts=hosts_given,
        ranks=[pb.RankPlacement(rank=r, host=h, nic=n) for r, h, n in ranks],
        tenant="t" * (priority % 100),
    )
    refused(
        world,
        lambda: world.raw(
            "/c4p.v1.FlowIntentService/RegisterJob", message.SerializeToString(), None
        ),
    )


@FUZZ
@given(
    link=st.text(max_size=80),
    reason=st.text(max_size=300),
    token=st.sampled_from([ADMIN_TOKEN, "wrong-admin-token-xxxxxxxx", None]),
)
def test_malformed_admin_calls_are_refused(
    world: World, link: str, reason: str, token: str | None
) -> None:
    if token == ADMIN_TOKEN and len(reason) <= 256:
        link = link + "--nowhere"  # a valid credential: make sure the link does not exist
    message = admin.DrainLinkRequest(link=link, reason=reason)
    refused(
        world,
        lambda: world.raw("/c4p.v1.AdminService/DrainLink", message.SerializeToString(), token),
    )


def test_the_world_still_works(world: World) -> None:
    """After all that, the service serves the job it had, unchanged."""
    watch = world.job.watch()
    try:
        assert watch.wait(lambda m: len(m.bindings) == 8, 20)
    finally:
        watch.stop()
    with clients(world.service.address) as (flow, _):
        assert flow.register_job("late", hosts=HOSTS[4:5]).token
