"""Control modes over real gRPC: shadow plans and predicts but pushes nothing, off is not even
planned, leaving active puts the default ports back in one update, the rollout policy (tenant,
canary by a hash of the job id, pins) resolves as configured, and one call rolls every job
back, durably across a restart of a real ``c4p serve`` process."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from service_cases import ADMIN_TOKEN, busy_fabric, clients, hosts, serving, wait_until

from c4p.api.v1 import admin_pb2, flow_intent_pb2
from c4p.api.v1 import intents_pb2 as pb
from c4p.client import Action, ApiError, AsyncFlowIntentClient, BindingChange, communicator
from c4p.client.emulated import EmulatedTransport
from c4p.files import save_fabric

FABRIC = busy_fabric()
HOSTS = hosts(FABRIC)
ROOT = Path(__file__).resolve().parents[1]
MODE = {
    pb.CONTROL_MODE_OFF: "off",
    pb.CONTROL_MODE_SHADOW: "shadow",
    pb.CONTROL_MODE_ACTIVE: "active",
}


def _pair(k: int) -> list[str]:
    """Two hosts on different leaves (job k of at most eight), so the job crosses spines."""
    return [HOSTS[k], HOSTS[k + 8]]


class Recorder(EmulatedTransport):
    """The emulated plugin, also keeping every change it was called with."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[BindingChange] = []

    def __call__(self, change: BindingChange) -> None:
        self.changes.append(change)
        super().__call__(change)


