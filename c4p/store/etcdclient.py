"""A thin blocking client for etcd's v3 gRPC API: the calls the etcd store and the election need.

Why our own client over stubs generated from etcd's ``.proto`` (``proto/etcd/v3/``) rather than a
PyPI package: the maintained gRPC clients either pin protobuf/grpc versions that clash with the
ones this project pins for OR-Tools, or are asyncio-only, or talk to the HTTP/JSON gateway (base64
bodies, no streaming keep-alive); see ``docs/ha.md`` for the comparison. What we need is small
(range, put, delete, txn, compact, lease grant/keep-alive/revoke, status), etcd's API is a
stable published contract, and grpcio is already here.

Endpoints: a list of ``host:port``; a call that finds its member unreachable (``UNAVAILABLE``)
moves to the next member and tries again within the same deadline, so one dead member costs a
failed attempt, not an error. Every call has a deadline (``timeout``): with etcd's quorum lost a
linearizable request would otherwise wait forever. All failures surface as
:class:`EtcdUnavailable` (retryable: the cluster is unreachable or has no quorum) or
:class:`EtcdError` (the request itself was refused).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from c4p.store.etcdpb import etcd_rpc_pb2 as pb

T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""What we accept in one answer (a paged range stays far below this)."""

_RETRY_ON_NEXT = frozenset({grpc.StatusCode.UNAVAILABLE})


class EtcdError(Exception):
    """etcd refused a request (too large, compacted revision, bad argument)."""

    retryable = False


class EtcdUnavailable(EtcdError):
    """No member answered in time (all down, partitioned, or the cluster has no quorum)."""

    retryable = True


@dataclass(frozen=True)
class EtcdTls:
    """TLS toward etcd: its CA, and (client-cert auth) our certificate and key."""

    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        key = self.key_file.read_bytes() if self.key_file else None
        cert = self.cert_file.read_bytes() if self.cert_file else None
        return grpc.ssl_channel_credentials(self.ca_file.read_bytes(), key, cert)


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix`` (etcd's convention)."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


def put_op(key: bytes, value: bytes, lease: int = 0) -> pb.RequestOp:
    return pb.RequestOp(request_put=pb.PutRequest(key=key, value=value, lease=lease))


def delete_op(key: bytes, range_end: bytes = b"") -> pb.RequestOp:
    return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key, range_end=range_end))


def range_op(key: bytes) -> pb.RequestOp:
    return pb.RequestOp(request_range=pb.RangeRequest(key=key))


def created_at(key: bytes, revision: int) -> pb.Compare:
    """Compare: ``key`` exists and was created at ``revision`` (0: ``key`` does not exist)."""
    return pb.Compare(
        result=pb.Compare.EQUAL, target=pb.Compare.CREATE, key=key, create_revision=revision
    )


