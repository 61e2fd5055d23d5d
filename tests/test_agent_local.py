"""The agent's local binding API: the wire format (round trips and fuzzed bytes), the
``bindings:`` section of the agent's config, a real ``c4p agent`` process fed fuzzed frames over
its Unix socket while its controller is unreachable (it answers ERROR or closes, never crashes,
and keeps serving the bindings it holds on disk), and one ``c4p agent`` process doing both of
its jobs at once: a probe batch for the controller and a rank's bindings."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from agent_cases import AGENT_TOKEN, agents_section, real_network
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from libc4p_cases import agent, agent_config, free_port
from pydantic import ValidationError
from service_cases import hosts, serving, spread_fabric, wait_until
from typer.testing import CliRunner

from c4p.agent import wire
from c4p.agent.config import AgentConfig, load_agent_config
from c4p.agent.local_config import SocketConfig
from c4p.agent.wire import BindingSet, Code, Kind, LocalBinding, QpKey, WireError
from c4p.cli import app

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
u32 = st.integers(0, 2**32 - 1)
keys = st.builds(QpKey, names, u32, u32, u32, u32)
bindings = st.builds(
    LocalBinding,
    keys,
    st.integers(0xC000, 0xFFFF),
    st.integers(0, 0xFFFFF),
    st.integers(0, 2**64 - 1),
)
bodies = st.builds(
    BindingSet,
    st.integers(0, 2**64 - 1),
    st.sampled_from(Kind),
    st.lists(bindings, max_size=5).map(tuple),
    st.lists(keys, max_size=5).map(tuple),
)
u64 = st.integers(0, 2**64 - 1)
reports = st.builds(
    wire.Report,
    u64,
    st.lists(
        st.builds(
            lambda c, k, step, size, start, span: wire.Transfer(
                c, *k, step, size, start, start + span
            ),
            names,
            st.tuples(u32, u32, u32, u32),
            u64,
            u64,
            st.integers(0, 2**63),
            st.integers(0, 2**63 - 1),
        ),
        max_size=4,
    ).map(tuple),
    st.lists(
        st.builds(wire.Arrive, names, u32, u64, names | st.just(""), u64, u64), max_size=4
    ).map(tuple),
    st.lists(st.builds(wire.Complete, names, u32, u64, u64), max_size=4).map(tuple),
)
messages = st.one_of(
    reports,
    st.builds(wire.Hello, names, st.text(max_size=40)),
    st.builds(wire.Welcome, names, st.booleans(), bodies),
    bodies,
    st.builds(wire.Error, st.sampled_from(Code), st.text(max_size=60)),
)


def _decode(frame: bytes) -> wire.Message:
    header = wire.parse_header(frame[: wire.HEADER.size])
    payload = frame[wire.HEADER.size :]
    if len(payload) != header.length:
        raise WireError(Code.PROTOCOL, "length")
    return wire.decode(header, payload)


@given(messages)
def test_every_message_round_trips(message: wire.Message) -> None:
    assert _decode(wire.encode(message)) == message


@given(messages, st.data())
def test_damaged_frames_are_refused_with_a_code(message: wire.Message, data: st.DataObject) -> None:
    frame = bytearray(wire.encode(message))
    cut = data.draw(st.integers(0, len(frame) - 1))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(1, 255))))
    for at, mask in flips:
        frame[at] ^= mask
    for damaged in (bytes(frame[:cut]), bytes(frame)):
        try:
            _decode(damaged)
        except WireError as exc:
            assert exc.code in (Code.PROTOCOL, Code.VERSION)


def test_a_future_version_is_a_version_error() -> None:
    frame = wire.encode(wire.Hello("j", "t"), version=2)
    with pytest.raises(WireError) as caught:
        _decode(frame)
    assert caught.value.code == Code.VERSION


def test_peer_policy() -> None:
    default = SocketConfig()
    assert default.admits(0, 5)
    assert not default.admits(65534, 65534) or default.uid() == 65534
    listed = SocketConfig(allowed_uids=(1000,), allowed_gids=(2000,))
    assert listed.admits(1000, 1) and listed.admits(5, 2000) and not listed.admits(5, 6)


def _refusal(tmp_path: Path, doc: dict[str, object]) -> str:
    """``c4p agent --check`` on ``doc``: must exit 2 without a traceback; its output."""
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump(doc))
    done = CliRunner().invoke(app, ["agent", "-c", str(config), "--check"])
    assert done.exit_code == 2, done.output
    assert "Traceback" not in done.output
    return " ".join(done.output.split())  # rich wraps long lines


def test_a_bad_bindings_section_is_refused_naming_the_field(tmp_path: Path) -> None:
    base: dict[str, object] = {"host": "h0", "controllers": ["127.0.0.1:1"]}
    assert "bindings.sock" in _refusal(tmp_path, {**base, "bindings": {"sock": 1}})
    bad_mode = {**base, "bindings": {"socket": {"mode": "0999"}}}
    assert "bindings.socket.mode" in _refusal(tmp_path, bad_mode)
    bad_timeout = {**base, "bindings": {"verify_timeout_s": 0}}
    assert "bindings.verify_timeout_s" in _refusal(tmp_path, bad_timeout)
    no_user = {**base, "bindings": {"socket": {"owner": "no-such-user-c4p"}}}
    assert "bindings.socket.owner" in _refusal(tmp_path, no_user)
    long_path = {**base, "bindings": {"socket": {"path": "/tmp/" + "x" * 120}}}
    assert "bindings.socket.path" in _refusal(tmp_path, long_path)
    # The controller settings are the agent's own: a second copy is an unknown key.
    second = {**base, "bindings": {"controller": {"address": "127.0.0.1:2"}}}
    assert "bindings.controller" in _refusal(tmp_path, second)
    assert "host" in _refusal(tmp_path, {**base, "host": "h 0", "bindings": {}})
    assert "nothing to do" in _refusal(tmp_path, base)


def test_the_shipped_agent_config_has_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("C4P_AGENT_TOKEN", "shipped-config-token-0123")
    shipped = load_agent_config(
        Path(__file__).resolve().parents[1] / "configs" / "agent.yaml", os_check=False
    )
    assert shipped.ports and shipped.bindings is not None


def test_the_config_sides(tmp_path: Path) -> None:
    """Bindings only: no ports, no agent token. Ports: a token. Relative paths: the file's."""
    only = AgentConfig.model_validate({"host": "h0", "controllers": ["unix:/c"], "bindings": {}})
    assert only.ports == () and only.token is None and only.bindings is not None
    with pytest.raises(ValidationError, match="token"):
        AgentConfig.model_validate(
            {
                "host": "h0",
                "controllers": ["unix:/c"],
                "ports": [{"port": "h0:p0", "interface": "lo", "address": "198.18.0.1"}],
            }
        )
    config, _ = agent_config(tmp_path / "a", "h0", "127.0.0.1:1")
    loaded = load_agent_config(config)
    assert loaded.bindings is not None
    assert loaded.bindings.state_dir == (tmp_path / "a" / "state").resolve()
    assert loaded.bindings.socket.path == tmp_path / "a" / "agent.sock"


