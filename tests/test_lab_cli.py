"""``c4p lab``: bad input is one clear line and exit 2, never a traceback (no root needed for
these: they fail before anything is built); with root, ``up`` then ``down`` leaves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from c4p.cli import app
from c4p.lab.netns import existing_namespaces, namespaces_possible

runner = CliRunner()
FABRIC = Path(__file__).resolve().parents[1] / "configs" / "leaf-spine.yaml"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["lab", "up", str(FABRIC), "--routing", "ospf"], "--routing: 'ospf'"),
        (["lab", "up", str(FABRIC), "--icmp-from", "mgmt"], "--icmp-from: 'mgmt'"),
        (["lab", "up", "no-such-fabric.yaml"], "no-such-fabric.yaml"),
        (["lab", "demo", "--routing", "rip"], "--routing: 'rip'"),
        (["lab", "demo", "--qps", "0"], "--qps: 0 is not between 1 and 16"),
        (["lab", "up", str(FABRIC), "--hash-policy", "2"], "--hash-policy: 2 is not one of"),
        (["lab", "demo", "--hash-policy", "4"], "--hash-policy: 4 is not one of 0, 1, 3"),
        (["lab", "down", "nosuch", "--state-dir", "."], "token: no lab 'nosuch'"),
    ],
)
def test_bad_lab_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


@pytest.mark.lab
@pytest.mark.skipif(namespaces_possible() is not None, reason=f"lab: {namespaces_possible()}")
def test_lab_up_then_down_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "labs"
    up = runner.invoke(app, ["lab", "up", str(FABRIC), "--state-dir", str(state)])
    try:
        assert up.exit_code == 0, up.output
        token = next(p.name for p in state.iterdir())
        mine = [ns for ns in existing_namespaces() if ns.startswith(f"c4p-{token}-")]
        assert len(mine) == 6 + 16  # 4 leaves + 2 spines, 16 hosts
    finally:
        down = runner.invoke(app, ["lab", "down", "--state-dir", str(state)])
    assert down.exit_code == 0, down.output
    assert not [ns for ns in existing_namespaces() if ns.startswith(f"c4p-{token}-")]
    assert not list(state.iterdir())
