"""The command line's rough edges (issue 33, items 11-17), each through the real ``c4p`` entry
point in a child process: unroutable flows are a finding, output options that would clash or
surprise are refused, a fabric sized differently from ``--gpus`` says why, a partial benchmark
leaves the docs alone, argument errors are one line, a closed pipe is not an error, tables fit
80 columns, a file of the wrong kind is named, and long work says what it is doing on stderr."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]


def c4p(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a child process (tracebacks would show on stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "c4p", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def ok(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = c4p(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture()
def small(tmp_path: Path) -> tuple[Path, Path]:
    """Two leaves of 8 hosts (8 spines) and two 2-host jobs."""
    fabric, jobs = tmp_path / "f.yaml", tmp_path / "j.yaml"
    ok("fabric", "generate", "leaf-spine", "--gpus", "16", "--set", "hosts_per_leaf=8",
       "-o", str(fabric), cwd=tmp_path)  # fmt: skip
    ok("jobs", "generate", "--fabric", str(fabric), "-o", str(jobs), "--hosts", "2",
       "--count", "2", cwd=tmp_path)  # fmt: skip
    return fabric, jobs


# --- 11: unroutable flows are a finding ------------------------------------------------------


def test_a_plan_with_unroutable_flows_lists_them_and_exits_1(
    tmp_path: Path, small: tuple[Path, Path]
) -> None:
    fabric, jobs = small
    done = c4p("plan", "--fabric", str(fabric), "--jobs", str(jobs), "-o", "p.yaml",
               "--fail", "h0000:nic0p0", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "Traceback" not in out
    assert "2 flows cannot be routed" in out, out
    assert "h0000" in done.stderr  # the list names the flows' ends
    assert ": optimal" not in out  # not without saying for what
    assert (tmp_path / "p.yaml").exists()  # the plan of the routable flows is still written


def _leaf_cut_off(fabric: Path, leaf: str) -> Path:
    data = yaml.safe_load(fabric.read_text())
    for link in data["links"]:
        ends = (link["a"].split(":")[0], link["b"].split(":")[0])
        if leaf in ends and any(e.startswith("spine") for e in ends):
            link["status"] = "down"
    out = fabric.with_name("cut.yaml")
    out.write_text(yaml.safe_dump(data))
    return out


def test_fabric_show_warns_about_parts_that_cannot_reach_the_rest(
    tmp_path: Path, small: tuple[Path, Path]
) -> None:
    fabric, _ = small
    healthy = c4p("fabric", "show", str(fabric), cwd=tmp_path)
    assert healthy.returncode == 0 and "cannot reach" not in healthy.stderr
    done = c4p("fabric", "show", str(_leaf_cut_off(fabric, "leaf-01")), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "leaf-01" in done.stderr and "8 NIC ports cannot reach the rest" in done.stderr, (
        done.stderr
    )
    summary = c4p("fabric", "show", str(_leaf_cut_off(fabric, "leaf-01")), "--json", "-",
                  cwd=tmp_path)  # fmt: skip
    assert json.loads(summary.stdout)["isolated_nic_ports"] == 8


# --- 12: output options ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["plan", "--fabric", "f.yaml", "--jobs", "j.yaml", "-o", "-", "--json", "-"],
         "standard output"),
        (["fabric", "generate", "leaf-spine", "--gpus", "16", "-o", "-", "--json", "-"],
         "standard output"),
        (["jobs", "generate", "--fabric", "f.yaml", "-o", "-", "--json", "-"], "standard output"),
        (["plan", "--fabric", "f.yaml", "--jobs", "j.yaml", "-o", "p.txt"], "'.txt'"),
        (["fabric", "generate", "leaf-spine", "--gpus", "16", "-o", "f.txt"], "'.txt'"),
        (["jobs", "generate", "--fabric", "f.yaml", "-o", "j.txt"], "'.txt'"),
        (["plan", "--fabric", "f.yaml", "--jobs", "j.yaml", "-o", "no/such/dir/p.json"],
         "no such directory"),
        (["plan", "--fabric", "f.yaml", "--jobs", "j.yaml", "-o", "p.json",
          "--json", "no/such/dir/r.json"], "no such directory"),
        (["plan", "--fabric", "f.yaml", "--jobs", "j.yaml", "-o", "p.json",
          "--bindings", "no/such/dir/b.yaml"], "no such directory"),
        (["fabric", "generate", "leaf-spine", "--gpus", "16", "-o", "no/such/dir/f.json"],
         "no such directory"),
        (["fabric", "show", "f.yaml", "--json", "no/such/dir/s.json"], "no such directory"),
        (["evaluate", "--fabric", "f.yaml", "--jobs", "j.yaml", "--json", "no/such/x.json"],
         "no such directory"),
        (["bench", "-o", "no/such/dir/b.md"], "no such directory"),
        (["report", "--store", "x.db", "--plot", "no/such/r.png"], "no such directory"),
        (["admin", "jobs", "--json", "no/such/a.json"], "no such directory"),
        (["jobs", "generate", "--fabric", "f.yaml", "-o", "j.json", "--json", "no/such/x.json"],
         "no such directory"),
    ],
)  # fmt: skip
def test_outputs_that_clash_or_surprise_are_refused_before_any_work(
    tmp_path: Path, small: tuple[Path, Path], command: list[str], says: str
) -> None:
    done = c4p(*command, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "no").exists()
    assert not any(tmp_path.glob("*.txt"))


# --- 13: a fabric of another size than asked says why ----------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["leaf-spine", "--gpus", "64", "--set", "leaves=4"], ["128 GPUs", "leaves=4"]),
        (["rail-optimized", "--gpus", "1000"], ["1,024 GPUs", "1,000"]),
    ],
)
def test_a_fabric_of_another_size_than_asked_says_what_and_why(
    tmp_path: Path, args: list[str], says: list[str]
) -> None:
    done = ok("fabric", "generate", *args, "-o", "f.json", cwd=tmp_path)
    note = [line for line in done.stderr.splitlines() if "GPUs" in line]
    assert len(note) == 1 and all(s in note[0] for s in says), done.stderr
    exact = ok("fabric", "generate", "leaf-spine", "--gpus", "64", "-o", "g.json", cwd=tmp_path)
    assert "GPUs" not in exact.stderr


def test_fat_tree_sizing_reaches_131072_gpus_with_a_larger_radix() -> None:
    from topology.generators import fat_tree_for_gpus

    params = fat_tree_for_gpus(131_072)
    assert params.gpus == params.pods * params.leaves_per_pod * params.hosts_per_leaf == 131_072
    assert params.leaf_oversubscription == params.spine_oversubscription == 1.0
    assert params.hosts_per_leaf + params.aggs_per_pod <= 128  # a leaf's ports: radix 128
    with pytest.raises(ValueError, match="--set radix=128"):
        fat_tree_for_gpus(131_072, radix=64)


# --- 14: a partial benchmark leaves the docs alone -------------------------------------------


def test_bench_only_writes_no_docs_table_without_o(tmp_path: Path) -> None:
    done = ok("bench", "--only", "2-tier rings, 128 GPUs, 1 QP", cwd=tmp_path)
    assert not (tmp_path / "docs").exists()
    assert "-o" in done.stdout + done.stderr  # says how to keep the table
    ok("bench", "--only", "2-tier rings, 128 GPUs, 1 QP", "-o", "b.md", cwd=tmp_path)
    assert "2-tier rings, 128 GPUs, 1 QP" in (tmp_path / "b.md").read_text()


# --- 15: one token convention, one-line argument errors, closed pipes --------------------------


def test_report_takes_the_admin_token_as_admin_does(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0k\n")
    done = c4p("report", "--controller", "127.0.0.1:9", "--token-file", str(token), cwd=tmp_path)
    assert "No such option" not in done.stderr and "--token" not in done.stderr, done.stderr
    assert done.returncode in (1, 2) and done.stderr.count("\n") == 1, done.stderr
    old = c4p("report", "--controller", "127.0.0.1:9", "--token-env", "MY_TOKEN",
              cwd=tmp_path, env={"MY_TOKEN": "t0k"})  # fmt: skip
    assert "deprecated" in old.stderr and "--token-file" in old.stderr, old.stderr
    assert old.returncode in (1, 2) and old.stderr.count("\n") == 2, old.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["fabric", "generate", "leaf-spine", "--gpus", "-5", "-o", "x.yaml"],
        ["fabric", "generate", "leaf-spine", "--bogus", "-o", "x.yaml"],
        ["fabric", "generate", "no-such-kind", "-o", "x.yaml"],
        ["plan", "--fabric", "f.yaml"],
        ["bench", "--only"],
    ],
)
def test_argument_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    done = c4p(*args, cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "╭" not in done.stderr and "Usage" not in done.stderr


def test_a_closed_pipe_is_not_a_finding(tmp_path: Path, small: tuple[Path, Path]) -> None:
    fabric, _ = small
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line (`| head -0`)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "c4p", "fabric", "show", str(fabric)],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr  # 128 + SIGPIPE, as the shell reports `cat`
    assert done.stderr == ""


# --- 16: 80 columns, files of the wrong kind, the demo's port ---------------------------------


def test_tables_fit_80_columns_without_cutting_words() -> None:
    from c4p.api.v1 import intents_pb2 as pb
    from c4p.cli.admin import _decision_row
    from c4p.cli.report import COLUMNS, cells, title
    from c4p.cli.tables import fitted
    from c4p.figures.rollout import RolloutReport, RolloutRow
    from c4p.store.base import ControlMode

    def shown(width: int, wide: bool = False) -> str:
        console = Console(width=width, record=True, file=io.StringIO())
        reason = "interval replan after link leaf-03:eth17--spine-12:eth3 went down"
        decision = pb.Decision(
            sequence=12,
            epoch=7,
            reason=reason,
            flows=4096,
            moved=17,
            max_utilization=0.98,
            error="deadline exceeded waiting for etcd",
        )
        columns = ["seq", "epoch", "at", "result", "reason", "flows", "moved", "max util",
                   "rewrites", "error"]  # fmt: skip
        fitted(console, "decisions", columns, [_decision_row(decision)], wide=wide)
        row = RolloutRow(start=0, end=60, mode=ControlMode.SHADOW, jobs=12, busbw_ecmp_gbps=311.5,
                         busbw_c4p_gbps=398.25, replans=4, moves=17, pushed=0, failures=1,
                         over_ecmp=9, over_c4p=0)  # fmt: skip
        report = RolloutReport(interval_s=60, decisions=4, first_sequence=1, last_sequence=4,
                               rows=(row,))  # fmt: skip
        fitted(console, title(report), COLUMNS, cells(report), wide=wide)
        return console.export_text()

    for text, width in ((shown(80), 80), (shown(200), 200), (shown(80, wide=True), 10_000)):
        assert "…" not in text, text
        assert max(len(line) for line in text.splitlines()) <= width
        for figure in ("0–60", "shadow", "311.5", "398.2", "+28%", "9→0", "4096", "0.98",
                       "leaf-03:eth17--spine-12:eth3", "over-rate ECMP→c4p", "etcd"):  # fmt: skip
            assert figure in text, (figure, text)
    assert "┃" not in shown(80) and "┃" in shown(200)  # lines at 80 columns, tables at 200


def test_a_file_of_the_other_kind_is_named(tmp_path: Path, small: tuple[Path, Path]) -> None:
    fabric, jobs = small
    swapped = c4p("plan", "--fabric", str(jobs), "--jobs", str(fabric), "-o", "p.yaml",
                  cwd=tmp_path)  # fmt: skip
    assert swapped.returncode == 2
    assert "is a jobs file, not a fabric file" in swapped.stderr, swapped.stderr
    reverse = c4p("plan", "--fabric", str(fabric), "--jobs", str(fabric), "-o", "p.yaml",
                  cwd=tmp_path)  # fmt: skip
    assert "is a fabric file, not a jobs file" in reverse.stderr, reverse.stderr


def test_the_rollout_demo_takes_a_port() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "c4p.demos.rollout", "--port", "70000"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--port" in done.stderr and "65535" in done.stderr


# --- 17: progress on long work ----------------------------------------------------------------


def test_progress_lines_go_to_stderr_and_quiet_stops_them(
    tmp_path: Path, small: tuple[Path, Path]
) -> None:
    fabric, jobs = small
    now = {"C4P_PROGRESS_AFTER": "0"}  # every phase counts as long (real ones: after 2 s)
    done = c4p("fabric", "generate", "leaf-spine", "--gpus", "16", "-o", "-", cwd=tmp_path, env=now)
    assert done.returncode == 0
    assert yaml.safe_load(done.stdout)["name"] == "leaf-spine-16gpu"  # stdout: the file only
    assert "c4p: generating" in done.stderr, done.stderr
    planned = c4p("plan", "--fabric", str(fabric), "--jobs", str(jobs), "-o", "p.json",
                  cwd=tmp_path, env=now)  # fmt: skip
    assert "c4p: planning" in planned.stderr and "c4p: planning" not in planned.stdout
    shown = c4p("fabric", "show", str(fabric), cwd=tmp_path, env=now)
    assert "c4p: loading" in shown.stderr
    quiet = c4p("fabric", "show", str(fabric), "--quiet", cwd=tmp_path, env=now)
    assert quiet.returncode == 0 and quiet.stderr == ""
    silent = c4p("fabric", "show", str(fabric), cwd=tmp_path)  # short phases say nothing
    assert silent.stderr == ""
