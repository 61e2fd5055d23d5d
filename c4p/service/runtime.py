"""Assembles and runs the service: store, state, reconcile loop, gRPC server, metrics.

Why one assembly function for every entry point: ``c4p serve``, the embedded service of tests,
the demo and the benchmark must run exactly the same wiring, or a test proves something about a
service nobody runs. Order matters and is the same everywhere:

1. open the store and load it (a crash before this point changes nothing);
2. rebuild the state (jobs, intents, bindings in force, drains) and the previous plan;
3. start the reconcile loop (its first key is ``startup``: if nothing changed since the last
   epoch, it does nothing, so a restart re-serves the same bindings, zero churn);
4. bind metrics, then bind and start gRPC (FlowIntentService, AdminService, health,
   reflection); health turns SERVING only when everything is up;
5. on stop: health NOT_SERVING, end streams, stop gRPC with a grace period, stop the loop
   after its current step, close the store.

Start-up is all or nothing: a port already in use (gRPC's ``SO_REUSEPORT`` is turned off, so a
second controller on the same address is refused instead of splitting the clients with the
first), a busy metrics port or any other failure stops what was started and raises one
:class:`~topology.errors.C4pError` naming the setting; ``c4p serve`` prints it as one line and
exits non-zero. The socket's rules are :mod:`c4p.service.listen`'s; the process around the
runtime (signals, a single controller or an HA replica) is :mod:`c4p.service.process`'s.

The seam for discovery: :meth:`ServiceRuntime.follow_link_events` pumps a fabric source's
events (``southbound.events.EventQueue.get`` is one: a blocking ``get(timeout)``) into the
reconcile loop on a thread of its own; only link events are taken, anything else is skipped.

With ``fabric.source: gnmi | snmp`` the runtime uses it itself: before the store is opened, a
:class:`southbound.fleet.Fleet` over the targets file discovers the fabric once (refusing to
start if no target answers: :mod:`c4p.service.discovery`); the state is built on that
fabric; :meth:`ServiceRuntime.start` starts the fleet's subscriptions and follows its events;
:meth:`ServiceRuntime.stop` stops the fleet first. Link status changes are followed; a wiring
change (a cable moved or added, a port re-speeded) found by periodic re-discovery is offered
to the controller (:meth:`ControllerState.offer_fabric`), which swaps the snapshot in at its
next step and re-plans only the jobs it touches (:mod:`c4p.controller.rewire`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from c4p.controller.intake import Intake
from c4p.controller.learning import PortLearner, PortMode
from c4p.controller.loop import ControllerLoop, LinkEventLike
from c4p.controller.reconcile import PortSourceFactory, Reconciler, StepOutcome
from c4p.controller.state import ControllerState
from c4p.controller.triggers import Key, KeyKind
from c4p.files import load_fabric
from c4p.service import admin, flow_intent
from c4p.service import agents as agent_service
from c4p.service.access import Guard, RateLimiter
from c4p.service.agents import AgentHub
from c4p.service.counters import CounterCheck
from c4p.service.detection import DetectionService
from c4p.service.discovery import discover
from c4p.service.fabric_watch import FabricWatch
from c4p.service.flow_intent import StreamHub
from c4p.service.listen import bind
from c4p.service.listen import server_credentials as server_credentials  # re-export
from c4p.service.probing import ProbeWorker
from c4p.service.rpc import Gate
from c4p.service.serve import ServeConfig, split_address
from c4p.service.sink import QueuedSink
from c4p.service.store_watch import StoreWatch
from c4p.service.telemetry import Metrics
from c4p.store.base import Store
from c4p.store.sqlite import SqliteStore
from southbound.events import EventQueue
from southbound.fleet import Fleet
from southbound.targets import FabricSource
from topology.errors import C4pError
from topology.model import Fabric

log = logging.getLogger("c4p.service")


STORE_HEALTH = "c4p.store"
"""The health service name that says whether the store takes writes."""


class ServiceRuntime:
    """One running controller service (see the module docstring)."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        fabric: Fabric | None = None,
        ports: PortSourceFactory | None = None,
        clock: Callable[[], float] = time.time,
        store: Store | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.fleet: Fleet | None = None
        self.counter_check: CounterCheck | None = None
        self.watch: FabricWatch | None = None
        self._fleet_events = EventQueue()
        if fabric is None:
            if config.fabric.discovered:
                fabric = self._discover(config.fabric)
            else:
                assert config.fabric.path is not None
                fabric = load_fabric(config.fabric.path)
        self.fabric = fabric
        # an HA replica passes the etcd store it leads with (c4p.service.replica)
        self.store: Store = store or SqliteStore(config.store.path, config.store.synchronous)
        self.state = ControllerState(
            self.fabric,
            self.store.load(),
            config.flap,
            clock(),
            config.store.tombstone_horizon,
            config.rollout,
            predicted_ports=config.ports.mode is PortMode.PREDICTED,
        )
        self.metrics = Metrics()
        # Host agents and port modes (learned / verified / predicted): see c4p.controller.learning.
        self.agents: AgentHub | None = None
        self.learner: PortLearner | None = None
        self.probe_worker: ProbeWorker | None = None
        if config.agents.credentials:
            self.agents = AgentHub(
                self.fabric,
                config.agents,
                client_names=config.agents.require_client_name,
                on_change=self._agent_changed,
            )
            self.agents.metrics = self.metrics  # agents' telemetry by outcome
        if self.agents is not None and config.port_mode is not PortMode.PREDICTED:
            self.learner = PortLearner(
                self.fabric, config.ports, config.port_mode, self.agents.hosts
            )
            ports = ports or self.learner.source
        self.hub = StreamHub(config.limits.max_streams_per_job, config.limits.max_streams)
        self.reconciler = Reconciler(self.state, self.store, config.planner, ports)
        self.loop = ControllerLoop(
            self.reconciler, config.controller, clock=clock, on_step=self._after_step
        )
        if self.learner is not None and self.agents is not None:
            self.probe_worker = ProbeWorker(self.learner, self.agents, self.loop)
        self.intake = Intake(self.state, self.store, config.limits.intake, clock)
        self.guard = Guard(
            self.store.token_secret(),
            self.state,
            admin_tokens=config.admin_tokens(),
            register_tokens=config.register_tokens(),
            admin_names=config.auth.admin_client_names,
        )
        self.flow = flow_intent.FlowIntentServicer(
            self.intake,
            self.state,
            self.loop,
            self.hub,
            self.guard,
            self.metrics,
            config.stream_check_s,
        )
        self.admin = admin.AdminServicer(
            self.intake,
            self.state,
            self.store,
            self.loop,
            self.hub,
            wait_s=config.planner.budget_s + 60.0,
            clock=clock,
        )
        self.detection: DetectionService | None = None
        """The telemetry sink (``c4p.detector``): the agent service hands reports to it."""
        if config.detector.enabled:
            self.detection = DetectionService(
                self.state, self.intake, self.loop, config.detector, clock=clock
            )
            self.admin.detection = self.detection
        self.telemetry_sink: QueuedSink | None = None
        if self.detection is not None and self.agents is not None:
            self.telemetry_sink = QueuedSink(self.detection)
            self.agents.sink = self.telemetry_sink
        self.health = HealthServicer()
        self._health_status: Any = None
        self.store_watch: StoreWatch | None = None
        if isinstance(self.store, SqliteStore):  # deleted or replaced under us: c4p.store.lock
            self.store_watch = StoreWatch(
                self.store.verify, config.store.check_s, lambda _: self._store_health_lost()
            )
        self._pumps: list[threading.Thread] = []
        self._stopping = threading.Event()
        self.server: grpc.aio.Server | None = None
        self.address = ""
        self.metrics_address = ""
        self._metrics_server: Any = None  # prometheus_client's WSGIServer
        self.metrics.active_jobs.set(len(self.state.jobs))
        self.metrics.epoch.set(self.state.epoch)

    def _discover(self, source: FabricSource) -> Fabric:
        """Ask every target once; keep the fleet (not yet watching) for :meth:`start`."""
        fabric, self.fleet = discover(source, self._fleet_events)
        return fabric

    def _agent_changed(self, host: str, up: bool) -> None:
        """An agent connected or went away (loop thread): its hosts' ports may change mode."""
        self.loop.enqueue(Key(KeyKind.AGENT, host, "up" if up else "down", force=True))

    def _store_health_lost(self) -> None:
        """The store refused a write: NOT_SERVING until a step commits again (a load balancer
        should send clients to a controller that can keep what they ask for)."""
        self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)

    def set_store_writable(self, writable: bool) -> None:
        """The store takes writes, or not, as its owner (an etcd replica's keep-alive) sees it:
        the same health and metric as a step's commit or refusal, through one memo, so that
        whichever saw it last is what the health says."""
        self._set_health(
            health_pb2.HealthCheckResponse.SERVING
            if writable
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )

    def _set_health(self, status: Any) -> None:
        """The overall health ("") and the store's (``c4p.store``) follow the store. The
        services' own names stay SERVING: their streams keep serving the bindings in force
        (fail-static), and the same rule holds for an etcd replica that lost its quorum."""
        if self._health_status == status or self._stopping.is_set() or self.server is None:
            return
        serving = status == health_pb2.HealthCheckResponse.SERVING
        if serving and self.store_watch is not None and self.store_watch.lost():
            return  # a store deleted or replaced under us never serves again
        self._health_status = status
        self.metrics.store_writable.set(
            1 if status == health_pb2.HealthCheckResponse.SERVING else 0
        )
        for name in ("", STORE_HEALTH):
            asyncio.ensure_future(self.health.set(name, status))

    def _after_step(self, outcome: StepOutcome) -> None:
        if self.probe_worker is not None:
            self.probe_worker.kick()  # the step may have asked for probes
        d = outcome.decision
        if outcome.failed and d.error.startswith("StoreError"):
            self._store_health_lost()
        elif not outcome.failed and self.address:
            self._set_health(health_pb2.HealthCheckResponse.SERVING)
        self.metrics.record_plan(d)
        if self.counter_check is not None:
            changed = d.bindings_added + d.bindings_changed + d.bindings_removed
            self.counter_check.plan_changed(d.epoch, changed > 0)
        with self.state.lock:
            modes = [e.control.value for e in self.state.jobs.values()]
        self.metrics.record_modes(modes)
        self.hub.notify(outcome.changed_jobs)
        log.info(
            "plan",
            extra={
                "event": "plan",
                "epoch": d.epoch,
                "result": d.result.value,
                "reason": d.reason,
                "flows": d.flows,
                "moved": d.moved,
                "max_utilization": d.max_utilization,
                "bound": d.bound,
                "gap": d.gap,
                "solve_s": round(d.solve_seconds, 4),
                "changed": d.bindings_added + d.bindings_changed,
                "removed": d.bindings_removed,
                "jobs_changed": list(d.jobs_changed),
                "error": d.error or None,
            },
        )

    async def start(self) -> str:
        """Start everything and return the bound ``host:port``; on any failure, stop what was
        started and raise (all or nothing, see the module docstring)."""
        try:
            return await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> str:
        cfg = self.config
        if cfg.metrics.address:  # first: a busy port must stop us before anything serves
            m_host, m_port = split_address(cfg.metrics.address)
            try:
                httpd, _ = start_http_server(m_port, m_host, registry=self.metrics.registry)
            except OSError as exc:
                raise C4pError(
                    f"metrics.address {cfg.metrics.address}: cannot listen: {exc.strerror or exc}"
                ) from None
            self._metrics_server = httpd
            self.metrics_address = f"{m_host}:{httpd.server_address[1]}"
        if self.agents is not None:
            self.agents.attach(asyncio.get_running_loop())
        if self.probe_worker is not None:
            await self.probe_worker.start()
        await self.loop.start()
        size = cfg.listen.max_message_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                ("grpc.so_reuseport", 0),  # a second controller on this address must fail
            ]
        )
        self.server = server
        gate = Gate(self.guard, RateLimiter(cfg.limits.rate), self.metrics, self._store_health_lost)
        server.add_generic_rpc_handlers(
            (
                gate.handler(flow_intent.SERVICE, self.flow.endpoints()),
                gate.handler(admin.SERVICE, self.admin.endpoints()),
            )
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        names: tuple[str, ...] = (
            flow_intent.SERVICE,
            admin.SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        )
        if self.agents is not None:
            server.add_generic_rpc_handlers((self.agents.handler(),))
            names = (*names, agent_service.SERVICE)
        reflection.enable_server_reflection((*names, reflection.SERVICE_NAME), server)
        address = bind(server, cfg)
        await server.start()
        self.address = address
        if self.fleet is not None:  # a failed bind above leaves no session open
            self.watch = FabricWatch(
                self.fleet,
                self.fabric,
                self.metrics.registry,
                observe_link=self.loop.observe_link,
                enqueue=self.loop.enqueue_threadsafe,
                clock=self.clock,
                offer=self.state.offer_fabric,
            )
            self.fleet.start()
            self.follow_link_events(self._fleet_events.get)
            self._start_rediscovery(cfg.fabric.rediscover_s)
            if cfg.deviation.every_s > 0:  # plans checked by the switches' counters
                self.counter_check = CounterCheck(
                    cfg.deviation,
                    self.state,
                    self.reconciler,
                    self.fleet,
                    self.loop.enqueue_threadsafe,
                    self.clock,
                    self.learner,
                )
                self._pumps.append(self.counter_check.start(self._stopping))
        for name in ("", *names[:2], STORE_HEALTH):  # last: SERVING once everything is up
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._health_status = health_pb2.HealthCheckResponse.SERVING
        if self.store_watch is not None:
            assert isinstance(self.store, SqliteStore)
            self.store.announce(self.address)  # a refused second controller names us
            self.store_watch.start()
        log.info(
            "serving",
            extra={
                "event": "serving",
                "address": self.address,
                "tls": cfg.tls.mode,
                "metrics": self.metrics_address or None,
                "epoch": self.state.epoch,
                "jobs": len(self.state.jobs),
            },
        )
        return self.address

    def follow_link_events(self, get: Callable[[float], object | None]) -> None:
        """Feed the link events ``get(timeout)`` returns into the reconcile loop (a thread)."""

        def pump() -> None:
            next_metrics = 0.0
            while not self._stopping.is_set():
                event = get(0.2)
                if isinstance(event, LinkEventLike):
                    self.loop.observe_link(event)
                if self.watch is not None:
                    self.watch.on_event(event)
                    if time.monotonic() >= next_metrics:
                        self.watch.refresh_metrics()
                        next_metrics = time.monotonic() + 1.0

        thread = threading.Thread(target=pump, name="c4p-link-events", daemon=True)
        thread.start()
        self._pumps.append(thread)

    def _start_rediscovery(self, every_s: float) -> None:
        """Compare a fresh snapshot with the fabric in force every ``every_s`` (0: never)."""
        if every_s <= 0 or self.watch is None:
            return
        watch = self.watch

        def run() -> None:
            while not self._stopping.wait(every_s):
                try:
                    watch.rediscover()
                except Exception as exc:  # a bad snapshot must not end the service
                    log.warning("re-discovery failed: %s", exc, extra={"event": "rediscovery"})

        thread = threading.Thread(target=run, name="c4p-rediscovery", daemon=True)
        thread.start()
        self._pumps.append(thread)

    async def stop(self) -> None:
        """Stop whatever is running (also after a start that failed half-way)."""
        self._stopping.set()
        if self.store_watch is not None:
            await self.store_watch.stop()
        if self.fleet is not None:
            await asyncio.to_thread(self.fleet.stop)
        for pump in self._pumps:
            await asyncio.to_thread(pump.join, 5.0)
        await self.health.enter_graceful_shutdown()
        self.hub.close_all()
        if self.probe_worker is not None:
            await self.probe_worker.stop()
        if self.agents is not None:
            await self.agents.close()
        if self.server is not None:
            await self.server.stop(self.config.listen.grace_s)
        await self.loop.stop()
        if self.telemetry_sink is not None:
            await asyncio.to_thread(self.telemetry_sink.close)
        if self.detection is not None:
            await asyncio.to_thread(self.detection.close)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
        self.store.close()
        log.info("stopped", extra={"event": "stopped", "epoch": self.state.epoch})