class EtcdClient:
    """Blocking calls to one etcd cluster (see the module docstring); thread-safe."""

    def __init__(
        self, endpoints: Sequence[str], *, tls: EtcdTls | None = None, timeout: float = 2.0
    ) -> None:
        if not endpoints:
            raise ValueError("etcd needs at least one endpoint")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", 10_000),
        ]
        if tls is None:
            self._channels = [grpc.insecure_channel(e, options=options) for e in self.endpoints]
        else:
            creds = tls.credentials()
            self._channels = [grpc.secure_channel(e, creds, options) for e in self.endpoints]
        self._current = 0
        self._lock = threading.Lock()

    def _stub(self, channel: grpc.Channel, path: str, response: Any) -> Any:
        return channel.unary_unary(
            path,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )

    def _call(self, path: str, request: Any, response: type[T], timeout: float | None) -> T:
        """One call, moving over the members on ``UNAVAILABLE`` until the deadline."""
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._lock:
            start = self._current
        last: grpc.RpcError | None = None
        for step in range(len(self._channels) * 3):
            index = (start + step) % len(self._channels)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                reply: T = self._stub(self._channels[index], path, response)(request, timeout=left)
            except grpc.RpcError as exc:
                last = exc
                if exc.code() in _RETRY_ON_NEXT:
                    continue
                if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                    break
                raise EtcdError(f"etcd {path.rsplit('/', 1)[-1]}: {exc.details()}") from None
            with self._lock:
                self._current = index
            return reply
        what = "no answer" if last is None else f"{last.code().name}: {last.details()}"
        raise EtcdUnavailable(
            f"etcd {path.rsplit('/', 1)[-1]} ({', '.join(self.endpoints)}): {what}"
        )

    # -- KV --------------------------------------------------------------------------------------

    def range(
        self,
        key: bytes,
        range_end: bytes = b"",
        *,
        revision: int = 0,
        limit: int = 0,
        descending: bool = False,
        timeout: float | None = None,
    ) -> pb.RangeResponse:
        request = pb.RangeRequest(key=key, range_end=range_end, revision=revision, limit=limit)
        if descending:
            request.sort_order = pb.RangeRequest.DESCEND
            request.sort_target = pb.RangeRequest.KEY
        return self._call("/etcdserverpb.KV/Range", request, pb.RangeResponse, timeout)

    def get(self, key: bytes) -> pb.KeyValue | None:
        kvs = self.range(key).kvs
        return kvs[0] if kvs else None

    def scan(self, prefix: bytes, page: int = 512) -> tuple[int, list[pb.KeyValue]]:
        """Every key under ``prefix``, read in pages at one revision: (revision, keys)."""
        end = prefix_end(prefix)
        first = self.range(prefix, end, limit=page)
        revision = first.header.revision
        found = list(first.kvs)
        more = first.more
        for _ in range(1_000_000):  # bounded: a page always advances the start key
            if not more or not found:
                break
            reply = self.range(found[-1].key + b"\0", end, revision=revision, limit=page)
            found.extend(reply.kvs)
            more = reply.more
        return revision, found

    def put(self, key: bytes, value: bytes, lease: int = 0) -> pb.PutResponse:
        request = pb.PutRequest(key=key, value=value, lease=lease)
        return self._call("/etcdserverpb.KV/Put", request, pb.PutResponse, None)

    def delete(self, key: bytes, range_end: bytes = b"") -> pb.DeleteRangeResponse:
        request = pb.DeleteRangeRequest(key=key, range_end=range_end)
        return self._call("/etcdserverpb.KV/DeleteRange", request, pb.DeleteRangeResponse, None)

    def txn(
        self,
        compare: Sequence[pb.Compare],
        success: Sequence[pb.RequestOp],
        failure: Sequence[pb.RequestOp] = (),
        timeout: float | None = None,
    ) -> pb.TxnResponse:
        request = pb.TxnRequest(compare=list(compare), success=list(success), failure=list(failure))
        return self._call("/etcdserverpb.KV/Txn", request, pb.TxnResponse, timeout)

    def compact(self, revision: int) -> None:
        request = pb.CompactionRequest(revision=revision)
        self._call("/etcdserverpb.KV/Compact", request, pb.CompactionResponse, None)

    def watch(self, key: bytes, range_end: bytes, start_revision: int) -> WatchStream:
        """Every change to ``[key, range_end)`` from ``start_revision`` on, as etcd's answers
        (a stream on the member in use; it ends with an error when that member goes away, and
        the caller resumes from its last revision, on the next member)."""
        with self._lock:
            index = self._current
            self._current = (index + 1) % len(self._channels)  # the next try: the next one
        create = pb.WatchCreateRequest(key=key, range_end=range_end, start_revision=start_revision)
        stream = WatchStream(self._channels[index], pb.WatchRequest(create_request=create))
        stream.endpoint = self.endpoints[index]
        return stream

    # -- leases ----------------------------------------------------------------------------------

    def grant(self, ttl: int) -> int:
        reply = self._call(
            "/etcdserverpb.Lease/LeaseGrant",
            pb.LeaseGrantRequest(TTL=ttl),
            pb.LeaseGrantResponse,
            None,
        )
        if reply.error:
            raise EtcdError(f"etcd LeaseGrant: {reply.error}")
        return int(reply.ID)

    def revoke(self, lease: int) -> None:
        self._call(
            "/etcdserverpb.Lease/LeaseRevoke",
            pb.LeaseRevokeRequest(ID=lease),
            pb.LeaseRevokeResponse,
            None,
        )

    def keep_alive(self, lease: int, timeout: float | None = None) -> int:
        """Renew ``lease`` once; returns its TTL (0: the lease is gone, it expired or was revoked).

        One short stream per renewal: a held-open stream would hide a dead member until gRPC's
        keep-alive noticed, and a renewal is only every TTL/4 seconds.
        """
        deadline = time.monotonic() + (timeout or self.timeout)
        last = "no answer"
        for step in range(len(self._channels) * 3):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with self._lock:
                index = (self._current + step) % len(self._channels)
            call = self._channels[index].stream_stream(
                "/etcdserverpb.Lease/LeaseKeepAlive",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=pb.LeaseKeepAliveResponse.FromString,
            )
            answers: Iterator[pb.LeaseKeepAliveResponse] = call(
                iter([pb.LeaseKeepAliveRequest(ID=lease)]), timeout=left
            )
            try:
                for answer in answers:
                    with self._lock:
                        self._current = index
                    return int(answer.TTL)
            except grpc.RpcError as exc:
                last = f"{exc.code().name}: {exc.details()}"
                if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                    break
                continue
            finally:
                answers.cancel()  # type: ignore[attr-defined]
        raise EtcdUnavailable(f"etcd LeaseKeepAlive ({', '.join(self.endpoints)}): {last}")

    def status(self, endpoint: int = 0, timeout: float = 1.0) -> pb.StatusResponse:
        """One member's status (its raft leader, db size): no failover, it asks that member."""
        stub = self._stub(
            self._channels[endpoint], "/etcdserverpb.Maintenance/Status", pb.StatusResponse
        )
        try:
            reply: pb.StatusResponse = stub(pb.StatusRequest(), timeout=timeout)
        except grpc.RpcError as exc:
            raise EtcdUnavailable(f"etcd {self.endpoints[endpoint]}: {exc.code().name}") from None
        return reply

    def close(self) -> None:
        for channel in self._channels:
            channel.close()


