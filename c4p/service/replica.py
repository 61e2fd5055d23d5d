"""One replica of a highly available controller: follow, campaign, lead, step down.

Two or three ``c4p serve`` processes with ``store.kind: etcd`` share their state in etcd and
elect one leader (:mod:`c4p.store.election`). Why this shape:

* **Only the leader runs a controller.** A follower holds its listening port, its fabric and its
  etcd session, and answers every ``c4p.v1`` call with ``UNAVAILABLE`` and the leader's address
  in the ``c4p-leader`` trailing metadata, so a client with a list of endpoints moves to the
  leader at once (``UNAVAILABLE`` also tells a client that knows nothing of HA to retry).
* **Promotion is a restart from the store.** The new leader loads the state the old leader
  committed (every acknowledged intent, the bindings in force, the decision that covered them)
  and runs the same :class:`~c4p.service.runtime.ServiceRuntime` a single controller runs, on
  the same port. Its first reconcile key is ``startup``: with unchanged inputs it plans nothing,
  so no binding moves; streams resume from the epochs their clients hold. Planning is
  deterministic (fixed seed, same previous plan rebuilt from the bindings), so inputs the old
  leader accepted but had not yet planned are planned as it would have.
* **Writes are fenced, not trusted.** The etcd store writes only under the leader key this
  replica created; an old leader that wakes up after its lease expired (stopped, partitioned)
  has its first write refused (:class:`~c4p.store.etcd.FencedError`), counts it, and steps
  down here at its next check.
* **Losing etcd's quorum is not losing leadership.** The keep-alive fails but nobody else can be
  elected either (etcd cannot expire a lease without a quorum), so the leader keeps serving the
  bindings it has, cannot write (plans fail and are retried; the data plane is fail-static),
  and says so: health ``c4p.store`` is ``NOT_SERVING`` and ``c4p_store_writable`` is 0. When
  the quorum returns and the lease is still alive it writes again (a retry is queued at once);
  if the lease is gone it steps down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from enum import StrEnum

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from c4p.api.v1 import admin_pb2, flow_intent_pb2
from c4p.controller.reconcile import PortSourceFactory
from c4p.controller.triggers import Key, KeyKind
from c4p.files import load_fabric
from c4p.service import admin, flow_intent
from c4p.service.listen import server_credentials
from c4p.service.runtime import STORE_HEALTH, ServiceRuntime
from c4p.service.serve import ServeConfig, split_address
from c4p.store.base import StoreError
from c4p.store.election import Election, LeaderInfo
from c4p.store.etcd import EtcdStore, Fence
from c4p.store.etcd_watch import WarmCopy
from c4p.store.etcdclient import EtcdClient, EtcdError, EtcdTls
from topology.model import Fabric

log = logging.getLogger("c4p.replica")

LEADER_METADATA = "c4p-leader"
"""Trailing metadata of a follower's refusal: ``host:port`` of the leader (absent: none yet)."""
"""Health service name that is ``SERVING`` while the store takes writes."""


class Role(StrEnum):
    FOLLOWER = "follower"
    LEADER = "leader"


