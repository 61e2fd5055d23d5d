"""The local binding API: the host's ranks (``libc4p``) get their bindings over a Unix socket.

Why a Unix socket and these checks: the socket never leaves the host, the kernel vouches for
the peer (``SO_PEERCRED`` gives its pid, uid and gid, which a process cannot forge), and the
file's owner, group and mode keep other users from even connecting. A rank then presents its
job id and token (HELLO); the agent answers at once from what it holds (WELCOME with the job's
bindings on this host, possibly none yet), then pushes a delta (BINDINGS) whenever the
controller changes any of them. Any malformed frame is answered with ERROR and the connection
closed: a rank can never crash or stall the agent, and the agent never waits on a rank (a rank
that stops reading is dropped once its backlog passes ``_MAX_BACKLOG``; it reconnects and gets
the full set). What a peer can make the agent hold is bounded: a frame's type caps its length
before its payload is read (``wire.inbound_limit``; a HELLO is under 1 KiB), all frames being
read share a byte budget, and connections that never say HELLO cannot lock ranks out (they
are the first closed when the agent or their uid is full: :mod:`c4p.agent.local_sessions`).

It runs as a component of the host agent (:class:`BindingsSide`, started by ``c4p agent`` when
its config has a ``bindings:`` section): the job streams are restored from disk first, then the
socket opens, so the first rank to connect already gets what the agent held before a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import socket
import struct
from pathlib import Path

from c4p.agent.config import AgentConfig
from c4p.agent.jobs import JobBook, JobView
from c4p.agent.local_config import BindingsSection
from c4p.agent.local_sessions import Session, Sessions
from c4p.agent.telemetry import TelemetryBook
from c4p.agent.wire import (
    HEADER,
    VERSION,
    BindingSet,
    Code,
    Error,
    Header,
    Hello,
    Message,
    MsgType,
    Report,
    Welcome,
    WireError,
    decode,
    encode,
    inbound_limit,
    parse_header,
    report_samples,
)

log = logging.getLogger("c4p.agent.local")
_HELLO_TIMEOUT_S = 10.0
_MAX_BACKLOG = 16 << 20
_READ_BUDGET = 32 << 20  # bytes of frames being read, all sessions together
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, as the kernel recorded at connect."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    pid, uid, gid = _CRED.unpack(raw)
    return int(pid), int(uid), int(gid)


async def read_frame(
    reader: asyncio.StreamReader, budget: Sessions | None = None, *, eof: bool = False
) -> tuple[Header, bytes] | None:
    """One frame's checked header and payload; ``WireError`` on a malformed, truncated or
    oversized one. With ``eof``, a rank that closes between frames gives ``None``.

    The length is judged on the header, before any payload is read: over its type's ceiling
    (``wire.inbound_limit``), or over what is left of ``budget``, the frame is refused."""
    try:
        first = await reader.read(1) if eof else b""
        if eof and not first:
            return None
        header = parse_header(first + await reader.readexactly(HEADER.size - len(first)))
        limit = inbound_limit(header.type)
        if header.length > limit:
            name = MsgType(header.type).name if header.type in MsgType._value2member_map_ else ""
            raise WireError(
                Code.PROTOCOL,
                f"{name or f'type {header.type}'} of {header.length} bytes over its limit "
                f"of {limit}",
            )
        if budget is None:
            payload = await reader.readexactly(header.length)
        else:
            budget.reserve(header.length, MsgType(header.type).name)
            try:
                payload = await reader.readexactly(header.length)
            finally:
                budget.release(header.length)
    except asyncio.IncompleteReadError as exc:
        raise WireError(Code.PROTOCOL, f"truncated frame ({len(exc.partial)} bytes)") from None
    if header.version != VERSION:
        raise WireError(
            Code.VERSION,
            f"the library speaks wire version {header.version}, this agent version {VERSION}",
        )
    return header, payload


async def read_message(reader: asyncio.StreamReader, budget: Sessions | None = None) -> Message:
    """One frame from a rank, decoded; ``WireError`` on a malformed, truncated or oversized one."""
    frame = await read_frame(reader, budget)
    assert frame is not None
    return decode(*frame)


def _answers(path: Path) -> bool:
    """Whether a process accepts connections on the Unix socket at ``path`` (a live agent)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


