"""One store, one writer, one file: a second controller on the same ``store.path`` refuses to
start; a store whose file (or lock file) is deleted or replaced while serving stops writing.

Before (issue 33): a second ``c4p serve`` on the same store started and split the plan with the
first; a deleted store was not noticed, writes were acknowledged and lost at the next start.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from service_cases import clients, hosts, serving, spread_fabric, wait_until
from test_serve_startup import finish, one_line, serve, write_config

from c4p.client import ApiError, communicator
from c4p.service.runtime import STORE_HEALTH
from c4p.store import SqliteStore, StoreError
from c4p.store.lock import StoreLock

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
        return int(reply.status)


def test_a_second_controller_on_the_same_store_is_refused(tmp_path: Path) -> None:
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    store = first_dir / "c4p.db"
    ready = first_dir / "ready"
    first = serve(write_config(first_dir), ready)
    try:
        assert wait_until(lambda: ready.exists() or first.poll() is not None, 60, 0.05)
        assert first.poll() is None, first.communicate()
        address = ready.read_text().strip()
        other = write_config(second_dir, store={"path": str(store), "synchronous": "normal"})
        code, err = finish(serve(other))
        line = one_line(err)
        assert code == 2, err
        assert str(store) in line and f"pid {first.pid}" in line and address in line, line
        assert first.poll() is None  # the holder serves on, untouched
        assert health(address) == health_pb2.HealthCheckResponse.SERVING
    finally:
        first.kill()
        first.communicate(timeout=30)
    again = serve(write_config(second_dir, store={"path": str(store)}), second_dir / "ready")
    try:  # a killed holder leaves no stale lock: the kernel released it with the process
        assert wait_until(lambda: (second_dir / "ready").exists() or again.poll() is not None, 60)
        assert again.poll() is None, again.communicate()
    finally:
        again.kill()
        again.communicate(timeout=30)


def test_a_second_store_object_in_one_process_is_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c4p.db")
    try:
        with pytest.raises(StoreError, match=rf"in use by another controller \(pid {os.getpid()}"):
            SqliteStore(tmp_path / "c4p.db")
    finally:
        store.close()
    SqliteStore(tmp_path / "c4p.db").close()  # closed: free again


@pytest.mark.parametrize("how", ["deleted", "replaced", "lock deleted"])
def test_a_store_file_gone_while_open_refuses_writes(tmp_path: Path, how: str) -> None:
    path = tmp_path / "c4p.db"
    store = SqliteStore(path)
    try:
        if how == "deleted":
            for name in ("c4p.db", "c4p.db-wal", "c4p.db-shm"):
                (tmp_path / name).unlink(missing_ok=True)
        elif how == "replaced":
            other = tmp_path / "other"
            other.mkdir()
            SqliteStore(other / "c4p.db").close()
            os.replace(other / "c4p.db", path)
        else:
            (tmp_path / "c4p.db.lock").unlink()
            peer = StoreLock(path)  # a second controller could now take a new lock file ...
            peer.close()
        with pytest.raises(StoreError, match="deleted or replaced"):
            store.set_rollback(None)  # ... so this store must stop writing
        with pytest.raises(StoreError, match="deleted or replaced"):
            store.set_rollback(None)  # and stays stopped
    finally:
        store.close()


def test_a_store_deleted_under_a_running_server_stops_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = {"path": str(tmp_path / "c4p.db"), "synchronous": "normal", "check_s": 0.2}
    with (
        serving(FABRIC, tmp_path, store=store) as service,
        clients(service.address, attempts=1) as (flow, admin),
    ):
        job = flow.register_job("a", hosts=HOSTS[:2])
        job.submit([communicator("dp")])
        for name in ("c4p.db", "c4p.db-wal", "c4p.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        # periodic check: no write needed for health to say so
        assert wait_until(lambda: health(service.address, STORE_HEALTH) == NOT_SERVING, 10)
        assert health(service.address) == NOT_SERVING
        with pytest.raises(ApiError) as caught:
            job.submit([communicator("more")])
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(ApiError) as caught:
            admin.drain(FABRIC.links[0].id, "x")
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(ApiError) as caught:  # a plan that cannot be kept: at once, not
            admin.replan("a step that would commit")  # after the 60 s wait for its step
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        time.sleep(1.0)  # steps (debounce 0.02 s) may run and fail to commit meanwhile
        assert health(service.address, STORE_HEALTH) == NOT_SERVING
    lost = [r for r in caplog.records if getattr(r, "event", "") == "store-lost"]
    assert len(lost) == 1, lost  # one line, however many writes were refused


def test_a_store_deleted_is_refused_before_the_periodic_check(tmp_path: Path) -> None:
    """The check before each commit: the periodic one is an hour away here."""
    store = {"path": str(tmp_path / "c4p.db"), "synchronous": "normal", "check_s": 3600}
    with (
        serving(FABRIC, tmp_path, store=store) as service,
        clients(service.address, attempts=1) as (flow, _),
    ):
        job = flow.register_job("a", hosts=HOSTS[:2])
        (tmp_path / "c4p.db").unlink()
        with pytest.raises(ApiError) as caught:
            job.submit([communicator("dp")])
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert "store" in caught.value.details
        assert wait_until(lambda: health(service.address) == NOT_SERVING, 10)
