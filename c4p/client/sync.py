"""The blocking flow-intent client: register, submit, watch (reconnect + resume), release; and
the admin client.

A call waits for the channel to be ready (``wait_for_ready``, on by default) up to its
timeout, so a controller that is restarting is waited for rather than failed fast. Retries are
safe because every mutating call is idempotent by design: RegisterJob carries a ``request_id``
(generated once per call and reused by its retries: a lost answer gives the same token),
SubmitIntents is idempotent by communicator version, and a watch resumes from the epoch the
mirror holds. So a call that failed with a retryable status (the controller restarting, a rate
limit) is retried with exponential backoff and jitter, up to ``attempts`` times; any other
status raises :class:`~c4p.client.wire.ApiError` at once.

A :class:`BindingWatch` runs the stream on a thread of its own and keeps a
:class:`~c4p.client.mirror.BindingMirror` current; the plugin's callback runs on that thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from c4p.api.v1 import admin_pb2 as admin
from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.client.endpoints import Endpoints, Method
from c4p.client.mirror import BindingMirror, OnChange, control_mode_name
from c4p.client.wire import ADMIN, FLOW, ApiError, ClientTls, auth, register_request, secure_channel
from c4p.client.wire import control_mode as control_mode_pb
from topology.backoff import Backoff

R = TypeVar("R")


def retrying(
    call: Callable[[], R],
    attempts: int,
    stop: threading.Event | None = None,
    endpoints: Endpoints[Any] | None = None,
) -> R:
    """``call()`` until it succeeds, a non-retryable error, or ``attempts`` tries; with
    ``endpoints``, a follower's redirect is followed at once and a dead endpoint is left for the
    next one (see :mod:`c4p.client.endpoints`)."""
    # between replicas a new leader is elected within a lease TTL: do not sleep much longer
    backoff = Backoff(cap=1.0) if endpoints is not None and endpoints.several else Backoff()
    for attempt in range(attempts):
        try:
            return call()
        except grpc.RpcError as exc:
            error = ApiError.from_rpc(exc)
            if not error.retryable or attempt == attempts - 1:
                raise error from None
            if endpoints is not None and endpoints.follow(error):
                continue  # the answer named the leader: go there now
        pause = backoff.next()
        if stop is not None and stop.wait(pause):
            break
        if stop is None:
            time.sleep(pause)
    raise ApiError(grpc.StatusCode.CANCELLED, "stopped", [])


class FlowIntentClient:
    """A connection to the controller's FlowIntentService.

    ``target`` is one ``host:port`` or several (a list, or comma-separated) of the replicas of a
    highly available controller; with several, calls do not wait for a dead endpoint to come
    back (``wait_for_ready`` is off unless asked for) but move on (see
    :mod:`c4p.client.endpoints`).
    """

    def __init__(
        self,
        target: str | Sequence[str],
        *,
        tls: ClientTls | None = None,
        register_token: str | None = None,
        timeout: float = 30.0,
        attempts: int = 6,
        wait_for_ready: bool | None = None,
    ) -> None:
        self.endpoints: Endpoints[grpc.Channel] = Endpoints(
            target, lambda t: secure_channel(t, tls)
        )
        self.target = self.endpoints.targets[0]
        self.register_token = register_token
        self.timeout = timeout
        self.attempts = attempts
        self.wait_for_ready = (
            not self.endpoints.several if wait_for_ready is None else wait_for_ready
        )
        e = self.endpoints
        self._register = Method(e, FLOW + "RegisterJob", fi.RegisterJobResponse)
        self._submit = Method(e, FLOW + "SubmitIntents", fi.SubmitIntentsResponse)
        self._release = Method(e, FLOW + "ReleaseJob", fi.ReleaseJobResponse)
        self._watch = Method(e, FLOW + "WatchBindings", fi.BindingUpdate, stream=True)

    def register_job(
        self,
        job_id: str,
        *,
        hosts: Sequence[str] = (),
        ranks: Sequence[tuple[int, str, str]] = (),
        tenant: str = "",
        priority: int = 0,
        request_id: str | None = None,
        control_mode: str | None = None,
    ) -> JobSession:
        """Register a job by hosts (every NIC a rank) or by (rank, host, nic) triples."""
        request = register_request(job_id, hosts, ranks, tenant, priority, request_id, control_mode)
        metadata = auth(self.register_token)
        reply: fi.RegisterJobResponse = retrying(
            lambda: self._register(
                request, timeout=self.timeout, metadata=metadata, wait_for_ready=self.wait_for_ready
            ),
            self.attempts,
            endpoints=self.endpoints,
        )
        session = JobSession(self, reply.job_id, reply.token, list(reply.ranks))
        session.control_mode = control_mode_name(reply.control_mode)
        return session

    def session(self, job_id: str, token: str) -> JobSession:
        """A session for a job registered elsewhere (another process of the same job)."""
        return JobSession(self, job_id, token, [])

    def close(self) -> None:
        for channel in self.endpoints.channels():
            channel.close()
        self.endpoints.forget()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class JobSession:
    """One job's calls, carrying its token."""

    def __init__(
        self, client: FlowIntentClient, job_id: str, token: str, ranks: list[pb.ResolvedRank]
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.token = token
        self.ranks = ranks
        self.control_mode = "active"
        """The job's control mode when it registered (the stream tells of later changes)."""

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return auth(self.token)

    def submit(
        self, communicators: Sequence[pb.CommunicatorIntent], withdraw: Sequence[str] = ()
    ) -> fi.SubmitIntentsResponse:
        request = fi.SubmitIntentsRequest(
            job_id=self.job_id, communicators=list(communicators), withdraw=list(withdraw)
        )
        c = self.client
        reply: fi.SubmitIntentsResponse = retrying(
            lambda: c._submit(
                request, timeout=c.timeout, metadata=self.metadata, wait_for_ready=c.wait_for_ready
            ),
            c.attempts,
            endpoints=c.endpoints,
        )
        return reply

    def release(self) -> int:
        c = self.client
        request = fi.ReleaseJobRequest(job_id=self.job_id)
        for _ in range(len(c.endpoints.targets) + 1):  # follow a redirect, never retry blind
            try:
                reply = c._release(request, timeout=c.timeout, metadata=self.metadata)
                return int(reply.epoch)
            except grpc.RpcError as exc:
                error = ApiError.from_rpc(exc)
                if not (error.leader and c.endpoints.follow(error)):
                    raise error from None
        raise ApiError(grpc.StatusCode.UNAVAILABLE, "no leader answered", [])

    def watch(
        self, on_change: OnChange | None = None, *, mirror: BindingMirror | None = None
    ) -> BindingWatch:
        """Start watching (from ``mirror.epoch`` when a mirror is given, else a full set)."""
        return BindingWatch(self, mirror or BindingMirror(on_change)).start()


class BindingWatch:
    """A background WatchBindings stream that reconnects and resumes (see the module doc)."""

    def __init__(self, session: JobSession, mirror: BindingMirror) -> None:
        self.session = session
        self.mirror = mirror
        self.reconnects = 0
        self.error: ApiError | None = None
        self.done = threading.Event()
        self._stop = threading.Event()
        self._call: Any = None
        self._thread = threading.Thread(target=self._run, name="c4p-watch", daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def _run(self) -> None:
        backoff = Backoff()
        s = self.session
        try:
            while not self._stop.is_set():
                request = fi.WatchBindingsRequest(job_id=s.job_id, from_epoch=self.mirror.epoch)
                try:
                    self._call = s.client._watch(request, metadata=s.metadata)
                    for message in self._call:
                        self.mirror.feed(message)
                        backoff.reset()
                        if self.mirror.withdrawn:
                            return
                except grpc.RpcError as exc:
                    if self._stop.is_set():
                        return
                    error = ApiError.from_rpc(exc)
                    if not error.retryable:
                        self.error = error
                        return
                    if s.client.endpoints.follow(error):
                        self.mirror.discard_parts()
                        self.reconnects += 1
                        continue  # a follower named the leader: resume there now
                self.mirror.discard_parts()
                self.reconnects += 1
                if self._stop.wait(backoff.next()):
                    return
        finally:
            self.done.set()
            self.mirror.wake()

    def wait(self, predicate: Callable[[BindingMirror], bool], timeout: float) -> bool:
        """Block until ``predicate(mirror)`` holds; ``False`` on timeout or if the watch ended."""
        self.mirror.wait(lambda m: predicate(m) or self.done.is_set(), timeout)
        return predicate(self.mirror)

    def wait_revision(self, revision: int, timeout: float) -> bool:
        """Until the bindings cover the job's intents at ``revision`` (SubmitIntents' answer)."""
        return self.wait(lambda m: m.intent_revision >= revision, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()
        self._thread.join(timeout)


class AdminClient:
    """The controller's AdminService, with the admin credential."""

    def __init__(
        self,
        target: str | Sequence[str],
        token: str,
        *,
        tls: ClientTls | None = None,
        timeout: float = 120.0,
        wait_for_ready: bool | None = None,
    ) -> None:
        self.endpoints: Endpoints[grpc.Channel] = Endpoints(
            target, lambda t: secure_channel(t, tls)
        )
        self.wait_for_ready = (
            not self.endpoints.several if wait_for_ready is None else wait_for_ready
        )
        self.metadata = auth(token)
        self.timeout = timeout
        e = self.endpoints
        self._fabric = Method(e, ADMIN + "GetFabric", admin.FabricSnapshot)
        self._jobs = Method(e, ADMIN + "ListJobs", admin.ListJobsResponse)
        self._plan = Method(e, ADMIN + "GetPlan", admin.PlanSummary)
        self._drain = Method(e, ADMIN + "DrainLink", admin.LinkChangeResponse)
        self._restore = Method(e, ADMIN + "RestoreLink", admin.LinkChangeResponse)
        self._replan = Method(e, ADMIN + "Replan", admin.ReplanResponse)
        self._log = Method(e, ADMIN + "GetDecisionLog", admin.GetDecisionLogResponse)
        self._set_mode = Method(e, ADMIN + "SetControlMode", admin.SetControlModeResponse)
        self._rollback = Method(e, ADMIN + "RollbackAll", admin.RollbackAllResponse)
        self._events = Method(e, ADMIN + "WatchEvents", admin.Event, stream=True)

    def _call(self, stub: Any, request: Any) -> Any:
        """One call; a follower's redirect is followed, and with several endpoints an
        unavailable one is left for the next (every admin call is safe to repeat: a drain of a
        drained link changes nothing). Not retried otherwise."""
        tries = 2 * len(self.endpoints.targets) + 1
        for attempt in range(tries):
            try:
                return stub(
                    request,
                    timeout=self.timeout,
                    metadata=self.metadata,
                    wait_for_ready=self.wait_for_ready,
                )
            except grpc.RpcError as exc:
                error = ApiError.from_rpc(exc)
                moved = self.endpoints.follow(error)
                unavailable = error.code is grpc.StatusCode.UNAVAILABLE and self.endpoints.several
                if attempt == tries - 1 or not (moved or unavailable):
                    raise error from None
                if not moved:
                    time.sleep(0.2)
        raise AssertionError("unreachable")  # pragma: no cover

    def fabric(self, only_changed: bool = False) -> admin.FabricSnapshot:
        reply: admin.FabricSnapshot = self._call(
            self._fabric, admin.GetFabricRequest(only_changed=only_changed)
        )
        return reply

    def jobs(self, job_id: str = "") -> admin.ListJobsResponse:
        reply: admin.ListJobsResponse = self._call(self._jobs, admin.ListJobsRequest(job_id=job_id))
        return reply

    def plan(self) -> admin.PlanSummary:
        reply: admin.PlanSummary = self._call(self._plan, admin.GetPlanRequest())
        return reply

    def drain(self, link: str, reason: str = "", wait: bool = True) -> admin.LinkChangeResponse:
        request = admin.DrainLinkRequest(link=link, reason=reason, wait=wait)
        reply: admin.LinkChangeResponse = self._call(self._drain, request)
        return reply

    def restore(
        self, link: str, wait: bool = True, force: bool = False
    ) -> admin.LinkChangeResponse:
        """Give a drained link back; ``force`` also ends its hold-down or flap suppression."""
        request = admin.RestoreLinkRequest(link=link, wait=wait, force=force)
        reply: admin.LinkChangeResponse = self._call(self._restore, request)
        return reply

    def replan(self, reason: str = "", wait: bool = True) -> admin.ReplanResponse:
        request = admin.ReplanRequest(reason=reason, wait=wait)
        reply: admin.ReplanResponse = self._call(self._replan, request)
        return reply

    def decisions(self, limit: int = 50, before: int = 0) -> list[pb.Decision]:
        request = admin.GetDecisionLogRequest(limit=limit, before_sequence=before)
        return list(self._call(self._log, request).decisions)

    def decision_log(self, page: int = 1000, most: int = 100_000) -> list[pb.Decision]:
        """The whole decision log (at most ``most`` entries), oldest first, page by page."""
        out: list[pb.Decision] = []
        before = 0
        while len(out) < most:
            batch = self.decisions(min(page, most - len(out)), before)
            out.extend(batch)
            if len(batch) < page or not batch:
                break
            before = int(batch[-1].sequence)
        return out[::-1]

    def set_control_mode(
        self, job_id: str, mode: str | None, wait: bool = True
    ) -> admin.SetControlModeResponse:
        """Pin a job's control mode (off, shadow, active), or ``None`` to follow the policy."""
        request = admin.SetControlModeRequest(job_id=job_id, mode=control_mode_pb(mode), wait=wait)
        reply: admin.SetControlModeResponse = self._call(self._set_mode, request)
        return reply

    def rollback_all(
        self, reason: str = "", *, clear: bool = False, wait: bool = True
    ) -> admin.RollbackAllResponse:
        """Every job to ``off`` (new ones too) until cleared with ``clear=True``; durable."""
        request = admin.RollbackAllRequest(reason=reason, clear=clear, wait=wait)
        reply: admin.RollbackAllResponse = self._call(self._rollback, request)
        return reply

    def events(
        self, after: int = 0, follow: bool = False, job_id: str = "", timeout: float | None = None
    ) -> Iterator[admin.Event]:
        """The detector's events after sequence ``after``; with ``follow``, new ones until
        ``timeout`` seconds (``None``: until cancelled). Errors raise :class:`ApiError`."""
        request = admin.EventWatchRequest(after_sequence=after, follow=follow, job_id=job_id)
        stream = self._events(
            request, timeout=timeout, metadata=self.metadata, wait_for_ready=self.wait_for_ready
        )
        try:
            yield from stream
        except grpc.RpcError as exc:
            if follow and exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                return  # the time asked for is over
            raise ApiError.from_rpc(exc) from None

    def close(self) -> None:
        for channel in self.endpoints.channels():
            channel.close()
        self.endpoints.forget()
