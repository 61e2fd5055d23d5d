"""The queue between the agents' telemetry and the detector: it never blocks the event loop,
keeps order, drops and counts what does not fit, survives the detector's failures, and a
controller with agents and a detector enabled hands its agents' telemetry to it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from agent_cases import agents_section
from service_cases import busy_fabric, hosts, serving

from c4p.detector.summary import TelemetryReport
from c4p.service.sink import QueuedSink


class Slow:
    """A detector that takes ``gate`` before each report, and fails on host ``bad``."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.seen: list[str] = []

    def accept(self, report: TelemetryReport) -> None:
        self.gate.wait(10)
        if report.host == "bad":
            raise RuntimeError("the detector's bug")
        self.seen.append(report.host)


def test_reports_reach_the_target_in_order_and_overflow_is_counted() -> None:
    target = Slow()
    sink = QueuedSink(target, capacity=4)
    started = time.perf_counter()
    for n in range(10):  # the worker holds one, the queue four: the rest is dropped
        sink.accept(TelemetryReport(host=f"h{n}"))
    assert time.perf_counter() - started < 5  # accept never waited for the held gate
    assert sink.accepted + sink.dropped == 10 and sink.dropped >= 5
    target.gate.set()
    sink.close()
    assert target.seen == [f"h{n}" for n in range(sink.accepted)]


def test_a_failing_report_is_counted_and_the_next_one_still_arrives() -> None:
    target = Slow()
    target.gate.set()
    sink = QueuedSink(target)
    sink.accept(TelemetryReport(host="bad"))
    sink.accept(TelemetryReport(host="good"))
    sink.close()
    assert (sink.failed, target.seen) == (1, ["good"])


def test_a_controller_with_agents_hands_their_telemetry_to_its_detector(tmp_path: Path) -> None:
    fabric = busy_fabric()
    with serving(fabric, tmp_path, agents=agents_section(hosts(fabric)[:1])) as service:
        runtime = service.runtime
        assert runtime is not None and runtime.agents is not None
        assert isinstance(runtime.agents.sink, QueuedSink)
        assert runtime.agents.sink.target is runtime.detection
