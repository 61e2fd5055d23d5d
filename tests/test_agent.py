"""The host agent: its config and OS check, its safety rules, its session with the controller.

Over real gRPC: the agents are real daemons; the controller is the real service (or, to test
what an agent refuses, a deliberately misbehaving controller served with grpcio). The probes
are answered by the prober seam (a modelled network; see ``agent_cases``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from agent_cases import (
    AGENT_TOKEN,
    agent_config,
    agents_running,
    agents_section,
    real_network,
)
from service_cases import serving, spread_fabric, wait_until

from c4p.agent.config import AgentConfig, check_os, load_agent_config, os_addresses
from c4p.agent.daemon import SessionState
from c4p.agent.executor import ProbeExecutor, SessionTerms, TokenBucket
from c4p.agent.probe_wire import spec_of
from c4p.api.v1 import agent_pb2 as pb
from southbound.probing import HopReply, ModeledProber, Probe, Trace
from topology.errors import FabricFileError

FABRIC = spread_fabric()
HOSTS = [h.name for h in FABRIC.hosts]
Reason = pb.ProbeRefusal.Reason


@pytest.fixture
def unix_endpoint() -> Iterator[str]:
    """A Unix socket path in a fresh directory (short: sun_path is 108 bytes), removed after."""
    directory = tempfile.mkdtemp(prefix=f"c4p-agent-{os.getpid()}-")
    try:
        yield f"unix:{directory}/controller.sock"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _ports_of(host: str) -> list[Any]:
    return [p for p in FABRIC.index.ports if p.host.name == host]


# -- config and the OS ---------------------------------------------------------------------------


def test_the_agent_config_refuses_ports_of_another_host_and_plaintext_off_host() -> None:
    other = _ports_of(HOSTS[1])[0]
    with pytest.raises(ValueError, match=r"ports\[0\]\.port: 'h0001:.*' is not a port of host"):
        agent_config(
            FABRIC,
            HOSTS[0],
            "127.0.0.1:1",
            ports=[
                {"port": f"{HOSTS[1]}:{other.port.name}", "interface": "lo", "address": "1.2.3.4"}
            ],
        )
    with pytest.raises(ValueError, match=r"controllers\[0\]: plaintext only to loopback"):
        agent_config(FABRIC, HOSTS[0], "10.1.2.3:50051")
    with pytest.raises(ValueError, match="a unix address needs a path"):
        agent_config(FABRIC, HOSTS[0], "unix:")


def test_the_os_check_uses_the_kernels_addresses(tmp_path: Path) -> None:
    present = os_addresses()  # ip -j addr: the kernel's own answer
    assert "127.0.0.1" in present.get("lo", set())
    config = agent_config(
        FABRIC,
        HOSTS[0],
        "127.0.0.1:1",
        ports=[{"port": f"{HOSTS[0]}:nic0p0", "interface": "lo", "address": "127.0.0.1"}],
    )
    check_os(config)  # loopback holds 127.0.0.1 on every Linux host
    wrong = agent_config(FABRIC, HOSTS[0], "127.0.0.1:1")  # the fabric's addresses: not on lo
    first = _ports_of(HOSTS[0])[0].port.address
    with pytest.raises(
        FabricFileError, match=rf"ports\[0\]\.address: {first} is not configured on lo"
    ):
        check_os(wrong)
    missing = agent_config(
        FABRIC,
        HOSTS[0],
        "127.0.0.1:1",
        ports=[{"port": f"{HOSTS[0]}:nic0p0", "interface": "c4pnope0", "address": "127.0.0.1"}],
    )
    with pytest.raises(FabricFileError, match="no interface 'c4pnope0'"):
        check_os(missing)
    # The loader checks files and the token too, and names each field.
    path = tmp_path / "agent.yaml"
    path.write_text(
        "host: h0000\ncontrollers: ['127.0.0.1:1']\ntoken: {env: C4P_TEST_UNSET_TOKEN_VAR}\n"
        "ports: [{port: 'h0000:nic0p0', interface: lo, address: 127.0.0.1}]\n"
        "tls: {mode: tls, ca_file: nope.pem}\n",
        encoding="utf-8",
    )
    with pytest.raises(FabricFileError) as caught:
        load_agent_config(path)
    text = str(caught.value)
    assert "tls.ca_file: no such file" in text and "token: environment variable" in text


# -- the executor's rules ------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_token_bucket_paces_and_refuses_what_would_wait_too_long() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10.0, 5, clock=clock, sleep=clock.sleep)
    assert all(bucket.take(1, deadline=0.0) for _ in range(5))  # the burst
    assert not bucket.take(1, deadline=0.05)  # the next token takes 0.1 s
    assert bucket.take(1, deadline=1.0) and clock.now == pytest.approx(0.1)
    assert not bucket.take(6, deadline=100.0)  # more than a burst never fits


def _executor(**probing: Any) -> tuple[ProbeExecutor, FakeClock]:
    clock = FakeClock()
    config = agent_config(FABRIC, HOSTS[0], "127.0.0.1:1", probing=probing)
    executor = ProbeExecutor(config, lambda: ModeledProber(FABRIC), clock=clock, sleep=clock.sleep)
    return executor, clock


def _book() -> frozenset[Any]:
    return frozenset(ipaddress.ip_address(p.port.address) for p in FABRIC.index.ports)


def test_an_agent_without_a_session_probes_nothing() -> None:
    executor, _ = _executor()
    src, dst = _ports_of(HOSTS[0])[0].port.address, _ports_of(HOSTS[1])[0].port.address
    out = executor.run(pb.ProbeBatch(batch=1, probes=[spec_of(Probe(src, dst, 0xC000))]))
    assert not out.traces and [r.index for r in out.refused] == [0]
    assert executor.probes_run == 0 and executor.packets_sent == 0


def test_the_executor_refuses_foreign_sources_unknown_destinations_and_excess_rate() -> None:
    executor, _ = _executor(max_probes_per_s=10, burst=10, max_wait_s=0.0)
    executor.begin(SessionTerms(_book(), 1000.0))
    mine = _ports_of(HOSTS[0])[0].port.address
    theirs = _ports_of(HOSTS[1])[0].port.address
    outside = ipaddress.IPv4Address("198.19.255.254")  # in the lab range, not in the book
    probes = [
        Probe(theirs, mine, 0xC000, first_ttl=2, max_ttl=2),  # not our source
        Probe(mine, outside, 0xC000, first_ttl=2, max_ttl=2),  # not in the address book
        Probe(mine, theirs, 0xC000, first_ttl=2, max_ttl=40),  # TTL over the agent's limit
    ] + [Probe(mine, theirs, 0xC000 + i, first_ttl=2, max_ttl=2) for i in range(14)]
    out = executor.run(pb.ProbeBatch(batch=7, probes=[spec_of(p) for p in probes]))
    reasons = {r.index: r.reason for r in out.refused}
    assert reasons[0] == Reason.REASON_SOURCE
    assert reasons[1] == Reason.REASON_DESTINATION
    assert reasons[2] == Reason.REASON_INVALID
    # 14 one-packet probes against a burst of 10 and no waiting: 10 run, 4 refused for rate.
    assert sorted(i for i, r in reasons.items() if r == Reason.REASON_RATE) == list(range(13, 17))
    assert sorted(t.index for t in out.traces) == list(range(3, 13))
    assert executor.refused == {
        "REASON_SOURCE": 1,
        "REASON_DESTINATION": 1,
        "REASON_INVALID": 1,
        "REASON_RATE": 4,
    }
    assert executor.packets_sent == 10


def test_the_lower_of_the_two_rates_applies() -> None:
    executor, _ = _executor(max_probes_per_s=500)
    assert executor.begin(SessionTerms(_book(), 100.0)) == 100.0
    assert executor.begin(SessionTerms(_book(), 5000.0)) == 500.0


# -- sessions over real gRPC ---------------------------------------------------------------------


def _wait_state(daemon: Any, runner: Any, state: SessionState, timeout: float = 20.0) -> bool:
    return bool(runner.call(daemon.session.wait_for(state, timeout), timeout + 5))


def test_agents_register_and_only_for_their_own_host(tmp_path: Path, unix_endpoint: str) -> None:
    agents = agents_section(HOSTS[:1]) | {
        "credentials": [
            {"hosts": [HOSTS[0]], "token": {"value": AGENT_TOKEN}},
            {"hosts": [HOSTS[1]], "token": {"value": "other-hosts-token-0123456789"}},
        ]
    }
    listen = {"address": unix_endpoint, "grace_s": 0.5}
    with serving(FABRIC, tmp_path, agents=agents, listen=listen) as service:
        runtime = service.runtime
        assert runtime is not None and runtime.agents is not None
        with agents_running() as runner:
            good = runner.add(
                agent_config(FABRIC, HOSTS[0], unix_endpoint), lambda: ModeledProber(FABRIC)
            )
            assert _wait_state(good, runner, SessionState.CONNECTED)
            assert runtime.agents.hosts() == {HOSTS[0]}
            # h0000's token presented for h0001: refused, and the agent stays idle.
            thief = runner.add(
                agent_config(FABRIC, HOSTS[1], unix_endpoint, token=AGENT_TOKEN),
                lambda: ModeledProber(FABRIC),
            )
            assert wait_until(lambda: "PERMISSION_DENIED" in thief.session.status.last_error)
            assert not thief.executor.active and thief.session.status.sessions == 0
            # A port that is not the host's own: refused with the field named.
            theirs = _ports_of(HOSTS[2])[0]
            liar = runner.add(
                agent_config(
                    FABRIC,
                    HOSTS[1],
                    unix_endpoint,
                    token="other-hosts-token-0123456789",
                    ports=[
                        {
                            "port": f"{HOSTS[1]}:{theirs.port.name}x",
                            "interface": "lo",
                            "address": str(theirs.port.address),
                        }
                    ],
                ),
                lambda: ModeledProber(FABRIC),
            )
            assert wait_until(lambda: "INVALID_ARGUMENT" in liar.session.status.last_error)
            assert "hello.ports[0].port" in liar.session.status.last_error
            assert runtime.agents.hosts() == {HOSTS[0]}
            assert runtime.agents.refused["PERMISSION_DENIED"] >= 1
            assert runtime.agents.refused["INVALID_ARGUMENT"] >= 1


def test_a_probe_batch_runs_on_the_source_hosts_agent(tmp_path: Path, unix_endpoint: str) -> None:
    network = real_network(FABRIC)
    listen = {"address": unix_endpoint, "grace_s": 0.5}
    with serving(FABRIC, tmp_path, agents=agents_section(HOSTS[:2]), listen=listen) as service:
        hub = service.runtime.agents if service.runtime else None
        assert hub is not None
        with agents_running() as runner:
            daemon = runner.add(
                agent_config(FABRIC, HOSTS[0], unix_endpoint), lambda: ModeledProber(network)
            )
            assert _wait_state(daemon, runner, SessionState.CONNECTED)
            src = _ports_of(HOSTS[0])[0].port.address
            dst = _ports_of(HOSTS[1])[0].port.address
            other = _ports_of(HOSTS[2])[0].port.address  # h0002 has no agent
            probes = [Probe(src, dst, 0xC000 + i, first_ttl=1, max_ttl=4) for i in range(40)]
            probes.append(Probe(other, dst, 0xC000, first_ttl=1, max_ttl=4))
            traces = hub.trace_many(probes)
            truth = ModeledProber(network).trace_many(probes[:40])
            assert [t.hops for t in traces[:40]] == [t.hops for t in truth]
            assert all(h.address is None for h in traces[40].hops)  # nobody probes for h0002
            assert daemon.executor.probes_run == 40


def test_a_lost_controller_leaves_the_agent_idle_then_it_reconnects(
    tmp_path: Path, unix_endpoint: str
) -> None:
    listen = {"address": unix_endpoint, "grace_s": 0.2}
    agents = agents_section(HOSTS[:1])
    with agents_running() as runner:
        with serving(FABRIC, tmp_path / "a", agents=agents, listen=listen):
            daemon = runner.add(
                agent_config(FABRIC, HOSTS[0], unix_endpoint), lambda: ModeledProber(FABRIC)
            )
            assert _wait_state(daemon, runner, SessionState.CONNECTED)
            assert daemon.executor.active
        # The controller is gone: idle (no terms, nothing runs) and retrying with backoff.
        assert _wait_state(daemon, runner, SessionState.RECONNECTING)
        assert not daemon.executor.active
        ran = daemon.executor.probes_run
        src = _ports_of(HOSTS[0])[0].port.address
        dst = _ports_of(HOSTS[1])[0].port.address
        out = daemon.executor.run(pb.ProbeBatch(batch=1, probes=[spec_of(Probe(src, dst, 1))]))
        assert not out.traces and daemon.executor.probes_run == ran
        attempts = daemon.session.status.attempts
        assert wait_until(lambda: daemon.session.status.attempts >= attempts + 2)
        with serving(FABRIC, tmp_path / "b", agents=agents, listen=listen) as second:
            assert _wait_state(daemon, runner, SessionState.CONNECTED)
            assert daemon.session.status.sessions == 2
            assert second.runtime is not None and second.runtime.agents is not None
            assert second.runtime.agents.hosts() == {HOSTS[0]}


# -- an agent refuses a misbehaving controller ---------------------------------------------------


class RogueController:
    """An AgentService that welcomes the agent, then asks it for probes it must refuse."""

    def __init__(self, batch: pb.ProbeBatch, book: list[str]) -> None:
        self.batch = batch
        self.book = book
        self.results: asyncio.Queue[pb.ProbeResults] = asyncio.Queue()

    async def connect(
        self, requests: AsyncIterator[pb.AgentMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ControllerMessage]:
        hello = await anext(aiter(requests))
        yield pb.ControllerMessage(
            welcome=pb.Welcome(host=hello.hello.host, address_book=self.book, max_probes_per_s=1e4)
        )
        yield pb.ControllerMessage(batch=self.batch)
        reply = await anext(aiter(requests))
        await self.results.put(reply.results)
        await asyncio.sleep(30)


def test_an_agent_refuses_a_controllers_probes_outside_its_rules(unix_endpoint: str) -> None:
    mine = _ports_of(HOSTS[0])[0].port.address
    theirs = _ports_of(HOSTS[1])[0].port.address
    book = [str(p.port.address) for p in FABRIC.index.ports]
    probes = [
        Probe(mine, theirs, 0xC001, first_ttl=2, max_ttl=2),  # fine
        Probe(theirs, mine, 0xC002, first_ttl=2, max_ttl=2),  # another host's source
        Probe(mine, ipaddress.IPv4Address("198.19.0.1"), 0xC003, first_ttl=2, max_ttl=2),
    ]
    rogue = RogueController(pb.ProbeBatch(batch=9, probes=[spec_of(p) for p in probes]), book)
    with agents_running() as runner:

        async def serve() -> grpc.aio.Server:
            server = grpc.aio.server()
            handler = grpc.stream_stream_rpc_method_handler(
                rogue.connect,
                request_deserializer=pb.AgentMessage.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler("c4p.v1.AgentService", {"Connect": handler}),)
            )
            server.add_insecure_port(unix_endpoint)
            await server.start()
            return server

        server = runner.call(serve())
        try:
            daemon = runner.add(
                agent_config(FABRIC, HOSTS[0], unix_endpoint), lambda: ModeledProber(FABRIC)
            )
            results = runner.call(asyncio.wait_for(rogue.results.get(), 20), 25)
            assert [t.index for t in results.traces] == [0]
            assert {r.index: r.reason for r in results.refused} == {
                1: Reason.REASON_SOURCE,
                2: Reason.REASON_DESTINATION,
            }
            assert daemon.executor.refused == {"REASON_SOURCE": 1, "REASON_DESTINATION": 1}
            assert daemon.executor.packets_sent == 1
        finally:
            runner.call(server.stop(0))


class StuckProber:
    """A prober whose batch only ends when it is told to stop (or after 60 s): the stand-in for
    a long paced batch, so the test can see whether the agent stops it when the controller goes."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.started = threading.Event()
        self.stopped_early = False

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        self.cancel.clear()
        self.started.set()
        self.stopped_early = self.cancel.wait(60)
        return [Trace(p, tuple(HopReply(t, None) for t in range(p.first_ttl, p.max_ttl + 1)))
                for p in probes]  # fmt: skip


