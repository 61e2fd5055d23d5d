"""The client's copy of a job's bindings, and the callback contract of a transport plugin.

Why a mirror: the stream sends a full set, then differences, each stamped with a plan epoch, and a
large update may come in parts. The mirror assembles parts, applies each update atomically,
remembers the epoch (the resume point after a reconnect) and calls the plugin back once per QP
that must change: ``apply`` (set the flow label at INIT->RTR, or
``mlx5dv_modify_qp_udp_sport`` on a live QP) or ``withdraw`` (the intent or the whole job is
gone: the QP may go back to the kernel's default label) or ``default`` (the job's control mode
left ``active``: put the QP back on its default port, flow label 0, at once). A full set after a
reconnect only calls back for QPs whose binding differs from what the mirror held, so resuming
never re-applies ports needlessly.

Fail-static lives here too: a broken stream changes nothing in the mirror; the plugin keeps
every port it applied until the controller says otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb

QpId = tuple[str, int, int]
"""(communicator, connection, QP index) within one job."""


@dataclass(frozen=True)
class AppliedBinding:
    """One QP's binding as the transport applies it."""

    communicator: str
    connection: int
    qp: int
    src_rank: int
    dst_rank: int
    channel: int
    src_port: str
    dst_port: str
    udp_sport: int
    flow_label: int
    epoch: int
    path: tuple[str, ...]
    verified: bool = False
    """A probe showed the port take ``path`` (learned/verified port modes)."""

    @property
    def id(self) -> QpId:
        return (self.communicator, self.connection, self.qp)

    def applies_same(self, other: AppliedBinding) -> bool:
        """The transport would do nothing to go from ``other`` to this."""
        return (self.src_port, self.dst_port, self.udp_sport, self.flow_label) == (
            other.src_port,
            other.dst_port,
            other.udp_sport,
            other.flow_label,
        )

    @classmethod
    def from_pb(cls, b: pb.Binding) -> AppliedBinding:
        return cls(
            communicator=b.qp.communicator,
            connection=b.qp.connection,
            qp=b.qp.qp,
            src_rank=b.src_rank,
            dst_rank=b.dst_rank,
            channel=b.channel,
            src_port=b.src_port,
            dst_port=b.dst_port,
            udp_sport=b.udp_sport,
            flow_label=b.flow_label,
            epoch=b.epoch,
            path=tuple(b.path),
            verified=b.verified,
        )


class Action(StrEnum):
    APPLY = "apply"
    WITHDRAW = "withdraw"
    DEFAULT = "default"
    """Back to the default port: flow label 0 at INIT->RTR; on a live QP, the port the kernel
    derives from label 0 (``rdma_calc_flow_label(lqpn, rqpn)``). The job left control mode
    ``active`` (``off`` or ``shadow``); every QP it held comes in one update."""


def control_mode_name(value: int) -> str:
    """``CONTROL_MODE_SHADOW`` -> ``"shadow"``; UNSPECIFIED (an older server) -> ``"active"``."""
    if value == pb.CONTROL_MODE_UNSPECIFIED:
        return "active"
    try:
        return str(pb.ControlMode.Name(value)).removeprefix("CONTROL_MODE_").lower()
    except ValueError:
        return f"<unknown {value}>"


@dataclass(frozen=True)
class BindingChange:
    """What the transport must do for one QP."""

    action: Action
    binding: AppliedBinding
    epoch: int


OnChange = Callable[[BindingChange], None]


class BindingMirror:
    """A job's bindings as last received (thread-safe reads)."""

    def __init__(self, on_change: OnChange | None = None) -> None:
        self.on_change = on_change
        self.bindings: dict[QpId, AppliedBinding] = {}
        self.epoch = 0
        self.intent_revision = 0
        self.state: int = pb.INTENT_STATE_UNSPECIFIED
        self.issues: list[pb.BindingIssue] = []
        self.updates = 0
        self.applied = 0
        self.withdrawn = False
        self.control_mode = "active"
        """The job's control mode as of :attr:`epoch` (off, shadow, active)."""
        self._parts: list[fi.BindingUpdate] = []
        self._cond = threading.Condition()

    def feed(self, message: fi.BindingUpdate) -> list[BindingChange]:
        """Take one message; returns the changes it completed (none while parts are pending)."""
        self._parts.append(message)
        if message.more:
            return []
        parts, self._parts = self._parts, []
        return self._apply(parts)

    def _apply(self, parts: list[fi.BindingUpdate]) -> list[BindingChange]:
        head, last = parts[0], parts[-1]
        incoming = {
            b.id: b for part in parts for b in (AppliedBinding.from_pb(x) for x in part.bindings)
        }
        changes: list[BindingChange] = []
        with self._cond:
            epoch = last.epoch
            released = last.state == pb.INTENT_STATE_WITHDRAWN
            mode = control_mode_name(last.control_mode)
            back = Action.DEFAULT if mode != "active" and not released else Action.WITHDRAW
            if released:  # the job is gone: every binding is withdrawn
                incoming = {}
                gone = list(self.bindings)
            elif head.kind == fi.BindingUpdate.KIND_FULL:
                gone = [k for k in self.bindings if k not in incoming]
            else:
                gone = [
                    (r.communicator, r.connection, r.qp) for part in parts for r in part.removed
                ]
            for key in gone:
                old = self.bindings.pop(key, None)
                if old is not None:
                    changes.append(BindingChange(back, old, epoch))
            for key, binding in incoming.items():
                old = self.bindings.get(key)
                self.bindings[key] = binding
                if old is None or not binding.applies_same(old):
                    changes.append(BindingChange(Action.APPLY, binding, epoch))
            self.epoch = epoch
            self.intent_revision = last.intent_revision
            self.state = last.state
            self.issues = list(last.issues)
            self.withdrawn = released
            self.control_mode = mode
            self.updates += 1
            self.applied += len(changes)
            self._cond.notify_all()
        if self.on_change is not None:
            for change in changes:
                self.on_change(change)
        return changes

    def wait(self, predicate: Callable[[BindingMirror], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked after every update)."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    def discard_parts(self) -> None:
        """Forget a half-received update (the stream broke): it is resent whole on resume."""
        self._parts.clear()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def snapshot(self) -> dict[QpId, AppliedBinding]:
        with self._cond:
            return dict(self.bindings)
