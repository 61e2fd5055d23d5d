"""The call pipeline every RPC goes through: parse, authenticate, rate-limit, run, map errors.

Why handlers built here instead of the generated ``add_*Servicer_to_server``: the generated
registration deserializes requests before any c4p code runs, and a request that does not parse
then ends as INTERNAL ("Exception deserializing request"). Registering the methods with raw
bytes lets the pipeline answer INVALID_ARGUMENT for garbage, and gives one place for what every
method needs: credentials and per-caller rate limits (:mod:`c4p.service.access`), the
``c4p_requests_total`` metric, a structured log line for every refusal, and the mapping of
:class:`~c4p.controller.errors.RequestError` to status codes with the problems in the trailing
metadata ``c4p-problems`` (JSON). A store that cannot be written is UNAVAILABLE (the request
changed nothing; retry later) and tells the runtime, which turns health NOT_SERVING until a
write succeeds again. An unexpected exception is logged with its traceback and answered
INTERNAL without internals.

The method names and message types come from the generated descriptors, so server reflection
and the ``.proto`` contract stay the single truth.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from c4p.controller.errors import (
    InvalidRequest,
    PermissionDenied,
    RequestError,
    Unauthenticated,
    Unavailable,
)
from c4p.service import limits, peers
from c4p.service.access import Guard, RateLimiter
from c4p.service.telemetry import Metrics
from c4p.store.base import StoreError

log = logging.getLogger("c4p.service")

MAX_DETAILS = 2000
"""Characters of a status message; gRPC carries it in a header (8 KiB for all headers)."""
MAX_PROBLEMS_JSON = 4000


class Scope(StrEnum):
    REGISTER = "register"
    JOB = "job"
    ADMIN = "admin"


@dataclass(frozen=True)
class Call:
    """Who is calling, as the pipeline established it."""

    method: str
    peer: str
    caller: str
    job_id: str = ""
    incarnation: int = 0
    hosts: tuple[str, ...] = ("*",)
    """RegisterJob: the host patterns the caller's credential may place ranks on."""
    credential: str = ""
    """RegisterJob: who registers (a replay answers only them; "" never matches)."""
    deadline: float | None = None
    """``time.monotonic()`` at which the caller stops waiting (its gRPC deadline); ``None``:
    it set none. A call that waits for a plan answers before it (:mod:`c4p.service.admin`)."""


Unary = Callable[[Any, Call], Awaitable[Message]]
Stream = Callable[[Any, Call], AsyncIterator[Message]]


@dataclass(frozen=True)
class Endpoint:
    name: str
    request: type[Message]
    scope: Scope
    unary: Unary | None = None
    stream: Stream | None = None
    changes: bool = False
    """An admin call that changes something (drain, restore, replan): a bucket of its own."""


def _cert_names(context: grpc.aio.ServicerContext) -> list[str]:
    """The common names of the caller's client certificate (mTLS; none otherwise)."""
    return [
        n.decode("utf-8", "replace")
        for n in (context.auth_context() or {}).get("x509_common_name", ())
    ]