class VanishingController(RogueController):
    """Welcomes the agent, sends one batch, then ends the stream while the batch runs."""

    def __init__(self, batch: pb.ProbeBatch, book: list[str], running: threading.Event) -> None:
        super().__init__(batch, book)
        self.running = running

    async def connect(
        self, requests: AsyncIterator[pb.AgentMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ControllerMessage]:
        hello = await anext(aiter(requests))
        yield pb.ControllerMessage(
            welcome=pb.Welcome(host=hello.hello.host, address_book=self.book, max_probes_per_s=1e4)
        )
        yield pb.ControllerMessage(batch=self.batch)
        await asyncio.to_thread(self.running.wait, 20)
        await context.abort(grpc.StatusCode.UNAVAILABLE, "controller going away")


def test_a_controller_lost_mid_batch_stops_the_probing_at_once(unix_endpoint: str) -> None:
    mine = _ports_of(HOSTS[0])[0].port.address
    theirs = _ports_of(HOSTS[1])[0].port.address
    book = [str(p.port.address) for p in FABRIC.index.ports]
    prober = StuckProber()
    batch = pb.ProbeBatch(batch=1, probes=[spec_of(Probe(mine, theirs, 0xC001, 2, 2))])
    vanishing = VanishingController(batch, book, prober.started)
    with agents_running() as runner:

        async def serve() -> grpc.aio.Server:
            server = grpc.aio.server()
            handler = grpc.stream_stream_rpc_method_handler(
                vanishing.connect,
                request_deserializer=pb.AgentMessage.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler("c4p.v1.AgentService", {"Connect": handler}),)
            )
            server.add_insecure_port(unix_endpoint)
            await server.start()
            return server

        server = runner.call(serve())
        try:
            daemon = runner.add(agent_config(FABRIC, HOSTS[0], unix_endpoint), lambda: prober)
            assert prober.started.wait(20), "the batch never reached the prober"
            # The stream ends while the batch runs: the agent stops the prober (it does not
            # wait out the batch) and goes back to idle, reconnecting.
            assert wait_until(lambda: prober.cancel.is_set(), 20)
            assert _wait_state(daemon, runner, SessionState.RECONNECTING)
            assert not daemon.executor.active
        finally:
            runner.call(server.stop(0))
    assert prober.stopped_early