HELD = [["dp", 0, 0, 0, 1, 0, 0xC001, 1, 2], ["dp", 0, 1, 0, 1, 0, 0xC002, 2, 2]]
TOKEN = "cached-token-0123456789"


@pytest.fixture(scope="module")
def cached_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real agent whose controller is unreachable, with one job on disk."""
    directory = tmp_path_factory.mktemp("agent")
    config, sock = agent_config(directory, "h0", f"127.0.0.1:{free_port()}")
    bindings = load_agent_config(config).bindings
    assert bindings is not None
    state = bindings.state_dir / "jobs"
    state.mkdir(parents=True)
    doc = {"version": 1, "job_id": "j", "token": TOKEN, "epoch": 2, "known": True, "bindings": HELD}
    (state / "j.json").write_text(json.dumps(doc))
    with agent(config):
        yield sock


def _exchange(sock: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(15)
        s.connect(str(sock))
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the agent may close first: what it sent is still readable
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def _welcome(sock: Path, token: str) -> wire.Message:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(15)
        s.connect(str(sock))
        s.sendall(wire.encode(wire.Hello("j", token)))
        header = wire.parse_header(s.recv(wire.HEADER.size, socket.MSG_WAITALL))
        return wire.decode(header, s.recv(header.length, socket.MSG_WAITALL))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.binary(max_size=64),
        messages.map(wire.encode).map(lambda f: f[: max(1, len(f) - 1)]),
        st.builds(
            lambda t, n, tail: b"C4PL" + struct.pack(">HHI", 1, t, n) + tail,
            st.integers(0, 6),
            st.integers(0, 1 << 23),
            st.binary(max_size=40),
        ),
    )
)
def test_fuzzed_frames_get_an_error_or_a_close_never_a_crash(
    cached_agent: Path, data: bytes
) -> None:
    answer = _exchange(cached_agent, data)
    if answer:
        message = _decode(answer)
        assert isinstance(message, (wire.Error, wire.Welcome)), message


def test_cached_token_is_served_from_disk_with_the_controller_away(cached_agent: Path) -> None:
    welcome = _welcome(cached_agent, TOKEN)
    assert isinstance(welcome, wire.Welcome) and welcome.known and welcome.host == "h0"
    got = {(b.key.qp, b.udp_sport) for b in welcome.body.bindings}
    assert got == {(0, 0xC001), (1, 0xC002)}
    refused = _welcome(cached_agent, "another-token-0123456789")  # cannot be checked now
    assert isinstance(refused, wire.Error) and refused.code == Code.UNAVAILABLE


def test_watch_bindings_filters_by_source_host(tmp_path: Path) -> None:
    """``WatchBindingsRequest.src_hosts``: only the QPs leaving those hosts; none is the old
    behaviour (every QP)."""
    import grpc

    from c4p.api.v1 import flow_intent_pb2 as fi
    from c4p.client import FlowIntentClient, communicator
    from c4p.client.wire import FLOW, auth

    fabric = spread_fabric()
    names = hosts(fabric)
    with serving(fabric, tmp_path) as service, FlowIntentClient(service.address) as flow:
        job = flow.register_job("f", hosts=[names[0], names[1]])
        reply = job.submit([communicator("dp", qps_per_connection=2)])
        with grpc.insecure_channel(service.address) as channel:
            watch = channel.unary_stream(
                FLOW + "WatchBindings",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=fi.BindingUpdate.FromString,
            )

            def first(hosts_: list[str]) -> list[str]:
                request = fi.WatchBindingsRequest(job_id="f", src_hosts=hosts_)
                for update in watch(request, metadata=auth(job.token), timeout=30):
                    if update.intent_revision >= reply.revision and not update.more:
                        return [b.src_port for b in update.bindings]
                raise AssertionError("the stream ended")

            every = first([])
            only = first([names[0]])
    assert {p.split(":")[0] for p in every} == {names[0], names[1]}
    assert only and sorted(only) == sorted(p for p in every if p.startswith(names[0] + ":"))


def test_one_agent_process_probes_and_serves_a_ranks_bindings(tmp_path: Path) -> None:
    """``c4p agent`` with ports and a ``bindings:`` section: the controller's probe batch is
    answered by the process, and a rank on its socket gets exactly the job's QPs that leave
    this host, as the controller streams them (both over the same ``controllers`` entry)."""
    import signal
    import subprocess

    from c4p.client import FlowIntentClient, communicator
    from c4p.files import save_fabric
    from southbound.probing import Probe

    fabric = spread_fabric()
    names = hosts(fabric)
    here = names[0]
    network = tmp_path / "network.json"
    save_fabric(real_network(fabric), network)
    short = Path(tempfile.mkdtemp(prefix=f"c4p-ai-{os.getpid()}-"))  # sun_path is short
    try:
        endpoint = f"unix:{short}/controller.sock"
        listen = {"address": endpoint, "grace_s": 0.5}
        with (
            serving(fabric, tmp_path / "svc", agents=agents_section([here]), listen=listen) as svc,
            FlowIntentClient(endpoint) as flow,
        ):
            hub = svc.runtime.agents if svc.runtime else None
            assert hub is not None
            job = flow.register_job("both", hosts=[names[0], names[1]])
            reply = job.submit([communicator("dp", qps_per_connection=2)])
            watch = job.watch()
            try:
                assert watch.wait_revision(reply.revision, 30)
                snapshot = watch.mirror.snapshot()
            finally:
                watch.stop()
            expected = {
                (b.communicator, b.src_rank, b.dst_rank, b.channel, b.qp): b.udp_sport
                for b in snapshot.values()
                if b.src_port.split(":")[0] == here
            }
            assert expected  # the job has QPs leaving this host
            ports = [
                {"port": f"{here}:{p.port.name}", "interface": "lo", "address": str(p.port.address)}
                for p in fabric.index.ports
                if p.host.name == here
            ]
            sock = short / "agent.sock"
            config = tmp_path / "agent.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "host": here,
                        "controllers": [endpoint],
                        "token": {"value": AGENT_TOKEN},
                        "ports": ports,
                        "reconnect": {"initial_s": 0.05, "max_s": 0.5},
                        "bindings": {"socket": {"path": str(sock)}, "state_dir": "state"},
                    }
                )
            )
            options = ("--prober", f"modeled:{network}", "--no-os-check")
            with agent(config, *options) as child:
                ready = (tmp_path / "agent.ready").read_text().split()
                assert ready == ["controller-session", "bindings"]
                assert wait_until(lambda: hub.hosts() == {here}, 60)
                src = next(p.port.address for p in fabric.index.ports if p.host.name == here)
                dst = next(p.port.address for p in fabric.index.ports if p.host.name == names[1])
                traces = hub.trace_many([Probe(src, dst, 0xC000, first_ttl=2, max_ttl=2)])
                assert traces[0].hops[0].address is not None  # the agent process answered

                def served() -> dict[tuple[str, int, int, int, int], int]:
                    welcome = _welcome_for(sock, "both", job.token)
                    assert isinstance(welcome, wire.Welcome), welcome
                    assert welcome.host == here
                    return {
                        (
                            b.key.communicator,
                            b.key.src_rank,
                            b.key.dst_rank,
                            b.key.channel,
                            b.key.qp,
                        ): b.udp_sport
                        for b in welcome.body.bindings
                    }

                assert wait_until(lambda: served() == expected, 60)
                child.send_signal(signal.SIGTERM)
                assert child.wait(30) == 0
                assert not sock.exists()  # the binding side removed its socket on stop
            assert isinstance(child, subprocess.Popen)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def _welcome_for(sock: Path, job_id: str, token: str) -> wire.Message:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(15)
        s.connect(str(sock))
        s.sendall(wire.encode(wire.Hello(job_id, token)))
        header = wire.parse_header(s.recv(wire.HEADER.size, socket.MSG_WAITALL))
        return wire.decode(header, s.recv(header.length, socket.MSG_WAITALL))


def test_binding_streams_try_the_controllers_in_order(tmp_path: Path) -> None:
    """A bindings-only agent whose first endpoint is dead: a rank's HELLO still gets the job's
    bindings, through the second endpoint (the order the probe session uses too)."""
    from c4p.client import FlowIntentClient, communicator

    fabric = spread_fabric()
    names = hosts(fabric)
    short = Path(tempfile.mkdtemp(prefix=f"c4p-ao-{os.getpid()}-"))
    try:
        live = f"unix:{short}/live.sock"
        listen = {"address": live, "grace_s": 0.5}
        with serving(fabric, tmp_path / "svc", listen=listen), FlowIntentClient(live) as flow:
            job = flow.register_job("order", hosts=[names[0], names[1]])
            reply = job.submit([communicator("dp")])
            config = tmp_path / "agent.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "host": names[0],
                        "controllers": [f"unix:{short}/dead.sock", live],
                        "bindings": {"socket": {"path": str(short / "a.sock")}},
                    }
                )
            )
            with agent(config):
                assert (tmp_path / "agent.ready").read_text().split() == ["bindings"]

                def welcomed() -> bool:
                    answer = _welcome_for(short / "a.sock", "order", job.token)
                    assert isinstance(answer, wire.Welcome), answer
                    return answer.known and answer.body.epoch >= 1

                assert wait_until(welcomed, 60)
            assert reply.revision >= 1
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_the_agent_process_does_not_load_the_planner(tmp_path: Path) -> None:
    """``c4p agent`` runs on every GPU host: it must not import OR-Tools or pandas (the
    planner's; most of a process's memory). Checked in a fresh interpreter that runs the
    console entry point up to a validated config."""
    import subprocess
    import sys

    config, _ = agent_config(tmp_path, "h0", "127.0.0.1:1")
    probe = (
        "import sys\n"
        f"sys.argv = ['c4p', 'agent', '-c', {str(config)!r}, '--check']\n"
        "from c4p.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print(sorted(m for m in ('ortools', 'pandas', 'solver.search.cpsat')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_a_second_agent_never_takes_a_live_agents_socket(tmp_path: Path) -> None:
    """Something serves on the socket path (a first agent): a second agent refuses to start
    with one line and exit 2, and the socket still answers; a stale socket file is replaced."""
    import socket
    import subprocess

    from libc4p_cases import AGENT

    config, _ = agent_config(tmp_path, "h0", "127.0.0.1:1")
    doc = yaml.safe_load(config.read_text())
    path = tmp_path / "live.sock"
    doc["bindings"]["socket"]["path"] = str(path)
    config.write_text(yaml.safe_dump(doc))
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        live.bind(str(path))
        live.listen(4)
        done = subprocess.run(
            [*AGENT, "-c", str(config)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2, done.stderr
        assert "another process is serving on it" in done.stderr
        assert "Traceback" not in done.stderr
        assert path.is_socket()
        still = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            still.connect(str(path))  # the first one's socket was left alone
        finally:
            still.close()
    finally:
        live.close()


def test_a_socket_that_cannot_be_made_is_a_clear_exit_2(tmp_path: Path) -> None:
    """The socket's directory is a file: the agent stops at start with one line, exit 2."""
    import subprocess

    from libc4p_cases import AGENT

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    config, _ = agent_config(tmp_path, "h0", "127.0.0.1:1")
    doc = yaml.safe_load(config.read_text())
    doc["bindings"]["socket"]["path"] = str(blocker / "agent.sock")
    config.write_text(yaml.safe_dump(doc))
    done = subprocess.run([*AGENT, "-c", str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "bindings: cannot start" in done.stderr and "Traceback" not in done.stderr


def test_inbound_frames_are_limited_by_their_type() -> None:
    """What a library may send, each with its own ceiling (a HELLO is under 1 KiB, a REPORT
    256 KiB); what only the agent sends is refused from a library before any payload is read."""
    assert wire.inbound_limit(wire.MsgType.HELLO) < 1024
    assert wire.inbound_limit(wire.MsgType.ERROR) < 2048
    assert wire.inbound_limit(5) == 256 << 10  # REPORT (the sensor's), library -> agent
    longest = wire.encode(wire.Hello("j" * wire.MAX_NAME, "t" * wire.MAX_TOKEN))
    assert len(longest) - wire.HEADER.size == wire.inbound_limit(wire.MsgType.HELLO)
    for kind in (wire.MsgType.WELCOME, wire.MsgType.BINDINGS, 99):
        with pytest.raises(WireError, match="not a message a library sends"):
            wire.inbound_limit(kind)


def _agent_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_an_oversized_frame_is_refused_from_its_header(tmp_path: Path) -> None:
    """A HELLO header declaring 4 MiB is answered ERROR (PROTOCOL) at once, without the agent
    waiting for (and buffering) the payload; 32 connections sending 4 MiB each leave the
    agent's resident memory within a few MiB (it was +4 MiB per connection)."""
    config, sock = agent_config(tmp_path, "h0", f"127.0.0.1:{free_port()}")
    declared = b"C4PL" + struct.pack(">HHI", 1, int(wire.MsgType.HELLO), 4 << 20)
    with agent(config) as child:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)  # the hello timeout is 10 s: an answer before it is the header's
            s.connect(str(sock))
            s.sendall(declared)
            answer = _decode(s.recv(65536, socket.MSG_WAITALL) or b"")
        assert isinstance(answer, wire.Error) and answer.code == Code.PROTOCOL, answer
        assert "HELLO" in answer.message and "limit" in answer.message, answer.message
        before = _agent_rss_kb(child.pid)
        conns = []
        try:
            for _ in range(32):
                c = socket.socket(socket.AF_UNIX)
                c.settimeout(5)
                c.connect(str(sock))
                conns.append(c)
                with contextlib.suppress(OSError):  # refused and closed after the header
                    c.sendall(declared + b"\0" * ((4 << 20) - 1))  # all but the last byte
            grown = _agent_rss_kb(child.pid) - before
        finally:
            for c in conns:
                c.close()
    assert grown < 16 << 10, f"the agent grew by {grown} KiB for 32 x 4 MiB declared"


def _cached_agent_config(directory: Path, **bindings: object) -> tuple[Path, Path]:
    """An agent config (controller unreachable) with job ``j`` on disk, so that a rank with
    ``TOKEN`` is welcomed from the cache; ``bindings`` extends its ``bindings:`` section."""
    config, sock = agent_config(directory, "h0", f"127.0.0.1:{free_port()}")
    doc = yaml.safe_load(config.read_text())
    doc["bindings"].update(bindings)
    config.write_text(yaml.safe_dump(doc))
    state = directory / "state" / "jobs"
    state.mkdir(parents=True)
    job = {"version": 1, "job_id": "j", "token": TOKEN, "epoch": 2, "known": True, "bindings": HELD}
    (state / "j.json").write_text(json.dumps(job))
    return config, sock


def _closed(conn: socket.socket, wait: float = 1.0) -> bool:
    """Whether the agent has closed ``conn`` (an ERROR and EOF, or a reset) within ``wait``
    seconds (well under the agent's 10 s HELLO timeout)."""
    conn.settimeout(wait)
    try:
        while chunk := conn.recv(4096):
            del chunk
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def test_idle_connections_never_lock_a_rank_out(tmp_path: Path) -> None:
    """``max_sessions`` connections that never say HELLO: a rank's HELLO still gets its
    WELCOME (it was ``over N sessions`` for the 10 s HELLO timeout, renewable), and the
    oldest idle connection is the one closed, with ERROR UNAVAILABLE saying why."""
    config, sock = _cached_agent_config(tmp_path, max_sessions=8)
    with agent(config):
        idle = [socket.socket(socket.AF_UNIX) for _ in range(8)]
        try:
            for c in idle:
                c.connect(str(sock))
            assert not _closed(idle[0])  # under the limit: nobody is closed
            welcome = _welcome(sock, TOKEN)
            assert isinstance(welcome, wire.Welcome) and welcome.known, welcome
            idle[0].settimeout(5)
            answer = _decode(idle[0].recv(65536, socket.MSG_WAITALL))
            assert isinstance(answer, wire.Error) and answer.code == Code.UNAVAILABLE
            assert "to make room" in answer.message, answer.message
            assert [_closed(c) for c in idle[1:3]] == [False, False]  # only the oldest
        finally:
            for c in idle:
                c.close()


_HOLDER = """
import socket, sys, time
conns = []
for _ in range(int(sys.argv[2])):
    c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]); conns.append(c)
time.sleep(1)
still = 0
for c in conns:
    c.setblocking(False)
    try:
        still += c.recv(4096) != b"" and 0
    except BlockingIOError:
        still += 1
    except OSError:
        pass
print(still, flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_one_uid_cannot_take_every_session(tmp_path: Path) -> None:
    """Peer uid 65534 (switched for real with setpriv; admitted by ``allowed_uids``) opens 8
    idle connections where its limit is 4: its 4 oldest are closed, and with the agent full
    a rank of another uid still gets in."""
    import subprocess

    from libc4p_cases import as_user, interpreter_for, staged_for

    with staged_for(65534) as shared:  # a socket directory uid 65534 can reach
        config, sock = _cached_agent_config(shared / "a", max_sessions=8, max_sessions_per_uid=4)
        doc = yaml.safe_load(config.read_text())
        doc["bindings"]["socket"].update(mode="0666", allowed_uids=[0, 65534])
        config.write_text(yaml.safe_dump(doc))
        os.chmod(shared / "a", 0o755)
        with agent(config):
            mine = [socket.socket(socket.AF_UNIX) for _ in range(4)]
            with subprocess.Popen(
                [*as_user(65534), interpreter_for(65534), "-c", _HOLDER, str(sock), "8"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            ) as holder:
                try:
                    assert holder.stdout is not None
                    assert holder.stdout.readline().strip() == "4"  # its limit, not the agent's
                    for c in mine:  # the agent is now full: 4 of 65534's, 4 of root's
                        c.connect(str(sock))
                    welcome = _welcome(sock, TOKEN)
                    assert isinstance(welcome, wire.Welcome) and welcome.known, welcome
                finally:
                    for c in mine:
                        c.close()
                    holder.kill()


def test_frames_being_read_share_a_byte_budget() -> None:
    """The agent reserves a frame's declared length before reading its payload; a frame that
    would take the sessions together past the budget is refused (UNAVAILABLE) unread, and a
    frame read in full gives its bytes back."""
    import asyncio

    from c4p.agent.local import read_message
    from c4p.agent.local_sessions import Sessions

    hello = wire.encode(wire.Hello("j" * 100, "t" * 500))
    size = len(hello) - wire.HEADER.size

    async def scenario() -> None:
        budget = Sessions(limit=4, per_uid=4, budget=size + 100)
        first, second = asyncio.StreamReader(), asyncio.StreamReader()
        first.feed_data(hello[:-1])  # all but its last byte: its payload is being read
        pending = asyncio.ensure_future(read_message(first, budget))
        await asyncio.sleep(0)
        assert budget.buffered == size
        second.feed_data(hello)
        with pytest.raises(WireError, match="budget") as caught:
            await read_message(second, budget)
        assert caught.value.code == Code.UNAVAILABLE
        first.feed_data(hello[-1:])
        assert isinstance(await pending, wire.Hello) and budget.buffered == 0
        third = asyncio.StreamReader()
        third.feed_data(hello)
        assert isinstance(await read_message(third, budget), wire.Hello)

    asyncio.run(scenario())
