"""The command line as a new user meets it: never a traceback, clear errors with exit 2,
output files with normal permissions, ``-o -`` on standard output, help that says what a
command needs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_cli import run

ROOT = Path(__file__).resolve().parents[1]


def c4p(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a child process (tracebacks would show on stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "c4p", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture()
def small(tmp_path: Path) -> tuple[Path, Path]:
    fabric = tmp_path / "f.yaml"
    jobs = tmp_path / "j.yaml"
    run("fabric", "generate", "leaf-spine", "--gpus", "16", "-o", str(fabric))
    run(
        "jobs", "generate", "--fabric", str(fabric), "-o", str(jobs), "--hosts", "2", "--count", "2"
    )
    return fabric, jobs


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["fabric", "generate", "leaf-spine", "--gpus", "16", "-o", "."], "is a directory"),
        (["fabric", "generate", "leaf-spine", "--gpus", "16", "-o", "/proc/c4p/x.yaml"],
         "cannot write"),
        (["fabric", "generate", "leaf-spine", "--gpus", "-5", "-o", "x.yaml"], "--gpus"),
        (["fabric", "generate", "leaf-spine", "-o", "x.yaml"], "--set leaves=N"),
        (["fabric", "show", "broken.yaml"], "broken.yaml: not valid YAML: line 3, column 9"),
    ],
)  # fmt: skip
def test_bad_input_is_one_clear_error_and_exit_2(
    tmp_path: Path, args: list[str], says: str
) -> None:
    (tmp_path / "broken.yaml").write_text("name: x\nswitches: []\nlinks: a: b\n")
    done = c4p(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert says in done.stderr, done.stderr


@pytest.mark.parametrize("budget", ["-1", "inf", "nan"])
def test_a_budget_must_be_a_finite_number_of_seconds(
    tmp_path: Path, small: tuple[Path, Path], budget: str
) -> None:
    fabric, jobs = small
    done = c4p("plan", "--fabric", str(fabric), "--jobs", str(jobs), "-o", "p.yaml",
               f"--budget={budget}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--budget" in done.stderr


def test_output_files_get_normal_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        run("fabric", "generate", "leaf-spine", "--gpus", "16", "-o", str(tmp_path / "f.yaml"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.yaml").stat().st_mode) == 0o644


def test_dash_writes_the_file_to_standard_output(tmp_path: Path) -> None:
    done = c4p("fabric", "generate", "leaf-spine", "--gpus", "16", "-o", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["name"] == "leaf-spine-16gpu"
    assert not (tmp_path / "-").exists()


def test_help_lists_each_kind_and_its_keys() -> None:
    text = run("fabric", "generate", "--help")
    for kind, key in [
        ("leaf-spine", "leaves*"),
        ("fat-tree", "pods*"),
        ("rail-optimized", "units*"),
    ]:
        assert kind in text and key in text
    assert "contiguous" in run("jobs", "generate", "--help")  # choices are enums


def test_a_plan_of_other_jobs_is_said_once(tmp_path: Path, small: tuple[Path, Path]) -> None:
    fabric, jobs = small
    plan = tmp_path / "p.yaml"
    run("plan", "--fabric", str(fabric), "--jobs", str(jobs), "-o", str(plan), "--budget", "1")
    other = tmp_path / "other.yaml"
    run("jobs", "generate", "--fabric", str(fabric), "-o", str(other), "--hosts", "4",
        "--count", "1", "--pattern", "all-to-all")  # fmt: skip
    out = run("evaluate", "--fabric", str(fabric), "--jobs", str(other), "--plan", str(plan),
              code=2)  # fmt: skip
    assert "does not belong to these jobs" in out
    assert "more problems" not in out and out.count("\n") <= 4


def test_version() -> None:
    assert run("--version").startswith("c4p ")


def test_serve_without_the_admin_token_says_how_to_make_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "C4P_ADMIN_TOKEN"}
    done = subprocess.run(
        [sys.executable, "-m", "c4p", "serve", "--config", str(ROOT / "configs/controller.yaml"),
         "--check"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "C4P_ADMIN_TOKEN" in done.stderr and "secrets.token_urlsafe" in done.stderr