def test_agent_config_model_is_strict() -> None:
    with pytest.raises(ValueError, match="extra"):
        AgentConfig.model_validate(
            {
                "host": "h0000",
                "controllers": ["127.0.0.1:1"],
                "token": {"value": AGENT_TOKEN},
                "ports": [{"port": "h0000:nic0p0", "interface": "lo", "address": "127.0.0.1"}],
                "probing": {"max_probes_per_s": 10, "turbo": True},
            }
        )


# -- the command ---------------------------------------------------------------------------------


def _write_agent_yaml(path: Path, endpoint: str, host: str = HOSTS[0]) -> Path:
    ports = "".join(
        f"  - {{port: '{host}:{p.port.name}', interface: lo, address: {p.port.address}}}\n"
        for p in _ports_of(host)
    )
    path.write_text(
        f"host: {host}\ncontrollers: ['{endpoint}']\ntoken: {{value: {AGENT_TOKEN}}}\n"
        f"ports:\n{ports}reconnect: {{initial_s: 0.05, max_s: 0.5}}\n",
        encoding="utf-8",
    )
    return path


def test_the_agent_command_refuses_bad_input_with_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from c4p.cli import app

    runner = CliRunner()
    config = _write_agent_yaml(tmp_path / "agent.yaml", "127.0.0.1:1")
    fabric = tmp_path / "fabric.json"
    from c4p.files import save_fabric

    save_fabric(FABRIC, fabric)
    ok = runner.invoke(
        app,
        ["agent", "-c", str(config), "--prober", f"modeled:{fabric}", "--no-os-check", "--check"],
    )
    assert ok.exit_code == 0, ok.output
    # The OS does not hold the fabric's addresses: refused, the field named, no traceback.
    bad = runner.invoke(app, ["agent", "-c", str(config), "--prober", f"modeled:{fabric}"])
    assert bad.exit_code == 2 and "ports[0].address" in bad.output
    assert "Traceback" not in bad.output
    unknown = runner.invoke(app, ["agent", "-c", str(config), "--prober", "magic", "--no-os-check"])
    assert unknown.exit_code == 2 and "use 'socket' or 'modeled:FABRIC'" in unknown.output