def _peer_host(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` -> ``127.0.0.1``; ``ipv6:[::1]:5000`` -> ``::1``."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition("]")[0].lstrip("[")
    return rest.rpartition(":")[0] if kind == "ipv4" else peer


class Gate:
    """Builds gRPC handlers that run :class:`Endpoint` behaviours through the pipeline."""

    def __init__(
        self,
        guard: Guard,
        limiter: RateLimiter,
        metrics: Metrics,
        on_store_error: Callable[[], None] | None = None,
    ) -> None:
        self.guard = guard
        self.limiter = limiter
        self.metrics = metrics
        self.on_store_error = on_store_error
        s = limiter.settings
        self.failures = RateLimiter(
            s.model_copy(
                update={"requests_per_s": s.failed_auth_per_s, "burst": s.failed_auth_burst}
            ),
            limiter.clock,
        )

    def handler(self, service: str, endpoints: list[Endpoint]) -> grpc.GenericRpcHandler:
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for e in endpoints:
            if e.stream is not None:
                handlers[e.name] = grpc.unary_stream_rpc_method_handler(
                    self._stream(service, e), response_serializer=_serialize
                )
            else:
                handlers[e.name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(service, e), response_serializer=_serialize
                )
        return grpc.method_handlers_generic_handler(service, handlers)

    # -- the pipeline --------------------------------------------------------------------------

    def _admit(
        self, e: Endpoint, raw: bytes, context: grpc.aio.ServicerContext
    ) -> tuple[Any, Call]:
        try:
            request = e.request.FromString(raw)
        except (DecodeError, ValueError) as exc:
            name = e.request.DESCRIPTOR.full_name
            raise InvalidRequest(f"not a valid {name} message ({exc})", "request") from None
        metadata: dict[str, str | bytes] = {}
        for key, value in context.invocation_metadata() or ():
            metadata.setdefault(key, value)
        peer = context.peer() or ""
        host = _peer_host(peer)
        failed = limits.failure_bucket(e.scope is Scope.JOB, metadata, host)
        self.failures.check(failed)  # a credential (or peer) that failed too often is not heard
        try:
            if e.scope is Scope.JOB:
                job_id = str(request.job_id)
                incarnation = self.guard.job(metadata, job_id)
                call = Call(e.name, peer, f"job:{job_id}", job_id, incarnation)
            elif e.scope is Scope.ADMIN:
                which = self.guard.admin(metadata, _cert_names(context))
                kind = "change" if e.changes else "read"
                call = Call(e.name, peer, f"admin:{which}:{host}:{kind}")
            else:
                hosts = self.guard.register(metadata)
                token = self.guard.registrant(metadata)
                caller = limits.register_bucket(token, host)
                call = Call(e.name, peer, caller, hosts=hosts, credential=token)
        except (Unauthenticated, PermissionDenied):
            self.failures.take(failed)
            raise
        self.limiter.take(call.caller)
        if e.scope is Scope.REGISTER and not call.credential:  # open: who is it (after the
            identity = peers.identity(peer, _cert_names(context))  # limit: reads /proc)
            call = Call(e.name, peer, call.caller, hosts=call.hosts, credential=identity)
        left = context.time_remaining()
        if left is not None and math.isfinite(left):
            call = dataclasses.replace(call, deadline=time.monotonic() + left)
        return request, call

    async def _refuse(
        self, context: grpc.aio.ServicerContext, method: str, exc: RequestError
    ) -> None:
        problems = [{"field": f, "reason": r} for f, r in exc.problems[:50]]
        text = json.dumps(problems)
        while len(text) > MAX_PROBLEMS_JSON and problems:
            problems.pop()
            text = json.dumps(problems)
        log.info(
            "refused",
            extra={
                "event": "refused",
                "method": method,
                "code": exc.code,
                "reason": str(exc)[:500],
            },
        )
        await context.abort(
            getattr(grpc.StatusCode, exc.code),
            str(exc)[:MAX_DETAILS],
            trailing_metadata=(("c4p-problems", text),),
        )

    async def _store_failed(
        self, context: grpc.aio.ServicerContext, method: str, exc: StoreError
    ) -> None:
        log.error(
            "store failed", extra={"event": "store-failed", "method": method, "error": str(exc)}
        )
        if self.on_store_error is not None:
            self.on_store_error()
        refusal = Unavailable("the controller's store cannot be written now; retry later")
        await self._refuse(context, method, refusal)

    async def _internal(self, context: grpc.aio.ServicerContext, method: str) -> None:
        log.exception("internal error", extra={"event": "internal-error", "method": method})
        await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the controller log")

    def _count(self, method: str, code: str) -> None:
        self.metrics.requests.labels(method=method, code=code).inc()

    def _unary(
        self, service: str, e: Endpoint
    ) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[Message]]:
        assert e.unary is not None
        behaviour = e.unary

        async def run(raw: bytes, context: grpc.aio.ServicerContext) -> Message:
            code = "OK"
            try:
                request, call = self._admit(e, raw, context)
                return await behaviour(request, call)
            except RequestError as exc:
                code = exc.code
                await self._refuse(context, e.name, exc)
            except StoreError as exc:
                code = "UNAVAILABLE"
                await self._store_failed(context, e.name, exc)
            except Exception:
                code = "INTERNAL"
                await self._internal(context, e.name)
            finally:
                self._count(e.name, code)
            raise AssertionError("abort returned")  # pragma: no cover

        return run

    def _stream(
        self, service: str, e: Endpoint
    ) -> Callable[[bytes, grpc.aio.ServicerContext], AsyncIterator[Message]]:
        assert e.stream is not None
        behaviour = e.stream

        async def run(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
            code = "OK"
            try:
                request, call = self._admit(e, raw, context)
                async for message in behaviour(request, call):
                    yield message
            except RequestError as exc:
                code = exc.code
                await self._refuse(context, e.name, exc)
            except StoreError as exc:
                code = "UNAVAILABLE"
                await self._store_failed(context, e.name, exc)
            except Exception:
                code = "INTERNAL"
                await self._internal(context, e.name)
            finally:
                self._count(e.name, code)

        return run


def _serialize(message: Message) -> bytes:
    return bytes(message.SerializeToString())
