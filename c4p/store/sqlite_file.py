"""The embedded store's file: its tables, the schema version it is stamped with, the files SQLite
keeps beside it in WAL mode, and what a commit syncs (``synchronous``).

Why apart from :mod:`c4p.store.sqlite`: that module reads and writes records in transactions;
this is the file's shape, which a backup, a version check or a new table reads on its own and
changes only with the schema. :mod:`c4p.store.sqlite` re-exports :class:`Synchronous`.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

SCHEMA = "c4p-store-1"


_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS intents (
    job_id TEXT NOT NULL, comm_id TEXT NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (job_id, comm_id));
CREATE TABLE IF NOT EXISTS bindings (
    job_id TEXT NOT NULL, comm_id TEXT NOT NULL, connection INTEGER NOT NULL,
    qp INTEGER NOT NULL, epoch INTEGER NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (job_id, comm_id, connection, qp));
CREATE TABLE IF NOT EXISTS tombstones (
    job_id TEXT NOT NULL, comm_id TEXT NOT NULL, connection INTEGER NOT NULL,
    qp INTEGER NOT NULL, epoch INTEGER NOT NULL,
    PRIMARY KEY (job_id, comm_id, connection, qp));
CREATE TABLE IF NOT EXISTS link_overrides (link_id TEXT PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (
    sequence INTEGER PRIMARY KEY, epoch INTEGER NOT NULL, record TEXT NOT NULL);
"""


MAX_SEQUENCE = 2**63 - 1
"""SQLite's largest integer; decision sequences never reach it."""


def _family(file: Path) -> list[Path]:
    """The database and the files SQLite keeps beside it in WAL mode."""
    return [file, file.with_name(file.name + "-wal"), file.with_name(file.name + "-shm")]


class Synchronous(StrEnum):
    FULL = "full"
    NORMAL = "normal"
