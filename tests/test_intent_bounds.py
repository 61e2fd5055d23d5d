"""A SubmitIntents full of explicit connections is judged while it is read, before anything is
built from it: counts first, then each connection's ranks, NICs, QPs and rate, stopping at the
first hundred problems.

Before (issue 33): 9 communicators x 65k out-of-range connections (4.1 MB) were converted to
dicts and validated by pydantic before the ranks were checked: 4.5 s of server CPU and +565 MB
for one refusal (``scripts/measure/controller_abuse.py`` prints the figures). The tests count
the connections converted (``convert._connection``) on the way to a refusal: none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from service_cases import clients, hosts, serving, spread_fabric

from c4p.api.v1 import intents_pb2 as pb
from c4p.client import ApiError, communicator
from c4p.service import convert

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)


@pytest.fixture
def converted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many connections the service converted from protobuf (a counting wrapper)."""
    count = [0]
    real = convert._connection

    def counting(c: pb.ConnectionIntent) -> dict[str, Any]:
        count[0] += 1
        return real(c)

    monkeypatch.setattr(convert, "_connection", counting)
    yield count


def explicit(name: str, connections: list[pb.ConnectionIntent]) -> pb.CommunicatorIntent:
    return communicator(name, pattern="explicit", connections=connections)


def refused(job: Any, comms: list[pb.CommunicatorIntent]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        job.submit(comms)
    return caught.value


def test_too_many_connections_in_one_request_are_refused_by_count(
    tmp_path: Path, converted: list[int]
) -> None:
    with (
        serving(FABRIC, tmp_path) as service,
        clients(service.address, attempts=1) as (flow, _),
    ):
        job = flow.register_job("j", hosts=HOSTS[:2])
        bomb = [pb.ConnectionIntent(src_rank=100 + k % 20, dst_rank=120) for k in range(65_000)]
        error = refused(job, [explicit(f"x{c}", bomb) for c in range(9)])
        assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert error.problems[0][0] == "communicators", error.problems
        assert "585,000 connections" in error.details
        assert converted[0] == 0


def test_out_of_range_connections_stop_at_a_hundred_problems(
    tmp_path: Path, converted: list[int]
) -> None:
    with (
        serving(FABRIC, tmp_path) as service,
        clients(service.address, attempts=1) as (flow, _),
    ):
        job = flow.register_job("j", hosts=HOSTS[:2])  # 4 ranks
        bomb = [pb.ConnectionIntent(src_rank=100 + k % 20, dst_rank=1) for k in range(65_000)]
        error = refused(job, [explicit(f"x{c}", bomb) for c in range(4)])
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        fields = [f for f, _ in error.problems]
        assert fields[0] == "communicators[0].connections[0].src_rank", fields
        assert "out of range" in error.problems[0][1] and "100" in error.problems[0][1]
        assert "first 100 problems" in error.details, error.details
        assert converted[0] == 0  # refused while reading: nothing built


@pytest.mark.parametrize(
    ("connection", "field", "reason"),
    [
        (pb.ConnectionIntent(src_rank=0, dst_rank=4), "dst_rank", "out of range 0..3"),
        (pb.ConnectionIntent(src_rank=2, dst_rank=2), "dst_rank", "both 2"),
        (pb.ConnectionIntent(src_nic="nope:nic0", dst_rank=1), "src_nic", "holds no rank"),
        (pb.ConnectionIntent(src_rank=0, dst_rank=1, qps=17), "qps", "1..16"),
        (pb.ConnectionIntent(src_rank=0, dst_rank=1, rate=float("nan")), "rate", "nan"),
        (pb.ConnectionIntent(src_rank=0), "dst_rank", "missing"),
    ],
)
def test_each_connection_problem_names_its_field(
    tmp_path: Path,
    converted: list[int],
    connection: pb.ConnectionIntent,
    field: str,
    reason: str,
) -> None:
    with (
        serving(FABRIC, tmp_path) as service,
        clients(service.address, attempts=1) as (flow, _),
    ):
        job = flow.register_job("j", hosts=HOSTS[:2])
        good = pb.ConnectionIntent(src_nic=f"{HOSTS[0]}:nic0", dst_rank=3, qps=2, rate=2.0)
        error = refused(job, [explicit("x", [good, connection])])
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert error.problems[0][0] == f"communicators[0].connections[1].{field}", error.problems
        assert reason in error.problems[0][1], error.problems
        assert converted[0] == 0
        accepted = job.submit([explicit("x", [good])])  # a sound one is still accepted
        assert accepted.flows == 2 and converted[0] == 1
