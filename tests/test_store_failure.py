"""A store that stops taking writes while the controller runs: callers get UNAVAILABLE (retry
later), not INTERNAL, and health says NOT_SERVING until a write succeeds again.

The store's SQLite connection is closed under the running service: every later write fails in
SQLite itself, as it would on a disk gone read-only or full.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from service_cases import clients, hosts, serving, spread_fabric, wait_until

from c4p.client import ApiError, communicator

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)


def status(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        return int(reply.status)


def test_a_store_that_fails_is_unavailable_and_not_serving(tmp_path: Path) -> None:
    with (
        serving(FABRIC, tmp_path) as service,
        clients(service.address, attempts=1) as (flow, admin),
    ):
        job = flow.register_job("a", hosts=HOSTS[:2])
        job.submit([communicator("dp")])
        assert status(service.address) == health_pb2.HealthCheckResponse.SERVING
        runtime = service.runtime
        assert runtime is not None
        with runtime.store._lock:
            runtime.store._db.close()
        with pytest.raises(ApiError) as caught:
            job.submit([communicator("more")])
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert "store" in caught.value.details
        assert wait_until(
            lambda: status(service.address) == health_pb2.HealthCheckResponse.NOT_SERVING, 10
        )
        with pytest.raises(ApiError) as caught:
            admin.drain(FABRIC.links[0].id, "x")
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
