"""The local binding API: the host's ranks (``libc4p``) get their bindings over a Unix socket.

Why a Unix socket and these checks: the socket never leaves the host, the kernel vouches for
the peer (``SO_PEERCRED`` gives its pid, uid and gid, which a process cannot forge), and the
file's owner, group and mode keep other users from even connecting. A rank then presents its
job id and token (HELLO); the agent answers at once from what it holds (WELCOME with the job's
bindings on this host, possibly none yet), then pushes a delta (BINDINGS) whenever the
controller changes any of them. Any malformed frame is answered with ERROR and the connection
closed: a rank can never crash or stall the agent, and the agent never waits on a rank (a rank
that stops reading is dropped once its backlog passes ``_MAX_BACKLOG``; it reconnects and gets
the full set).

Run on its own: ``python -m c4p.agent.local --config FILE [--ready-file PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import struct
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from c4p.agent.jobs import JobBook, JobView
from c4p.agent.local_config import BindingsAgentConfig, load_bindings_config
from c4p.agent.wire import (
    HEADER,
    VERSION,
    BindingSet,
    Code,
    Error,
    Hello,
    Message,
    Welcome,
    WireError,
    decode,
    encode,
    parse_header,
)

log = logging.getLogger("c4p.agent.local")
_HELLO_TIMEOUT_S = 10.0
_MAX_BACKLOG = 16 << 20
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, as the kernel recorded at connect."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    pid, uid, gid = _CRED.unpack(raw)
    return int(pid), int(uid), int(gid)


async def read_message(reader: asyncio.StreamReader) -> Message:
    """One frame from a rank; ``WireError`` on a malformed or truncated one."""
    try:
        header = parse_header(await reader.readexactly(HEADER.size))
        payload = await reader.readexactly(header.length)
    except asyncio.IncompleteReadError as exc:
        raise WireError(Code.PROTOCOL, f"truncated frame ({len(exc.partial)} bytes)") from None
    if header.version != VERSION:
        raise WireError(
            Code.VERSION,
            f"the library speaks wire version {header.version}, this agent version {VERSION}",
        )
    return decode(header, payload)


class LocalServer:
    """Serves the ranks of this host (see the module docstring)."""

    def __init__(self, config: BindingsAgentConfig, book: JobBook) -> None:
        self.config = config
        self.book = book
        self.server: asyncio.base_events.Server | None = None
        self.sessions = 0
        self.served = 0

    async def start(self) -> None:
        cfg = self.config.socket
        cfg.path.parent.mkdir(parents=True, exist_ok=True)
        if cfg.path.is_socket():
            cfg.path.unlink()  # a stale socket of a previous run
        old = os.umask(0o177)  # no window in which the socket is more open than configured
        try:
            self.server = await asyncio.start_unix_server(self._session, path=str(cfg.path))
        finally:
            os.umask(old)
        os.chown(cfg.path, cfg.uid(), cfg.gid())
        os.chmod(cfg.path, int(cfg.mode, 8))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)
        self.config.socket.path.unlink(missing_ok=True)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.sessions += 1
        view: JobView | None = None
        listener = None
        try:
            _, uid, gid = peer_credentials(writer.get_extra_info("socket"))
            if not self.config.socket.admits(uid, gid):
                raise WireError(
                    Code.PERMISSION,
                    f"peer uid {uid} gid {gid} is not in socket.allowed_uids/allowed_gids",
                )
            if self.sessions > self.config.max_sessions:
                raise WireError(Code.UNAVAILABLE, f"over {self.config.max_sessions} sessions")
            hello = await asyncio.wait_for(read_message(reader), _HELLO_TIMEOUT_S)
            if not isinstance(hello, Hello):
                raise WireError(Code.PROTOCOL, "the first message must be HELLO")
            view = await self.book.admit(hello.job_id, hello.token)

            def listener(delta: BindingSet) -> None:
                if writer.transport.get_write_buffer_size() > _MAX_BACKLOG:
                    writer.transport.abort()  # a rank that does not read: it resyncs later
                    return
                writer.write(encode(delta))

            welcome = Welcome(self.config.host, view.known, view.full_set())
            writer.write(encode(welcome))
            view.listeners.add(listener)
            self.served += 1
            await writer.drain()
            extra = await reader.read(1)  # nothing more is expected from a rank
            if extra:
                raise WireError(Code.PROTOCOL, "unexpected data after HELLO")
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
            self.sessions -= 1
            if view is not None and listener is not None:
                view.listeners.discard(listener)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)


async def run(config: BindingsAgentConfig, ready_file: Path | None = None) -> None:
    """Serve until SIGTERM or SIGINT."""
    config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    book = JobBook(config)
    book.restore()
    server = LocalServer(config, book)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready_file is not None:
        ready_file.write_text(str(config.socket.path), encoding="utf-8")
    log.info("serving %s for host %s", config.socket.path, config.host)
    try:
        await stop.wait()
    finally:
        await server.stop()
        await book.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m c4p.agent.local", description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--ready-file", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        config = load_bindings_config(args.config)
        config.controller.client_tls()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        print(f"error: {args.config}: {problems}", file=sys.stderr)
        return 2
    except (yaml.YAMLError, ValueError, KeyError, OSError) as exc:
        print(f"error: {args.config}: {exc}", file=sys.stderr)
        return 2
    asyncio.run(run(config, args.ready_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
