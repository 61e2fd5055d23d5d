"""The ``c4p`` command line, run in-process through typer's runner on real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from c4p.cli import app
from c4p.files import load_fabric, load_model, save_model
from solver.planning.plans import plan_from_paths
from solver.workload.jobs import JobsFile
from solver.workload.patterns import derive_workload
from solver.yardstick.ecmp import ecmp_paths

runner = CliRunner()


def run(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.output


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json", "-"))


@pytest.mark.parametrize(
    ("kind", "sets", "switches", "ports"),
    [
        ("leaf-spine", ["leaves=4", "spines=2", "hosts_per_leaf=2"], 6, 8),
        ("rail-optimized", ["units=2", "hosts_per_unit=2", "rails=4", "spines=2"], 10, 16),
        ("fat-tree", ["k=4"], 20, 16),
        ("dual-plane", ["units=2", "hosts_per_unit=2", "rails=2", "spines=2"], 12, 16),
    ],
)
def test_generate_and_show_every_kind(
    kind: str, sets: list[str], switches: int, ports: int, tmp_path: Path
) -> None:
    out = tmp_path / f"{kind}.yaml"
    args = ["fabric", "generate", kind, "-o", str(out)]
    for item in sets:
        args += ["--set", item]
    run(*args)
    fabric = load_fabric(out)
    assert len(fabric.switches) == switches
    shown = run_json("fabric", "show", str(out))
    assert shown["nic_ports"] == ports
    assert sum(shown["switches_by_role"].values()) == switches
    assert shown["bisection_ratio"] == pytest.approx(1.0)


def test_show_reports_oversubscription_and_bisection(tmp_path: Path) -> None:
    out = tmp_path / "ls.json"
    run("fabric", "generate", "leaf-spine", "-o", str(out), "--set", "leaves=4",
        "--set", "spines=2", "--set", "hosts_per_leaf=8")  # fmt: skip
    shown = run_json("fabric", "show", str(out))
    leaf = next(t for t in shown["tiers"] if t["role"] == "leaf")
    assert leaf["oversubscription_min"] == pytest.approx(4.0)
    # Half the hosts (2 leaves x 8 x 400G) can push only 2 leaves x 2 uplinks x 400G across.
    assert shown["bisection_gbps"] == pytest.approx(2 * 2 * 400)
    assert shown["bisection_ratio"] == pytest.approx(0.25)


def test_sized_for_gpus(tmp_path: Path) -> None:
    out = tmp_path / "f.yaml"
    run("fabric", "generate", "rail-optimized", "--gpus", "512", "-o", str(out))
    assert load_fabric(out).index.num_nodes - len(load_fabric(out).switches) == 512


def test_jobs_generate_then_evaluate_ecmp_and_a_plan(tmp_path: Path) -> None:
    fabric_path, jobs_path, plan_path = (
        tmp_path / "f.yaml",
        tmp_path / "j.yaml",
        tmp_path / "p.json",
    )
    run("fabric", "generate", "rail-optimized", "-o", str(fabric_path), "--set", "units=4",
        "--set", "hosts_per_unit=4", "--set", "rails=2", "--set", "spines=4")  # fmt: skip
    made = run_json("jobs", "generate", "--fabric", str(fabric_path), "-o", str(jobs_path),
                    "--count", "2", "--hosts", "5", "--placement", "random",
                    "--qps", "2")  # fmt: skip
    assert made["flows"] == 2 * 5 * 2 * 2  # jobs x hosts x rails x qps (rail rings)
    fabric = load_fabric(fabric_path)
    jobs = load_model(JobsFile, jobs_path)
    assert not set(jobs.jobs[0].hosts or ()) & set(jobs.jobs[1].hosts or ())

    ecmp_only = run_json("evaluate", "--fabric", str(fabric_path), "--jobs", str(jobs_path))
    assert set(ecmp_only) == {"ecmp"}
    assert [j["job"] for j in ecmp_only["ecmp"]["jobs"]] == ["job0", "job1"]

    # A plan that puts every flow exactly where ECMP does must evaluate exactly like ECMP.
    workload = derive_workload(fabric, jobs)
    ecmp = ecmp_paths(fabric, workload.flows, seed=3)
    save_model(plan_from_paths(fabric, workload.flows, ecmp.paths, "copy-of-ecmp"), plan_path)
    both = run_json("evaluate", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                    "--plan", str(plan_path), "--seed", "3")  # fmt: skip
    assert both["plan"]["jobs"] == both["ecmp"]["jobs"]
    assert both["plan"]["max_link_load"] == both["ecmp"]["max_link_load"]

    table = run("evaluate", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                "--plan", str(plan_path))  # fmt: skip
    assert "job0" in table and "busbw" in table


def test_user_errors_exit_2_with_a_located_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("switches: [{name: s0, role: spine, colour: red}]\n")
    out = run("fabric", "show", str(bad), code=2)
    assert "bad.yaml: switches[0].colour: unknown key" in out
    assert "'torus' is not one of" in run(
        "fabric", "generate", "torus", "-o", str(tmp_path / "x.yaml"), code=2
    )
    assert "expected KEY=VALUE" in run(
        "fabric", "generate", "fat-tree", "-o", str(tmp_path / "x.yaml"), "--set", "k", code=2
    )
    assert "no such file" in run("fabric", "show", str(tmp_path / "missing.yaml"), code=2)
    fabric_path = tmp_path / "f.yaml"
    run("fabric", "generate", "fat-tree", "--set", "k=4", "-o", str(fabric_path))
    jobs = tmp_path / "j.yaml"
    jobs.write_text("jobs: [{id: a, hosts: [nope], communicators: [{id: c, pattern: ring}]}]\n")
    out = run("evaluate", "--fabric", str(fabric_path), "--jobs", str(jobs), code=2)
    assert "jobs[0].hosts[0]" in out and "nope" in out
    assert not (tmp_path / "x.yaml").exists()


def _small_fabric_and_jobs(tmp_path: Path, spines: int = 2) -> tuple[Path, Path]:
    fabric_path, jobs_path = tmp_path / "f.yaml", tmp_path / "j.yaml"
    run("fabric", "generate", "rail-optimized", "-o", str(fabric_path), "--set", "units=4",
        "--set", "hosts_per_unit=4", "--set", "rails=2", "--set", f"spines={spines}")  # fmt: skip
    run("jobs", "generate", "--fabric", str(fabric_path), "-o", str(jobs_path), "--count", "3",
        "--hosts", "5", "--placement", "random", "--qps", "2", "--seed", "4")  # fmt: skip
    return fabric_path, jobs_path


def test_plan_writes_a_plan_that_evaluate_accepts_and_beats_ecmp(tmp_path: Path) -> None:
    fabric_path, jobs_path = _small_fabric_and_jobs(tmp_path)
    plan_path = tmp_path / "plan.json"
    out = run_json("plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                   "-o", str(plan_path))  # fmt: skip
    util = out["max_link_utilization"]
    assert util["c4p"] == util["lower_bound"]
    assert util["c4p"] <= util["greedy"] <= util["ecmp"] or util["c4p"] <= util["ecmp"]
    assert out["plan"]["status"] == "optimal"
    evaluated = run_json("evaluate", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                         "--plan", str(plan_path))  # fmt: skip
    assert evaluated["plan"]["max_link_utilization"] == util["c4p"]
    fractions = [j["c4p_busbw_fraction"] for j in out["jobs"]]
    assert [j["busbw_fraction"] for j in evaluated["plan"]["jobs"]] == fractions


@pytest.mark.parametrize("spines", [2, 4])
def test_replan_after_a_failure_moves_only_what_crossed_it(tmp_path: Path, spines: int) -> None:
    fabric_path, jobs_path = _small_fabric_and_jobs(tmp_path, spines)
    first, second = tmp_path / "p1.json", tmp_path / "p2.json"
    before = run_json("plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                      "-o", str(first))  # fmt: skip
    planned = json.loads(first.read_text())
    used = {
        (a, b)
        for f in planned["flows"]
        for a, b in zip(f["path"][1:-2], f["path"][2:-1], strict=True)
        if a.startswith("leaf")
    }
    leaf, spine = sorted(used)[0]
    crossing = {
        (f["job"], f["connection"], f["qp"])
        for f in planned["flows"]
        if any((a, b) == (leaf, spine) for a, b in zip(f["path"], f["path"][1:], strict=False))
    }
    out = run_json("plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                   "-o", str(second), "--previous", str(first),
                   "--fail", f"{leaf}--{spine}")  # fmt: skip
    moved = {(j, int(c), int(q)) for j, _, c, q in (m.split("/") for m in out["moved"])}
    assert crossing and crossing <= moved  # what crossed the failed link must move ...
    assert out["max_link_utilization"]["c4p"] == out["max_link_utilization"]["lower_bound"]
    assert len(moved) < len(planned["flows"]) / 4  # ... and few others (what the bound needs)
    replanned = json.loads(second.read_text())
    assert all(
        (leaf, spine) not in zip(f["path"], f["path"][1:], strict=False) for f in replanned["flows"]
    )
    old = {(f["job"], f["connection"], f["qp"]): f["path"] for f in planned["flows"]}
    for f in replanned["flows"]:
        key = (f["job"], f["connection"], f["qp"])
        assert (f["path"] != old[key]) == (key in moved)  # unmoved flows keep their paths
    assert before["plan"]["moved"] == 0


def test_plan_refuses_bad_options(tmp_path: Path) -> None:
    fabric_path, jobs_path = _small_fabric_and_jobs(tmp_path)
    base = ["plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
            "-o", str(tmp_path / "p.json")]  # fmt: skip
    assert "--strategy 'magic'" in run(*base, "--strategy", "magic", code=2)
    assert "no link 'leaf-x--spine-y'" in run(*base, "--fail", "leaf-x--spine-y", code=2)
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    ("kind", "sets"),
    [
        ("leaf-spine", ["leaves=4", "spines=3", "hosts_per_leaf=2", "nics_per_host=2"]),
        ("rail-optimized", ["units=3", "hosts_per_unit=3", "rails=2", "spines=3"]),
        ("fat-tree", ["k=4"]),
        ("dual-plane", ["units=3", "hosts_per_unit=2", "rails=2", "spines=2"]),
    ],
)
def test_plan_bindings_steer_every_qp_onto_its_planned_path(
    kind: str, sets: list[str], tmp_path: Path
) -> None:
    fabric_path, jobs_path = tmp_path / "f.yaml", tmp_path / "j.yaml"
    args = ["fabric", "generate", kind, "-o", str(fabric_path)]
    for item in sets:
        args += ["--set", item]
    run(*args)
    run("jobs", "generate", "--fabric", str(fabric_path), "-o", str(jobs_path), "--count", "2",
        "--hosts", "3", "--placement", "random", "--qps", "2", "--seed", "9")  # fmt: skip
    bindings_path = tmp_path / "b.json"
    out = run_json("plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                   "-o", str(tmp_path / "p.json"), "--bindings", str(bindings_path))  # fmt: skip
    assert out["bindings"]["as_planned"] and out["bindings"]["differing_links"] == 0
    written = json.loads(bindings_path.read_text())
    planned = {
        (f["job"], f["connection"], f["qp"]): f["path"]
        for f in json.loads((tmp_path / "p.json").read_text())["flows"]
    }
    assert len(written["bindings"]) == len(planned)
    for b in written["bindings"]:
        assert 0xC000 <= b["sport"] <= 0xFFFF
        assert b["path"] == planned[(b["job"], b["connection"], b["qp"])]
