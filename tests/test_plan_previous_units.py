"""``c4p plan``: one unit in every column, and ``--previous`` checked against the fabric and jobs.

Why: with job priorities the planner minimizes rate x priority, but ECMP and ``c4p evaluate``
speak plain line rates; a table mixing the two (ECMP 2.50 beside c4p 4.50) misleads. And a plan
made for another fabric or other jobs must not silently steer a re-plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from c4p.cli import app

runner = CliRunner()


def run(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.output


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json", "-"))


def fabric_and_jobs(tmp_path: Path) -> tuple[Path, Path]:
    fabric_path, jobs_path = tmp_path / "f.yaml", tmp_path / "j.yaml"
    run("fabric", "generate", "rail-optimized", "-o", str(fabric_path), "--set", "units=4",
        "--set", "hosts_per_unit=4", "--set", "rails=2", "--set", "spines=2")  # fmt: skip
    run("jobs", "generate", "--fabric", str(fabric_path), "-o", str(jobs_path), "--count", "3",
        "--hosts", "5", "--placement", "random", "--qps", "2", "--seed", "4")  # fmt: skip
    return fabric_path, jobs_path


def test_priorities_are_shown_apart_and_plan_agrees_with_evaluate(tmp_path: Path) -> None:
    fabric_path, jobs_path = fabric_and_jobs(tmp_path)
    jobs = yaml.safe_load(jobs_path.read_text())
    jobs["jobs"][0]["priority"] = 3.0
    jobs_path.write_text(yaml.safe_dump(jobs))
    plan_path = tmp_path / "p.json"
    out = run_json("plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                   "-o", str(plan_path))  # fmt: skip
    util = out["max_link_utilization"]
    evaluated = run_json("evaluate", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                         "--plan", str(plan_path))  # fmt: skip
    assert util["c4p"] == evaluated["plan"]["max_link_utilization"]
    assert util["ecmp"] == evaluated["ecmp"]["max_link_utilization"]
    assert util["lower_bound"] <= util["c4p"] + 1e-9  # a bound in the same (rate) units
    weighted = out["priority_weighted_utilization"]
    assert weighted["c4p"] >= util["c4p"]  # priority 3 on one job weighs its flows up
    assert weighted["lower_bound"] <= weighted["c4p"] + 1e-9
    assert "line rates" in out["units"]
    text = run("plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
               "-o", str(plan_path))  # fmt: skip
    assert "priority-weighted" in text and "NIC line rates" in text


def test_previous_for_another_fabric_or_other_jobs_is_refused(tmp_path: Path) -> None:
    fabric_path, jobs_path = fabric_and_jobs(tmp_path)
    first = tmp_path / "p1.json"
    base = ["plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
            "-o", str(tmp_path / "p2.json")]  # fmt: skip
    run(*base[:-1], str(first))
    planned = json.loads(first.read_text())
    other_fabric = dict(planned, fabric="elsewhere")
    (tmp_path / "other-fabric.json").write_text(json.dumps(other_fabric))
    out = run(*base, "--previous", str(tmp_path / "other-fabric.json"), code=2)
    assert "'elsewhere'" in out and "not" in out
    other_jobs = dict(planned, flows=[dict(f, job="gone") for f in planned["flows"]])
    (tmp_path / "other-jobs.json").write_text(json.dumps(other_jobs))
    out = run(*base, "--previous", str(tmp_path / "other-jobs.json"), code=2)
    assert "other jobs" in out
    assert not (tmp_path / "p2.json").exists()
    # A changed job set: matched flow by flow, the unmatched reported.
    fewer = dict(planned, flows=planned["flows"][3:])
    (tmp_path / "fewer.json").write_text(json.dumps(fewer))
    out_json = run_json(*base, "--previous", str(tmp_path / "fewer.json"))
    assert out_json["previous"] == {
        "matched": len(planned["flows"]) - 3,
        "new": 3,
        "gone": 0,
    }
    assert out_json["plan"]["moved"] == 0  # the flows that stay keep their paths


def test_plan_json_text_is_the_plan_file_model_dumped() -> None:

    from planning_cases import make_flows, ports

    from solver.planner import plan
    from solver.planning.plans import PlanFile, plan_from_paths, plan_json_text
    from topology.formats import TextFormat, dump_model, parse_model
    from topology.generators import RailOptimizedParams, rail_optimized

    fabric = rail_optimized(RailOptimizedParams(units=2, hosts_per_unit=2, rails=2, spines=2))
    n = len(ports(fabric))
    rates = [1.0 if i % 3 else 2.5 for i in range(n)]
    flows = make_flows(fabric, [(i, (i + 3) % n) for i in range(n)], rates)
    result = plan(fabric, flows, budget=1)
    paths = list(result.paths)
    paths[0] = ()  # an unreachable flow has no path
    model = plan_from_paths(fabric, flows, paths, "auto", 3)
    text = plan_json_text(fabric, flows, paths, "auto", 3)
    assert json.loads(text) == json.loads(dump_model(model, TextFormat.JSON))
    assert parse_model(PlanFile, text, TextFormat.JSON, "p.json") == model
    no_seed = plan_json_text(fabric, flows, paths, "auto", None)
    assert "seed" not in json.loads(no_seed)
