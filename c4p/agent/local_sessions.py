"""Who holds the agent's local socket: the sessions of the ranks, counted per peer uid, and
the bytes the agent has agreed to buffer for frames it is still reading.

Why: a session costs the agent a task and a buffer, so their number is capped
(``bindings.max_sessions``); but a cap alone lets anyone allowed to connect fill it with
connections that never say HELLO and lock the real ranks out, renewing them every
``HELLO timeout``. So a session that has not yet sent its HELLO is the first to go: when the
peer's uid holds ``max_sessions_per_uid`` sessions, or the agent holds ``max_sessions``, the
oldest session still waiting for a HELLO (of that uid, or of anyone) is closed with ERROR
``UNAVAILABLE`` to make room. A rank connects and says HELLO at once, so it is never the oldest
waiting one for long; sessions past their HELLO (checking the token, or serving a rank) are never
closed for room, and a new connection is refused only when every session is such a one.

The byte budget bounds what all sessions together may be waiting to receive: each frame's
declared length is reserved (after its type's own ceiling, ``wire.inbound_limit``) before its
payload is read, and released once read.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from c4p.agent.wire import Code, Error, WireError, encode


@dataclass(eq=False)
class Session:
    """One connection on the socket; ``hello`` once a complete HELLO was read from it."""

    uid: int
    writer: asyncio.StreamWriter
    task: asyncio.Task[None] | None
    opened: float = field(default_factory=time.monotonic)
    hello: bool = False


class Sessions:
    """The live sessions and the read budget (see the module docstring)."""

    def __init__(self, limit: int, per_uid: int, budget: int) -> None:
        self.limit = limit
        self.per_uid = per_uid
        self.budget = budget
        self.buffered = 0
        self.live: dict[Session, None] = {}  # insertion order: the oldest first
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.live)

    def open(self, session: Session) -> None:
        """Count ``session`` in, closing the oldest one still without HELLO if a limit is
        reached; ``WireError`` (UNAVAILABLE) when no such session can make room."""
        mine = [s for s in self.live if s.uid == session.uid]
        if len(mine) >= self.per_uid:
            self._make_room(
                mine,
                f"peer uid {session.uid} holds {self.per_uid} sessions "
                "(bindings.max_sessions_per_uid), all of them past their HELLO",
            )
        if len(self.live) >= self.limit:
            self._make_room(
                list(self.live),
                f"over {self.limit} sessions (bindings.max_sessions), all past their HELLO",
            )
        self.live[session] = None

    def close(self, session: Session) -> None:
        self.live.pop(session, None)

    def _make_room(self, among: list[Session], refusal: str) -> None:
        waiting = next((s for s in among if not s.hello), None)
        if waiting is None:
            raise WireError(Code.UNAVAILABLE, refusal)
        self.close(waiting)
        self.evicted += 1
        age = time.monotonic() - waiting.opened
        try:
            message = f"closed to make room: no HELLO in {age:.1f} s while the agent is full"
            waiting.writer.write(encode(Error(Code.UNAVAILABLE, message)))
            waiting.writer.close()  # flushes the ERROR, then closes
        except (ConnectionError, OSError, RuntimeError):
            waiting.writer.transport.abort()
        if waiting.task is not None:
            waiting.task.cancel()  # it is only waiting for bytes: nothing to undo

    def reserve(self, length: int, what: str) -> None:
        """Count ``length`` bytes about to be buffered; ``WireError`` (UNAVAILABLE) over the
        budget (the frame is refused before a byte of its payload is read)."""
        if self.buffered + length > self.budget:
            raise WireError(
                Code.UNAVAILABLE,
                f"{what} of {length} bytes: the agent is already reading {self.buffered} bytes "
                f"of frames (budget {self.budget}); try again",
            )
        self.buffered += length

    def release(self, length: int) -> None:
        self.buffered -= length
