"""The service's edge: every number finite and in range, registration rights explicit, failed
authentications rate-limited, operators in buckets of their own, unsafe configs refused."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from pydantic import ValidationError
from service_cases import ADMIN_TOKEN, clients, hosts, serving, spread_fabric

from c4p.api.v1 import intents_pb2 as pb
from c4p.client import AdminClient, ApiError, FlowIntentClient, communicator
from c4p.service.serve import ServeConfig

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)
LAUNCHER = "launcher-token-0123456789abcdef"


@pytest.mark.parametrize("rate", [5e-324, float("inf"), float("nan"), -1.0, 1e9])
def test_a_rate_outside_its_range_is_refused_at_the_edge(tmp_path: Path, rate: float) -> None:
    with (
        serving(FABRIC, tmp_path) as service,
        clients(service.address, attempts=1) as (flow, admin),
    ):
        job = flow.register_job("j", hosts=HOSTS[:2])
        explicit = pb.ConnectionIntent(src_rank=0, dst_rank=2, rate=rate)
        for comm, where in [
            (communicator("dp", rate=rate), "communicators[0].rate"),
            (communicator("x", pattern="explicit", connections=[explicit]),
             "communicators[0].connections[0].rate"),
        ]:  # fmt: skip
            with pytest.raises(ApiError) as caught:
                job.submit([comm])
            assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert where in [f for f, _ in caught.value.problems], caught.value.problems
        job.submit([communicator("ok", rate=0.5)])  # the controller still plans for everyone
        assert admin.replan("after refusals").decision.result == pb.Decision.RESULT_PLANNED
        assert admin.decisions(10, before=2**64 - 1)  # any uint64 is a valid bound


def test_registration_rights_name_the_hosts(tmp_path: Path) -> None:
    auth = {
        "admin": [{"value": ADMIN_TOKEN}],
        "registration": [{"value": LAUNCHER, "hosts": [HOSTS[0], HOSTS[1]]}],
    }
    with serving(FABRIC, tmp_path, auth=auth) as service:
        with FlowIntentClient(service.address, register_token=LAUNCHER, attempts=1) as flow:
            flow.register_job("mine", hosts=HOSTS[:2])
            with pytest.raises(ApiError) as caught:
                flow.register_job("theirs", hosts=[HOSTS[2], HOSTS[3]])
            assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
            assert HOSTS[2] in caught.value.details
        with FlowIntentClient(service.address, attempts=1) as anonymous:
            with pytest.raises(ApiError) as caught:
                anonymous.register_job("anyone", hosts=[HOSTS[4]])
            assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_failed_authentications_are_rate_limited_per_peer(tmp_path: Path) -> None:
    limits = {"rate": {"failed_auth_per_s": 0.01, "failed_auth_burst": 5}}
    with serving(FABRIC, tmp_path, limits=limits) as service:
        wrong = AdminClient(service.address, "not-the-admin-token-at-all", wait_for_ready=False)
        right = AdminClient(service.address, ADMIN_TOKEN)
        try:
            codes = []
            for _ in range(8):
                try:
                    wrong.jobs()
                except ApiError as exc:
                    codes.append(exc.code)
            assert codes[:5] == [grpc.StatusCode.PERMISSION_DENIED] * 5
            assert set(codes[5:]) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
            with pytest.raises(ApiError) as caught:  # not even compared now: the peer waits
                right.jobs()
            assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            wrong.close()
            right.close()


def test_a_polling_dashboard_cannot_starve_a_drain(tmp_path: Path) -> None:
    limits = {"rate": {"requests_per_s": 0.01, "burst": 3}}
    with serving(FABRIC, tmp_path, limits=limits) as service:
        admin = AdminClient(service.address, ADMIN_TOKEN)
        try:
            refused = 0
            for _ in range(6):
                try:
                    admin.jobs()
                except ApiError as exc:
                    assert exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                    refused += 1
            assert refused == 3  # the reads' bucket is empty ...
            link = FABRIC.links[0].id
            assert admin.drain(link, "urgent").changed  # ... and a drain still goes through
        finally:
            admin.close()


def test_tenant_limits(tmp_path: Path) -> None:
    limits = {"intake": {"max_jobs_per_tenant": 1}}
    with (
        serving(FABRIC, tmp_path, limits=limits) as service,
        clients(service.address, attempts=1) as (flow, _),
    ):
        flow.register_job("a", hosts=HOSTS[:2], tenant="t1")
        flow.register_job("b", hosts=HOSTS[2:4], tenant="t2")
        with pytest.raises(ApiError) as caught:
            flow.register_job("c", hosts=HOSTS[4:6], tenant="t1")
        assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "tenant" in caught.value.details


BASE = {"fabric": {"path": "f.json"}, "auth": {"admin": [{"value": ADMIN_TOKEN}]}}
TLS = {"mode": "tls", "cert_file": "c.pem", "key_file": "k.pem"}


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        ({"listen": {"address": "192.0.2.1:50051"}, "tls": TLS}, "auth.registration"),
        ({"metrics": {"address": "0.0.0.0:9464"}}, "metrics.address"),
        ({"metrics": {"address": "0.0.0.0:9464", "allow_remote": True}}, None),
        (
            {
                "listen": {"address": "192.0.2.1:50051"},
                "tls": TLS,
                "auth": {
                    "admin": [{"value": ADMIN_TOKEN}],
                    "registration": [{"value": LAUNCHER, "hosts": ["rack1-*"]}],
                },
            },
            None,
        ),
    ],
)
def test_unsafe_configs_are_refused(extra: dict[str, object], refused: str | None) -> None:
    data = {**BASE, **extra}
    if refused is None:
        ServeConfig.model_validate(data)
        return
    with pytest.raises(ValidationError, match=refused.replace(".", r"\.")):
        ServeConfig.model_validate(data)
