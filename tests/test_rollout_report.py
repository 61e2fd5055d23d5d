"""The rollout report from a real decision log: jobs run in shadow, a link is drained, then every
job goes active. The report's numbers (read through the admin API, from the store file, and by
``c4p report``) are checked against an independent recomputation here: ECMP from
``solver.yardstick.ecmp`` with the recorded seed, c4p from the paths of the bindings the clients
actually received, both evaluated with ``solver.yardstick.evaluate``; links over line rate by
offered load, written out again below. Nothing of :mod:`c4p.figures.rollout` or the reconciler's
prediction code is reused."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from service_cases import ADMIN_TOKEN, busy_fabric, clients, hosts, serving, wait_until
from typer.testing import CliRunner

from c4p.cli import app
from c4p.client import communicator
from c4p.figures.rollout import RolloutReport, from_pb, rollout
from c4p.store.base import (
    ControlMode,
    DecisionRecord,
    DecisionResult,
    JobPredictionRecord,
)
from c4p.store.sqlite import read_decisions
from solver.workload.flows import Workload
from solver.workload.jobs import CommunicatorSpec, JobsFile, JobSpec
from solver.workload.patterns import derive_workload
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import evaluate
from topology.model import Fabric, LinkStatus

FABRIC = busy_fabric()
HOSTS = hosts(FABRIC)
SEED = 7
JOBS = {  # four hosts on four leaves each: rings cross the spines
    "j1": [HOSTS[0], HOSTS[2], HOSTS[4], HOSTS[6]],
    "j2": [HOSTS[8], HOSTS[10], HOSTS[12], HOSTS[14]],
    "j3": [HOSTS[1], HOSTS[3], HOSTS[9], HOSTS[11]],
}
RING = {"qps_per_connection": 2, "channels": 2}


def _offered_over(fabric: Fabric, workload: Workload, paths: list[tuple[int, ...]]) -> set[int]:
    """Switch-to-switch link directions offered more than their speed, when every NIC port
    sends at the speed of its own link, shared by its QPs in proportion to their rate."""
    index = fabric.index
    out_of: dict[str, float] = {}
    for f in workload.flows:
        out_of[f.src] = out_of.get(f.src, 0.0) + f.rate
    switches = {s.name for s in fabric.switches}
    load: dict[int, float] = {}
    for f, path in zip(workload.flows, paths, strict=True):
        if not path:
            continue
        sent = float(index.res_capacity[path[0]]) * f.rate / out_of[f.src]
        for r in path:
            u, v = index.resource_name(r).split("->")
            if u.partition(":")[0] in switches and v.partition(":")[0] in switches:
                load[r] = load.get(r, 0.0) + sent
    return {r for r, x in load.items() if x > float(index.res_capacity[r]) * (1 + 1e-9)}


def _per_job_over(workload: Workload, paths: list[tuple[int, ...]], hot: set[int]) -> int:
    """Job-link pairs over line rate, summed over jobs."""
    crossed: dict[str, set[int]] = {}
    for f, path in zip(workload.flows, paths, strict=True):
        crossed.setdefault(f.job, set()).update(hot.intersection(path))
    return sum(len(v) for v in crossed.values())


def test_report_matches_an_independent_recomputation(tmp_path: Path) -> None:
    rollout_cfg = {"default": "shadow"}
    planner = {"budget_s": 1.0, "seed": SEED}
    with (
        serving(FABRIC, tmp_path, rollout=rollout_cfg, planner=planner) as service,
        clients(service.address) as (flow, admin),
    ):
        watches = {}
        for name, placed in JOBS.items():
            job = flow.register_job(name, hosts=placed)
            watches[name] = job.watch()
            reply = job.submit([communicator("dp", **RING)])  # type: ignore[arg-type]
            assert watches[name].wait_revision(reply.revision, 30)
        link = next(lk.id for lk in admin.fabric().links if lk.id.startswith("leaf-00:"))
        drain = admin.drain(link, "test", wait=True).decision
        assert all(len(w.mirror.bindings) == 0 for w in watches.values())  # shadow: nothing
        for name in JOBS:
            epoch = admin.set_control_mode(name, "active", wait=True).decision.epoch
            assert wait_until(lambda n=name, e=epoch: watches[n].mirror.epoch >= e, 30)  # type: ignore[misc]
        received = {name: w.mirror.snapshot() for name, w in watches.items()}
        api = [from_pb(d) for d in admin.decision_log()]
        online = CliRunner().invoke(
            app,
            ["report", "--controller", service.address, "--interval", "1e9", "--json", "-"],
            env={"C4P_ADMIN_TOKEN": ADMIN_TOKEN},
        )
        for w in watches.values():
            w.stop()
    stored = read_decisions(tmp_path / "c4p.db")
    by_api = rollout(api, 1e9)  # one interval: a row per mode, no timing in the test
    by_store = rollout(stored, 1e9)
    cli = CliRunner().invoke(
        app, ["report", "--store", str(tmp_path / "c4p.db"), "--interval", "1e9", "--json", "-"]
    )
    assert cli.exit_code == 0, cli.output
    by_cli = RolloutReport.model_validate(json.loads(cli.output))
    assert online.exit_code == 0, online.output
    by_online = RolloutReport.model_validate(json.loads(online.output))
    assert by_api == by_store == by_cli == by_online

    # -- the independent recomputation --------------------------------------------------------
    drained = FABRIC.with_link_status({FABRIC.index.link_number(link): LinkStatus.DRAINED})
    ring = CommunicatorSpec.model_validate({"id": "dp", **RING})
    specs = tuple(JobSpec(id=n, hosts=tuple(h), communicators=(ring,)) for n, h in JOBS.items())
    workload = derive_workload(drained, JobsFile(jobs=specs))
    index = drained.index
    ecmp = ecmp_paths(drained, workload.flows, SEED)
    planned = [
        index.path_resources(received[f.job][(f.communicator, f.connection, f.qp)].path)
        for f in workload.flows
    ]
    ecmp_eval = evaluate(drained, workload, list(ecmp.paths))
    c4p_eval = evaluate(drained, workload, planned)
    mean_ecmp = sum(j.busbw_gbps or 0.0 for j in ecmp_eval.jobs) / len(JOBS)
    mean_c4p = sum(j.busbw_gbps or 0.0 for j in c4p_eval.jobs) / len(JOBS)
    over_ecmp = _per_job_over(
        workload, list(ecmp.paths), _offered_over(drained, workload, list(ecmp.paths))
    )
    over_c4p = _per_job_over(workload, planned, _offered_over(drained, workload, planned))

    rows = {r.mode.value: r for r in by_api.rows}
    assert set(rows) == {"shadow", "active"}
    shadow, active = rows["shadow"], rows["active"]
    flows = len(workload.flows)
    assert flows == 3 * 8 * 2 * 2  # jobs x (2 rails x 4 hosts) connections x channels x QPs
    assert shadow.jobs == active.jobs == 3
    assert active.moves == 0  # activation moved nothing: shadow planned what active got ...
    assert shadow.busbw_c4p_gbps == pytest.approx(mean_c4p, rel=1e-9)  # ... so this holds
    assert active.busbw_c4p_gbps == pytest.approx(mean_c4p, rel=1e-9)
    assert shadow.busbw_ecmp_gbps == pytest.approx(mean_ecmp, rel=1e-9)
    assert active.busbw_ecmp_gbps == pytest.approx(mean_ecmp, rel=1e-9)
    assert mean_c4p > mean_ecmp  # ECMP collides on this fabric with this seed
    assert (active.over_ecmp, active.over_c4p) == (over_ecmp, over_c4p)
    assert active.pushed == flows  # each QP pushed once, when its job went active
    assert shadow.pushed >= flows  # every QP would have moved off its default port
    assert shadow.failures == (1 if drain.jobs_on_links else 0) and drain.jobs_on_links
    assert active.failures == 0
    modes_seen = [
        {p.control.value for p in d.predictions} for d in api if d.predictions
    ]  # plans with a shadow job / an active job, counted from the raw log
    assert shadow.replans == sum("shadow" in m for m in modes_seen)
    assert active.replans == sum("active" in m for m in modes_seen)


def test_report_refuses_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["report", "--store", str(tmp_path / "none.db")])
    both = runner.invoke(app, ["report"])
    interval = runner.invoke(app, ["report", "--store", "x.db", "--interval", "0"])
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 10)
    not_store = runner.invoke(app, ["report", "--store", str(junk)])
    with socket.socket() as s:  # a port nothing listens on (bound, never listened)
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
        down = runner.invoke(
            app, ["report", "--controller", address], env={"C4P_ADMIN_TOKEN": ADMIN_TOKEN}
        )
    no_token = runner.invoke(
        app, ["report", "--controller", address, "--token-env", "C4P_TEST_UNSET_TOKEN"]
    )
    for result in (missing, both, interval, not_store, down, no_token):
        assert result.exit_code == 2 and "error:" in result.output
        assert "Traceback" not in result.output
    assert "no such file" in missing.output
    assert "exactly one of" in both.output
    assert "--interval" in interval.output
    assert "UNAVAILABLE" in down.output
    assert "C4P_TEST_UNSET_TOKEN" in no_token.output


def test_intervals_modes_failures_by_hand() -> None:
    """Three plans and a failed one, figures worked out by hand."""

    def p(job: str, mode: str, busbw: float, ecmp: float, **more: int) -> JobPredictionRecord:
        return JobPredictionRecord(
            job_id=job,
            busbw_gbps=busbw,
            line_rate_gbps=400,
            busbw_fraction=busbw / 400,
            control=ControlMode(mode),
            ecmp_busbw_gbps=ecmp,
            **more,
        )

    def d(seq: int, at: float, *preds: JobPredictionRecord, **more: object) -> DecisionRecord:
        return DecisionRecord.model_validate(
            {"sequence": seq, "epoch": seq, "at": at, "reason": "", "result": "planned",
             "predictions": preds, **more}
        )  # fmt: skip

    log = [
        d(1, 100.0, p("a", "shadow", 300, 200, bindings_pushed=8), jobs_off=("c",)),
        d(
            2,
            105.0,
            p("a", "shadow", 400, 200, moved=2, links_over_ecmp=3),
            triggers=("link x--y down",),
            jobs_on_links=("a",),
        ),  # fmt: skip
        d(3, 125.0, p("a", "active", 400, 250, bindings_pushed=8), p("b", "shadow", 100, 100)),
        DecisionRecord(sequence=4, epoch=3, at=126.0, reason="", result=DecisionResult.FAILED),
    ]
    report = rollout(reversed(log), 20.0)  # any order
    rows = [(r.start, r.mode.value, r.jobs, r.busbw_ecmp_gbps, r.busbw_c4p_gbps, r.replans,
             r.moves, r.pushed, r.failures, r.over_ecmp) for r in report.rows]  # fmt: skip
    assert report.decisions == 3 and (report.first_sequence, report.last_sequence) == (1, 3)
    assert rows == [
        (100.0, "off", 1, None, None, 1, 0, 0, 0, 0),
        (100.0, "shadow", 1, 200.0, 400.0, 2, 2, 8, 1, 3),  # the last plan's prediction of a
        (120.0, "shadow", 1, 100.0, 100.0, 1, 0, 0, 0, 0),
        (120.0, "active", 1, 250.0, 400.0, 1, 0, 8, 0, 0),
    ]
    assert report.rows[1].gain == pytest.approx(1.0)
    with pytest.raises(ValueError, match="interval_s"):
        rollout(log, 0)
