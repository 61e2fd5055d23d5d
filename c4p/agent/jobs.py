"""The jobs of this host: one controller stream per job, the last bindings on disk.

Why one stream per job (not per rank): eight ranks of a job on a host would otherwise open eight
streams for the same QPs; the agent holds one, asking only for the QPs whose source NIC port is
on this host (``WatchBindingsRequest.src_hosts``), and fans the changes out to the ranks.

Fail-static, the whole way down: every completed update is written to
``state_dir/jobs/<job>.json`` (atomically, mode 0600: it holds the job token) before the ranks
hear of it. A restarted agent loads those files, serves the same bindings at once, and resumes
each stream from its epoch; a controller that is away only delays changes. A rank's token is
checked against the controller once (by opening the job's stream with it) and then by its hash.

The streams use the agent's own ``controllers`` and ``tls`` (:mod:`c4p.agent.dial`), like the
probe session: each job's stream tries the endpoints in the configured order, moving to the next
one whenever its stream breaks, so a standby controller takes over the bindings as it takes
over the probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import grpc

from c4p.agent.config import AgentConfig
from c4p.agent.dial import controller_endpoints, next_endpoint
from c4p.agent.local_config import BindingsSection
from c4p.agent.wire import BindingSet, Code, Kind, LocalBinding, QpKey, WireError
from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.client.wire import FLOW, ApiError, auth
from topology.backoff import Backoff

log = logging.getLogger("c4p.agent.jobs")

Ref = tuple[str, int, int]  # (communicator, connection, qp): the controller's name of a QP
Listener = Callable[[BindingSet], None]
_FINAL = {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}
STATE_VERSION = 1


def write_private(path: Path, text: str) -> None:
    """Atomically (a temporary file beside it, then a rename), readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class JobView:
    """One job's bindings on this host as last received, and the ranks listening."""

    def __init__(self, job_id: str, token: str, path: Path) -> None:
        self.job_id = job_id
        self.token = token
        self.token_hash = token_hash(token)
        self.path = path
        self.epoch = 0
        self.known = False  # True once a full set arrived (or was loaded from disk)
        self.held: dict[Ref, LocalBinding] = {}
        self.listeners: set[Listener] = set()
        self.verified: asyncio.Future[Code] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.ended = False
        self.attempts = 0  # stream attempts: which controller endpoint comes next

    def full_set(self) -> BindingSet:
        return BindingSet(self.epoch, Kind.FULL, tuple(sorted(self.held.values(), key=_k)))

    # -- applying a completed update ------------------------------------------------------------

    def apply(self, parts: list[fi.BindingUpdate]) -> BindingSet:
        """Apply one update (all its parts); returns what changed for the ranks as a delta."""
        head, last = parts[0], parts[-1]
        incoming: dict[Ref, LocalBinding] = {}
        for part in parts:
            for b in part.bindings:
                ref = (b.qp.communicator, b.qp.connection, b.qp.qp)
                key = QpKey(b.qp.communicator, b.src_rank, b.dst_rank, b.channel, b.qp.qp)
                incoming[ref] = LocalBinding(key, b.udp_sport, b.flow_label, b.epoch)
        if last.state == pb.INTENT_STATE_WITHDRAWN:
            gone = list(self.held)
            incoming = {}
            self.ended = True
        elif head.kind == fi.BindingUpdate.KIND_FULL:
            gone = [r for r in self.held if r not in incoming]
        else:
            gone = [(r.communicator, r.connection, r.qp) for p in parts for r in p.removed]
        removed: list[QpKey] = []
        for ref in gone:
            old = self.held.pop(ref, None)
            if old is not None:
                removed.append(old.key)
        changed: list[LocalBinding] = []
        for ref, new in incoming.items():
            old = self.held.get(ref)
            self.held[ref] = new
            if old is not None and old.key != new.key:  # same QP, renamed (a new version)
                removed.append(old.key)
            if old is None or (old.key, old.udp_sport, old.flow_label) != (
                new.key,
                new.udp_sport,
                new.flow_label,
            ):
                changed.append(new)
        self.epoch = int(last.epoch)
        self.known = True
        return BindingSet(self.epoch, Kind.DELTA, tuple(changed), tuple(removed))

    def publish(self, delta: BindingSet) -> None:
        if delta.bindings or delta.removed:
            for listener in list(self.listeners):
                listener(delta)

    # -- disk ----------------------------------------------------------------------------------

    def save(self) -> None:
        rows = [
            [r[0], r[1], r[2], b.key.src_rank, b.key.dst_rank, b.key.channel]
            + [b.udp_sport, b.flow_label, b.epoch]
            for r, b in sorted(self.held.items())
        ]
        doc = {
            "version": STATE_VERSION,
            "job_id": self.job_id,
            "token": self.token,
            "epoch": self.epoch,
            "known": self.known,
            "bindings": rows,
        }
        write_private(self.path, json.dumps(doc, separators=(",", ":")))

    @classmethod
    def load(cls, path: Path) -> JobView:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"state version {doc.get('version')!r}, expected {STATE_VERSION}")
        view = cls(str(doc["job_id"]), str(doc["token"]), path)
        view.epoch = int(doc["epoch"])
        view.known = bool(doc["known"])
        for comm, conn, qp, src, dst, ch, sport, label, epoch in doc["bindings"]:
            key = QpKey(str(comm), int(src), int(dst), int(ch), int(qp))
            view.held[(str(comm), int(conn), int(qp))] = LocalBinding(
                key, int(sport), int(label), int(epoch)
            )
        return view


