"""One client cannot lock out its host: rate limits follow the credential, not the address.

Before (issue 33): a released job's client retrying at 10/s with its dead token spent the
failed-authentication allowance of 127.0.0.1, and every other caller from that address (other
jobs' SubmitIntents and WatchBindings, the operator's DrainLink, new registrations) was refused
RESOURCE_EXHAUSTED: 68% of the neighbours' calls failed in ``scripts/measure/controller_abuse.py``.
Now a well-formed job token that fails spends a bucket of its own, and only calls without a
usable credential share their peer's.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from service_cases import ADMIN_TOKEN, clients, hosts, serving, spread_fabric

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import flow_intent_pb2_grpc
from c4p.client import AdminClient, ApiError, communicator

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)


def test_a_released_jobs_retries_do_not_lock_out_its_neighbours(tmp_path: Path) -> None:
    limits = {"rate": {"failed_auth_burst": 5}}  # spent within the first second of retries
    with (
        serving(FABRIC, tmp_path, limits=limits) as service,
        clients(service.address, attempts=1) as (flow, admin),
    ):
        dead = flow.register_job("released", hosts=HOSTS[:2])
        dead.release()
        alive = flow.register_job("alive", hosts=HOSTS[2:4])
        codes: Counter[str] = Counter()
        stop = threading.Event()

        def retry() -> None:
            for _ in range(60):  # 10/s for at most 6 s
                if stop.is_set():
                    return
                try:
                    dead.submit([communicator("dp")])
                except ApiError as exc:
                    codes[exc.code.name] += 1
                time.sleep(0.1)

        retrier = threading.Thread(target=retry)
        retrier.start()
        failed: list[str] = []
        calls = 0
        channel = grpc.insecure_channel(service.address)
        stub = flow_intent_pb2_grpc.FlowIntentServiceStub(channel)
        link = FABRIC.links[0].id
        try:
            time.sleep(2.0)  # the retrier spends more than the allowance meanwhile
            for k in range(1, 11):
                calls += 4
                try:
                    alive.submit([communicator("dp", version=k)])
                    (admin.drain(link, "x", wait=False) if k % 2 else admin.restore(link))
                    stream = stub.WatchBindings(
                        fi.WatchBindingsRequest(job_id=alive.job_id),
                        metadata=(("authorization", f"Bearer {alive.token}"),),
                        timeout=10,
                    )
                    next(iter(stream))
                    stream.cancel()
                    flow.register_job(f"new{k}", hosts=HOSTS[4:6]).release()
                except (ApiError, grpc.RpcError) as exc:
                    failed.append(str(exc)[:200])
                time.sleep(0.2)
        finally:
            stop.set()
            retrier.join(20)
            channel.close()
        print(f"neighbours' calls failed: {len(failed)}/{calls}; the retrier got {dict(codes)}")
        assert failed == []
        assert codes["PERMISSION_DENIED"] >= 1  # the dead token is still refused ...
        assert codes["RESOURCE_EXHAUSTED"] >= 1  # ... and its retries are slowed, alone


def test_a_guessed_admin_token_still_locks_out_only_guessing(tmp_path: Path) -> None:
    """Operator credentials are configured strings that could be guessed: failures with them
    still spend the peer's allowance, as before; job tokens of other jobs are unaffected."""
    limits = {"rate": {"failed_auth_per_s": 0.01, "failed_auth_burst": 5}}
    with (
        serving(FABRIC, tmp_path, limits=limits) as service,
        clients(service.address, attempts=1) as (flow, _),
    ):
        job = flow.register_job("j", hosts=HOSTS[:2])
        wrong = AdminClient(service.address, "not-the-admin-token-at-all", wait_for_ready=False)
        right = AdminClient(service.address, ADMIN_TOKEN)
        try:
            for _ in range(8):
                with contextlib.suppress(ApiError):
                    wrong.jobs()
            with pytest.raises(ApiError) as caught:  # the guessing peer's admin calls wait
                right.jobs()
            assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            job.submit([communicator("dp")])  # a job's own token is its own credential
        finally:
            wrong.close()
            right.close()