class WatchStream:
    """One open Watch: iterate its answers; :meth:`cancel` ends it from any thread.

    Why the request side stays open until cancelled: etcd ends a watch stream whose client
    closed its sending half, so the request iterator blocks after the create request."""

    def __init__(self, channel: grpc.Channel, create: pb.WatchRequest) -> None:
        self._done = threading.Event()
        self.endpoint = ""

        def requests() -> Iterator[pb.WatchRequest]:
            yield create
            self._done.wait()

        call = channel.stream_stream(
            "/etcdserverpb.Watch/Watch",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.WatchResponse.FromString,
        )
        self._answers: Iterator[pb.WatchResponse] = call(requests())

    def __iter__(self) -> Iterator[pb.WatchResponse]:
        try:
            yield from self._answers
        except grpc.RpcError as exc:
            if self._done.is_set():
                return
            raise EtcdUnavailable(f"etcd Watch: {exc.code().name}: {exc.details()}") from None

    def cancel(self) -> None:
        self._done.set()
        self._answers.cancel()  # type: ignore[attr-defined]


def retry_unavailable(call: Callable[[], T], attempts: int, pause: float) -> T:
    """``call()`` again after :class:`EtcdUnavailable`, up to ``attempts`` times."""
    for attempt in range(attempts):
        try:
            return call()
        except EtcdUnavailable:
            if attempt == attempts - 1:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover
