"""The agent process: its components, its session with the controller, signals, reconnects.

Why components: the agent does two jobs on a GPU host, probing for the controller (here) and
handing the host's ranks their bindings over a Unix socket (the binding side,
:class:`c4p.agent.local.BindingsSide`, which ``c4p agent`` adds when the config has a
``bindings:`` section). The daemon runs a list of :class:`Component` s, started in order and
stopped in reverse, so the binding side plugs in without touching the session code; the probe
session is itself a component (:class:`ControllerSession`), present when the config lists
``ports``.

The session (``AgentService.Connect``, see ``proto/c4p/v1/agent.proto``): the agent dials the
first controller endpoint, sends ``hello`` (host, ports, its own rate), and waits for
``welcome`` (address book, the controller's rate). Only then does the executor accept batches;
every batch is answered by one ``results`` message. When the stream ends for any reason (the
controller stopped, the network broke, the credential was refused) the executor's terms are
dropped at once, so the agent is **idle**: it never probes on its own. It then reconnects with
bounded exponential backoff and jitter (``reconnect.initial_s`` doubling to ``reconnect.max_s``),
trying the configured endpoints in turn, forever, until stopped.

Telemetry (:mod:`c4p.agent.telemetry`): when the binding side folds its ranks' REPORT frames
into step summaries, the session sends them on the same stream as ``telemetry`` messages, at
most one every ``TELEMETRY_INTERVAL_S``; without a session they wait in the bounded book.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import random
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import metadata
from typing import Any, Protocol

import grpc

from c4p.agent.config import AgentConfig
from c4p.agent.dial import channel_for, next_endpoint
from c4p.agent.executor import ProbeExecutor, ProberFactory, SessionTerms
from c4p.agent.telemetry import TelemetryBook, report_pb
from c4p.api.v1 import agent_pb2 as pb
from topology.backoff import Backoff

log = logging.getLogger("c4p.agent")

CONNECT = "/c4p.v1.AgentService/Connect"
TELEMETRY_INTERVAL_S = 0.1  # at most 10 telemetry messages a second per agent


def _version() -> str:
    try:
        return metadata.version("c4p")
    except metadata.PackageNotFoundError:
        return "unknown"


FINAL_CODES = (
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT,
)
"""Refusals that a retry will not cure: logged as errors (the agent still retries, at the
longest interval, so a fixed controller config is picked up without restarting agents)."""


class Component(Protocol):
    """A part of the agent with a life: started in order, stopped in reverse."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class SessionState(StrEnum):
    IDLE = "idle"  # not started, or stopped
    CONNECTING = "connecting"
    CONNECTED = "connected"  # welcome received: batches are accepted
    RECONNECTING = "reconnecting"  # waiting out the backoff


@dataclass
class SessionStatus:
    state: SessionState = SessionState.IDLE
    endpoint: str = ""
    sessions: int = 0
    attempts: int = 0
    last_error: str = ""
    rate: float = 0.0
    history: list[SessionState] = field(default_factory=list)


