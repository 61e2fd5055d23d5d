"""The asyncio flow-intent client: the same calls and guarantees as :mod:`c4p.client.sync`.

Why a second client: launchers and agents built on asyncio (and many Python training
frameworks' control planes) must not block their loop on gRPC. Retries, idempotency and the
resume rule are the sync client's (see there); the stream is an async iterator of the changes
each update completes, reconnecting with backoff and resuming from the mirror's epoch until the
job is released, a non-retryable error occurs, or ``stop`` is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Self, TypeVar

import grpc

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from c4p.client.endpoints import Endpoints, Method
from c4p.client.mirror import BindingChange, BindingMirror, OnChange, control_mode_name
from c4p.client.wire import FLOW, ApiError, ClientTls, auth, register_request, secure_aio_channel
from topology.backoff import Backoff

R = TypeVar("R")


async def retrying(
    call: Callable[[], Awaitable[R]],
    attempts: int,
    endpoints: Endpoints[grpc.aio.Channel] | None = None,
) -> R:
    """Await ``call()`` until success, a non-retryable error, or ``attempts`` tries; with
    ``endpoints``, redirects are followed at once (the sync client's rule)."""
    backoff = Backoff(cap=1.0) if endpoints is not None and endpoints.several else Backoff()
    for attempt in range(attempts):
        try:
            return await call()
        except grpc.RpcError as exc:
            error = ApiError.from_rpc(exc)
            if not error.retryable or attempt == attempts - 1:
                raise error from None
            if endpoints is not None and endpoints.follow(error):
                continue
        await asyncio.sleep(backoff.next())
    raise AssertionError("unreachable")


class AsyncFlowIntentClient:
    """An asyncio connection to the controller's FlowIntentService; ``target`` is one
    ``host:port`` or the replicas of a highly available controller (as the sync client)."""

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
        self.endpoints: Endpoints[grpc.aio.Channel] = Endpoints(
            target, lambda t: secure_aio_channel(t, tls)
        )
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

    async def register_job(
        self,
        job_id: str,
        *,
        hosts: Sequence[str] = (),
        ranks: Sequence[tuple[int, str, str]] = (),
        tenant: str = "",
        priority: int = 0,
        request_id: str | None = None,
        control_mode: str | None = None,
    ) -> AsyncJobSession:
        request = register_request(job_id, hosts, ranks, tenant, priority, request_id, control_mode)
        metadata = auth(self.register_token)
        reply: fi.RegisterJobResponse = await retrying(
            lambda: self._register(
                request, timeout=self.timeout, metadata=metadata, wait_for_ready=self.wait_for_ready
            ),
            self.attempts,
            self.endpoints,
        )
        session = AsyncJobSession(self, reply.job_id, reply.token, list(reply.ranks))
        session.control_mode = control_mode_name(reply.control_mode)
        return session

    def session(self, job_id: str, token: str) -> AsyncJobSession:
        return AsyncJobSession(self, job_id, token, [])

    async def close(self) -> None:
        for channel in self.endpoints.channels():
            await channel.close()
        self.endpoints.forget()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncJobSession:
    """One job's calls, carrying its token."""

    def __init__(
        self, client: AsyncFlowIntentClient, job_id: str, token: str, ranks: list[pb.ResolvedRank]
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.token = token
        self.ranks = ranks
        self.control_mode = "active"

    async def submit(
        self, communicators: Sequence[pb.CommunicatorIntent], withdraw: Sequence[str] = ()
    ) -> fi.SubmitIntentsResponse:
        request = fi.SubmitIntentsRequest(
            job_id=self.job_id, communicators=list(communicators), withdraw=list(withdraw)
        )
        c = self.client
        reply: fi.SubmitIntentsResponse = await retrying(
            lambda: c._submit(
                request,
                timeout=c.timeout,
                metadata=auth(self.token),
                wait_for_ready=c.wait_for_ready,
            ),
            c.attempts,
            c.endpoints,
        )
        return reply

    async def release(self) -> int:
        c = self.client
        request = fi.ReleaseJobRequest(job_id=self.job_id)
        for _ in range(len(c.endpoints.targets) + 1):  # follow a redirect, never retry blind
            try:
                reply = await c._release(request, timeout=c.timeout, metadata=auth(self.token))
                return int(reply.epoch)
            except grpc.RpcError as exc:
                error = ApiError.from_rpc(exc)
                if not (error.leader and c.endpoints.follow(error)):
                    raise error from None
        raise ApiError(grpc.StatusCode.UNAVAILABLE, "no leader answered", [])

    async def changes(
        self, mirror: BindingMirror, stop: asyncio.Event | None = None
    ) -> AsyncIterator[list[BindingChange]]:
        """The changes of every update, for ever (reconnecting), until released or stopped."""
        backoff = Backoff()
        while stop is None or not stop.is_set():
            request = fi.WatchBindingsRequest(job_id=self.job_id, from_epoch=mirror.epoch)
            try:
                async for message in self.client._watch(request, metadata=auth(self.token)):
                    done = mirror.feed(message)
                    backoff.reset()
                    if not message.more:
                        yield done
                    if mirror.withdrawn or (stop is not None and stop.is_set()):
                        return
            except grpc.RpcError as exc:
                error = ApiError.from_rpc(exc)
                if not error.retryable:
                    raise error from None
                if self.client.endpoints.follow(error):
                    mirror.discard_parts()
                    continue  # a follower named the leader: resume there now
            mirror.discard_parts()
            await asyncio.sleep(backoff.next())

    async def watch_until(
        self,
        predicate: Callable[[BindingMirror], bool],
        timeout: float,
        *,
        on_change: OnChange | None = None,
        mirror: BindingMirror | None = None,
    ) -> BindingMirror:
        """Watch until ``predicate(mirror)`` holds (raises ``TimeoutError`` after ``timeout``)."""
        mirror = mirror or BindingMirror(on_change)

        async def run() -> None:
            if predicate(mirror):
                return
            async for _ in self.changes(mirror):
                if predicate(mirror):
                    return

        await asyncio.wait_for(run(), timeout)
        return mirror
