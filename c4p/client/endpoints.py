"""A list of controller endpoints and the one in use: how a client finds the leader.

Why on the client: with two or three replicas only the leader answers; a follower refuses with
``UNAVAILABLE`` and names the leader in the ``c4p-leader`` trailing metadata. A client that holds
the list goes straight to the named leader (no back-off: the answer says where to go), and when
its endpoint is unreachable (the leader died) tries the next one with back-off, since a new
leader needs a lease TTL to be elected. A single endpoint behaves as before.

This is the seam every client uses (the sync and asyncio flow-intent clients, the admin client,
and the host agent): :meth:`Endpoints.follow` is the one rule, the channels are cached per
address, and it is thread-safe (:attr:`ApiError.leader` reads the metadata). The leader a
follower names need not be in the list (a replica may advertise an address the operator did not
write down); it is added. :class:`Method` is the call made on the current endpoint, one class for
the sync and asyncio channels alike (their ``unary_unary``/``unary_stream`` take the same
arguments), so the two clients cannot drift in how they address the leader.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import grpc

from c4p.client.wire import ApiError

C = TypeVar("C")


def parse_targets(targets: str | Sequence[str]) -> list[str]:
    """``"a:1,b:2"`` or ``["a:1", "b:2"]`` -> the list (blank items dropped, order kept)."""
    items = targets.split(",") if isinstance(targets, str) else list(targets)
    found = [t.strip() for t in items if t.strip()]
    if not found:
        raise ValueError("no controller endpoint given")
    return list(dict.fromkeys(found))


class Endpoints(Generic[C]):
    """Controller addresses, the current one, and a channel per address (made by ``dial``)."""

    def __init__(self, targets: str | Sequence[str], dial: Callable[[str], C]) -> None:
        self.targets = parse_targets(targets)
        self._dial = dial
        self._channels: dict[str, C] = {}
        self._index = 0
        self._lock = threading.Lock()
        self.moves = 0
        """How often the client changed endpoint (redirects and fail-overs)."""

    @property
    def several(self) -> bool:
        return len(self.targets) > 1

    @property
    def current(self) -> str:
        with self._lock:
            return self.targets[self._index]

    def channel(self, target: str | None = None) -> C:
        """The channel to ``target`` (default: the current endpoint), made once per address."""
        with self._lock:
            target = self.targets[self._index] if target is None else target
            channel = self._channels.get(target)
            if channel is None:
                channel = self._channels[target] = self._dial(target)
            return channel

    def follow(self, error: ApiError) -> bool:
        """Pick the endpoint for the next try after ``error``; ``True`` when a follower named
        the leader (retry at once), ``False`` otherwise (back off first)."""
        leader = error.leader
        with self._lock:
            if leader:
                if leader not in self.targets:
                    self.targets.append(leader)
                index = self.targets.index(leader)
                if index != self._index:
                    self._index = index
                    self.moves += 1
                return True
            if error.code is grpc.StatusCode.UNAVAILABLE and len(self.targets) > 1:
                self._index = (self._index + 1) % len(self.targets)
                self.moves += 1
            return False

    def channels(self) -> list[C]:
        with self._lock:
            return list(self._channels.values())

    def forget(self) -> None:
        with self._lock:
            self._channels.clear()


class Method(Generic[C]):
    """A unary (or server-streaming) method called on whichever endpoint is current; ``C`` is a
    sync ``grpc.Channel`` or a ``grpc.aio.Channel`` (both build multi-callables alike)."""

    def __init__(
        self, endpoints: Endpoints[C], path: str, response: Any, stream: bool = False
    ) -> None:
        self.endpoints, self.path, self.response, self.stream = endpoints, path, response, stream

    def __call__(self, request: Any, **options: Any) -> Any:
        channel: Any = self.endpoints.channel()
        make = channel.unary_stream if self.stream else channel.unary_unary
        return make(
            self.path,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self.response.FromString,
        )(request, **options)