def _refused(address: str, path: str, request: Any, token: str = "") -> ApiError:
    """Send a raw request the typed clients would not build; the status it is refused with."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString())
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        try:
            call(request, timeout=30, metadata=metadata)
        except grpc.RpcError as exc:
            return ApiError.from_rpc(exc)
    raise AssertionError(f"{path} accepted {request}")


def _modes(admin_jobs: list[object]) -> dict[str, tuple[str, str]]:
    return {j.job_id: (MODE[j.control_mode], j.control_source) for j in admin_jobs}  # type: ignore[attr-defined]


def test_shadow_plans_and_predicts_but_pushes_nothing(tmp_path: Path) -> None:
    with (
        serving(FABRIC, tmp_path, rollout={"default": "shadow"}) as service,
        clients(service.address) as (flow, admin),
    ):
        job = flow.register_job("s1", hosts=_pair(0))
        assert job.control_mode == "shadow"
        plugin = Recorder()
        watch = job.watch(on_change=plugin)
        reply = job.submit([communicator("dp", qps_per_connection=2)])
        assert watch.wait_revision(reply.revision, 30)
        listed = admin.jobs().jobs
        log = admin.decisions(10)
        watch.stop()
    assert plugin.changes == [] and plugin.ports == {}
    assert watch.mirror.bindings == {} and watch.mirror.control_mode == "shadow"
    assert _modes(list(listed)) == {"s1": ("shadow", "default")}
    assert listed[0].bound == 0 and listed[0].flows == reply.flows > 0
    planned = next(d for d in log if d.flows)
    assert planned.jobs_changed == ["s1"] and planned.bindings_added == 0
    (p,) = planned.predictions
    assert p.control_mode == pb.CONTROL_MODE_SHADOW
    assert p.bindings_pushed == reply.flows  # every QP would have moved off its default port
    assert p.busbw_gbps > 0 and p.ecmp_busbw_gbps > 0


def test_off_is_not_planned_and_gets_nothing(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        off = flow.register_job("o1", hosts=_pair(0), control_mode="off")
        on = flow.register_job("a1", hosts=_pair(1))
        plugins = {"o1": Recorder(), "a1": Recorder()}
        watches = {j.job_id: j.watch(on_change=plugins[j.job_id]) for j in (off, on)}
        flows = {}
        for j in (off, on):
            reply = j.submit([communicator("dp")])
            flows[j.job_id] = reply.flows
            assert watches[j.job_id].wait_revision(reply.revision, 30)
        log = admin.decisions(20)
        modes = _modes(list(admin.jobs().jobs))
        for w in watches.values():
            w.stop()
    assert modes == {"o1": ("off", "job"), "a1": ("active", "default")}
    assert plugins["o1"].changes == [] and watches["o1"].mirror.control_mode == "off"
    assert len(plugins["a1"].ports) == flows["a1"] == flows["o1"] > 0
    last = log[0]
    assert last.jobs_off == ["o1"] and [p.job_id for p in last.predictions] == ["a1"]
    assert last.flows == flows["a1"]  # the off job's flows are not in the plan


def test_active_to_off_puts_the_default_ports_back_in_one_update(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        job = flow.register_job("a1", hosts=_pair(0))
        plugin = Recorder()
        watch = job.watch(on_change=plugin)
        reply = job.submit([communicator("dp", qps_per_connection=4, channels=2)])
        assert watch.wait_revision(reply.revision, 30)
        applied = dict(plugin.ports)
        updates_before = watch.mirror.updates
        answer = admin.set_control_mode("a1", "off", wait=True)
        assert answer.changed and MODE[answer.mode] == "off" and answer.source == "operator"
        assert wait_until(lambda: watch.mirror.control_mode == "off", 30)
        updates_after = watch.mirror.updates
        again = admin.set_control_mode("a1", "off", wait=False)
        listed = admin.jobs().jobs[0]
        watch.stop()
    assert len(applied) == reply.flows == 2 * 2 * 2 * 4  # rails x directions x channels x QPs
    back = [c for c in plugin.changes if c.action is Action.DEFAULT]
    assert {c.binding.id for c in back} == set(applied)  # every QP, each once
    assert len({c.epoch for c in back}) == 1  # at one epoch ...
    assert updates_after == updates_before + 1  # ... in one update
    assert plugin.ports == {} and plugin.defaulted == len(applied) and plugin.withdrawn == 0
    assert answer.decision.bindings_removed == len(applied)
    assert not again.changed
    assert listed.bound == 0 and MODE[listed.control_mode] == "off"


def test_tenant_override_job_pin_and_operator(tmp_path: Path) -> None:
    rollout = {"default": "shadow", "tenants": {"prod": "active", "lab": "off"}}
    with (
        serving(FABRIC, tmp_path, rollout=rollout) as service,
        clients(service.address) as (flow, admin),
    ):
        flow.register_job("p1", hosts=_pair(0), tenant="prod")
        flow.register_job("p2", hosts=_pair(1), tenant="prod", control_mode="shadow")
        flow.register_job("l1", hosts=_pair(2), tenant="lab")
        flow.register_job("x1", hosts=_pair(3), tenant="other")
        first = _modes(list(admin.jobs().jobs))
        admin.set_control_mode("x1", "active", wait=False)
        pinned = _modes(list(admin.jobs(job_id="x1").jobs))
        admin.set_control_mode("x1", None, wait=False)
        cleared = _modes(list(admin.jobs(job_id="x1").jobs))
        with pytest.raises(ApiError) as unknown:
            admin.set_control_mode("nope", "off", wait=False)
        bad = _refused(
            service.address,
            "/c4p.v1.AdminService/SetControlMode",
            admin_pb2.SetControlModeRequest(job_id="x1", mode=9),  # type: ignore[arg-type]
            ADMIN_TOKEN,
        )
        bad_register = _refused(
            service.address,
            "/c4p.v1.FlowIntentService/RegisterJob",
            flow_intent_pb2.RegisterJobRequest(job_id="b1", hosts=_pair(4), control_mode=7),  # type: ignore[arg-type]
        )
    assert first == {
        "p1": ("active", "tenant"),
        "p2": ("shadow", "job"),
        "l1": ("off", "tenant"),
        "x1": ("shadow", "default"),
    }
    assert pinned == {"x1": ("active", "operator")}
    assert cleared == {"x1": ("shadow", "default")}
    assert unknown.value.code.name == "NOT_FOUND"
    assert bad.code.name == "INVALID_ARGUMENT" and bad.problems[0][0] == "mode"
    assert bad_register.code.name == "INVALID_ARGUMENT"
    assert bad_register.problems[0][0] == "control_mode" and "7" in bad_register.details


def _bucket(job_id: str) -> float:
    """The canary rule as the docs state it: the first 8 bytes of SHA-256(job id) / 2**64."""
    return int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big") / 2.0**64


@contextmanager
def controller_process(config: Path, ready: Path) -> Iterator[str]:
    """``python -m c4p serve`` as a child process on a port of its choosing (0); yields the
    address from its ready file; killed (SIGKILL) on exit whatever happens."""
    ready.unlink(missing_ok=True)
    child = subprocess.Popen(
        [sys.executable, "-m", "c4p", "serve", "--config", str(config)]
        + ["--ready-file", str(ready)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        up = wait_until(lambda: ready.exists() and bool(ready.read_text().strip()), 60, 0.05)
        if child.poll() is not None or not up:
            raise RuntimeError(f"the controller did not start (status {child.poll()})")
        yield ready.read_text().strip()
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)


def _config(tmp_path: Path, rollout: dict[str, Any]) -> Path:
    save_fabric(FABRIC, tmp_path / "fabric.json")
    config = tmp_path / "controller.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "fabric": {"path": "fabric.json"},
                "listen": {"address": "127.0.0.1:0", "grace_s": 0.5},
                "store": {"path": "state/c4p.db", "synchronous": "full"},
                "auth": {"admin": [{"value": ADMIN_TOKEN}]},
                "metrics": {"address": None},
                "logging": {"level": "warning"},
                "controller": {"debounce_s": 0.02, "max_delay_s": 0.2},
                "planner": {"budget_s": 1.0},
                "rollout": rollout,
            }
        )
    )
    return config


def test_canary_fraction_is_a_hash_of_the_job_id_and_survives_a_restart(tmp_path: Path) -> None:
    rollout = {"default": "shadow", "canary": {"fraction": 0.5, "mode": "active"}}
    config, ready = _config(tmp_path, rollout), tmp_path / "ready"
    names = [f"job-{k:02d}" for k in range(16)]
    with controller_process(config, ready) as address, clients(address) as (flow, admin):
        for k, name in enumerate(names):
            flow.register_job(name, hosts=[HOSTS[k]])
        before = _modes(list(admin.jobs().jobs))
    with controller_process(config, ready) as address, clients(address) as (_, admin):
        after = _modes(list(admin.jobs().jobs))
    expected = {
        n: ("active", "canary") if _bucket(n) < 0.5 else ("shadow", "default") for n in names
    }
    assert before == expected and after == expected
    assert 0 < sum(m == "active" for m, _ in expected.values()) < len(names)  # both kinds


def test_rollback_all_is_one_call_and_survives_a_restart(tmp_path: Path) -> None:
    config, ready = _config(tmp_path, {"default": "active"}), tmp_path / "ready"
    plugins = {"r1": Recorder(), "r2": Recorder()}
    with controller_process(config, ready) as address, clients(address) as (flow, admin):
        watches = {}
        for k, name in enumerate(plugins):
            job = flow.register_job(name, hosts=_pair(k))
            watches[name] = job.watch(on_change=plugins[name])
            reply = job.submit([communicator("dp", qps_per_connection=2)])
            assert watches[name].wait_revision(reply.revision, 30)
        applied = {n: dict(p.ports) for n, p in plugins.items()}
        pinned = admin.set_control_mode("r2", "shadow", wait=True)
        assert wait_until(lambda: watches["r2"].mirror.control_mode == "shadow", 30)
        admin.set_control_mode("r2", "active", wait=True)
        assert wait_until(lambda: watches["r2"].mirror.control_mode == "active", 30)
        assert wait_until(lambda: len(plugins["r2"].ports) == len(applied["r2"]), 30)
        back = admin.rollback_all("incident 42", wait=True)
        assert back.engaged and back.changed and back.jobs == 2
        for w in watches.values():
            assert wait_until(lambda w=w: w.mirror.control_mode == "off", 30)  # type: ignore[misc]
        ports_off = {n: dict(p.ports) for n, p in plugins.items()}
        for w in watches.values():
            w.stop()
    assert pinned.source == "operator"
    assert ports_off == {"r1": {}, "r2": {}}
    assert plugins["r1"].defaulted == len(applied["r1"])
    assert plugins["r2"].defaulted == 2 * len(applied["r2"])  # to shadow, then rolled back
    with controller_process(config, ready) as address, clients(address) as (flow, admin):
        kept = _modes(list(admin.jobs().jobs))
        late = flow.register_job("r3", hosts=_pair(2))
        late_mode = late.control_mode
        cleared = admin.rollback_all(clear=True, wait=True)
        restored = _modes(list(admin.jobs().jobs))
    assert kept == {"r1": ("off", "rollback"), "r2": ("off", "rollback")}
    assert late_mode == "off"
    assert not cleared.engaged and cleared.changed
    assert restored == {
        "r1": ("active", "default"),
        "r2": ("active", "operator"),
        "r3": ("active", "default"),
    }
    assert cleared.decision.bindings_added == sum(len(a) for a in applied.values())


def test_a_mode_change_without_bindings_still_reaches_the_stream(tmp_path: Path) -> None:
    """shadow -> off changes no binding, but the job's stream must still say so."""
    rollout = {"default": "shadow"}
    with (
        serving(FABRIC, tmp_path, rollout=rollout) as service,
        clients(service.address) as (
            flow,
            admin,
        ),
    ):
        job = flow.register_job("s1", hosts=_pair(0))
        watch = job.watch()
        reply = job.submit([communicator("dp")])
        assert watch.wait_revision(reply.revision, 30)
        assert watch.mirror.control_mode == "shadow"
        admin.set_control_mode("s1", "off", wait=True)
        seen = wait_until(lambda: watch.mirror.control_mode == "off", 30)
        watch.stop()
    assert seen and watch.mirror.bindings == {}


