"""libc4p's reporting API: samples from C ranks reach a socket as REPORT frames, or are counted.

The rank is the C driver ``c4p_check`` linking ``libc4p.so.1`` (under valgrind where installed:
no invalid access, no leak; and a ThreadSanitizer build for the many-threads case). The agent's
side is a Unix socket served here with the agent's own wire module, so every frame the library
sends is decoded by the Python implementation of the format (two implementations, one spec).
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import suppress
from pathlib import Path

import pytest
from libc4p_cases import BUILD, Rank, build_libc4p, ranks

from c4p.agent import wire


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    reason = build_libc4p()
    if reason is not None:
        pytest.skip(reason)


def _frames(conn: socket.socket, got: list[wire.Report], until: float) -> None:
    """Read REPORT frames until EOF or ``until`` (a partial frame at the end is discarded)."""
    data = b""
    while time.monotonic() < until:
        try:
            chunk = conn.recv(1 << 16)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
        while len(data) >= wire.HEADER.size:
            header = wire.parse_header(data[: wire.HEADER.size])
            end = wire.HEADER.size + header.length
            if len(data) < end:
                break
            message = wire.decode(header, data[wire.HEADER.size : end])
            assert isinstance(message, wire.Report), message
            got.append(message)
            data = data[end:]


class Collector:
    """A fake agent: welcomes each session (holding no bindings) and collects its REPORTs.

    ``stall_s``: on the first session, stop reading for that long after the welcome (a stuck
    agent), then read what arrived and close it."""

    def __init__(self, path: Path, sessions: int = 1, stall_s: float = 0.0) -> None:
        self.reports: list[wire.Report] = []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(4)
        self.server.settimeout(60)
        self.sessions = sessions
        self.stall_s = stall_s
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            for number in range(self.sessions):
                conn, _ = self.server.accept()
                with conn:
                    conn.settimeout(0.2)
                    conn.recv(4096)  # HELLO
                    conn.sendall(wire.encode(wire.Welcome("h0", False)))
                    if number == 0 and self.stall_s:
                        time.sleep(self.stall_s)
                        conn.shutdown(socket.SHUT_WR)
                        _frames(conn, self.reports, time.monotonic() + 5)
                        continue
                    _frames(conn, self.reports, time.monotonic() + 60)
        finally:
            self.server.close()

    def join(self) -> None:
        self.thread.join(60)
        assert not self.thread.is_alive()


def _args(sock: Path) -> tuple[str, ...]:
    return ("--socket", str(sock), "--job", "j", "--token", "t", "--timeout-ms", "5000")


def _ok(r: Rank, line: str) -> None:
    r.send(line)
    words = r.lines.get(timeout=30).split()
    assert words == ["report", "0"], (line, words)


def test_reports_reach_the_agent_exactly(tmp_path: Path) -> None:
    sock = tmp_path / "a.sock"
    agent = Collector(sock)
    with ranks(Rank(*_args(sock))) as (r,):
        assert r.open_code == 0
        r.send("comm dp")
        assert r.expect("comm") == ["comm", "0", "0"]
        r.send("comm tp")
        assert r.expect("comm") == ["comm", "1", "0"]
        r.send("comm dp")  # the same name, the same id
        assert r.expect("comm") == ["comm", "0", "0"]
        _ok(r, "arrive 0 3 7 AllReduce 1048576 1000")
        _ok(r, "transfer 0 3 4 2 1 7 524288 1100 1600")
        _ok(r, f"transfer 1 3 5 0 0 {wire.STEP_UNKNOWN} 4096 1200 1300")
        _ok(r, "complete 0 3 7 2000")
        # Bad arguments: an unregistered communicator, an end before its start.
        r.send("transfer 9 0 1 0 0 1 1 5 6")
        assert r.expect("report") == ["report", "2"]
        r.send("transfer 0 0 1 0 0 1 1 6 5")
        assert r.expect("report") == ["report", "2"]
        r.send("flush 5000")
        assert r.expect("flush") == ["flush", "0"]
        r.send("rstats")
        assert r.expect("rstats") == ["rstats", "4", "4", "0"]
    agent.join()
    assert agent.reports, "no REPORT frame arrived"
    transfers = [t for rep in agent.reports for t in rep.transfers]
    arrivals = [a for rep in agent.reports for a in rep.arrivals]
    completions = [c for rep in agent.reports for c in rep.completions]
    assert sorted(transfers) == [
        wire.Transfer("dp", 3, 4, 2, 1, 7, 524288, 1100, 1600),
        wire.Transfer("tp", 3, 5, 0, 0, wire.STEP_UNKNOWN, 4096, 1200, 1300),
    ]
    assert arrivals == [wire.Arrive("dp", 3, 7, "AllReduce", 1048576, 1000)]
    assert completions == [wire.Complete("dp", 3, 7, 2000)]
    assert all(rep.dropped == 0 for rep in agent.reports)


def test_a_static_session_does_not_report(tmp_path: Path) -> None:
    path = tmp_path / "h.c4pb"
    path.write_text("c4p-bindings 1\nfabric f\njob j\nhost h\nepoch 1\ncount 0\n")
    with ranks(Rank("--file", str(path), "--fabric", "f", "--job", "j")) as (r,):
        assert r.open_code == 0
        r.send("comm dp")
        assert r.expect("comm")[2] == "12"  # C4P_ENOTSUP: there is no agent to report to


@pytest.mark.parametrize("sanitizer", ["", "tsan", "asan"])
def test_every_sample_is_delivered_or_counted_as_dropped(tmp_path: Path, sanitizer: str) -> None:
    """Four threads report 100,000 transfers while the agent is stuck: the ring fills and drops,
    the frame cut by the stall is lost and counted, and the session comes back by itself."""
    sock = tmp_path / "a.sock"
    agent = Collector(sock, sessions=2, stall_s=1.5)
    binary = BUILD / sanitizer / "c4p_check" if sanitizer else BUILD / "c4p_check"
    if not binary.exists():
        pytest.skip(f"{binary} was not built")
    calls, threads = 25_000, 4
    with ranks(Rank(*_args(sock), binary=binary, valgrind=False)) as (r,):
        assert r.open_code == 0
        r.send("comm dp")
        assert r.expect("comm")[2] == "0"
        r.send(f"rthreads {threads} {calls} 0")
        ok, dropped, other = map(int, r.expect("rthreads", 60)[1:])
        assert other == 0 and ok + dropped == calls * threads
        assert dropped > 0  # 100,000 samples, a 16,384-slot ring and an agent that reads none
        r.send("flush 20000")  # drained once the library has reconnected to the second session
        assert r.expect("flush", 60) == ["flush", "0"]
        r.send("rstats")
        taken, sent, lost = map(int, r.expect("rstats")[1:])
        assert taken == ok and lost >= dropped
    agent.join()
    received = sum(len(rep.transfers) for rep in agent.reports)
    assert received == sent
    assert received + lost == calls * threads  # nothing vanished without being counted
    assert max(rep.dropped for rep in agent.reports) == lost
    # Per thread, the samples that arrived are in the order they were taken.
    for src in range(threads):
        steps = [t.step for rep in agent.reports for t in rep.transfers if t.src_rank == src]
        assert steps == sorted(steps)
    with suppress(OSError):
        sock.unlink()


def test_an_agent_that_refuses_reports_makes_the_library_drop_them(tmp_path: Path) -> None:
    """An agent older than reports answers the first REPORT with a protocol error and closes:
    the library reconnects, keeps its session, and from then on counts its reports as dropped
    instead of sending them (no reconnect loop)."""
    sock = tmp_path / "old.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.listen(2)
    server.settimeout(60)
    later: list[bytes] = []

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(10)
                conn.recv(4096)
                conn.sendall(wire.encode(wire.Welcome("h0", False)))
                conn.recv(1 << 16)  # the first REPORT
                conn.sendall(wire.encode(wire.Error(wire.Code.PROTOCOL, "unexpected data")))
            conn, _ = server.accept()
            with conn:
                conn.settimeout(3)
                conn.recv(4096)
                conn.sendall(wire.encode(wire.Welcome("h0", False)))
                with suppress(OSError):
                    while chunk := conn.recv(1 << 16):
                        later.append(chunk)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with ranks(Rank(*_args(sock))) as (r,):
        assert r.open_code == 0
        r.send("comm dp")
        assert r.expect("comm")[2] == "0"
        _ok(r, "transfer 0 0 1 0 0 1 10 1 2")
        r.send("flush 5000")
        assert r.expect("flush") == ["flush", "0"]

        def reconnected() -> bool:
            r.send("status")
            return r.expect("status")[3] == "1"

        time.sleep(0.3)
        deadline = time.monotonic() + 20
        while not reconnected() and time.monotonic() < deadline:
            time.sleep(0.05)
        _ok(r, "transfer 0 0 1 0 0 2 10 3 4")
        r.send("flush 5000")
        assert r.expect("flush") == ["flush", "0"]
        r.send("rstats")
        assert r.expect("rstats") == ["rstats", "2", "1", "1"]
    thread.join(30)
    assert later == []  # nothing more was sent to an agent that does not take reports
