"""Real processes: many emulated jobs registering and watching at once from separate processes,
and the controller itself as a process, killed with SIGKILL mid-traffic and restarted: no
accepted intent is lost and every binding is served again unchanged (zero churn)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from service_cases import ADMIN_TOKEN, busy_fabric, hosts, serving, wait_until

from c4p.client import (
    AdminClient,
    ApiError,
    AppliedBinding,
    BindingWatch,
    FlowIntentClient,
    JobSession,
    communicator,
)
from c4p.client.emulated import EmulatedTransport, run_job
from c4p.client.mirror import QpId
from c4p.files import save_fabric
from topology.roce import rdma_flow_label_to_udp_sport

FABRIC = busy_fabric()
HOSTS = hosts(FABRIC)
ROOT = Path(__file__).resolve().parents[1]


def test_many_jobs_in_separate_processes(tmp_path: Path) -> None:
    jobs = [(f"job{k}", [HOSTS[k], HOSTS[k + 8]]) for k in range(6)]  # across the spines
    with serving(FABRIC, tmp_path) as service:
        context = multiprocessing.get_context("spawn")
        with context.Pool(processes=len(jobs)) as pool:
            pending = [
                pool.apply_async(run_job, (service.address, name, placed), {"qps": 2})
                for name, placed in jobs
            ]
            results = [p.get(timeout=90) for p in pending]
        admin = AdminClient(service.address, ADMIN_TOKEN)
        try:
            listed = {j.job_id: j for j in admin.jobs().jobs}
            plan = admin.plan()
        finally:
            admin.close()
    assert len({r["token"] for r in results}) == len(jobs)
    for r in results:
        assert r["complete"] and r["error"] is None, r
        assert r["flows"] == 8 and len(r["ports"]) == 8
        for qp, port in r["ports"].items():  # the kernel turns each label into its port
            assert rdma_flow_label_to_udp_sport(r["labels"][qp]) == port
        assert listed[r["job"]].bound == 8
    assert plan.decision.flows == 8 * len(jobs) and plan.decision.gap == 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def controller_process(config: Path, ready: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m c4p serve`` as a child process; killed on exit whatever happens."""
    ready.unlink(missing_ok=True)
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "c4p",
            "serve",
            "--config",
            str(config),
            "--ready-file",
            str(ready),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if not wait_until(lambda: ready.exists() or child.poll() is not None, 60, 0.05):
            raise TimeoutError("the controller did not become ready")
        if child.poll() is not None:
            raise RuntimeError(f"the controller exited with status {child.returncode}")
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)


def _config(tmp_path: Path) -> tuple[Path, str]:
    """A controller config on a fixed free port (the restart must come back on it)."""
    save_fabric(FABRIC, tmp_path / "fabric.json")
    address = f"127.0.0.1:{_free_port()}"
    config = tmp_path / "controller.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "fabric": {"path": "fabric.json"},
                "listen": {"address": address, "grace_s": 0.5},
                "store": {"path": "state/c4p.db", "synchronous": "full"},
                "auth": {"admin": [{"value": ADMIN_TOKEN}]},
                "metrics": {"address": None},
                "logging": {"level": "warning"},
                "controller": {"debounce_s": 0.02, "max_delay_s": 0.2},
                "planner": {"budget_s": 1.0},
            }
        )
    )
    return config, address


def _submit_until_killed(
    job: JobSession, controller: subprocess.Popen[bytes], acknowledged: list[tuple[str, int]]
) -> None:
    """Submit new versions from a thread; SIGKILL the controller after 20 were acknowledged."""
    stop = threading.Event()

    def submit_forever() -> None:
        for i in range(1, 10_000):
            if stop.is_set():
                return
            try:
                job.submit([communicator(f"c{i % 7}", version=i, channels=1 + i % 3)])
            except ApiError:
                return  # the controller is gone
            acknowledged.append((f"c{i % 7}", i))

    submitter = threading.Thread(target=submit_forever)
    submitter.start()
    try:
        assert wait_until(lambda: len(acknowledged) >= 20, 30, 0.005)
        os.kill(controller.pid, signal.SIGKILL)  # in the middle of the submissions
        controller.wait(30)
    finally:
        stop.set()
        submitter.join(30)


def _ports(bindings: dict[QpId, AppliedBinding]) -> dict[QpId, int]:
    return {k: b.udp_sport for k, b in bindings.items()}


def test_kill_9_and_restart_keeps_every_intent_and_binding(tmp_path: Path) -> None:
    config, target = _config(tmp_path)
    ready = tmp_path / "ready"
    acknowledged: list[tuple[str, int]] = []
    sessions: dict[str, JobSession] = {}
    watches: dict[str, BindingWatch] = {}
    transports: dict[str, EmulatedTransport] = {}
    with FlowIntentClient(target, attempts=1) as flow:
        try:
            with controller_process(config, ready) as first:
                for k, name in enumerate(("a", "b", "c")):
                    sessions[name] = flow.register_job(name, hosts=[HOSTS[k], HOSTS[k + 8]])
                    reply = sessions[name].submit([communicator("dp", qps_per_connection=2)])
                    transports[name] = EmulatedTransport()
                    watches[name] = sessions[name].watch(on_change=transports[name])
                    assert watches[name].wait_revision(reply.revision, 30)
                before = {n: dict(t.ports) for n, t in transports.items()}
                applied = {n: t.applied for n, t in transports.items()}
                d = flow.register_job("d", hosts=[HOSTS[3], HOSTS[11]])
                _submit_until_killed(d, first, acknowledged)
            with controller_process(config, ready):
                admin = AdminClient(target, ADMIN_TOKEN)
                try:
                    jobs = {j.job_id: j for j in admin.jobs().jobs}
                finally:
                    admin.close()
                versions = {c.id: c.version for c in jobs["d"].communicators}
                for comm, version in acknowledged:  # every acknowledged intent survived
                    assert versions[comm] >= version
                for name, watch in watches.items():  # the old streams reconnect and resume
                    assert watch.wait(lambda m, w=watch: w.reconnects > 0 and m.updates >= 2, 30)
                    assert transports[name].ports == before[name]
                    assert transports[name].applied == applied[name]  # nothing re-applied
                    fresh = sessions[name].watch()  # a full set from the restarted controller
                    try:
                        assert fresh.wait(lambda m: len(m.bindings) == 8, 30)
                        assert _ports(fresh.mirror.snapshot()) == before[name]
                    finally:
                        fresh.stop()
        finally:
            for watch in watches.values():
                watch.stop()
    assert len(acknowledged) >= 20


@pytest.mark.parametrize("bad", ["no-admin", "remote-plaintext"])
def test_a_bad_config_stops_before_serving(tmp_path: Path, bad: str) -> None:
    save_fabric(FABRIC, tmp_path / "fabric.json")
    config = {
        "fabric": {"path": "fabric.json"},
        "auth": {"admin": [{"env": "C4P_TEST_UNSET_VARIABLE"}]},
    }
    if bad == "remote-plaintext":
        config = {"fabric": {"path": "fabric.json"}, "listen": {"address": "0.0.0.0:0"}}
    path = tmp_path / "controller.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "c4p", "serve", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    message = done.stderr.decode()
    assert ("auth.admin[0]" if bad == "no-admin" else "loopback") in message
    assert "Traceback" not in message
