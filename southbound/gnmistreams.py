"""The gNMI session's streams: the Subscribe requests (ON_CHANGE oper-status and LLDP, SAMPLE
counters and ECN marks), the threads that pump them, and each notification as watch updates.

Why apart from :mod:`southbound.gnmi`: a session does two things, one round of questions
(Capabilities, Get: :meth:`~southbound.gnmi.GnmiSession.observe`) and keeping streams open
(:meth:`GnmiStreams.watch`); the second is this mixin, which :class:`~southbound.gnmi.GnmiSession`
inherits and whose state (channel stub, metadata, the calls to cancel) the session sets up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2

from southbound.driver_errors import (
    TargetUnreachable,
)
from southbound.gnmicodec import (
    COUNTERS_PATH,
    ECN_PATH,
    LLDP_NEIGHBORS_PATH,
    OPER_STATUS_PATH,
    Capabilities,
    decode_value,
    elems_of,
)
from southbound.observed import (
    CounterSample,
    InterfaceCounters,
    LldpChanged,
    OperChange,
    Problem,
    StreamSynced,
    WatchUpdate,
)
from southbound.oc_tree import OcTree, TreeError, path_text
from southbound.openconfig import (
    ecn_marks_of,
    interfaces_of,
    streamed_leaves,
)
from southbound.targets import TargetConfig


class GnmiStreams:
    """Subscribe streams of one session (see the module docstring); the session sets the state
    declared here and answers the calls typed here."""

    config: TargetConfig
    name: str
    capabilities: Capabilities | None
    encoding: str
    last_message_at: float | None
    _wall: Callable[[], float]
    _stub: Any
    _metadata: tuple[tuple[str, str], ...]
    _calls: list[Any]
    _lock: threading.Lock
    _release: threading.Event
    _cancelled: threading.Event
    open: Callable[[], Capabilities]
    _error: Callable[[str, Any, float], Exception]
    _prefix: Callable[[], Any]
    _path: Callable[[str], Any]

    def subscriptions(self) -> list[Any]:
        """The SubscribeRequests: ON_CHANGE oper-status alone (few, urgent) and, on a stream
        of its own, SAMPLE counters and ECN marks (many, bulk), so that a backlog of samples
        never holds a status change back (head-of-line blocking)."""
        opts = self.config.gnmi
        interval = int(opts.sample_interval_s * 1e9)
        status = gnmi_pb2.Subscription(
            path=self._path(OPER_STATUS_PATH),
            mode=gnmi_pb2.SubscriptionMode.Value("ON_CHANGE"),
            # Without counters the status stream doubles as the liveness heartbeat.
            heartbeat_interval=0 if opts.counters else interval,
        )
        groups = [[status]]
        if opts.counters:
            paths = [COUNTERS_PATH]
            if opts.ecn and self.capabilities is not None and self.capabilities.has_qos:
                paths.append(ECN_PATH)
            sample = gnmi_pb2.SubscriptionMode.Value("SAMPLE")
            groups.append(
                [
                    gnmi_pb2.Subscription(path=self._path(p), mode=sample, sample_interval=interval)
                    for p in paths
                ]
            )
        return [
            gnmi_pb2.SubscribeRequest(
                subscribe=gnmi_pb2.SubscriptionList(
                    prefix=self._prefix(),
                    mode=gnmi_pb2.SubscriptionList.Mode.Value("STREAM"),
                    encoding=gnmi_pb2.Encoding.Value(self.encoding),
                    subscription=subs,
                )
            )
            for subs in groups
        ]

    def _requests(self, first: Any) -> Iterator[Any]:
        yield first
        # Keep our half of the stream open (some targets end a stream on half-close).
        self._release.wait()

    def watch(self, on_update: Callable[[WatchUpdate], None]) -> None:
        """Stream updates to ``on_update`` until :meth:`cancel`; a broken stream raises
        :class:`TargetUnreachable` (or :class:`TargetAuthError`). The sample stream is read
        by a helper thread, so ``on_update`` is called from two threads."""
        if self.capabilities is None:
            self.open()
        if self._cancelled.is_set():
            return
        calls = [
            self._stub.Subscribe(self._requests(r), metadata=self._metadata)
            for r in self.subscriptions()
        ]
        lldp = self.lldp_subscription()
        optional = (
            [self._stub.Subscribe(self._requests(lldp), metadata=self._metadata)] if lldp else []
        )
        with self._lock:
            self._calls = calls + optional
        if self._cancelled.is_set():  # cancel() ran before the calls were registered
            for call in calls:
                call.cancel()
        self.last_message_at = time.monotonic()
        failures: list[Exception] = []
        helpers = [
            threading.Thread(
                target=self._pump,
                args=(call, on_update, failures, False),
                name=f"c4p-gnmi-samples-{self.name}",
                daemon=True,
            )
            for call in calls[1:]
        ] + [
            threading.Thread(
                target=self._pump_lldp,
                args=(call, on_update),
                name=f"c4p-gnmi-lldp-{self.name}",
                daemon=True,
            )
            for call in optional
        ]
        for helper in helpers:
            helper.start()
        try:
            self._pump(calls[0], on_update, failures, True)
        finally:
            self._release.set()
            for call in calls + optional:
                call.cancel()
            for helper in helpers:
                helper.join(5)
            with self._lock:
                self._calls = []
        if self._cancelled.is_set():
            return
        if failures:
            raise failures[0]
        raise TargetUnreachable("the target ended the Subscribe stream", target=self.name)

    def lldp_subscription(self) -> Any:
        """ON_CHANGE on the LLDP neighbour tables, where the target lists openconfig-lldp and
        the targets file does not turn it off: a recabled port is then re-read at once
        instead of at the next periodic refresh. ``None`` when not asked for."""
        caps = self.capabilities
        if not self.config.gnmi.lldp_on_change or caps is None:
            return None
        if caps.models and "openconfig-lldp" not in caps.models:
            return None
        return gnmi_pb2.SubscribeRequest(
            subscribe=gnmi_pb2.SubscriptionList(
                prefix=self._prefix(),
                mode=gnmi_pb2.SubscriptionList.Mode.Value("STREAM"),
                encoding=gnmi_pb2.Encoding.Value(self.encoding),
                subscription=[
                    gnmi_pb2.Subscription(
                        path=self._path(LLDP_NEIGHBORS_PATH),
                        mode=gnmi_pb2.SubscriptionMode.Value("ON_CHANGE"),
                    )
                ],
            )
        )

    def _pump_lldp(self, call: Any, on_update: Callable[[WatchUpdate], None]) -> None:
        """Read the optional LLDP stream: after its initial sync, any update means the
        wiring may have changed. A target that refuses it costs only this stream (a problem,
        then the periodic refresh); it never ends the status and sample streams.

        The sync itself also asks for one re-read: the wiring was read before this stream
        was subscribed, and a port recabled in between shows only in the stream's initial
        state, which is not compared with that read (a recabling right after the status
        stream synced was missed until the hourly refresh: once in a clean-clone CI run of
        ``test_rediscovery``; ``test_a_recabling_before_the_lldp_stream_syncs_is_reread``
        makes it happen every time)."""
        synced = False
        try:
            for response in call:
                if response.HasField("sync_response"):
                    if not synced:
                        on_update(LldpChanged(target=self.name, at=self._wall()))
                    synced = True
                elif synced and response.HasField("update"):
                    on_update(LldpChanged(target=self.name, at=self._wall()))
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if not self._cancelled.is_set() and code is not grpc.StatusCode.CANCELLED:
                details = exc.details() if hasattr(exc, "details") else str(exc)
                on_update(
                    Problem(
                        target=self.name,
                        path=f"{LLDP_NEIGHBORS_PATH} (ON_CHANGE)",
                        reason=f"not offered ({details}); LLDP is re-read on the periodic "
                        "refresh only",
                    )
                )
        except Exception:  # a consumer's error: the main streams report their own
            return

    def _pump(
        self,
        call: Any,
        on_update: Callable[[WatchUpdate], None],
        failures: list[Exception],
        report_sync: bool,
    ) -> None:
        """Read one stream until it ends; the first failure of any stream ends them all."""
        try:
            for response in call:
                self.last_message_at = time.monotonic()
                if response.HasField("sync_response"):
                    if report_sync:
                        on_update(StreamSynced(target=self.name, at=self._wall()))
                elif response.HasField("update"):
                    for update in self.updates_of(response.update):
                        on_update(update)
        except grpc.RpcError as exc:
            if not self._cancelled.is_set() and not failures:
                failures.append(self._error("Subscribe", exc, 0.0))
        except Exception as exc:  # a consumer's error must not die silently in a thread
            if not failures:
                failures.append(
                    TargetUnreachable(f"update handling failed: {exc!r}", target=self.name)
                )
        finally:
            with self._lock:
                calls = list(self._calls)
            for other in calls:
                other.cancel()

    def updates_of(self, notification: Any) -> list[WatchUpdate]:
        """One streamed notification as oper-status changes, counter samples and problems."""
        at = notification.timestamp / 1e9 if notification.timestamp else self._wall()
        prefix = elems_of(notification.prefix)
        out: list[WatchUpdate] = []
        pairs = []
        for update in notification.update:
            elems = prefix + elems_of(update.path)
            try:
                pairs.append((elems, decode_value(update.val)))
            except ValueError as exc:
                out.append(Problem(target=self.name, path=path_text(elems), reason=str(exc)))
        fast, rest = streamed_leaves(self.name, at, pairs)
        out.extend(fast)
        if not rest:
            return out
        tree = OcTree()
        for elems, value in rest:
            try:
                tree.add(elems, value)
            except TreeError as exc:
                out.append(Problem(target=self.name, path=path_text(elems), reason=str(exc)))
        states, counters, bad = interfaces_of(tree, self.name)
        marks, bad_ecn = ecn_marks_of(tree, self.name)
        out.extend(bad + bad_ecn)
        for state in states:
            out.append(
                OperChange(
                    target=self.name, interface=state.name, oper_status=state.oper_status, at=at
                )
            )
        for name, value in marks.items():
            counters[name] = counters.get(name, InterfaceCounters()).model_copy(
                update={"ecn_marked": value}
            )
        for name, sample in counters.items():
            out.append(CounterSample(target=self.name, interface=name, counters=sample, at=at))
        return out
