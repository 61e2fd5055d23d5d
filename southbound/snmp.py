"""The SNMP driver: IF-MIB and LLDP-MIB walks for switches without gNMI.

Why: older or smaller switches only speak SNMP. The driver learns the same facts as gNMI
(interfaces, oper-status, speed, counters, LLDP neighbors) and builds the same
:class:`~southbound.observed.SwitchObservation`; it polls counters and oper-status on the
target's ``poll_interval_s`` instead of streaming.

* pysnmp 7's asyncio API (``bulk_walk_cmd``, ``lexicographicMode=False``) runs on one event
  loop thread owned by :class:`SnmpDriver`; sessions submit their walks to it and wait with a
  deadline, so a silent agent costs a timeout, never a hung thread.
* SNMPv2c communities and SNMPv3 authPriv users come from the targets file; a v3 context name
  selects a virtual agent (snmpsim serves one switch per context or community).
* LLDP remote rows are indexed ``timeMark.localPortNum.remIndex``; ``localPortNum`` is mapped
  to an interface through ``lldpLocPortId`` (then ``lldpLocPortDesc``, then ``ifIndex``), as
  switches number LLDP ports their own way. The management address comes from the index of
  ``lldpRemManAddrTable``. Capabilities (bridge/router vs station) tell switches from hosts.
* MIB names are never resolved (numeric OIDs only); the MIB compiler is attached once while
  pysmi's deprecation warnings (pysnmp 7.1 still calls the old pysmi names) are silenced.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from pysnmp.hlapi.v3arch import asyncio as hlapi
    from pysnmp.smi.compiler import add_mib_compiler

from southbound.driver_errors import TargetAuthError, TargetConfigError, TargetUnreachable
from southbound.observed import (
    CounterSample,
    InterfaceCounters,
    InterfaceState,
    OperChange,
    Problem,
    Protocol,
    StreamSynced,
    SwitchObservation,
    WatchUpdate,
)
from southbound.snmpmib import (
    COUNTER_COLUMNS,
    IF_ALIAS,
    IF_HIGH_SPEED,
    IF_NAME,
    IF_OPER_STATUS,
    IF_PHYS_ADDRESS,
    IP_AD_ENT_IF_INDEX,
    IP_ADDRESS_IF_INDEX,
    LLDP_LOC_CHASSIS_ID,
    LLDP_LOC_PORT_DESC,
    LLDP_LOC_PORT_ID,
    LLDP_REM,
    LLDP_REM_MAN_ADDR_IF_SUBTYPE,
    OPER_STATUS,
    SYS_NAME,
    TORN_REREADS,
    Rows,
    _addresses,
    _mac,
    _text,
    _torn_rows,
    _unread_oper,
    counters_of,
    neighbors_of,
)
from southbound.targets import AuthProtocol, PrivProtocol, SnmpV2c, SnmpV3, TargetConfig

T = TypeVar("T")

_AUTH = {
    AuthProtocol.MD5: hlapi.USM_AUTH_HMAC96_MD5,
    AuthProtocol.SHA: hlapi.USM_AUTH_HMAC96_SHA,
    AuthProtocol.SHA224: hlapi.USM_AUTH_HMAC128_SHA224,
    AuthProtocol.SHA256: hlapi.USM_AUTH_HMAC192_SHA256,
    AuthProtocol.SHA384: hlapi.USM_AUTH_HMAC256_SHA384,
    AuthProtocol.SHA512: hlapi.USM_AUTH_HMAC384_SHA512,
}
_PRIV = {
    PrivProtocol.DES: hlapi.USM_PRIV_CBC56_DES,
    PrivProtocol.TRIPLE_DES: hlapi.USM_PRIV_CBC168_3DES,
    PrivProtocol.AES128: hlapi.USM_PRIV_CFB128_AES,
    PrivProtocol.AES192: hlapi.USM_PRIV_CFB192_AES,
    PrivProtocol.AES256: hlapi.USM_PRIV_CFB256_AES,
}
_AUTH_ERRORS = ("UnknownUserName", "WrongDigest", "UnknownSecurityName", "AuthenticationError")


class SnmpDriver:
    """The ``snmp`` driver: one asyncio loop thread and one SNMP engine per distinct
    credentials, shared by all its sessions (an engine loads MIB machinery: 0.3 s each)."""

    def __init__(self, max_inflight: int = 8) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._engines: dict[object, Any] = {}
        self._lock = threading.Lock()
        self._max_inflight = max_inflight
        self._inflight: asyncio.Semaphore | None = None

    async def limited(self, start: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``start()`` when fewer than ``max_inflight`` walks are running: SNMP agents
        answer one request at a time, and a flood makes them time out (call on the loop).

        Why a factory and not a coroutine: a walk cancelled while it waits for its turn (the
        first failure cancels its siblings) must not leave a created-but-never-awaited
        coroutine behind; the walk's coroutine is made only once it may run."""
        if self._inflight is None:
            self._inflight = asyncio.Semaphore(self._max_inflight)
        async with self._inflight:
            return await start()

    def session(self, config: TargetConfig) -> SnmpSession:
        return SnmpSession(self, config)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="c4p-snmp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def engine(self, key: object) -> Any:
        """The engine for one set of credentials (call on the loop thread)."""
        if key not in self._engines:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                engine = hlapi.SnmpEngine()
                add_mib_compiler(engine.get_mib_builder(), ifAvailable=True, ifNotAdded=True)
            self._engines[key] = engine
        return self._engines[key]

    def run(self, coro: Coroutine[Any, Any, T], timeout: float, target: str) -> T:
        """Run ``coro`` on the loop; :class:`TargetUnreachable` after ``timeout`` seconds."""
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise TargetUnreachable(
                f"no complete SNMP answer within {timeout:g} s", target=target
            ) from None

    async def _shutdown(self) -> None:
        for engine in self._engines.values():
            engine.close_dispatcher()
        self._engines.clear()
        await asyncio.sleep(0)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Close every engine's sockets, finish pending tasks, stop and close the loop."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(5)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()


