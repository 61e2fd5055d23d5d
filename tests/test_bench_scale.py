"""The scale ladder's smallest rung, end to end through ``c4p bench --scale --max-gpus 4096``:
both fabrics, healthy and one link down, every column filled and the figures consistent
(correctness of the table, not its timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from c4p.cli import app
from c4p.figures import scale


def test_scale_ladder_smallest_rung(tmp_path: Path) -> None:
    table, image, data = tmp_path / "s.md", tmp_path / "s.png", tmp_path / "s.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--scale", "--max-gpus", "4096", "--work-dir", str(tmp_path / "files"),
         "-o", str(table), "--plot", str(image), "--json", str(data)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [scale.ScaleRow(**r) for r in json.loads(data.read_text())]
    assert [(r.fabric, r.gpus, r.case) for r in rows] == [
        (fabric, 4096, case) for fabric in scale.FABRICS for case in ("healthy", "one link down")
    ]
    for r in rows:
        assert r.flows == 2 * 4096  # the shuffled ring: one connection per GPU, two QPs
        assert r.bound > 0 and r.util_c4p >= r.bound - 1e-9
        assert r.util_c4p <= 1.5 * r.bound  # c4p stays near its bound (it meets it today)
        assert r.peak_mb > 0 and r.fabric_mb > 0
        assert min(r.generate_s, r.load_s, r.plan_s, r.evaluate_s) > 0
        if r.case == "healthy":
            assert r.replan_s is None and r.moved is None and not r.link
        else:
            assert r.replan_s is not None and r.replan_s > 0 and "--" in r.link
            assert r.moved is not None and r.min_moves is not None
            assert 1 <= r.min_moves <= r.moved  # a link that carried flows went down
    assert (tmp_path / "files" / "ft4096.json").stat().st_size > 0
    text = table.read_text()
    assert text.count("\n| 3-tier |") == 2 and text.count("\n| 2-tier |") == 2
    assert "c4p bench --scale --max-gpus 4096" in text and "s.png" in text
    assert image.stat().st_size > 0


def test_scale_rungs_and_bad_size() -> None:
    assert scale.rungs(8192) == [("3-tier", 4096), ("2-tier", 4096), ("3-tier", 8192),
                                 ("2-tier", 8192)]  # fmt: skip
    assert len(scale.rungs()) == 2 * len(scale.RUNGS)
    with pytest.raises(ValueError, match="multiple of 1,024"):
        scale.fat_tree_params(5000)
