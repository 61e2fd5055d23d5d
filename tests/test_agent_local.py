"""The agent's local binding API on its own: the wire format (round trips and fuzzed bytes),
the config, and a real agent process fed fuzzed frames over its Unix socket while its
controller is unreachable: it answers ERROR or closes, never crashes, and keeps serving the
bindings it holds on disk."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from libc4p_cases import agent, agent_config, free_port
from service_cases import hosts, serving, spread_fabric

from c4p.agent import wire
from c4p.agent.local import main
from c4p.agent.local_config import SocketConfig, load_bindings_config
from c4p.agent.wire import BindingSet, Code, Kind, LocalBinding, QpKey, WireError

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
messages = st.one_of(
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


def test_bad_config_is_refused_with_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump({"host": "h0", "controller": {"address": "x:1"}, "sock": 1}))
    assert main(["--config", str(config)]) == 2
    assert "sock" in capsys.readouterr().err
    config.write_text(yaml.safe_dump({"host": "h 0", "controller": {"address": "x:1"}}))
    assert main(["--config", str(config)]) == 2
    assert "host" in capsys.readouterr().err
    config.write_text(
        yaml.safe_dump({"host": "h0", "controller": {"address": "x:1", "tls": "mtls"}})
    )
    assert main(["--config", str(config)]) == 2
    assert "ca_file" in capsys.readouterr().err


HELD = [["dp", 0, 0, 0, 1, 0, 0xC001, 1, 2], ["dp", 0, 1, 0, 1, 0, 0xC002, 2, 2]]
TOKEN = "cached-token-0123456789"


@pytest.fixture(scope="module")
def cached_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real agent whose controller is unreachable, with one job on disk."""
    directory = tmp_path_factory.mktemp("agent")
    config, sock = agent_config(directory, "h0", f"127.0.0.1:{free_port()}")
    state = load_bindings_config(config).state_dir / "jobs"
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