class SnmpSession:
    """One SNMP target: walks on demand, polls while watching."""

    def __init__(self, driver: SnmpDriver, config: TargetConfig) -> None:
        self.name = config.name
        self.config = config
        self.last_message_at: float | None = None
        self._driver = driver
        self._engine: Any = None
        self._auth: Any = None
        self._transport: Any = None
        self._context: Any = None
        self._cancelled = threading.Event()
        self._times: dict[str, dict[tuple[int, ...], float]] = {}

    @property
    def _deadline(self) -> float:
        """For a whole round of walks (each request has ``rpc_s`` including retries)."""
        t = self.config.timeouts
        return t.connect_s + 10 * t.rpc_s

    def open(self) -> str:
        """Set up engine, credentials and transport, then read sysName (checks reachability)."""
        self._driver.run(self._setup(), self.config.timeouts.connect_s + 5, self.name)
        rows = self._driver.run(
            self._driver.limited(lambda: self._walk(SYS_NAME)), self._deadline, self.name
        )
        return _text(next(iter(rows.values()))) if rows else ""

    async def _setup(self) -> None:
        cfg, opts = self.config, self.config.snmp
        creds = opts.credentials
        if isinstance(creds, SnmpV3):  # USM users live in the engine: share per user and keys
            auth, priv = creds.keys(self.name)
            key: object = (creds.user, creds.auth_protocol, auth, creds.priv_protocol, priv)
        else:
            key = "community"
        self._engine = self._driver.engine(key)
        if isinstance(creds, SnmpV2c):
            community = creds.community.get_secret_value() if creds.community else None
            if community is None:
                community = os.environ.get(creds.community_env or "")
                if community is None:
                    raise TargetConfigError(
                        f"community_env: environment variable {creds.community_env!r} is not set",
                        target=self.name,
                    )
            self._auth = hlapi.CommunityData(community, mpModel=1)
            self._context = hlapi.ContextData()
        elif isinstance(creds, SnmpV3):
            auth_key, priv_key = creds.keys(self.name)
            self._auth = hlapi.UsmUserData(
                creds.user,
                auth_key,
                priv_key,
                authProtocol=_AUTH[creds.auth_protocol],
                privProtocol=_PRIV[creds.priv_protocol],
            )
            self._context = hlapi.ContextData(contextName=creds.context)
        per_try = cfg.timeouts.rpc_s / (opts.retries + 1)
        transport = await hlapi.UdpTransportTarget.create(
            (cfg.address, opts.port), timeout=per_try, retries=opts.retries
        )
        if opts.source_address is not None:
            transport.set_local_address((str(opts.source_address), 0))
        self._transport = transport

    async def _walk(self, oid: str) -> Rows:
        prefix = tuple(int(x) for x in oid.split("."))
        rows: Rows = {}
        start = hlapi.ObjectType(hlapi.ObjectIdentity(oid))
        walk = hlapi.bulk_walk_cmd(
            self._engine, self._auth, self._transport, self._context, 0,
            self.config.snmp.max_repetitions, start, lexicographicMode=False, lookupMib=False,
        )  # fmt: skip
        times = self._times.setdefault(oid, {})
        async for error, status, index, var_binds in walk:
            if error:
                kind = type(error).__name__
                cls = TargetAuthError if kind in _AUTH_ERRORS else TargetUnreachable
                raise cls(f"{error} (walking {oid})", target=self.name)
            if status:
                raise TargetUnreachable(
                    f"agent error {status.prettyPrint()} at {oid} #{index}", target=self.name
                )
            now = time.time()  # SNMP has no sample time: the answer's arrival is the closest
            for name, value in var_binds:
                idx = tuple(name)[len(prefix) :]
                rows[idx] = value
                times[idx] = now
        self.last_message_at = time.monotonic()
        return rows

    async def _walk_many(self, oids: dict[str, str]) -> dict[str, Rows]:
        """Walk columns concurrently (at most the driver's limit in flight); the first
        failure cancels the rest."""
        tasks = [
            asyncio.ensure_future(self._driver.limited(partial(self._walk, oid)))
            for oid in oids.values()
        ]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return dict(zip(oids, results, strict=True))

    def close(self) -> None:
        """The engine is the driver's (shared); a session has nothing of its own to close."""
        self.cancel()

    def cancel(self) -> None:
        self._cancelled.set()

    # -- one round --------------------------------------------------------------------------

    def observe(self) -> SwitchObservation:
        columns = {
            "sys_name": SYS_NAME,
            "if_name": IF_NAME,
            "oper": IF_OPER_STATUS,
            "speed": IF_HIGH_SPEED,
            "if_phys": IF_PHYS_ADDRESS,
            "if_alias": IF_ALIAS,
            "ip_address": IP_ADDRESS_IF_INDEX,
            "ip_ad_ent": IP_AD_ENT_IF_INDEX,
            "loc_chassis": LLDP_LOC_CHASSIS_ID,
            "loc_port_id": LLDP_LOC_PORT_ID,
            "loc_port_desc": LLDP_LOC_PORT_DESC,
            "man_addr": LLDP_REM_MAN_ADDR_IF_SUBTYPE,
            **{f"rem_{k}": v for k, v in LLDP_REM.items()},
            **{f"c_{k}": v for k, v in COUNTER_COLUMNS.items()},
        }
        got = self._driver.run(self._walk_many(columns), self._deadline, self.name)
        remote = {k: v for k, v in columns.items() if k.startswith("rem_") or k == "man_addr"}
        ports = {k: columns[k] for k in ("if_name", "oper", "speed", "if_phys", "if_alias")}
        for _ in range(TORN_REREADS):
            lldp, unread = bool(_torn_rows(got)), bool(_unread_oper(got))
            if not lldp and not unread:
                break
            again = (remote if lldp else {}) | (ports if unread else {})
            got.update(self._driver.run(self._walk_many(again), self._deadline, self.name))
        now = time.time()
        problems: list[Problem] = []
        names = {idx[0]: _text(v) for idx, v in got["if_name"].items() if len(idx) == 1}
        interfaces = []
        owned = _addresses(got)
        for if_index in _unread_oper(got):
            problems.append(
                Problem(
                    target=self.name,
                    path=f"ifOperStatus.{if_index}",
                    reason=f"{names[if_index]} has an ifName but no ifOperStatus in "
                    f"{TORN_REREADS + 1} reads (created while read?): taken as UNKNOWN",
                )
            )
        for if_index, name in sorted(names.items()):
            status = OPER_STATUS.get(int(got["oper"].get((if_index,), 4)), "UNKNOWN")
            mbps = got["speed"].get((if_index,))
            speed = int(mbps) / 1000 if mbps is not None and int(mbps) > 0 else None
            phys = got["if_phys"].get((if_index,))
            alias = got["if_alias"].get((if_index,))
            interfaces.append(
                InterfaceState(
                    name=name,
                    oper_status=status,
                    speed_gbps=speed,
                    if_index=if_index,
                    description=_text(alias) if alias is not None else "",
                    mac=_mac(phys) if phys is not None and len(bytes(phys)) == 6 else "",
                    addresses=tuple(owned.get(if_index, ())),
                )
            )
        counters = counters_of(got, names)
        neighbors = neighbors_of(got, names, self.name, problems)
        if not got["loc_port_id"] and not got["loc_chassis"] and not got["rem_sys_name"]:
            problems.append(
                Problem(
                    target=self.name,
                    path="LLDP-MIB",
                    reason="no LLDP-MIB (lldpLocalSystemData is empty): no LLDP tree; is an "
                    "LLDP agent (e.g. lldpd -x, its AgentX subagent) serving it?",
                )
            )
        sys_name = next(iter(got["sys_name"].values()), None)
        loc_chassis = next(iter(got["loc_chassis"].values()), None)
        return SwitchObservation(
            target=self.name,
            protocol=Protocol.SNMP,
            at=now,
            hostname=_text(sys_name) if sys_name is not None else None,
            chassis_id=_mac(loc_chassis) if loc_chassis is not None else "",
            interfaces=tuple(interfaces),
            neighbors=tuple(neighbors),
            counters=counters,
            problems=tuple(problems),
        )

    # -- polling ----------------------------------------------------------------------------

    def poll(self) -> list[WatchUpdate]:
        """One poll: oper-status and counters of every interface. Each counter is stamped
        with the arrival of the answer that carried it, so that a rate divides by the
        counter's own interval, not by the whole poll's."""
        columns = {
            "if_name": IF_NAME,
            "oper": IF_OPER_STATUS,
            **{f"c_{k}": v for k, v in COUNTER_COLUMNS.items()},
        }
        got = self._driver.run(self._walk_many(columns), self._deadline, self.name)
        now = time.time()
        names = {idx[0]: _text(v) for idx, v in got["if_name"].items() if len(idx) == 1}
        updates: list[WatchUpdate] = []
        for if_index, name in sorted(names.items()):
            raw = got["oper"].get((if_index,))
            if raw is None:  # read torn (the interface came or went between the walks): no
                continue  # news of it, rather than an UNKNOWN the fleet would take for down
            status = OPER_STATUS.get(int(raw), "UNKNOWN")
            updates.append(OperChange(target=self.name, interface=name, oper_status=status, at=now))
        for counter, oid in COUNTER_COLUMNS.items():
            times = self._times.get(oid, {})
            for (if_index, *_), value in got[f"c_{counter}"].items():
                if if_index in names:
                    sample = InterfaceCounters(**{counter: int(value)})
                    at = times.get((if_index,), now)
                    updates.append(
                        CounterSample(
                            target=self.name, interface=names[if_index], counters=sample, at=at
                        )
                    )
        return updates

    def watch(self, on_update: Callable[[WatchUpdate], None]) -> None:
        interval = self.config.snmp.poll_interval_s
        on_update(StreamSynced(target=self.name, at=time.time()))  # observe() just ran
        while not self._cancelled.wait(interval):
            for update in self.poll():
                on_update(update)