class Replica:
    """One ``c4p serve`` replica on etcd (see the module docstring); ``start``/``stop`` like
    :class:`~c4p.service.runtime.ServiceRuntime`."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        fabric: Fabric | None = None,
        ports: PortSourceFactory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        assert config.store.kind == "etcd"
        self.config = config
        self.ports = ports
        self.clock = clock
        if fabric is None and not config.fabric.discovered:
            assert config.fabric.path is not None
            fabric = load_fabric(config.fabric.path)  # once, not at every promotion
        self.fabric = fabric
        s = config.store
        tls = None
        if s.tls is not None:
            tls = EtcdTls(s.tls.ca_file, s.tls.cert_file, s.tls.key_file)
        self.client = EtcdClient(s.endpoints, tls=tls, timeout=s.timeout_s)
        self.role = Role.FOLLOWER
        self.runtime: ServiceRuntime | None = None
        self.store: EtcdStore | None = None
        self.election: Election | None = None
        self.address = ""
        self.writable = True
        self.promotions = 0
        self.last_promotion_s = 0.0
        """Seconds from winning the election to serving as the leader (the last time)."""
        self.last_promotion_warm = False
        """Whether that promotion loaded from the warm copy (not from a read of etcd)."""
        self.warm: WarmCopy | None = None
        """The store as this replica last saw it (etcd Watch), so a promotion reads nothing."""
        self._follower: grpc.aio.Server | None = None
        self._health = HealthServicer()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # -- the follower's face -----------------------------------------------------------------

    def leader_address(self) -> str:
        leader = None if self.election is None else self.election.leader
        return "" if leader is None else leader.address

    def _handlers(self) -> list[grpc.GenericRpcHandler]:
        """Every method of the c4p.v1 services, refused with the leader's address."""

        async def refuse(_: bytes, context: grpc.aio.ServicerContext) -> bytes:
            leader = self.leader_address()
            if leader and leader != self.election_address:
                text = f"this replica is a follower; the leader is {leader}"
                trailer: tuple[tuple[str, str], ...] = ((LEADER_METADATA, leader),)
            else:
                text, trailer = "no leader elected yet; retry", ()
            await context.abort(grpc.StatusCode.UNAVAILABLE, text, trailing_metadata=trailer)
            raise AssertionError("abort returned")  # pragma: no cover

        handlers = []
        for module in (flow_intent_pb2, admin_pb2):
            for service in module.DESCRIPTOR.services_by_name.values():
                methods = {
                    m.name: grpc.unary_unary_rpc_method_handler(refuse) for m in service.methods
                }
                handlers.append(grpc.method_handlers_generic_handler(service.full_name, methods))
        return handlers

    @property
    def election_address(self) -> str:
        return "" if self.election is None else self.election.me.address

    async def _serve_follower(self) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(tuple(self._handlers()))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        host, port = split_address(self.address or self.config.listen.address)
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        credentials = server_credentials(self.config)
        if credentials is None:
            bound = server.add_insecure_port(target)
        else:
            bound = server.add_secure_port(target, credentials)
        await server.start()
        self._follower = server
        self.address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
        for name in (flow_intent.SERVICE, admin.SERVICE, STORE_HEALTH):
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def _stop_follower(self) -> None:
        if self._follower is not None:
            await self._follower.stop(0)
            self._follower = None

    # -- life ----------------------------------------------------------------------------------

    async def start(self) -> str:
        """Bind the port (as a follower) and start campaigning; returns the bound address."""
        await self._serve_follower()
        me = LeaderInfo(self.config.replica.name, self.config.replica.advertise or self.address)
        key = self.config.store.prefix.rstrip("/").encode() + b"/leader"
        self.election = Election(self.client, key, me, self.config.store.lease_ttl_s)
        prefix = self.config.store.prefix.rstrip("/").encode() + b"/"
        self.warm = WarmCopy(self.client, prefix).start()
        with contextlib.suppress(EtcdError):  # ready means: able to name a leader at once
            await asyncio.to_thread(self.election.observe)
        self._task = asyncio.create_task(self._run(), name="c4p-replica")
        log.info(
            "replica",
            extra={
                "event": "replica",
                "replica": me.name,
                "address": me.address,
                "role": "follower",
            },
        )
        return self.address

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.runtime is not None:
            await self.runtime.stop()
            self.runtime = None
        if self.election is not None:
            await asyncio.to_thread(self.election.resign)  # the next replica need not wait a TTL
        await self._stop_follower()
        if self.warm is not None:
            await asyncio.to_thread(self.warm.stop)
        self.client.close()

    async def _run(self) -> None:
        assert self.election is not None
        election = self.election
        settings = self.config.store
        while not self._stopping:
            if self.role is Role.FOLLOWER:
                fence: Fence | None = None
                try:  # a read while someone leads; a campaign (a raft write) only when nobody does
                    if await asyncio.to_thread(election.observe) is None:
                        fence = await asyncio.to_thread(election.campaign)
                except EtcdError as exc:
                    log.warning("campaign failed", extra={"event": "campaign", "error": str(exc)})
                if fence is not None:
                    try:
                        await self._promote(fence)
                    except Exception:
                        log.exception("promotion failed", extra={"event": "promote-failed"})
                        await self._demote("promotion failed")
                    continue
                await asyncio.sleep(self.config.replica.poll_s)
                continue
            await asyncio.sleep(settings.lease_ttl_s / 4)
            try:
                await self._check_leadership(election)
            except Exception:  # never let the replica's task die: it is the only one
                log.exception("leader check failed", extra={"event": "check-failed"})
                await self._demote("leader check failed")

    async def _check_leadership(self, election: Election) -> None:
        store = self.store
        try:
            alive = await asyncio.to_thread(election.renew)
        except EtcdError as exc:
            self._set_writable(False, str(exc))
            return
        if not alive or (store is not None and store.fenced.is_set()):
            await self._demote("lease lost" if not alive else "a write was fenced")
            return
        if not self.writable:
            self._set_writable(True, "keep-alive answered")
        if store is not None and store.uncertain.is_set() and election.fence is not None:
            await self._reload(election.fence)

    def _set_writable(self, writable: bool, why: str) -> None:
        # The health goes through the runtime every time, not only when this flag changes: a
        # step that commits meanwhile sets it SERVING (the runtime's rule), and a keep-alive
        # failing after that must set it back even though this replica already knew.
        runtime = self.runtime
        if runtime is not None:
            runtime.set_store_writable(writable)
        if writable == self.writable:
            return
        self.writable = writable
        if runtime is not None and writable:  # plans that failed meanwhile: now, not later
            runtime.loop.enqueue(Key(KeyKind.RETRY, detail="store writable", force=False))
        log.warning(
            "store writable" if writable else "store not writable",
            extra={"event": "store-writable", "writable": writable, "why": why},
        )

    async def _build(self, fence: Fence, warm: bool = False) -> tuple[EtcdStore, ServiceRuntime]:
        """A store fenced by ``fence`` and a runtime on the state etcd holds (not started).
        With ``warm``, from the warm copy once it has seen ``fence`` created (then it holds all
        the old leader committed: :mod:`c4p.store.etcd_watch`), else (or if it lags) read from
        etcd. Raises :class:`StoreError` / :class:`EtcdError` when etcd cannot be read."""

        def open_store() -> EtcdStore:
            store = EtcdStore(self.client, self.config.store.prefix, owns_client=False)
            store.fence = fence
            copy = self.warm if warm else None
            kv = None if copy is None else copy.snapshot(fence.revision, self.client.timeout)
            self.last_promotion_warm = kv is not None
            if kv is None:
                store.load()  # off the event loop: fails here, not in the runtime, if etcd is down
            else:
                assert copy is not None
                store.load_from(kv, copy.bindings())  # parsed ahead: only what is newer is parsed
            return store

        store = await asyncio.to_thread(open_store)
        listen = self.config.listen.model_copy(update={"address": self.address})
        config = self.config.model_copy(update={"listen": listen})
        runtime = ServiceRuntime(
            config, fabric=self.fabric, ports=self.ports, clock=self.clock, store=store
        )
        return store, runtime

    async def _promote(self, fence: Fence) -> None:
        started = time.monotonic()
        store, runtime = await self._build(fence, warm=True)
        await self._stop_follower()
        await self._lead(fence, store, runtime, started)

    async def _lead(
        self, fence: Fence, store: EtcdStore, runtime: ServiceRuntime, started: float
    ) -> None:
        await runtime.start()
        self.store, self.runtime, self.role = store, runtime, Role.LEADER
        if self.warm is not None:
            self.warm.parsing = False
        self.writable = True
        store.on_fenced = runtime.metrics.fenced_writes.inc
        runtime.metrics.leader.set(1)
        await runtime.health.set(STORE_HEALTH, health_pb2.HealthCheckResponse.SERVING)
        self.promotions += 1
        self.last_promotion_s = time.monotonic() - started
        log.info(
            "leading",
            extra={
                "event": "leading",
                "replica": self.config.replica.name,
                "address": self.address,
                "fence": fence.revision,
                "epoch": runtime.state.epoch,
                "jobs": len(runtime.state.jobs),
                "promote_s": round(self.last_promotion_s, 3),
                "warm": self.last_promotion_warm,
            },
        )

    async def _reload(self, fence: Fence) -> None:
        """Still the leader, but a write got no answer (it may have landed or not): rebuild the
        controller from what etcd holds rather than trust the state in memory. The new runtime
        is built first: if etcd cannot be read now, the old one keeps serving and the reload is
        tried again at the next check. While it is built the old one serves but refuses writes
        (retryable), so nothing it accepts is missing from the new one. Streams drop and
        resume on the same address."""
        started = time.monotonic()
        # No write may land between the new store's read and the swap: it would be in etcd
        # and not in the new runtime. The old runtime refuses them (retryable) meanwhile.
        held = self.store
        if held is not None:
            await asyncio.to_thread(held.hold_writes, "reloading from etcd")
        try:
            store, runtime = await self._build(fence)
        except (StoreError, EtcdError) as exc:
            if held is not None:
                held.hold_writes(None)
            log.warning("reload postponed", extra={"event": "reload", "why": str(exc)})
            return
        log.warning("reloading from the store", extra={"event": "reload"})
        old, self.runtime, self.store = self.runtime, None, None
        if old is not None:
            await old.stop()
        await self._lead(fence, store, runtime, started)

    async def _demote(self, why: str) -> None:
        log.warning("stepping down", extra={"event": "step-down", "why": why})
        runtime, self.runtime, self.store = self.runtime, None, None
        self.role = Role.FOLLOWER
        if self.warm is not None:
            self.warm.parsing = True
        self.writable = True
        if runtime is not None:
            await runtime.stop()
        if self.election is not None:
            await asyncio.to_thread(self.election.resign)
        if self._follower is None and not self._stopping:
            await self._serve_follower()
