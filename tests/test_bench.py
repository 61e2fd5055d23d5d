"""The benchmark harness on tiny scenarios: figures are consistent and the table is written."""

from __future__ import annotations

from pathlib import Path

from c4p.figures import ladder as scenario_ladder
from solver.workload.placement import JobsGenParams
from topology.generators import generate
from topology.model import Fabric


def tiny_ladder() -> list[scenario_ladder.Scenario]:
    def rail() -> Fabric:
        return generate("rail-optimized", units=3, hosts_per_unit=3, rails=2, spines=2)

    def fat() -> Fabric:
        return generate("fat-tree", k=4)

    rings = JobsGenParams(hosts_per_job=3, placement="random", qps_per_connection=2, seed=2)
    return [
        scenario_ladder.Scenario("rings", rail, rings),
        scenario_ladder.Scenario("permutation", rail, scenario_ladder.permutation_jobs(2)),
        scenario_ladder.Scenario("fat rings", fat, JobsGenParams(hosts_per_job=4)),
        scenario_ladder.Scenario("rates", rail, rings, rates=(1.0, 2.0)),
        scenario_ladder.Scenario("failure", rail, rings, fail_link=True),
    ]


def test_rows_are_consistent_and_c4p_is_never_worse(tmp_path: Path) -> None:
    rows = scenario_ladder.run(tiny_ladder())
    assert [r.scenario for r in rows] == ["rings", "permutation", "fat rings", "rates", "failure"]
    for row in rows:
        assert row.flows > 0
        assert row.bound <= row.util_c4p + 1e-9
        assert row.util_c4p <= row.util_greedy + 1e-9
        assert row.gap >= 0
    equal_rate_two_tier = [r for r in rows if r.scenario in ("rings", "permutation", "failure")]
    assert all(r.util_c4p == r.bound for r in equal_rate_two_tier)
    failure = rows[-1]
    assert failure.moved is not None and failure.crossed is not None
    assert failure.crossed > 0 and failure.moved >= failure.crossed

    table = tmp_path / "b.md"
    table.write_text(scenario_ladder.markdown(rows, "c4p bench --test", 1.0))
    text = table.read_text()
    assert text.count("\n| ") == len(rows) + 1  # header + one line per scenario
    scenario_ladder.plot(rows, tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_the_ladder_covers_the_issue() -> None:
    names = " / ".join(s.name for s in scenario_ladder.scenarios())
    for needle in ("16,384 GPUs", "all-to-all", "3-tier rings, 8,192", "fragmented", "unequal",
                   "link failure + re-plan, 4,096", "128 GPUs"):  # fmt: skip
        assert needle in names
    assert any(s.quick for s in scenario_ladder.scenarios())
