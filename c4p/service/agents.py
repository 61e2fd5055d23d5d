"""The controller's side of the host agents: ``AgentService.Connect`` and a prober over them.

Why a hub: probes must leave from the NIC whose 5-tuple they test, so the controller's
:class:`~southbound.probing.Prober` is the set of connected agents. :class:`AgentHub` keeps one
session per host (a reconnecting agent replaces its old session), and its :meth:`trace_many`
splits a batch of probes by source host, sends each host its part over that host's stream, and
waits (bounded by ``batch_timeout_s``) for the traces. It is called from the probe worker's
thread, never from the reconcile step. A probe whose host has no agent, that the agent refused,
or whose batch timed out comes back silent: the path table treats it as an unanswered probe.

Checks on a session, in order (each refusal logged and counted in :attr:`AgentHub.refused`):
``authorization: Bearer <token>`` present (else ``UNAUTHENTICATED``); the first message is a
hello naming a host of the fabric (``INVALID_ARGUMENT``); the token is one configured for that
host, and with ``require_client_name`` the mTLS certificate's CN is the host
(``PERMISSION_DENIED``); every port announced is a NIC port of that host with the fabric's
address (``INVALID_ARGUMENT``). The welcome carries the fabric's address book (what the agent
may probe) and the controller's rate; the agent uses the lower of its own and this one, and the
hub sizes batches to about one second of it.

The same stream carries the agent's ``telemetry`` (its ranks' collectives, folded per step):
checked field by field (:mod:`c4p.service.agent_telemetry`; a bad field ends the stream with
``INVALID_ARGUMENT`` naming it) and handed to the optional :class:`TelemetrySink` (the
detector); without one it is counted and dropped.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import itertools
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import grpc

from c4p.agent.probe_wire import BlackHole, silent, spec_of, trace_from
from c4p.api.v1 import agent_pb2 as pb
from c4p.detector.summary import TelemetrySink
from c4p.service.agent_telemetry import BadTelemetry, from_pb
from c4p.service.serve import AgentsConfig
from c4p.service.telemetry import Metrics
from southbound.probing import IPv4, Probe, Trace
from topology.errors import TopologyError
from topology.model import Fabric

log = logging.getLogger("c4p.service")

SERVICE = "c4p.v1.AgentService"


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass
class _Session:
    host: str
    number: int
    rate: float
    outbox: asyncio.Queue[pb.ControllerMessage | None] = field(default_factory=asyncio.Queue)
    refusal: Refused | None = None  # set by the reader: the stream ends with this status
    waiting: dict[int, asyncio.Future[pb.ProbeResults]] = field(default_factory=dict)

    def close(self) -> None:
        for future in self.waiting.values():
            if not future.done():
                future.cancel()
        self.waiting.clear()
        self.outbox.put_nowait(None)


def address_book(fabric: Fabric) -> list[str]:
    """Every address probes may go to: switch mgmt/loopback/interface addresses, NIC ports."""
    found: set[str] = {str(a) for s in fabric.switches for a in s.all_addresses()}
    found |= {str(p.port.address) for p in fabric.index.ports}
    return sorted(found, key=lambda a: ipaddress.ip_address(a).packed)


class AgentHub:
    """Sessions by host, the Connect servicer, and a :class:`Prober` over them."""

    def __init__(
        self,
        fabric: Fabric,
        config: AgentsConfig,
        *,
        client_names: bool = False,
        on_change: Callable[[str, bool], None] | None = None,
        sink: TelemetrySink | None = None,
    ) -> None:
        self.fabric = fabric
        self.sink = sink  # the detector; None: telemetry is counted and dropped
        self.telemetry_accepted = 0
        self.telemetry_dropped = 0
        self.metrics: Metrics | None = None  # set by the runtime: c4p_agent_telemetry_total
        self.config = config
        self.client_names = client_names
        self.on_change = on_change
        self._tokens = config.tokens()
        self._book = address_book(fabric)
        self._sessions: dict[str, _Session] = {}
        self._numbers = itertools.count(1)
        self._batches = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._holes: list[BlackHole] = []
        self.refused: Counter[str] = Counter()
        self.probes_sent = 0
        self.probes_unanswered = 0

    # -- sessions ------------------------------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop the sessions run on (the runtime's)."""
        self._loop = loop

    def hosts(self) -> frozenset[str]:
        """Hosts with a live session (thread-safe)."""
        with self._lock:
            return frozenset(self._sessions)

    def _authenticate(self, context: grpc.aio.ServicerContext, hello: pb.AgentHello) -> None:
        token = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                token = value.removeprefix("Bearer ").strip()
        if not token:
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, "no agent credential")
        host = hello.host
        hosts = {h.name: h for h in self.fabric.hosts}
        if host not in hosts:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"hello.host: no host {host!r}")
        if not any(hmac.compare_digest(token, t) for t in self._tokens.get(host, ())):
            raise Refused(
                grpc.StatusCode.PERMISSION_DENIED, f"the credential does not act for host {host!r}"
            )
        if self.client_names:
            names = [
                n.decode("utf-8", "replace")
                for n in (context.auth_context() or {}).get("x509_common_name", ())
            ]
            if host not in names:
                raise Refused(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"the client certificate ({', '.join(names) or 'none'}) is not host {host!r}",
                )
        index = self.fabric.index
        for i, port in enumerate(hello.ports):
            try:
                info = index.port(port.port)
            except TopologyError:
                info = None
            if info is None or info.host.name != host:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"hello.ports[{i}].port: {port.port!r} is not a NIC port of host {host!r}",
                )
            if port.address != str(info.port.address):
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"hello.ports[{i}].address: {port.address!r}, but the fabric gives "
                    f"{port.port} {info.port.address}",
                )

    async def Connect(  # noqa: N802 (the gRPC method name)
        self,
        request_iterator: AsyncIterator[pb.AgentMessage],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.ControllerMessage]:
        peer = context.peer() or ""
        try:
            first = await anext(aiter(request_iterator), None)
            if first is None or not first.HasField("hello"):
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be hello")
            self._authenticate(context, first.hello)
        except Refused as exc:
            self.refused[exc.code.name] += 1
            log.warning(
                "agent refused",
                extra={"event": "refused", "method": "Connect", "peer": peer, "reason": exc.reason},
            )
            await context.abort(exc.code, exc.reason)
            return
        hello = first.hello
        rate = min(
            hello.max_probes_per_s or self.config.max_probes_per_s, self.config.max_probes_per_s
        )
        session = _Session(hello.host, next(self._numbers), rate)
        with self._lock:
            old = self._sessions.get(hello.host)
            self._sessions[hello.host] = session
        if old is not None:
            old.close()
        log.info(
            "agent connected",
            extra={"event": "agent-connected", "host": hello.host, "session": session.number},
        )
        reader = asyncio.create_task(self._read(request_iterator, session))
        try:
            yield pb.ControllerMessage(
                welcome=pb.Welcome(
                    host=hello.host,
                    session=session.number,
                    address_book=self._book,
                    max_probes_per_s=self.config.max_probes_per_s,
                    ports=[p.port for p in hello.ports],
                )
            )
            if self.on_change is not None:
                self.on_change(hello.host, True)
            while True:
                message = await session.outbox.get()
                if message is None:
                    break
                yield message
            if session.refusal is not None:  # the reader refused a message: say which field
                self.refused[session.refusal.code.name] += 1
                log.warning(
                    "agent message refused",
                    extra={
                        "event": "refused",
                        "host": hello.host,
                        "reason": session.refusal.reason,
                    },
                )
                await context.abort(session.refusal.code, session.refusal.reason)
        finally:
            reader.cancel()
            with self._lock:
                if self._sessions.get(hello.host) is session:
                    del self._sessions[hello.host]
            session.close()
            log.info(
                "agent gone",
                extra={"event": "agent-gone", "host": hello.host, "session": session.number},
            )
            if self.on_change is not None:
                self.on_change(hello.host, False)

    async def _read(self, messages: AsyncIterator[pb.AgentMessage], session: _Session) -> None:
        try:
            async for message in messages:
                if message.HasField("results"):
                    future = session.waiting.pop(message.results.batch, None)
                    if future is not None and not future.done():
                        future.set_result(message.results)
                elif message.HasField("telemetry"):
                    self._telemetry(message.telemetry, session)
                    if session.refusal is not None:
                        break
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        finally:
            session.close()

    def _telemetry(self, message: pb.TelemetryReport, session: _Session) -> None:
        """Check and hand one telemetry message to the sink (see :mod:`agent_telemetry`).
        Runs on the service's event loop: the sink must take the report and return at once."""
        try:
            report = from_pb(message, session.host)
        except BadTelemetry as exc:
            session.refusal = Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            self._count("refused")
            return
        if self.sink is None:
            self.telemetry_dropped += 1
            self._count("dropped")
            return
        self.telemetry_accepted += 1
        self._count("accepted")
        try:
            self.sink.accept(report)
        except Exception:  # the detector's bug must not end the agent's session
            log.exception("telemetry sink failed", extra={"event": "sink-failed"})

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.agent_telemetry.labels(outcome=outcome).inc()

    async def _request(self, host: str, probes: Sequence[Probe]) -> pb.ProbeResults | None:
        with self._lock:
            session = self._sessions.get(host)
        if session is None:
            return None
        number = next(self._batches)
        future: asyncio.Future[pb.ProbeResults] = asyncio.get_running_loop().create_future()
        session.waiting[number] = future
        session.outbox.put_nowait(
            pb.ControllerMessage(
                batch=pb.ProbeBatch(batch=number, probes=[spec_of(p) for p in probes])
            )
        )
        try:
            return await asyncio.wait_for(future, self.config.batch_timeout_s)
        except (TimeoutError, asyncio.CancelledError):
            session.waiting.pop(number, None)
            return None

    # -- the prober ----------------------------------------------------------------------------

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        """Run probes on their source hosts' agents (from a thread other than the loop's)."""
        index = self.fabric.index
        out: list[Trace | None] = [None] * len(probes)
        by_host: dict[str, list[int]] = {}
        for i, probe in enumerate(probes):
            node = index.node_of_address.get(probe.src)
            host = index.port_by_node[node].host.name if node in index.port_by_node else ""
            by_host.setdefault(host, []).append(i)
        loop = self._loop
        waits = []
        for host, members in by_host.items():
            with self._lock:
                session = self._sessions.get(host)
            if session is None or loop is None:
                continue
            # Batches of about a second at the agreed rate, one after the other: the agent
            # paces them within its own limits instead of refusing.
            per_batch = max(1, int(session.rate))
            chunks: list[list[int]] = []
            chunk: list[int] = []
            packets = 0
            for i in members:
                if chunk and packets + probes[i].packets > per_batch:
                    chunks.append(chunk)
                    chunk, packets = [], 0
                chunk.append(i)
                packets += probes[i].packets
            if chunk:
                chunks.append(chunk)
            batches = [[probes[k] for k in c] for c in chunks]
            future = asyncio.run_coroutine_threadsafe(self._run_host(host, batches), loop)
            waits.append((chunks, future))
        for chunks, future in waits:
            try:
                answers = future.result(self.config.batch_timeout_s * len(chunks) + 5.0)
            except Exception:  # a lost loop or a timeout: those probes stay silent
                continue
            for chunk, results in zip(chunks, answers, strict=True):
                for message in results.traces if results is not None else ():
                    if message.index < len(chunk):
                        k = chunk[message.index]
                        trace, hole = trace_from(probes[k], message)
                        out[k] = trace
                        if hole is not None:
                            with self._lock:
                                self._holes.append(hole)
        traces = [t if t is not None else silent(p) for t, p in zip(out, probes, strict=True)]
        self.probes_sent += len(probes)
        self.probes_unanswered += sum(t is None for t in out)
        return traces

    async def _run_host(
        self, host: str, batches: list[list[Probe]]
    ) -> list[pb.ProbeResults | None]:
        return [await self._request(host, batch) for batch in batches]

    def take_black_holes(self) -> list[tuple[Probe, int, IPv4, int]]:
        """The black holes seen since the last call."""
        with self._lock:
            holes, self._holes = self._holes, []
        return [(h.probe, h.ttl, h.address, h.code) for h in holes]

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's handler (typed by hand: the generated servicer is untyped)."""
        method = grpc.stream_stream_rpc_method_handler(
            self.Connect,
            request_deserializer=pb.AgentMessage.FromString,
            response_serializer=lambda m: bytes(m.SerializeToString()),
        )
        return grpc.method_handlers_generic_handler(SERVICE, {"Connect": method})

    async def close(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.close()
