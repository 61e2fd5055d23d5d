"""The agents' telemetry handed to the detector off the event loop, through a bounded queue.

Why a queue and a thread: the agent service receives telemetry on the gRPC event loop, where
every agent's session, every binding stream and every admin call also run; judging one step of
a 16,384-rank job costs the detector 20-30 ms. A thread of its own keeps that off the loop, and
a bounded queue keeps a burst of telemetry (many agents reporting at once, a detector stuck on
a lock) from growing memory: a report that does not fit is dropped and counted, as the agents
themselves drop rather than block ranks. A dropped report costs the detector one step of one
host's view; it judges each step once enough hosts have reported it, or a later one completes.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading

from c4p.detector.summary import TelemetryReport, TelemetrySink

log = logging.getLogger("c4p.service.sink")

_STOP = object()


class QueuedSink:
    """A :class:`TelemetrySink` that returns at once and feeds ``target`` from one thread."""

    def __init__(self, target: TelemetrySink, capacity: int = 1024) -> None:
        self.target = target
        self.queue: queue.Queue[object] = queue.Queue(maxsize=capacity)
        self.accepted = 0
        self.dropped = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="c4p-detector", daemon=True)
        self._thread.start()

    def accept(self, report: TelemetryReport) -> None:
        try:
            self.queue.put_nowait(report)
            self.accepted += 1
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float = 5.0) -> None:
        """Stop after what is queued (bounded by ``timeout``); later reports are dropped."""
        # A worker stuck on a full queue is a daemon thread: it ends with the process.
        with contextlib.suppress(queue.Full):
            self.queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (item := self.queue.get()) is not _STOP:
            assert isinstance(item, TelemetryReport)
            try:
                self.target.accept(item)
            except Exception:  # the detector's bug must not end the worker
                self.failed += 1
                log.exception("detector failed on a report", extra={"event": "detector-failed"})