def _k(b: LocalBinding) -> QpKey:
    return b.key


class JobBook:
    """Every job of this host (see the module docstring)."""

    def __init__(self, config: AgentConfig) -> None:
        if config.bindings is None:
            raise ValueError("bindings: the agent config has no bindings section")
        self.config = config
        self.settings: BindingsSection = config.bindings
        self.dir = self.settings.state_dir / "jobs"
        self.views: dict[str, JobView] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.endpoints = controller_endpoints(config)

    def _watch(self, endpoint: str) -> grpc.aio.UnaryStreamMultiCallable:
        """``WatchBindings`` on ``endpoint``; one channel per endpoint, shared by the jobs."""
        return self.endpoints.channel(endpoint).unary_stream(
            FLOW + "WatchBindings",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=fi.BindingUpdate.FromString,
        )

    def restore(self) -> None:
        """Load every job file and resume its stream from its epoch (unreadable files are
        logged and left for an operator)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path in sorted(self.dir.glob("*.json")):
            try:
                view = JobView.load(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable job state %s: %s", path, exc)
                continue
            view.verified.set_result(Code.OK)
            self.views[view.job_id] = view
            view.task = asyncio.create_task(self._stream(view))

    async def admit(self, job_id: str, token: str) -> JobView:
        """The job's view if ``token`` opens it: checked with the controller the first time,
        then by its hash. Raises :class:`WireError` (AUTH, UNAVAILABLE)."""
        lock = self._locks.setdefault(job_id, asyncio.Lock())
        async with lock:
            view = self.views.get(job_id)
            if view is not None and view.token_hash == token_hash(token) and not view.ended:
                return view
            candidate = JobView(job_id, token, self.dir / f"{job_id}.json")
            candidate.task = asyncio.create_task(self._stream(candidate))
            try:
                code = await asyncio.wait_for(
                    asyncio.shield(candidate.verified), self.settings.verify_timeout_s
                )
            except TimeoutError:
                code = Code.UNAVAILABLE
            if code != Code.OK:
                candidate.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await candidate.task
                if code == Code.AUTH:
                    raise WireError(code, f"job {job_id!r}: the controller refused the token")
                raise WireError(
                    code,
                    f"job {job_id!r}: the token cannot be checked now (controllers "
                    f"{', '.join(self.config.controllers)} unreachable for "
                    f"{self.settings.verify_timeout_s:g} s)",
                )
            if view is not None:  # a new incarnation of the job replaces the old one
                await self._end(view)
            self.views[job_id] = candidate
            return candidate

    async def _end(self, view: JobView) -> None:
        if view.task is not None and view.task is not asyncio.current_task():
            view.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await view.task
        view.listeners.clear()

    async def _stream(self, view: JobView) -> None:
        """Watch the job for ever: reconnect with backoff, resume from the view's epoch."""
        backoff = Backoff()
        while not view.ended:
            request = fi.WatchBindingsRequest(
                job_id=view.job_id,
                from_epoch=view.epoch if view.known else 0,
                src_hosts=[self.config.host],
            )
            parts: list[fi.BindingUpdate] = []
            endpoint = next_endpoint(self.config, view.attempts)
            try:
                async for message in self._watch(endpoint)(request, metadata=auth(view.token)):
                    parts.append(message)
                    if message.more:
                        continue
                    delta = view.apply(parts)
                    parts = []
                    backoff.reset()
                    await asyncio.to_thread(view.save)
                    if not view.verified.done():
                        view.verified.set_result(Code.OK)
                    view.publish(delta)
                    if view.ended:
                        break
            except grpc.RpcError as exc:
                error = ApiError.from_rpc(exc)
                if error.code in _FINAL:
                    if not view.verified.done():
                        view.verified.set_result(Code.AUTH)
                        return
                    log.warning("job %s: the controller no longer accepts its token", view.job_id)
                    view.ended = True
                elif not error.retryable:
                    log.warning("job %s: stream refused: %s", view.job_id, error)
            if view.ended:
                break
            view.attempts += 1  # broken or refused here: the next endpoint, in order
            await asyncio.sleep(backoff.next())
        if self.views.get(view.job_id) is view:  # released: forget it
            del self.views[view.job_id]
            view.path.unlink(missing_ok=True)

    async def close(self) -> None:
        for view in list(self.views.values()):
            await self._end(view)
        for channel in self.endpoints.channels():
            await channel.close()
        self.endpoints.forget()