class ControllerSession:
    """The probe session with the controller (see the module docstring)."""

    name = "controller-session"

    def __init__(
        self,
        config: AgentConfig,
        executor: ProbeExecutor,
        *,
        seed: int | None = None,
        telemetry: TelemetryBook | None = None,
    ) -> None:
        self.config = config
        self.executor = executor
        self.telemetry = telemetry
        self.telemetry_sent = 0
        self.status = SessionStatus()
        self._token = "" if config.token is None else config.token.resolve()
        self._random = random.Random(seed)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._changed: asyncio.Condition | None = None

    def _set(self, state: SessionState) -> None:
        self.status.state = state
        self.status.history.append(state)
        del self.status.history[:-100]  # the recent ones: an agent may reconnect for months
        if self._changed is not None:
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, state: SessionState, timeout: float) -> bool:
        """Wait (bounded) until the session is in ``state``."""
        assert self._changed is not None
        with contextlib.suppress(TimeoutError):
            async with self._changed:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.status.state is state), timeout
                )
        return self.status.state is state

    async def start(self) -> None:
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._run(), name="c4p-agent-session")

    async def stop(self) -> None:
        self._stopping = True
        self.executor.end()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._set(SessionState.IDLE)

    async def _run(self) -> None:
        settings = self.config.reconnect
        backoff = Backoff(settings.initial_s, settings.max_s, rng=self._random)
        while not self._stopping:
            endpoint = next_endpoint(self.config, self.status.attempts)
            self.status.attempts += 1
            self.status.endpoint = endpoint
            self._set(SessionState.CONNECTING)
            final = False
            try:
                if await self._session(endpoint):  # welcomed: the next retry is a first one
                    backoff.reset()
                self.status.last_error = "the controller ended the session"
            except grpc.aio.AioRpcError as exc:
                final = exc.code() in FINAL_CODES
                self.status.last_error = f"{exc.code().name}: {exc.details()}"
            except (OSError, ValueError) as exc:
                self.status.last_error = f"{type(exc).__name__}: {exc}"
            finally:
                self.executor.end()  # idle at once: never probe without a controller
            if self._stopping:
                break
            # Jittered (the one Backoff of the project): agents do not reconnect in step; a
            # final refusal (bad credential) waits the longest.
            delay = backoff.delay(60) if final else backoff.next()
            (log.error if final else log.warning)(
                "controller lost",
                extra={
                    "event": "controller-lost",
                    "endpoint": endpoint,
                    "error": self.status.last_error,
                    "retry_s": round(delay, 3),
                },
            )
            self._set(SessionState.RECONNECTING)
            await asyncio.sleep(delay)

    def _hello(self) -> pb.AgentMessage:
        return pb.AgentMessage(
            hello=pb.AgentHello(
                host=self.config.host,
                ports=[
                    pb.AgentPort(port=p.port, interface=p.interface, address=str(p.address))
                    for p in self.config.ports
                ],
                max_probes_per_s=self.config.probing.max_probes_per_s,
                version=_version(),
            )
        )

    async def _session(self, endpoint: str) -> bool:
        """One session until the stream ends; ``True`` if it was welcomed."""
        async with channel_for(self.config, endpoint) as channel:
            connect = channel.stream_stream(
                CONNECT,
                request_serializer=lambda m: bytes(m.SerializeToString()),
                response_deserializer=pb.ControllerMessage.FromString,
            )
            call = connect(metadata=(("authorization", f"Bearer {self._token}"),))
            await call.write(self._hello())
            first = await call.read()
            if first is grpc.aio.EOF or not first.HasField("welcome"):
                await call.done_writing()
                return False
            welcome = first.welcome
            book = frozenset(ipaddress.ip_address(a) for a in welcome.address_book)
            rate = self.executor.begin(SessionTerms(book, welcome.max_probes_per_s))
            self.status.sessions += 1
            self.status.rate = rate
            self._set(SessionState.CONNECTED)
            log.info(
                "connected",
                extra={
                    "event": "connected",
                    "endpoint": endpoint,
                    "session": welcome.session,
                    "ports": list(welcome.ports),
                    "addresses": len(book),
                    "rate": rate,
                },
            )
            reading: asyncio.Task[Any] = asyncio.ensure_future(call.read())
            writing = asyncio.Lock()  # one write at a time on the stream: results, telemetry
            sender = None
            if self.telemetry is not None:
                sender = asyncio.ensure_future(self._send_telemetry(call, writing))
            try:
                while True:
                    message = await reading
                    if message is grpc.aio.EOF:
                        return True
                    reading = asyncio.ensure_future(call.read())
                    if message.HasField("batch"):
                        results = await self._run_batch(message.batch, reading)
                        if results is None:  # the stream ended while the batch ran
                            return True
                        async with writing:
                            await call.write(pb.AgentMessage(results=results))
            finally:
                reading.cancel()
                if sender is not None:
                    sender.cancel()

    async def _send_telemetry(self, call: Any, writing: asyncio.Lock) -> None:
        """Every TELEMETRY_INTERVAL_S, what the ranks' reports folded into (closed steps,
        progress) as one message: at most 1 / TELEMETRY_INTERVAL_S messages a second, however
        fast the ranks report; what piles up meanwhile is bounded (and counted) by the book."""
        assert self.telemetry is not None
        # The stream ending under a write ends this task; the session notices it by itself.
        with contextlib.suppress(
            grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError
        ):
            while True:
                await asyncio.sleep(TELEMETRY_INTERVAL_S)
                report = self.telemetry.collect()
                if report is None:
                    continue
                async with writing:
                    await call.write(pb.AgentMessage(telemetry=report_pb(report)))
                self.telemetry_sent += 1

    async def _run_batch(
        self, batch: pb.ProbeBatch, reading: asyncio.Task[Any]
    ) -> pb.ProbeResults | None:
        """Run ``batch`` in a thread while the stream is watched: if the controller goes away
        meanwhile (the pending read ends or fails), the prober is told to stop sending at
        once and ``None`` comes back (nobody would read the results)."""
        running = asyncio.ensure_future(asyncio.to_thread(self.executor.run, batch))
        done, _ = await asyncio.wait({running, reading}, return_when=asyncio.FIRST_COMPLETED)
        if running in done:
            return running.result()
        ended = reading.exception() is not None or reading.result() is grpc.aio.EOF
        if not ended:  # another message while a batch runs: keep it for the loop
            return await running
        self.executor.end()  # stops the prober; the thread returns soon after
        await asyncio.gather(running, return_exceptions=True)
        return None


class AgentDaemon:
    """The agent process: components in order, the session among them; stops on a signal.

    The probe session is a component only when the config lists ``ports``: a bindings-only
    agent (no raw sockets on its host, or no probing at this site) never dials
    ``AgentService`` and needs no agent credential.
    """

    def __init__(
        self,
        config: AgentConfig,
        prober_factory: ProberFactory,
        *,
        components: Sequence[Component] = (),
        seed: int | None = None,
        telemetry: TelemetryBook | None = None,
    ) -> None:
        self.config = config
        self.executor = ProbeExecutor(config, prober_factory)
        self.session = ControllerSession(config, self.executor, seed=seed, telemetry=telemetry)
        probing: list[Component] = [self.session] if config.ports else []
        self.components: list[Component] = [*probing, *components]
        self._started: list[Component] = []

    async def start(self) -> None:
        for component in self.components:
            await component.start()
            self._started.append(component)

    async def stop(self) -> None:
        while self._started:
            component = self._started.pop()
            try:
                await component.stop()
            except Exception:
                log.exception("component stop failed", extra={"component": component.name})

    async def run_until_signal(self, ready: Callable[[], None] | None = None) -> None:
        """``c4p agent``: start, call ``ready``, wait for SIGINT/SIGTERM, stop (also when
        start fails)."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await self.start()
            log.info(
                "agent started",
                extra={
                    "event": "started",
                    "host": self.config.host,
                    "components": [c.name for c in self.components],
                },
            )
            if ready is not None:
                ready()
            await stop.wait()
        finally:
            await self.stop()
            log.info("agent stopped", extra={"event": "stopped", "host": self.config.host})
