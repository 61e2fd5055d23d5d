"""The store at start-up: never lies, never leaks, never starts over an existing store.

Each damaged-store case (an empty file, a corrupt page, a foreign database, a read-only file, a
wrong schema) must be refused with one clear line before anything serves, and the files that
hold the token secret (the database *and* its ``-wal``/``-shm``) are readable by the owner only.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from c4p.service.serve import load_config
from c4p.store import DecisionRecord, DecisionResult, SqliteStore, StoreError

ROOT = Path(__file__).resolve().parents[1]


def decision(sequence: int) -> DecisionRecord:
    return DecisionRecord(
        sequence=sequence, epoch=0, at=1.0, reason="t", result=DecisionResult.FAILED, error="x"
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_database_and_its_wal_and_shm_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask: files would be 0644 unless the store sees to it
    try:
        path = tmp_path / "c4p.db"
        store = SqliteStore(path)
        store.log_decision(decision(1))  # the WAL now holds pages (the secret among them)
        family = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(p.exists() for p in family)
        assert {p.name: mode(p) for p in family} == {p.name: 0o600 for p in family}
        store.close()
    finally:
        os.umask(old)


def test_an_older_store_left_world_readable_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "c4p.db"
    SqliteStore(path).close()
    os.chmod(path, 0o644)
    store = SqliteStore(path)
    assert mode(path) == 0o600 and mode(Path(f"{path}-wal")) == 0o600
    store.close()


def test_a_zero_length_file_is_refused_not_made_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "c4p.db"
    path.touch()
    with pytest.raises(StoreError, match="empty") as caught:
        SqliteStore(path)
    assert "\n" not in str(caught.value)
    assert path.stat().st_size == 0  # nothing written over it: no new secret


def test_a_corrupt_page_is_refused_at_start(tmp_path: Path) -> None:
    path = tmp_path / "c4p.db"
    store = SqliteStore(path)
    for k in range(1, 400):
        store.log_decision(decision(k))
    store.close()  # checkpointed into the main file
    size = path.stat().st_size
    assert size > 8 * 4096
    with path.open("r+b") as f:  # scribble over one page of the decisions (not page 1)
        f.seek(size - 3 * 4096)
        f.write(b"\xa5" * 4096)
    with pytest.raises(StoreError, match="damaged|malformed|not a database") as caught:
        SqliteStore(path)
    assert "\n" not in str(caught.value)


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not a c4p store"):
        SqliteStore(path)
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert tables == {"notes"}  # nothing of ours was added to it


def test_a_wrong_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c4p.db"
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = 'c4p-store-99' WHERE key = 'schema'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema 'c4p-store-99'"):
        SqliteStore(path)


OPEN = """
import sys
from c4p.store import SqliteStore, StoreError
try:
    SqliteStore(sys.argv[1])
except StoreError as exc:
    print(exc)
    sys.exit(3)
"""


def test_a_read_only_store_is_refused_at_start(tmp_path: Path) -> None:
    """As root (CI), permissions do not stop writes, so the store's directory is bind-mounted
    read-only in a private mount namespace of the child process (gone with it); as an ordinary
    user the file is simply made read-only."""
    path = tmp_path / "c4p.db"
    SqliteStore(path).close()
    command = [sys.executable, "-c", OPEN, str(path)]
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare(1) (util-linux) to mount the store read-only")
        script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                   str(tmp_path), *command]  # fmt: skip
    else:
        os.chmod(path, 0o400)
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "writ" in done.stdout and done.stdout.count("\n") == 1, done.stdout


def test_decisions_before_a_sequence_beyond_64_bits(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c4p.db")
    store.log_decision(decision(1))
    assert [d.sequence for d in store.decisions(10, before_sequence=2**64 - 1)] == [1]
    assert [d.sequence for d in store.decisions(10, before_sequence=2**63)] == [1]
    store.close()


def test_an_absolute_store_path_is_used_as_written(tmp_path: Path) -> None:
    where = tmp_path / "elsewhere" / "state.db"
    config = tmp_path / "conf" / "controller.yaml"
    config.parent.mkdir()
    (tmp_path / "conf" / "fabric.yaml").write_text("x: 1\n")
    config.write_text(
        "fabric: {path: fabric.yaml}\n"
        f"store: {{path: {where}}}\n"
        "auth: {admin: [{value: 0123456789abcdef0123}]}\n"
    )
    loaded = load_config(config)
    assert loaded.store.path == where
    assert loaded.fabric.path == config.parent / "fabric.yaml"