def test_the_agent_process_connects_and_stops_on_sigterm(
    tmp_path: Path, unix_endpoint: str
) -> None:
    import signal
    import subprocess
    import sys

    from c4p.files import save_fabric

    fabric = tmp_path / "network.json"
    save_fabric(real_network(FABRIC), fabric)
    config = _write_agent_yaml(tmp_path / "agent.yaml", unix_endpoint)
    listen = {"address": unix_endpoint, "grace_s": 0.5}
    with serving(FABRIC, tmp_path / "svc", agents=agents_section(HOSTS[:1]), listen=listen) as svc:
        hub = svc.runtime.agents if svc.runtime else None
        assert hub is not None
        command = [sys.executable, "-c", "from c4p.cli import main; main()", "agent"]
        child = subprocess.Popen(
            [*command, "-c", str(config), "--prober", f"modeled:{fabric}", "--no-os-check"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert wait_until(lambda: hub.hosts() == {HOSTS[0]}, 60), child.stderr
            src = _ports_of(HOSTS[0])[0].port.address
            dst = _ports_of(HOSTS[1])[0].port.address
            traces = hub.trace_many([Probe(src, dst, 0xC000, first_ttl=2, max_ttl=2)])
            assert traces[0].hops[0].address is not None  # the process answered
            child.send_signal(signal.SIGTERM)
            assert child.wait(30) == 0
            assert wait_until(lambda: not hub.hosts())
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
            child.stdout.close() if child.stdout else None
            child.stderr.close() if child.stderr else None


def test_agents_connect_over_mtls_and_the_certificate_name_can_be_required(
    tmp_path: Path,
) -> None:
    from c4p.testing.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    tls = {
        "mode": "mtls",
        "cert_file": str(pki.server_cert),
        "key_file": str(pki.server_key),
        "client_ca_file": str(pki.ca_cert),
    }
    client_tls = {
        "mode": "mtls",
        "ca_file": str(pki.ca_cert),
        "cert_file": str(pki.client_cert),
        "key_file": str(pki.client_key),
        "server_name": "localhost",
    }

    def config(endpoint: str) -> AgentConfig:
        base = agent_config(FABRIC, HOSTS[0], endpoint)
        return base.model_copy(
            update={"tls": AgentConfig.model_fields["tls"].annotation.model_validate(client_tls)}
        )  # type: ignore[union-attr]

    for require, expect in ((False, SessionState.CONNECTED), (True, None)):
        agents = agents_section(HOSTS[:1], require_client_name=require)
        directory = tmp_path / f"svc-{require}"
        with serving(FABRIC, directory, tls=tls, agents=agents) as service, agents_running() as run:
            daemon = run.add(config(service.address), lambda: ModeledProber(FABRIC))
            status = daemon.session.status
            if expect is not None:
                assert _wait_state(daemon, run, expect)
                assert status.sessions == 1
            else:  # the client certificate is "c4p-controller", not host h0000
                assert wait_until(lambda s=status: "PERMISSION_DENIED" in s.last_error)
                assert "not host 'h0000'" in status.last_error
                assert not daemon.executor.active


# -- a host network namespace (real kernel) -----------------------------------------------------


def _netns_reason() -> str | None:
    if os.geteuid() != 0:
        return "creating a network namespace needs root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_netns_reason() is not None, reason=_netns_reason() or "")
def test_an_agent_in_a_host_namespace_checks_its_kernel_and_reaches_the_controller(
    tmp_path: Path, unix_endpoint: str
) -> None:
    """As in the lab: the agent runs inside the host's network namespace, its port address is
    checked against *that* kernel, and it reaches the controller through a Unix socket."""
    import secrets
    import signal
    import subprocess
    import sys

    from c4p.files import save_fabric
    from topology.generators import generate

    fabric = generate(
        "leaf-spine",
        leaves=2,
        spines=2,
        hosts_per_leaf=1,
        nics_per_host=1,
        addresses={"nic_network": "198.18.0.0/16", "mgmt_network": "198.19.0.0/16"},
    )
    port = fabric.index.ports[0]
    host = port.host.name
    namespace = f"c4pa-{os.getpid() % 100000}-{secrets.token_hex(2)}"
    save_fabric(fabric, tmp_path / "fabric.json")
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"host: {host}\ncontrollers: ['{unix_endpoint}']\ntoken: {{value: {AGENT_TOKEN}}}\n"
        f"ports: [{{port: '{host}:{port.port.name}', interface: c4pnic0, "
        f"address: {port.port.address}}}]\nreconnect: {{initial_s: 0.05, max_s: 0.5}}\n",
        encoding="utf-8",
    )

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    command = [sys.executable, "-c", "from c4p.cli import main; main()", "agent", "-c", str(config)]
    prober = ["--prober", f"modeled:{tmp_path / 'fabric.json'}"]
    ip("netns", "add", namespace)
    child: subprocess.Popen[bytes] | None = None
    try:
        # A veth pair with both ends inside (no dummy driver everywhere); nothing leaves.
        ip("-n", namespace, "link", "add", "c4pnic0", "type", "veth", "peer", "name", "c4pnic1")
        ip("-n", namespace, "addr", "add", f"{port.port.address}/24", "dev", "c4pnic0")
        ip("-n", namespace, "link", "set", "c4pnic0", "up")
        # Outside the namespace this host has no such interface: refused before starting.
        outside = subprocess.run([*command, *prober, "--check"], capture_output=True, timeout=60)
        assert outside.returncode == 2 and b"no interface 'c4pnic0'" in outside.stderr
        listen = {"address": unix_endpoint, "grace_s": 0.5}
        agents = agents_section([host])
        with serving(fabric, tmp_path / "svc", agents=agents, listen=listen) as service:
            hub = service.runtime.agents if service.runtime else None
            assert hub is not None
            child = subprocess.Popen(
                ["ip", "netns", "exec", namespace, *command, *prober],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            assert wait_until(lambda: hub.hosts() == {host}, 60)
            child.send_signal(signal.SIGTERM)
            assert child.wait(30) == 0
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(10)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
