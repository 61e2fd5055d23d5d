"""``c4p serve`` port modes end to end: learned, verified, predicted, with host agents.

Real gRPC all the way: the controller service, real agent daemons connected to it, a job
registered and watched by the Python client. The network the agents probe hashes with seeds the
controller's model does not know (``agent_cases.real_network``), so the checks are about where
the packets of each bound 5-tuple really go in that network (``realized_path``), not about what
the controller believes. (Until the socket prober is merged, the network is the modelled data
plane behind the prober seam; the lab tests of the real-prober branch run the same modes on
kernel forwarding.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_cases import (
    BlackHoleProber,
    ScatteringProber,
    agent_config,
    agents_running,
    agents_section,
    real_network,
)
from service_cases import clients, serving, spread_fabric, wait_until

from c4p.api.v1 import intents_pb2 as pb
from c4p.client import communicator
from c4p.client.mirror import BindingMirror
from c4p.testing.network import realized_path
from southbound.probing import ModeledProber, Prober
from topology.model import Fabric, LinkStatus

FABRIC = spread_fabric()
HOSTS = [h.name for h in FABRIC.hosts]
Kind = pb.BindingIssue.Kind


@dataclass(frozen=True)
class LinkEvent:
    link_id: str
    status: LinkStatus
    at: float


@contextmanager
def controller_with_agents(
    tmp_path: Path,
    mode: str | None,
    agent_hosts: list[str],
    prober: Callable[[], Prober],
    configured: list[str] | None = None,
) -> Iterator[tuple[Any, Any]]:
    """A service with agents configured for ``configured`` (default: the agents' hosts) and
    agents running for ``agent_hosts``, every probe answered by ``prober()``."""
    overrides: dict[str, Any] = {}
    if configured is None:
        configured = agent_hosts
    if configured:
        overrides["agents"] = agents_section(configured)
    if mode is not None:
        overrides["ports"] = {"mode": mode}
    with serving(FABRIC, tmp_path, **overrides) as service, agents_running() as runner:
        for host in agent_hosts:
            runner.add(agent_config(FABRIC, host, service.address), prober)
        if agent_hosts:
            runtime = service.runtime
            assert runtime is not None and runtime.agents is not None
            assert wait_until(lambda: runtime.agents.hosts() == set(agent_hosts))
        yield service, runner


def run_job(
    service: Any, hosts: list[str], done: Callable[[BindingMirror], bool]
) -> tuple[BindingMirror, list[Any], float]:
    """Register a ring job on ``hosts`` (2 QPs per connection), wait (bounded) for ``done``;
    returns the mirror, the decision log and the seconds from submit to ``done``."""
    with clients(service.address) as (flow, admin):
        job = flow.register_job("job-a", hosts=hosts)
        watch = job.watch()
        try:
            started = time.monotonic()
            job.submit([communicator("dp", qps_per_connection=2)])
            assert watch.wait(done, 60), "the job's bindings did not settle"
            took = time.monotonic() - started
            mirror = watch.mirror
        finally:
            watch.stop()
        return mirror, admin.decisions(100), took


def all_verified(m: BindingMirror) -> bool:
    return (
        bool(m.bindings) and len(m.bindings) == 8 and all(b.verified for b in m.bindings.values())
    )


def off_path(network: Fabric, m: BindingMirror) -> int:
    """QPs whose bound port does not take the path the binding states, in the network."""
    return sum(
        realized_path(network, b.src_port, b.dst_port, b.udp_sport) != b.path
        for b in m.bindings.values()
    )


def test_learned_ports_put_every_qp_on_its_path_in_a_network_the_model_does_not_know(
    tmp_path: Path,
) -> None:
    network = real_network(FABRIC)
    with controller_with_agents(tmp_path, None, HOSTS[:2], lambda: ModeledProber(network)) as (
        service,
        _,
    ):
        assert service.runtime.config.port_mode == "learned"  # the default with agents
        mirror, decisions, _ = run_job(service, HOSTS[:2], all_verified)
        assert off_path(network, mirror) == 0
        assert not mirror.issues and mirror.state == pb.INTENT_STATE_INSTALLED
        assert decisions[0].ports_mode == "learned" and decisions[0].bindings_verified == 8
        worker = service.runtime.probe_worker
        assert worker is not None and worker.traces > 0
        # Only the planned paths of these QPs were learned: one NIC pair per direction.
        assert len(list(service.runtime.learner.table.known_keys())) <= 4


def test_probes_that_disagree_reach_the_jobs_stream_as_unstable(tmp_path: Path) -> None:
    """A prober whose paths are not a function of the 5-tuple (what connected sockets did
    under Linux's hash policy 1): ports whose two probes disagree are never bound, and the job
    hears it as KIND_UNSTABLE."""
    network = real_network(FABRIC)
    with controller_with_agents(
        tmp_path, None, HOSTS[:2], lambda: ScatteringProber(ModeledProber(network))
    ) as (service, _):
        seen: list[Any] = []

        def done(m: BindingMirror) -> bool:
            seen.extend(m.issues)
            return any(i.kind == Kind.KIND_UNSTABLE for i in seen)

        mirror, _, _ = run_job(service, HOSTS[:2], done)
        reason = next(i.reason for i in seen if i.kind == Kind.KIND_UNSTABLE)
        assert "disagreed on the path" in reason and "not used for a binding" in reason
        table = service.runtime.learner.table
        index = FABRIC.index
        for b in mirror.bindings.values():
            key = table.key_of(index.node(b.src_port), index.node(b.dst_port))
            assert b.udp_sport not in table.unstable(key)


def test_predicted_ports_are_never_marked_verified(tmp_path: Path) -> None:
    network = real_network(FABRIC)
    with controller_with_agents(tmp_path, None, [], lambda: ModeledProber(network)) as (service, _):
        assert service.runtime.config.port_mode == "predicted"  # no agents configured
        mirror, decisions, _ = run_job(service, HOSTS[:2], lambda m: len(m.bindings) == 8)
        assert not any(b.verified for b in mirror.bindings.values())
        assert decisions[0].bindings_verified == 0
        # Predicted by default (nobody chose it): bound, never "installed" (issue 30).
        assert mirror.state == pb.INTENT_STATE_BOUND_UNVERIFIED
        # The model's ports, in a network hashing otherwise, mostly miss (that is the point).
        assert off_path(network, mirror) > 0


def test_verified_mode_finds_mismatches_and_rebinds_from_the_probes(tmp_path: Path) -> None:
    network = real_network(FABRIC)
    with controller_with_agents(
        tmp_path, "verified", HOSTS[:2], lambda: ModeledProber(network)
    ) as (service, _):
        seen: list[Any] = []

        def done(m: BindingMirror) -> bool:
            seen.extend(m.issues)
            return all_verified(m)

        mirror, decisions, _ = run_job(service, HOSTS[:2], done)
        assert off_path(network, mirror) == 0
        assert any(i.kind == Kind.KIND_MISMATCH for i in seen)  # told in the job's stream
        findings = [f for d in decisions for f in d.probe_findings]
        assert any("re-bound from the probes" in f for f in findings), findings
        assert any(d.ports_mode == "verified" for d in decisions)


def test_verified_mode_confirms_the_models_ports_when_the_model_is_right(tmp_path: Path) -> None:
    with controller_with_agents(tmp_path, "verified", HOSTS[:2], lambda: ModeledProber(FABRIC)) as (
        service,
        _,
    ):
        mirror, decisions, _ = run_job(service, HOSTS[:2], all_verified)
        assert off_path(FABRIC, mirror) == 0
        assert not [f for d in decisions for f in d.probe_findings if "re-bound" in f]


def test_a_black_hole_gets_a_binding_issue_and_a_decision_log_entry(tmp_path: Path) -> None:
    network = real_network(FABRIC)
    behind = {str(p.port.address) for p in FABRIC.index.ports if p.host.name == HOSTS[1]}
    dead = "spine-01"  # has no route towards h0001's leaf, but stays in the groups

    def prober() -> Prober:
        return BlackHoleProber(ModeledProber(network), dead, behind)

    with controller_with_agents(tmp_path, "verified", HOSTS[:2], prober) as (service, _):
        with clients(service.address) as (flow, admin):
            job = flow.register_job("job-a", hosts=HOSTS[:2])
            watch = job.watch()
            seen: list[Any] = []
            try:
                job.submit([communicator("dp", qps_per_connection=4)])

                def settled(m: BindingMirror) -> bool:
                    seen.extend(m.issues)
                    return len(m.bindings) == 16 and not any(
                        i.kind == Kind.KIND_UNBOUND for i in m.issues
                    )

                assert watch.wait(settled, 60)
                mirror = watch.mirror
            finally:
                watch.stop()
            decisions = admin.decisions(100)
        towards = [b for b in mirror.bindings.values() if b.dst_port.startswith(HOSTS[1])]
        assert towards and not any(dead in b.path for b in towards)
        assert any(i.kind == Kind.KIND_BLACK_HOLE for i in seen)
        findings = [f for d in decisions for f in d.probe_findings]
        assert any("black hole" in f and dead in f for f in findings), findings


def test_hosts_without_an_agent_fall_back_to_predicted_with_an_issue(tmp_path: Path) -> None:
    network = real_network(FABRIC)
    with controller_with_agents(
        tmp_path, "learned", HOSTS[:1], lambda: ModeledProber(network), configured=HOSTS[:2]
    ) as (service, _):

        def done(m: BindingMirror) -> bool:
            mine = [b for b in m.bindings.values() if b.src_port.startswith(HOSTS[0])]
            return len(m.bindings) == 8 and all(b.verified for b in mine)

        mirror, _, _ = run_job(service, HOSTS[:2], done)
        from_b = [b for b in mirror.bindings.values() if b.src_port.startswith(HOSTS[1])]
        assert from_b and not any(b.verified for b in from_b)
        predicted = [i for i in mirror.issues if i.kind == Kind.KIND_PREDICTED]
        assert len(predicted) == len(from_b)
        assert all(f"no agent connected on host {HOSTS[1]}" in i.reason for i in predicted)
        assert mirror.state == pb.INTENT_STATE_DEGRADED


def test_a_link_failure_reprobes_and_rebinds_on_seen_paths(tmp_path: Path) -> None:
    network = real_network(FABRIC)
    probers: list[ModeledProber] = []

    def prober() -> Prober:
        probers.append(ModeledProber(network))
        return probers[-1]

    with controller_with_agents(tmp_path, "learned", HOSTS[:2], prober) as (service, _):
        runtime = service.runtime
        with clients(service.address) as (flow, _admin):
            job = flow.register_job("job-a", hosts=HOSTS[:2])
            watch = job.watch()
            try:
                job.submit([communicator("dp", qps_per_connection=2)])
                assert watch.wait(all_verified, 60)
                before = runtime.probe_worker.traces
                used = next(iter(watch.mirror.bindings.values())).path
                link = f"{used[1]}--{used[2]}"  # the source leaf's uplink the first QP takes
                failed = network.with_link_status(
                    {network.index.link_number(link): LinkStatus.DOWN}
                )
                for p in probers:
                    p.set_fabric(failed)  # the network changed under the controller
                runtime.loop.observe_link(LinkEvent(link, LinkStatus.DOWN, time.time()))

                def moved(m: BindingMirror) -> bool:
                    return all_verified(m) and not any(
                        {used[1], used[2]} <= set(b.path) and b.path.index(used[2]) == 2
                        for b in m.bindings.values()
                        if b.src_port.startswith(HOSTS[0])
                    )

                assert watch.wait(moved, 60)
                assert off_path(failed, watch.mirror) == 0
                assert runtime.probe_worker.traces > before  # re-probed after the event
            finally:
                watch.stop()


def test_serve_as_a_process_on_a_unix_socket_learns_ports_from_agents(tmp_path: Path) -> None:
    """``c4p serve`` itself (a child process) on ``unix:/path``, as in the lab, with agents."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    import yaml

    from c4p.files import save_fabric

    network = real_network(FABRIC)
    short = tempfile.mkdtemp(prefix=f"c4p-serve-{os.getpid()}-")  # sun_path is 108 bytes
    endpoint = f"unix:{short}/c.sock"
    save_fabric(FABRIC, tmp_path / "fabric.json")
    config = tmp_path / "controller.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "fabric": {"path": "fabric.json"},
                "listen": {"address": endpoint, "grace_s": 0.5},
                "store": {"path": "c4p.db", "synchronous": "normal"},
                "auth": {"admin": [{"value": "test-admin-token-0123456789"}]},
                "metrics": {"address": None},
                "logging": {"level": "warning"},
                "agents": agents_section(HOSTS[:2]),
            }
        ),
        encoding="utf-8",
    )
    ready = tmp_path / "ready"
    child = subprocess.Popen(
        [sys.executable, "-m", "c4p", "serve", "-c", str(config), "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: ready.exists() or child.poll() is not None, 60)
        assert child.poll() is None and ready.read_text().strip() == endpoint
        with agents_running() as runner:
            daemons = [
                runner.add(agent_config(FABRIC, h, endpoint), lambda: ModeledProber(network))
                for h in HOSTS[:2]
            ]
            mirror, decisions, _ = run_job(_Address(endpoint), HOSTS[:2], all_verified)
            assert off_path(network, mirror) == 0
            assert decisions[0].ports_mode == "learned"
            assert sum(d.executor.probes_run for d in daemons) > 0
    finally:
        if child.poll() is None:
            child.terminate()
        child.wait(30)
        shutil.rmtree(short, ignore_errors=True)


@dataclass(frozen=True)
class _Address:
    address: str


def test_learned_or_verified_ports_need_agents_configured(tmp_path: Path) -> None:
    import pytest

    from c4p.service.embedded import embedded_config

    with pytest.raises(ValueError, match="ports.mode: 'verified' needs host agents"):
        embedded_config(FABRIC, tmp_path, ports={"mode": "verified"})
    with pytest.raises(ValueError, match="unix:/absolute/path"):
        embedded_config(FABRIC, tmp_path, listen={"address": "unix:relative.sock"})
