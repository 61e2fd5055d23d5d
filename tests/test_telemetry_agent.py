"""Telemetry from the ranks to the controller: the agent's folding, the checked conversion, and
the whole path on real processes (C rank -> ``c4p agent`` -> controller over gRPC -> sink)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from agent_cases import AGENT_TOKEN, agents_section, real_network
from libc4p_cases import Rank, agent, build_libc4p, ranks
from service_cases import hosts, serving, spread_fabric, wait_until

from c4p.agent import wire
from c4p.agent.telemetry import Limits, TelemetryBook, busy_ns, report_pb
from c4p.agent.wire import STEP_UNKNOWN, Arrive, Complete, Report, Transfer
from c4p.api.v1 import agent_pb2 as pb
from c4p.detector.summary import ConnectionKey, StepSummary, TelemetryReport
from c4p.service.agent_telemetry import BadTelemetry, from_pb

MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _book(**limits: int) -> tuple[TelemetryBook, Clock]:
    clock = Clock()
    return TelemetryBook("h0", Limits(**limits), clock), clock


def test_busy_time_is_the_union_of_the_intervals() -> None:
    assert busy_ns([]) == 0
    assert busy_ns([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25
    assert busy_ns([(20, 30), (0, 40)]) == 40


def test_a_step_folds_two_ranks_and_their_connections() -> None:
    book, clock = _book()
    key = ConnectionKey("dp", 0, 1, 2, 0)
    # Rank 0 finishes step 4 at 100 ms, then computes 30 ms; rank 1 arrives late (a straggler).
    first = Report(
        0,
        (),
        (Arrive("dp", 0, 4, "AllReduce", 1 << 20, 90 * MS),),
        (Complete("dp", 0, 4, 100 * MS),),
    )
    book.take("job", 7, 1, first)
    clock.now = 130 * MS
    second = Report(
        3,  # this rank's ring dropped 3 samples so far
        (
            Transfer("dp", 0, 1, 2, 0, 5, 1000, 140 * MS, 150 * MS),
            Transfer("dp", 0, 1, 2, 0, 5, 1000, 145 * MS, 160 * MS),
            Transfer("dp", 0, 1, 2, 0, STEP_UNKNOWN, 500, 165 * MS, 170 * MS),  # by time
        ),
        (
            Arrive("dp", 0, 5, "AllReduce", 1 << 20, 130 * MS),
            Arrive("dp", 1, 5, "AllReduce", 1 << 20, 160 * MS),
        ),
        (Complete("dp", 1, 5, 171 * MS), Complete("dp", 0, 5, 172 * MS)),
    )
    book.take("job", 7, 1, second)
    assert book.collect(clock.now + 100 * MS) is not None  # the progress; step 5 lingers
    report = book.collect(clock.now + 250 * MS)
    assert report is not None
    steps = {s.step: s for s in report.steps}
    five = steps[5]
    assert (five.job_id, five.host, five.communicator, five.plan_epoch) == ("job", "h0", "dp", 7)
    assert (five.collective, five.bytes) == ("AllReduce", 1 << 20)
    ranks_ = {r.rank: r for r in five.ranks}
    assert ranks_[0].compute_ns == 30 * MS and ranks_[0].wait_ns == 42 * MS
    assert ranks_[1].compute_ns == 0 and ranks_[1].wait_ns == 11 * MS  # its first call here
    (conn,) = five.connections
    assert conn.key == key and conn.bytes == 2500 and conn.transfers == 3
    assert conn.busy_ns == 25 * MS  # [140, 160) and [165, 170)
    assert conn.rate_gbps == pytest.approx(2500 * 8 / (25 * MS))


def test_progress_shows_a_rank_inside_a_call_and_the_drops() -> None:
    book, clock = _book(progress_every_ns=1000 * MS, forget_after_ns=600_000 * MS)
    clock.now = 10 * MS
    book.take("job", 1, 1, Report(5, (), (Arrive("dp", 0, 0, "AllReduce", 8, 10 * MS),), ()))
    book.take(
        "job",
        1,
        2,
        Report(
            2, (), (Arrive("dp", 1, 0, "AllReduce", 8, 10 * MS),), (Complete("dp", 1, 0, 20 * MS),)
        ),
    )
    report = book.collect(500 * MS)
    assert report is not None and not report.steps  # rank 0 never completed: step 0 stays open
    (progress,) = report.progress
    assert progress.dropped == 7  # the two sessions' rings
    inside, outside = progress.ranks
    assert (inside.rank, inside.last_arrived, inside.last_completed) == (0, 0, -1)
    assert inside.inside_ns == 490 * MS and inside.idle_ns == 0
    assert (outside.rank, outside.inside_ns, outside.idle_ns) == (1, 0, 480 * MS)
    assert book.collect(600 * MS) is None  # the next progress is due at 1.5 s
    assert book.collect(1500 * MS) is not None
    assert book.collect(700_000 * MS) is None and not book.jobs  # idle 10 min: forgotten


def test_a_qp_behind_its_siblings_in_an_open_call_has_transfers_posted() -> None:
    """Rank 1 is inside step 0; rank 0's QPs 0 and 1 to it (channel 0) each completed two
    transfers, QP 2 one and QP 3 none: those two are one and two transfers behind, posted and
    not completed. Rank 2's connection to rank 1 on its own channel has no sibling ahead of it
    (nothing started: it may simply not have been sent yet), so nothing is posted. Once the
    call completes, nothing is open and nothing is posted; and the count survives the wire."""
    book, clock = _book(progress_every_ns=1000 * MS)
    t = [Transfer("dp", 0, 1, 0, q, 0, 100, k * MS, k * MS + 5) for q in (0, 1) for k in (1, 2)]
    t += [Transfer("dp", 0, 1, 0, 2, 0, 100, MS, MS + 5)]
    t += [Transfer("dp", 2, 1, 1, 0, 0, 100, MS, MS + 5)]
    book.take("job", 1, 1, Report(0, tuple(t), (Arrive("dp", 1, 0, "AllReduce", 8, 0),), ()))
    book.take("job", 1, 1, Report(0, (Transfer("dp", 0, 1, 0, 3, 9, 0, 0, 1),), (), ()))
    report = book.collect(500 * MS)
    assert report is not None
    (progress,) = report.progress
    posted = {(c.key.src_rank, c.key.channel, c.key.qp): c.posted for c in progress.connections}
    assert posted == {(0, 0, 0): 0, (0, 0, 1): 0, (0, 0, 2): 1, (0, 0, 3): 2, (2, 1, 0): 0}
    back = from_pb(pb.TelemetryReport.FromString(report_pb(report).SerializeToString()), "h0")
    assert back == report
    book.take("job", 1, 1, Report(0, (), (), (Complete("dp", 1, 0, 10 * MS),)))
    later = book.collect(2000 * MS)
    assert later is not None
    assert all(c.posted == 0 for p in later.progress for c in p.connections)


def test_open_steps_are_bounded_and_the_evicted_are_counted() -> None:
    book, clock = _book(max_open_steps=4)
    for step in range(10):  # a rank that arrives and never completes
        book.take("job", 1, 1, Report(0, (), (Arrive("dp", 0, step, "x", 1, step),), ()))
    assert len(book.jobs["job"].steps) == 4
    report = book.collect(10**9)
    assert report is not None and report.progress[0].dropped == 6


def test_the_conversion_round_trips_and_every_bad_field_is_named() -> None:
    book, clock = _book()
    book.take(
        "job",
        3,
        1,
        Report(
            0,
            (Transfer("dp", 0, 1, 0, 1, 0, 10, 1, 2),),
            (Arrive("dp", 0, 0, "AllReduce", 64, 0),),
            (Complete("dp", 0, 0, 3),),
        ),
    )
    report = book.collect(10**9)
    assert report is not None and report.steps and report.progress
    message = report_pb(report)
    assert from_pb(pb.TelemetryReport.FromString(message.SerializeToString()), "h0") == report

    def refused(change: object, field: str) -> None:
        bad = pb.TelemetryReport()
        bad.CopyFrom(message)
        change(bad)  # type: ignore[operator]
        with pytest.raises(BadTelemetry, match=field):
            from_pb(bad, "h0")

    with pytest.raises(BadTelemetry, match=r"telemetry\.host: 'h0', but the session is for 'h9'"):
        from_pb(message, "h9")
    refused(lambda m: setattr(m.steps[0], "host", "h1"), r"telemetry\.steps\[0\]\.host")
    refused(lambda m: setattr(m.steps[0], "communicator", ""), r"steps\[0\]\.communicator: empty")
    refused(lambda m: setattr(m.steps[0], "job_id", "x" * 200), r"steps\[0\]\.job_id: 200 bytes")
    refused(lambda m: m.steps[0].connections[0].ClearField("key"), r"connections\[0\]\.key")
    refused(lambda m: setattr(m.steps[0].connections[0], "transfers", 0), r"\.transfers: 0")
    refused(lambda m: m.steps[0].ranks.append(m.steps[0].ranks[0]), r"ranks: a rank is listed")
    refused(lambda m: setattr(m.progress[0].ranks[0], "last_arrived", -2), r"last_arrived: -2")
    refused(lambda m: setattr(m.progress[0], "job_id", ""), r"progress\[0\]\.job_id: empty")


class Sink:
    def __init__(self) -> None:
        self.reports: list[TelemetryReport] = []
        self.lock = threading.Lock()

    def accept(self, report: TelemetryReport) -> None:
        with self.lock:
            self.reports.append(report)


def test_a_ranks_reports_reach_the_controllers_sink(tmp_path: Path) -> None:
    """A C rank (libc4p) reports a step to a real ``c4p agent`` process, which folds it and
    sends the summary on its ``AgentService.Connect`` stream to a real controller (gRPC over a
    Unix socket); the controller checks it and hands it to its sink."""
    reason = build_libc4p()
    if reason is not None:
        pytest.skip(reason)
    from c4p.client import FlowIntentClient, communicator
    from c4p.files import save_fabric

    fabric = spread_fabric()
    names = hosts(fabric)
    here = names[0]
    network = tmp_path / "network.json"
    save_fabric(real_network(fabric), network)
    short = Path(tempfile.mkdtemp(prefix=f"c4p-tl-{os.getpid()}-"))  # sun_path is short
    try:
        endpoint = f"unix:{short}/controller.sock"
        listen = {"address": endpoint, "grace_s": 0.5}
        with (
            serving(fabric, tmp_path / "svc", agents=agents_section([here]), listen=listen) as svc,
            FlowIntentClient(endpoint) as flow,
        ):
            hub = svc.runtime.agents if svc.runtime else None
            assert hub is not None
            sink = Sink()
            hub.sink = sink
            job = flow.register_job("tele", hosts=[names[0], names[1]])
            job.submit([communicator("dp")])
            ports = [
                {"port": f"{here}:{p.port.name}", "interface": "lo", "address": str(p.port.address)}
                for p in fabric.index.ports
                if p.host.name == here
            ]
            sock = short / "agent.sock"
            config = tmp_path / "agent.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "host": here,
                        "controllers": [endpoint],
                        "token": {"value": AGENT_TOKEN},
                        "ports": ports,
                        "reconnect": {"initial_s": 0.05, "max_s": 0.5},
                        "bindings": {"socket": {"path": str(sock)}, "state_dir": "state"},
                    }
                )
            )
            options = ("--prober", f"modeled:{network}", "--no-os-check")
            args = ("--socket", str(sock), "--job", "tele", "--token", job.token)
            with agent(config, *options), ranks(Rank(*args)) as (r,):
                assert wait_until(lambda: hub.hosts() == {here}, 60)
                assert r.open_code == 0
                r.send("comm dp")
                assert r.expect("comm")[2] == "0"
                for line in (
                    "arrive 0 0 11 AllReduce 4096 1000000",
                    "arrive 0 1 11 AllReduce 4096 1500000",
                    "transfer 0 0 1 3 0 11 4096 1600000 1800000",
                    "transfer 0 1 0 3 0 11 4096 1600000 1700000",
                    "complete 0 0 11 2000000",
                    "complete 0 1 11 2100000",
                ):
                    r.send(line)
                    assert r.expect("report") == ["report", "0"]
                r.send("flush 10000")
                assert r.expect("flush") == ["flush", "0"]

                def summaries() -> list[StepSummary]:
                    with sink.lock:
                        return [s for rep in sink.reports for s in rep.steps]

                assert wait_until(lambda: len(summaries()) == 1, 60)
            (step,) = summaries()
            assert step.job_id == "tele" and step.host == here and step.step == 11
            assert [(x.rank, x.wait_ns) for x in step.ranks] == [(0, 1_000_000), (1, 600_000)]
            assert [(c.key, c.bytes, c.busy_ns) for c in step.connections] == [
                (ConnectionKey("dp", 0, 1, 3, 0), 4096, 200_000),
                (ConnectionKey("dp", 1, 0, 3, 0), 4096, 100_000),
            ]
            assert hub.telemetry_accepted >= 1
            assert svc.runtime is not None
            registry = svc.runtime.metrics.registry
            accepted = registry.get_sample_value(
                "c4p_agent_telemetry_total", {"outcome": "accepted"}
            )
            assert accepted is not None and accepted >= 1
            with sink.lock:
                assert any(p.job_id == "tele" for rep in sink.reports for p in rep.progress)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_a_bad_telemetry_field_ends_the_stream_with_invalid_argument(tmp_path: Path) -> None:
    """Over real gRPC: an agent's telemetry naming another host is refused with the field."""
    import queue

    import grpc

    fabric = spread_fabric()
    here = hosts(fabric)[0]
    short = Path(tempfile.mkdtemp(prefix=f"c4p-tb-{os.getpid()}-"))
    try:
        endpoint = f"unix:{short}/controller.sock"
        listen = {"address": endpoint, "grace_s": 0.5}
        with serving(fabric, tmp_path / "svc", agents=agents_section([here]), listen=listen) as svc:
            hub = svc.runtime.agents if svc.runtime else None
            assert hub is not None
            outgoing: queue.Queue[pb.AgentMessage | None] = queue.Queue()

            def requests() -> object:
                while (message := outgoing.get(timeout=30)) is not None:
                    yield message

            with grpc.insecure_channel(endpoint) as channel:
                connect = channel.stream_stream(
                    "/c4p.v1.AgentService/Connect",
                    request_serializer=lambda m: bytes(m.SerializeToString()),
                    response_deserializer=pb.ControllerMessage.FromString,
                )
                outgoing.put(pb.AgentMessage(hello=pb.AgentHello(host=here)))
                answers = connect(
                    requests(), metadata=(("authorization", f"Bearer {AGENT_TOKEN}"),)
                )
                assert next(answers).HasField("welcome")
                bad = pb.TelemetryReport(
                    host=here, progress=[pb.TelemetryProgress(job_id="j", host="elsewhere")]
                )
                outgoing.put(pb.AgentMessage(telemetry=bad))
                with pytest.raises(grpc.RpcError) as caught:
                    for _ in answers:
                        pass
                outgoing.put(None)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
            assert caught.value.details() == (  # type: ignore[attr-defined]
                f"telemetry.progress[0].host: 'elsewhere', but the report is from {here!r}"
            )
            assert hub.refused["INVALID_ARGUMENT"] == 1 and hub.telemetry_accepted == 0
            assert svc.runtime is not None
            refused = svc.runtime.metrics.registry.get_sample_value(
                "c4p_agent_telemetry_total", {"outcome": "refused"}
            )
            assert refused == 1
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_an_agent_over_its_budget_counts_frames_it_drops_unread() -> None:
    book, clock = _book(max_samples_per_s=100)
    book.take("job", 1, 1, Report(0))  # the job exists
    assert book.admit("job", 60)
    assert not book.admit("job", 60)  # 40 left: dropped whole, counted
    clock.now += 500 * MS  # +50
    assert book.admit("job", 60) and book.dropped == 60
    report = book.collect()
    assert report is not None and report.progress[0].dropped == 60
    frame = wire.encode(
        Report(
            9,
            (Transfer("dp", 0, 1, 0, 0, 1, 1, 1, 2),) * 3,
            (Arrive("dp", 0, 1, "x", 1, 1),),
            (Complete("dp", 0, 1, 2),) * 2,
        )
    )
    assert wire.report_samples(frame[wire.HEADER.size :]) == 6
    with pytest.raises(wire.WireError):
        wire.report_samples(frame[wire.HEADER.size : -1])


def test_one_message_stays_within_its_entry_budget() -> None:
    book, clock = _book(max_entries_per_report=10)
    for step in range(3):  # three steps of 2 ranks and 4 connections: 6 entries each
        transfers = tuple(Transfer("dp", 0, d, 0, 0, step, 1, 1, 2) for d in range(1, 5))
        arrivals = (Arrive("dp", 0, step, "x", 1, 0), Arrive("dp", 1, step, "x", 1, 0))
        done = (Complete("dp", 0, step, 3), Complete("dp", 1, step, 3))
        book.take("job", 1, 1, Report(0, transfers, arrivals, done))
    clock.now = 10**9
    sizes = []
    while (report := book.collect()) is not None:
        sizes.append((len(report.steps), len(report.progress)))
    assert sizes == [(1, 0), (1, 0), (1, 0), (0, 1)]  # the progress alone is 6 entries