def test_a_bad_rollout_config_is_refused_naming_each_field(tmp_path: Path) -> None:
    config = _config(tmp_path, {"default": "sideways", "canary": {"fraction": 1.5}})
    result = subprocess.run(
        [sys.executable, "-m", "c4p", "serve", "--config", str(config), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "rollout.default: Input should be 'off', 'shadow' or 'active'" in result.stderr
    assert "rollout.canary.fraction" in result.stderr and "1.5" in result.stderr


def test_a_policy_changed_across_a_restart_is_planned_at_start_up(tmp_path: Path) -> None:
    """Restart with ``rollout.default`` moved from shadow to active: the start-up step plans
    (the inputs' fingerprint covers modes) and pushes the job's bindings."""
    ready = tmp_path / "ready"
    config = _config(tmp_path, {"default": "shadow"})
    with controller_process(config, ready) as address, clients(address) as (flow, admin):
        job = flow.register_job("p1", hosts=_pair(0))
        watch = job.watch()
        reply = job.submit([communicator("dp", qps_per_connection=2)])
        assert watch.wait_revision(reply.revision, 30)
        token = job.token
        watch.stop()
    assert watch.mirror.bindings == {} and watch.mirror.control_mode == "shadow"
    config = _config(tmp_path, {"default": "active"})
    with controller_process(config, ready) as address, clients(address) as (flow, admin):
        watch = flow.session("p1", token).watch(mirror=watch.mirror)  # resumes from its epoch
        got = wait_until(lambda: len(watch.mirror.bindings) == reply.flows, 30)
        modes = _modes(list(admin.jobs().jobs))
        watch.stop()
    assert got and watch.mirror.control_mode == "active"
    assert modes == {"p1": ("active", "default")}


def test_the_asyncio_client_learns_the_mode(tmp_path: Path) -> None:
    """Runs on the embedded service's event loop: grpc.aio wants one loop per process."""
    with serving(FABRIC, tmp_path) as service:

        async def main() -> None:
            async with AsyncFlowIntentClient(service.address) as client:
                job = await client.register_job("aio", hosts=_pair(0), control_mode="shadow")
                assert job.control_mode == "shadow"
                reply = await job.submit([communicator("dp")])
                mirror = await job.watch_until(lambda m: m.intent_revision >= reply.revision, 20)
                assert mirror.control_mode == "shadow" and mirror.bindings == {}

        service.call(main())
