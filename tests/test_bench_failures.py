"""The failure ladder on small fabrics: every failure kind runs and its figures are consistent."""

from __future__ import annotations

from pathlib import Path

import pytest

from c4p.figures import failures as failure_ladder
from topology.generators import FatTreeParams, RailOptimizedParams, fat_tree, rail_optimized
from topology.model import Fabric

SMALL = {
    "rail": rail_optimized(RailOptimizedParams(units=4, hosts_per_unit=4, rails=2, spines=4)),
    "fat": fat_tree(FatTreeParams.model_validate({"k": 4})),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_failure_ladder_rows_are_consistent(name: str, tmp_path: Path) -> None:
    fabric: Fabric = SMALL[name]
    rows = failure_ladder.run_fabric(name, fabric, budget=5.0)
    assert [r.failure for r in rows] == list(failure_ladder.KINDS)
    for r in rows:
        assert r.bound <= r.util_c4p + 1e-9 and r.bound <= r.util_replan + 1e-9
        assert r.util_c4p <= r.util_greedy + 1e-9
        if r.status == "optimal":
            assert r.util_c4p == pytest.approx(r.bound)
        assert r.min_moves <= r.moved
        assert r.links >= 1
    spine = {r.failure: r for r in rows}["spine down"]
    assert spine.links > 1 and spine.crossed <= spine.moved  # its flows all had to move
    back = {r.failure: r for r in rows}["restore"]
    assert back.crossed == 0  # nothing is forced off a path when a link comes back
    assert back.util_replan <= back.util_c4p + 1e-9  # as good as a full plan of the fabric
    table = tmp_path / "f.md"
    table.write_text(failure_ladder.markdown(rows, "c4p bench --failures --test", 1.0))
    assert table.read_text().count("\n| ") == len(rows) + 1
    failure_ladder.plot(rows, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