class LocalServer:
    """Serves the ranks of this host (see the module docstring)."""

    def __init__(
        self, config: AgentConfig, book: JobBook, telemetry: TelemetryBook | None = None
    ) -> None:
        if config.bindings is None:
            raise ValueError("bindings: the agent config has no bindings section")
        self.host = config.host
        self.config: BindingsSection = config.bindings
        self.book = book
        self.telemetry = telemetry  # None: REPORT frames are read, counted and dropped
        self.server: asyncio.base_events.Server | None = None
        self.sessions = Sessions(
            self.config.max_sessions, self.config.max_sessions_per_uid, _READ_BUDGET
        )
        self.served = 0
        self.reports = 0
        self.reports_dropped = 0
        self._numbers = itertools.count(1)

    async def start(self) -> None:
        cfg = self.config.socket
        cfg.path.parent.mkdir(parents=True, exist_ok=True)
        if cfg.path.is_socket():
            if _answers(cfg.path):  # another agent serves there: never take its socket away
                raise OSError(
                    errno.EADDRINUSE,
                    f"socket.path {cfg.path}: another process is serving on it "
                    "(a second agent on this host?)",
                )
            cfg.path.unlink()  # a stale socket of a previous run: nobody answers on it
        old = os.umask(0o177)  # no window in which the socket is more open than configured
        try:
            self.server = await asyncio.start_unix_server(self._session, path=str(cfg.path))
        finally:
            os.umask(old)
        os.chown(cfg.path, cfg.uid(), cfg.gid())
        os.chmod(cfg.path, int(cfg.mode, 8))

    async def stop(self) -> None:
        if self.server is None:  # never listened: the path (if any) is not ours to remove
            return
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2)
        self.config.socket.path.unlink(missing_ok=True)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        view: JobView | None = None
        listener = None
        session: Session | None = None
        try:
            _, uid, gid = peer_credentials(writer.get_extra_info("socket"))
            if not self.config.socket.admits(uid, gid):
                raise WireError(
                    Code.PERMISSION,
                    f"peer uid {uid} gid {gid} is not in socket.allowed_uids/allowed_gids",
                )
            candidate = Session(uid, writer, asyncio.current_task())
            self.sessions.open(candidate)  # may close an idle one to make room, or refuse
            session = candidate
            hello = await asyncio.wait_for(read_message(reader, self.sessions), _HELLO_TIMEOUT_S)
            number = next(self._numbers)
            if not isinstance(hello, Hello):
                raise WireError(Code.PROTOCOL, "the first message must be HELLO")
            session.hello = True  # from here on it is never closed to make room
            view = await self.book.admit(hello.job_id, hello.token)

            def listener(delta: BindingSet) -> None:
                if writer.transport.get_write_buffer_size() > _MAX_BACKLOG:
                    writer.transport.abort()  # a rank that does not read: it resyncs later
                    return
                writer.write(encode(delta))

            welcome = Welcome(self.host, view.known, view.full_set())
            writer.write(encode(welcome))
            view.listeners.add(listener)
            self.served += 1
            await writer.drain()
            # After HELLO a rank only sends REPORT frames (its measurements), until it closes.
            while (frame := await read_frame(reader, self.sessions, eof=True)) is not None:
                if frame[0].type != MsgType.REPORT:
                    raise WireError(Code.PROTOCOL, "only REPORT frames may follow HELLO")
                self.reports += 1
                book = self.telemetry
                if book is None or not book.admit(view.job_id, report_samples(frame[1])):
                    self.reports_dropped += 1  # read (the rank never waits), not folded
                    continue
                report = decode(*frame)
                assert isinstance(report, Report)
                book.take(view.job_id, view.epoch, number, report)
        except WireError as exc:
            with contextlib.suppress(Exception):
                writer.write(encode(Error(exc.code, str(exc))))
                await asyncio.wait_for(writer.drain(), 1)
        except TimeoutError:
            with contextlib.suppress(Exception):
                writer.write(encode(Error(Code.TIMEOUT, "no HELLO in time")))
        except (ConnectionError, OSError):
            pass
        finally:
            if session is not None:
                self.sessions.close(session)
            if view is not None and listener is not None:
                view.listeners.discard(listener)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)


class BindingsSide:
    """The binding side as a component of the agent (:class:`c4p.agent.daemon.Component`).

    Start: the state directory, the job streams resumed from disk, then the socket. Stop in
    reverse: the socket closes first (no rank is admitted to a job whose stream is ending),
    then the streams and their channels.
    """

    name = "bindings"

    def __init__(self, config: AgentConfig, telemetry: TelemetryBook | None = None) -> None:
        if config.bindings is None:
            raise ValueError("bindings: the agent config has no bindings section")
        self.config = config
        self.telemetry = telemetry
        self.book: JobBook | None = None
        self.server: LocalServer | None = None

    async def start(self) -> None:
        assert self.config.bindings is not None
        try:
            self.config.bindings.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.book = JobBook(self.config)
            self.book.restore()
            self.server = LocalServer(self.config, self.book, self.telemetry)
            await self.server.start()
        except BaseException:
            await self.stop()  # not started: the daemon will not stop it, so undo here
            raise
        log.info("serving %s for host %s", self.server.config.socket.path, self.config.host)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self.book is not None:
            await self.book.close()
