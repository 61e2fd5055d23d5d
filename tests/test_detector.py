"""The detector on seeded faults: a 256-rank shuffled ring planned by the real planner, every
fault class injected and every benign phase run; plus the pieces on hand-made inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from c4p.detector.detector import Detector
from c4p.detector.findings import DetectorSettings, FindingClass
from c4p.detector.frame import StepWindow, join
from c4p.detector.localize import rank_pattern, tomography
from c4p.detector.paths import build
from c4p.detector.sim import (
    KINDS,
    Model,
    SimJob,
    benign_false_positives,
    scenario,
    score,
    suite,
)
from c4p.detector.summary import (
    ConnectionKey,
    ConnectionStep,
    ProgressReport,
    RankProgress,
    RankStep,
    StepSummary,
    TelemetryReport,
)
from c4p.figures.detect import build_job
from topology.generators import sized_for_gpus


@pytest.fixture(scope="module")
def job() -> SimJob:
    return build_job(sized_for_gpus("rail-optimized", 256), budget=5.0)


def test_seeded_faults_are_found_classified_and_localized(job: SimJob) -> None:
    everything = suite(job, trials=3)
    assert len(everything) == 3 * len(KINDS)
    # a link at 80% of its rate is above the detector's threshold (0.75 of the median): not
    # found, and not mistaken for anything else either
    mild = [o for o in everything if o.scenario == "link 20% slow"]
    assert mild and all(f.cls is FindingClass.COMM_SLOWDOWN for o in mild for f in o.findings)
    outcomes = [o for o in everything if o not in mild]
    scores = {s.cls: s for s in score(outcomes)}
    for cls in ("comm-slowdown", "comm-hang", "compute-slowdown", "noncomm-hang"):
        s = scores[cls]
        assert s.injected > 0
        assert s.recall == 1.0, (cls, s)
        assert s.precision is not None and s.precision >= 0.9, (cls, s)
    # a rank or a hung connection is named exactly; a link at least among the candidates
    # (on a small fabric two links can carry exactly the same flows)
    for cls in ("comm-hang", "compute-slowdown", "noncomm-hang"):
        assert scores[cls].localization == 1.0, scores[cls]
    assert (scores["comm-slowdown"].localization or 0) >= 0.75
    assert scores["comm-slowdown"].in_candidates == 1.0
    assert benign_false_positives(outcomes) == 0
    latency = scores["comm-slowdown"].latency_s
    assert latency is not None and latency > 0  # found after the fault, not before


def test_the_grace_period_is_what_keeps_a_replan_from_being_a_fault(job: SimJob) -> None:
    assert job.replanned is not None
    assert bool((job.replanned.signature != job.paths.signature).any())  # the re-plan moved
    m = Model()
    with_grace = scenario(job, "re-plan moving flows", m, 1, DetectorSettings())
    without = scenario(
        job, "re-plan moving flows", m, 1, DetectorSettings(grace_steps=0, grace_s=0)
    )
    # a grace of steps alone ends before the QPs have moved (they take a time, not steps)
    steps_only = scenario(job, "re-plan moving flows", m, 1, DetectorSettings(grace_s=0))
    assert with_grace.findings == []
    assert [f.cls for f in without.findings] == [FindingClass.COMM_SLOWDOWN]
    assert [f.cls for f in steps_only.findings] == [FindingClass.COMM_SLOWDOWN]


def test_a_slowdown_under_the_persistence_is_not_a_finding(job: SimJob) -> None:
    m = Model(steps_during=2)  # the fault ends before it lasted persist_steps (3)
    out = scenario(job, "slow link", m, 5, DetectorSettings())
    assert out.findings == []


def _index() -> tuple[object, list[ConnectionKey]]:
    """Four connections over links 0..4: 0 and 1 cross link 2, 2 and 3 cross link 3."""
    keys = [ConnectionKey("c", i, (i + 1) % 4, 0, 0) for i in range(4)]
    paths = [[0, 2, 4], [1, 2, 4], [0, 3, 4], [1, 3, 4]]
    ends = np.array([[-1, 0], [-1, 0], [0, 1], [0, 1], [1, -1]], dtype=np.int64)
    index = build(zip(keys, paths, strict=True), [f"l{i}" for i in range(5)], ends, ["s0", "s1"])
    return index, keys


def test_tomography_names_the_link_only_slow_paths_cross() -> None:
    index, _ = _index()
    assert hasattr(index, "rows")
    rows = np.arange(4, dtype=np.int64)
    found = tomography(index, rows[:2], rows[2:], 5)  # type: ignore[arg-type]
    assert (found.kind, found.element, found.bad_paths, found.good_paths) == ("link", "l2", 2, 0)
    assert found.confidence == 1.0
    # one slow path: every link of it that no healthy path crosses is as likely
    one = tomography(index, rows[:1], rows[3:], 5)  # type: ignore[arg-type]
    assert one.element in ("l0", "l2") and one.confidence == 0.5
    assert {c for c, _ in one.candidates} | {one.element} == {"l0", "l2"}


def test_the_delay_matrix_points_at_a_rank_by_its_row_or_column() -> None:
    src = np.array([0, 1, 2, 3, 0, 1, 2, 3], dtype=np.int64)
    dst = np.array([1, 2, 3, 0, 2, 3, 0, 1], dtype=np.int64)
    bad = src == 2
    assert rank_pattern(src, dst, bad) == (2, 1.0)
    assert rank_pattern(src, dst, np.zeros(8, dtype=bool)) is None
    assert rank_pattern(src, dst, np.array([1, 0, 0, 0, 0, 0, 1, 0], dtype=bool)) is None


def _summary(
    host: str, step: int, ranks: list[int], epoch: int = 1, slow: bool = True
) -> StepSummary:
    conns = tuple(
        ConnectionStep(ConnectionKey("c", r, r + 1, 0, 0), 1000, 80 * (1 + (slow and r == 3)), 1)
        for r in ranks
    )
    rs = tuple(RankStep(r, 100, 50) for r in ranks)
    return StepSummary("j", host, "c", step, epoch, "allreduce", 1 << 20, rs, conns)


def test_a_step_is_joined_over_hosts_once_complete_or_overtaken() -> None:
    w = StepWindow(lag=2)
    w.add(_summary("a", 0, [0, 1]))
    w.add(_summary("b", 0, [2, 3]))
    ready = w.ready()
    assert [[s.host for s in parts] for parts in ready] == [["a", "b"]]
    frame = join(ready[0])
    assert frame.rank.tolist() == [0, 1, 2, 3] and frame.rank_host.tolist() == [0, 0, 1, 1]
    assert frame.rates().tolist() == [100.0, 100.0, 100.0, 50.0]  # 8000 bits / 80 or 160 ns
    w.add(_summary("a", 1, [0, 1]))  # host b never reports step 1
    assert w.ready() == []
    for step in (2, 3):
        w.add(_summary("a", step, [0, 1]))
        w.add(_summary("b", step, [2, 3]))
    assert [parts[0].step for parts in w.ready()] == [1, 2, 3]  # 1 overtaken by 3
    w.add(_summary("b", 1, [2, 3]))
    assert w.late == 1


def test_a_new_plan_epoch_starts_the_streaks_over() -> None:
    d = Detector(DetectorSettings(min_peers=4, persist_steps=3, slow_z=2.0, persist_s=0))
    ranks = list(range(12))
    for step, epoch in enumerate([1, 1, 2, 2, 2]):
        d.accept(TelemetryReport("h", steps=(_summary("h", step, ranks, epoch),)))
        found = d.evaluate(float(step))
        # rank 3's connection runs at half rate: three slow steps in a row under one epoch;
        # without paths, the delay matrix's row names the rank
        if step < 4:
            assert found == []
        else:
            assert [(f.element, f.first_step) for f in found] == [("rank 3", 2)]


@pytest.mark.parametrize("first_after", [130, 0])
def test_a_restarted_job_settles_for_the_grace_time_before_it_is_judged(first_after: int) -> None:
    """Steps that jump ahead (the lab's restart: numbering goes on past unreported warm-up
    steps) or start over from 0 (a new communicator): a new incarnation. Its first steps, a
    slow connection among them, are not judged for ``grace_s`` (steps run 10 a second here),
    then the syndrome is found as usual (after ``persist_s``)."""
    d = Detector(
        DetectorSettings(min_peers=4, persist_steps=3, slow_z=2.0, grace_s=1.0, persist_s=0.5)
    )
    ranks = list(range(12))
    found = []
    for step in range(100):  # healthy
        d.accept(TelemetryReport("h", steps=(_summary("h", step, ranks, slow=False),)))
        found += d.evaluate(step * 0.1)
    t0 = 100 * 0.1 + 5.0  # the restart took 5 s
    for i in range(30):  # rank 3's connection slow from the first step after the restart
        d.accept(TelemetryReport("h", steps=(_summary("h", first_after + i, ranks),)))
        now = t0 + i * 0.1
        got = d.evaluate(now)
        assert now >= t0 + 1.0 or got == [], (i, got)
        found += got
    assert [(f.element, f.first_step) for f in found] == [("rank 3", first_after + 10)]


@pytest.mark.parametrize(("slow_steps", "found"), [(15, False), (45, True)])
def test_a_slowdown_must_hold_for_persist_s_not_just_three_steps(
    slow_steps: int, found: bool
) -> None:
    """At 30 steps a second, half a second of a slow connection (a sender kept off the CPU on
    a busy host) is not a finding; a second and a half is, once it held for ``persist_s``."""
    d = Detector(DetectorSettings(min_peers=4, persist_steps=3, slow_z=2.0, persist_s=1.0))
    ranks = list(range(12))
    got = []
    for step in range(100):
        slow = 50 <= step < 50 + slow_steps
        d.accept(TelemetryReport("h", steps=(_summary("h", step, ranks, slow=slow),)))
        got += [f for f in d.evaluate(step / 30) if not f.cleared]
    if found:
        (f,) = got
        assert (f.element, f.first_step) == ("rank 3", 50)
        assert f.detected_s - f.started_s >= 1.0
    else:
        assert got == []


def test_a_rank_frozen_inside_its_call_is_the_head_of_those_behind() -> None:
    """A ring of 6; rank 2 stopped inside step 10 (SIGSTOP mid-call). Its successor 3 finished
    a round more and blocks in step 10 too; the rest ran on into step 11 and wait there. Nobody
    is outside a call, nor are all in one step: the ranks furthest behind hold the others, and
    of them the one not fed by another rank behind (2: its predecessor 1 went on) is named."""
    keys = [ConnectionKey("c", r, (r + 1) % 6, 0, 0) for r in range(6)]
    ends = np.array([[-1, -1]] * 6, dtype=np.int64)
    index = build(((k, [i]) for i, k in enumerate(keys)), [f"l{i}" for i in range(6)], ends, [])
    d = Detector()
    d.set_paths("j", "c", index)
    s = 1_000_000_000
    ranks = tuple(
        RankProgress("c", r, 10 if r in (2, 3) else 11, 9 if r in (2, 3) else 10, 3 * s, 0)
        for r in range(6)
    )
    d.accept(TelemetryReport("h", progress=(ProgressReport("j", "h", ranks),)))
    (f,) = d.evaluate(100.0)
    assert (f.cls, f.element, f.step) == (FindingClass.NONCOMM_HANG, "rank 2", 10)
    # still moving (inside for less than the threshold): no hang
    young = tuple(RankProgress(r.communicator, r.rank, r.last_arrived, r.last_completed, s, 0)
                  for r in ranks)  # fmt: skip
    d2 = Detector()
    d2.set_paths("j", "c", index)
    d2.accept(TelemetryReport("h", progress=(ProgressReport("j", "h", young),)))
    assert d2.evaluate(100.0) == []


def test_a_rank_frozen_in_a_ring_run_both_ways_is_the_centre_of_those_behind() -> None:
    """A ring of 9 run both ways (each rank sends to both neighbours); rank 6 stopped inside
    step 10. Its neighbours 5 and 7 block in step 10, and theirs, 4 and 8, too; the rest ran on.
    Every rank behind is fed by another one behind, so no head shows by direction (the
    one-way rule named rank 4 or listed them all); the frozen rank is the centre of them."""
    n = 9
    keys = [ConnectionKey("c", r, (r + d) % n, 0, 0) for r in range(n) for d in (1, n - 1)]
    ends = np.array([[-1, -1]] * len(keys), dtype=np.int64)
    index = build(
        ((k, [i]) for i, k in enumerate(keys)), [f"l{i}" for i in range(len(keys))], ends, []
    )
    s = 1_000_000_000
    for frozen, spread in ((6, 2), (0, 1), (3, 3)):
        behind = {(frozen + k) % n for k in range(-spread, spread + 1)}
        d = Detector()
        d.set_paths("j", "c", index)
        ranks = tuple(
            RankProgress("c", r, 10 if r in behind else 11, 9 if r in behind else 10, 3 * s, 0)
            for r in range(n)
        )
        d.accept(TelemetryReport("h", progress=(ProgressReport("j", "h", ranks),)))
        (f,) = d.evaluate(100.0)
        assert (f.cls, f.element, f.step) == (FindingClass.NONCOMM_HANG, f"rank {frozen}", 10)
        assert f.confidence == 1.0 and f.candidates == ()


def test_a_rank_stopped_between_calls_is_found_though_its_peers_spread_over_steps() -> None:
    """A ring of 9; rank 6 stopped outside a call (in its compute). Its peers did not all stop
    in one step: 7 to 3 wait in step 10, 4 and 5 got on into step 11. Only two ranks wait in
    the newest step, yet every other rank is stuck: rank 6 is the hang."""
    s = 1_000_000_000
    ranks = tuple(
        RankProgress("c", 6, 9, 9, 0, 3 * s)
        if r == 6
        else RankProgress("c", r, 11 if r in (4, 5) else 10, 10 if r in (4, 5) else 9, 3 * s, 0)
        for r in range(9)
    )
    d = Detector()
    d.set_paths("j", "c", None)  # the communicator is known (from its steps, in a real job)
    d.accept(TelemetryReport("h", progress=(ProgressReport("j", "h", ranks),)))
    (f,) = d.evaluate(100.0)
    assert (f.cls, f.element) == (FindingClass.NONCOMM_HANG, "rank 6")


def test_the_report_counts_by_interval_and_mode_by_hand() -> None:
    from c4p.detector.report import detection_report

    events = [
        {"at": 100.0, "kind": "finding", "mode": "active", "finding_class": "comm-slowdown",
         "latency_s": 2.0, "truth": "tp"},
        {"at": 110.0, "kind": "finding", "mode": "active", "finding_class": "comm-slowdown",
         "latency_s": 4.0, "truth": "fp"},
        {"at": 120.0, "kind": "stats", "mode": "active", "steps": 10, "wait_s": 1.5,
         "busbw_gbps": 100.0},
        {"at": 150.0, "kind": "stats", "mode": "active", "steps": 30, "wait_s": 0.5,
         "busbw_gbps": 200.0},
        {"at": "1970-01-01T00:02:45Z", "kind": "finding", "mode": "shadow",
         "finding_class": "noncomm-hang", "latency_s": 3.0},
        {"at": 170.0, "kind": "cleared", "mode": "active"},
    ]  # fmt: skip
    rows = detection_report(events, 60.0)
    got = [(r.start, r.mode, r.detections, r.latency_s, r.false_positives, r.cleared, r.steps,
            r.wait_s, r.busbw_gbps) for r in rows]  # fmt: skip
    assert got == [
        (100.0, "active", {"comm-slowdown": 2}, 3.0, 1, 0, 40, 2.0, 175.0),
        (160.0, "active", {}, None, None, 1, 0, 0.0, None),
        (160.0, "shadow", {"noncomm-hang": 1}, 3.0, None, 0, 0, 0.0, None),
    ]


def test_report_events_file_errors_are_one_line(tmp_path: object) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from c4p.cli import app

    assert isinstance(tmp_path, Path)
    bad = tmp_path / "events.json"
    bad.write_text('{"decisions": []}')
    result = CliRunner().invoke(app, ["report", "--events", str(bad)])
    assert result.exit_code == 2 and "no 'events' list" in result.output
    assert "Traceback" not in result.output
    good = tmp_path / "good.json"
    good.write_text('{"events": [{"at": 5.0, "kind": "finding", "mode": "shadow", '
                    '"finding_class": "comm-hang", "latency_s": 1.0}]}')  # fmt: skip
    result = CliRunner().invoke(app, ["report", "--events", str(good)])
    assert result.exit_code == 0 and "detections" in result.output, result.output
    result = CliRunner().invoke(app, ["report", "--events", str(good), "--json", "-"])
    (row,) = json.loads(result.output)["detections"]
    assert (row["mode"], row["detections"], row["latency_s"]) == ("shadow", {"comm-hang": 1}, 1.0)


def test_a_planned_rank_that_never_reports_is_a_startup_fault() -> None:
    index, _ = _index()
    d = Detector(DetectorSettings(min_peers=2, startup_s=30.0))
    d.set_paths("j", "c", index)  # type: ignore[arg-type]
    found = []
    for step in range(3):  # ranks 0-2 report; rank 3, in the plan, never does
        d.accept(TelemetryReport("h", steps=(_summary("h", step, [0, 1, 2]),)))
        found += d.evaluate(20.0 * step)
    assert [(f.cls, f.element) for f in found] == [(FindingClass.STARTUP, "rank 3")]
    assert found[0].detected_s == 40.0  # not before startup_s after the job's first report
