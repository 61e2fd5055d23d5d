"""``c4p serve`` as a real process: start-up is all or nothing, with one clear line.

A second controller on an address in use, a busy metrics port and each kind of damaged store
must end the process with a non-zero status and one line naming the cause (never a traceback,
never a hang with health SERVING); a running controller stops on SIGTERM and on SIGINT.
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from service_cases import ADMIN_TOKEN, spread_fabric, wait_until

from c4p.files import save_fabric
from c4p.store import SqliteStore

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(tmp_path: Path, **overrides: Any) -> Path:
    fabric = tmp_path / "fabric.json"
    if not fabric.exists():
        save_fabric(spread_fabric(), fabric)
    data: dict[str, Any] = {
        "fabric": {"path": "fabric.json"},
        "listen": {"address": f"127.0.0.1:{_free_port()}", "grace_s": 0.2},
        "store": {"path": "c4p.db", "synchronous": "normal"},
        "auth": {"admin": [{"value": ADMIN_TOKEN}]},
        "metrics": {"address": None},
        "logging": {"level": "warning"},
        "planner": {"budget_s": 0.5},
    }
    data.update(overrides)
    path = tmp_path / "controller.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def serve(config: Path, ready: Path | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "c4p", "serve", "--config", str(config)]
    if ready is not None:
        command += ["--ready-file", str(ready)]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(child: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    """The exit status and standard error of a child that must end by itself."""
    try:
        _, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate(timeout=30)
        raise AssertionError("c4p serve did not exit (hung)") from None
    return child.returncode, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]


def test_a_second_controller_on_the_same_address_is_refused(tmp_path: Path) -> None:
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    config = write_config(first_dir)
    ready = first_dir / "ready"
    first = serve(config, ready)
    try:
        assert wait_until(lambda: ready.exists() or first.poll() is not None, 60, 0.05)
        assert first.poll() is None, first.communicate()
        address = ready.read_text().strip()
        other = write_config(second_dir, listen={"address": address, "grace_s": 0.2})
        code, err = finish(serve(other))
        assert code != 0
        assert "listen.address" in one_line(err) and address in err
    finally:
        first.kill()
        first.communicate(timeout=30)


def test_a_busy_metrics_port_stops_start_up(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = write_config(tmp_path, metrics={"address": f"127.0.0.1:{port}"})
        code, err = finish(serve(config, tmp_path / "ready"))
    assert code != 0
    assert "metrics.address" in one_line(err)
    assert not (tmp_path / "ready").exists()  # it never said it was serving


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_running_controller_stops_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    ready = tmp_path / "ready"
    child = serve(write_config(tmp_path), ready)
    try:
        assert wait_until(lambda: ready.exists() or child.poll() is not None, 60, 0.05)
        assert child.poll() is None
        child.send_signal(sig)
        code, err = finish(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=30)
    assert code == 0 and "Traceback" not in err


def _zero_length(path: Path) -> None:
    path.write_bytes(b"")


def _corrupt_page(path: Path) -> None:
    store = SqliteStore(path)
    store.close()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE filler (x TEXT)")
    db.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,) for _ in range(200)])
    db.commit()
    db.close()
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(size - 2 * 4096)
        f.write(b"\x5a" * 4096)


def _wrong_schema(path: Path) -> None:
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = 'c4p-store-0' WHERE key = 'schema'")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("damage", "expected"),
    [(_zero_length, "empty"), (_corrupt_page, "damaged"), (_wrong_schema, "schema")],
)
def test_a_damaged_store_is_refused_with_one_line(
    tmp_path: Path, damage: Any, expected: str
) -> None:
    damage(tmp_path / "c4p.db")
    before = (tmp_path / "c4p.db").read_bytes()
    code, err = finish(serve(write_config(tmp_path), tmp_path / "ready"))
    assert code == 2
    line = one_line(err)
    assert "c4p.db" in line and expected in line, line
    assert (tmp_path / "c4p.db").read_bytes() == before  # nothing written over it
