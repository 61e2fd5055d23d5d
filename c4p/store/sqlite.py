"""The embedded store: one SQLite file in WAL mode, one transaction per controller write.

Why SQLite in WAL mode: it is in the standard library, a committed transaction survives a
``kill -9`` of the process (the WAL is in the OS page cache and is replayed on the next open),
readers never block the writer, and one file is easy to back up. ``synchronous`` chooses what a
*power cut* may cost: ``full`` (the default) syncs the WAL at every commit, so nothing
acknowledged is lost; ``normal`` may lose the last commits on power loss but never corrupts,
and is much faster on slow disks.

Layout: every record is stored as its pydantic JSON (``record`` columns) beside the columns it is
looked up by, so a schema change is a new record version, not a migration of a dozen columns.
The ``meta`` table holds counters (epoch, incarnation, decision sequence), the planning
fingerprint and the token secret. ``schema`` in ``meta`` guards against opening a file written by
an incompatible version. The file's shape (tables, schema version, WAL family, ``synchronous``)
is :mod:`c4p.store.sqlite_file`.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from c4p.store.base import (
    CommunicatorRecord,
    DecisionRecord,
    DecisionResult,
    EpochCommit,
    HeldBinding,
    JobRecord,
    LinkOverride,
    RollbackRecord,
    StoredState,
    StoreError,
)
from c4p.store.lock import FileClaim
from c4p.store.sqlite_file import _TABLES, MAX_SEQUENCE, SCHEMA, _family
from c4p.store.sqlite_file import Synchronous as Synchronous

DECISIONS_KEPT = 10_000
"""Decision log entries kept; older ones are pruned at each commit."""


class SqliteStore:
    """A :class:`~c4p.store.base.Store` in one SQLite file (``":memory:"`` for tests)."""

    def __init__(self, path: Path | str, synchronous: Synchronous = Synchronous.FULL) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._synchronous = Synchronous(synchronous)
        self._claim: FileClaim | None = None
        if self.path == ":memory:":
            self._db = self._connect(self.path)
            self._create()
            return
        file = Path(self.path)
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store {self.path}: cannot create its directory: {exc}") from exc
        self._claim = FileClaim(file)  # first: one writer, also while creating the file
        try:
            if not file.exists():
                self._create_file(file)
            self._preflight(file)
            self._db = self._connect(self.path)
        except BaseException:
            self._claim.close()
            raise
        self._claim.opened()
        try:
            self._check_opened()
        except BaseException:
            self._db.close()
            self._claim.close()
            raise

    # -- opening -----------------------------------------------------------------------------

    def _connect(self, path: str) -> sqlite3.Connection:
        """A connection in WAL mode, made under umask 077: SQLite creates ``-wal`` and ``-shm``
        when it first needs them, and the WAL holds the token secret, so they must never exist
        readable by others, not even for a moment (they also inherit the database's mode)."""
        old = os.umask(0o077)
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            try:
                db.execute("PRAGMA busy_timeout=5000")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={self._synchronous.value.upper()}")
            except sqlite3.Error:
                db.close()
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"store {path}: cannot open: {exc}") from exc
        finally:
            os.umask(old)
        return db

    def _create(self) -> None:
        try:
            self._db.executescript(_TABLES)
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot create: {exc}") from exc
        self._write_meta_new()

    def _create_file(self, file: Path) -> None:
        """A new store is built under a temporary name and renamed into place, so a file at
        ``path`` is always a complete store: a crash during creation leaves no empty file that
        the next start would have to refuse."""
        temp = file.with_name(f".{file.name}.new-{os.getpid()}")
        for leftover in _family(temp):
            leftover.unlink(missing_ok=True)
        try:
            os.close(os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            self._db = self._connect(str(temp))
            try:
                self._create()
            finally:
                self._db.close()  # the last connection checkpoints and removes the WAL
            os.replace(temp, file)
        except OSError as exc:
            raise StoreError(f"store {self.path}: cannot create: {exc}") from exc
        finally:
            for leftover in _family(temp):
                leftover.unlink(missing_ok=True)

    def _preflight(self, file: Path) -> None:
        """What can be judged before SQLite opens the file: never treat an empty or foreign
        file as a new store (that would mint a new token secret and forget every job)."""
        try:
            size = file.stat().st_size
        except OSError as exc:
            raise StoreError(f"store {self.path}: cannot read: {exc}") from exc
        if size == 0:
            raise StoreError(
                f"store {self.path}: the file is empty (0 bytes), not a c4p store; "
                "restore it from a backup, or move it away to start with no jobs"
            )
        for member in _family(file):
            if not member.exists():
                continue
            if not os.access(member, os.R_OK | os.W_OK):
                raise StoreError(
                    f"store {self.path}: {member.name} is not readable and writable by this "
                    "process; c4p needs to write its store"
                )
            try:
                os.chmod(member, 0o600)  # it holds the token secret (an older c4p left 0644)
            except OSError as exc:
                raise StoreError(
                    f"store {self.path}: cannot make {member.name} 0600: {exc}"
                ) from exc
        if not os.access(file.parent, os.W_OK | os.X_OK):
            raise StoreError(
                f"store {self.path}: its directory is not writable (SQLite's WAL lives beside it)"
            )

    def _check_opened(self) -> None:
        """Schema, integrity and writability, checked before the controller serves anything."""
        db = self._db
        try:
            tables = {
                str(name)
                for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: not a readable SQLite database: {exc}") from exc
        if "meta" not in tables:
            raise StoreError(
                f"store {self.path}: not a c4p store (an SQLite database without c4p's tables)"
            )
        try:
            schema = self._meta("schema")
            secret = self._meta("secret")
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot read: {exc}") from exc
        if schema != SCHEMA:
            raise StoreError(f"store {self.path}: schema {schema!r}, this c4p needs {SCHEMA!r}")
        if not secret:
            raise StoreError(f"store {self.path}: no token secret (damaged store)")
        try:
            found = [str(row[0]) for row in db.execute("PRAGMA integrity_check(5)")]
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: damaged: {exc}") from exc
        if found != ["ok"]:
            raise StoreError(f"store {self.path}: damaged: {'; '.join(found)}")
        try:
            db.executescript(_TABLES)  # tables a newer c4p of this schema may add
            with self._tx() as tx:  # a real write: a read-only file or mount fails here
                self._set_meta(tx, schema=SCHEMA)
        except (sqlite3.Error, StoreError) as exc:
            cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc
            raise StoreError(f"store {self.path}: cannot be written: {cause}") from exc
        for member in _family(Path(self.path)):
            if member.exists():
                os.chmod(member, 0o600)

    # -- plumbing ----------------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (``BEGIN IMMEDIATE``), rolled back on error."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    if self._claim is not None:  # still the one writer of the file a restart
                        self._claim.check()  # reads (c4p.store.lock)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: write failed: {exc}") from exc

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _set_meta(db: sqlite3.Connection, **values: object) -> None:
        db.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [(k, str(v)) for k, v in values.items()],
        )

    def _write_meta_new(self) -> None:
        """The counters and a fresh token secret of a store created just now (never else)."""
        with self._tx() as db:
            self._set_meta(
                db,
                schema=SCHEMA,
                secret=secrets.token_hex(32),
                epoch=0,
                fingerprint="",
                compacted_epoch=0,
                incarnation=0,
                decision_sequence=0,
            )

    # -- reads -------------------------------------------------------------------------------

    def token_secret(self) -> bytes:
        with self._lock:
            value = self._meta("secret")
        if value is None:
            raise StoreError(f"store {self.path}: no token secret")
        return bytes.fromhex(value)

    def load(self) -> StoredState:
        with self._lock:
            try:
                return self._load()
            except (sqlite3.Error, ValidationError, ValueError) as exc:
                raise StoreError(f"store {self.path}: cannot read: {exc}") from exc

    def _load(self) -> StoredState:
        db = self._db
        state = StoredState(
            epoch=int(self._meta("epoch") or 0),
            fingerprint=self._meta("fingerprint") or "",
            compacted_epoch=int(self._meta("compacted_epoch") or 0),
            incarnation=int(self._meta("incarnation") or 0),
            decision_sequence=int(self._meta("decision_sequence") or 0),
        )
        for (text,) in db.execute("SELECT record FROM jobs"):
            job = JobRecord.model_validate_json(text)
            state.jobs[job.job_id] = job
            state.intents[job.job_id] = {}
        for job_id, comm_id, text in db.execute("SELECT job_id, comm_id, record FROM intents"):
            if job_id in state.intents:
                state.intents[job_id][comm_id] = CommunicatorRecord.model_validate_json(text)
        for job_id, text in db.execute("SELECT job_id, record FROM bindings"):
            held = HeldBinding.model_validate_json(text)
            state.bindings.setdefault(job_id, {})[held.key] = held
        rows = db.execute("SELECT job_id, comm_id, connection, qp, epoch FROM tombstones")
        for job_id, comm_id, connection, qp, epoch in rows:
            state.tombstones.setdefault(job_id, {})[(job_id, comm_id, connection, qp)] = epoch
        for (text,) in db.execute("SELECT record FROM link_overrides"):
            override = LinkOverride.model_validate_json(text)
            state.overrides[override.link_id] = override
        rollback = self._meta("rollback")
        if rollback:
            state.rollback = RollbackRecord.model_validate_json(rollback)
        rows = db.execute("SELECT record FROM decisions ORDER BY sequence DESC")
        for (text,) in rows:  # the newest, and the newest that committed an epoch
            decision = DecisionRecord.model_validate_json(text)
            state.last_decision = state.last_decision or decision
            if decision.result is DecisionResult.PLANNED:
                state.last_planned = decision
                break
        return state

    def decisions(self, limit: int, before_sequence: int = 0) -> list[DecisionRecord]:
        """The newest ``limit`` decisions, those with a sequence below ``before_sequence`` if it
        is positive (any value beyond SQLite's 64-bit integers means "all")."""
        limit = max(0, min(limit, DECISIONS_KEPT))
        before_sequence = min(before_sequence, MAX_SEQUENCE)
        with self._lock:
            if before_sequence > 0:
                rows = self._db.execute(
                    "SELECT record FROM decisions WHERE sequence < ? "
                    "ORDER BY sequence DESC LIMIT ?",
                    (before_sequence, limit),
                )
            else:
                rows = self._db.execute(
                    "SELECT record FROM decisions ORDER BY sequence DESC LIMIT ?", (limit,)
                )
            return [DecisionRecord.model_validate_json(text) for (text,) in rows]

    # -- writes ------------------------------------------------------------------------------

    def register_job(self, job: JobRecord, incarnation: int) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO jobs (job_id, record) VALUES (?, ?)",
                (job.job_id, job.model_dump_json(exclude_defaults=True)),
            )
            self._set_meta(db, incarnation=incarnation)

    def put_intents(
        self, job: JobRecord, upserts: Sequence[CommunicatorRecord], withdrawn: Sequence[str]
    ) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET record = ? WHERE job_id = ?",
                (job.model_dump_json(exclude_defaults=True), job.job_id),
            )
            db.executemany(
                "INSERT INTO intents (job_id, comm_id, record) VALUES (?, ?, ?) "
                "ON CONFLICT (job_id, comm_id) DO UPDATE SET record = excluded.record",
                [
                    (job.job_id, c.spec.id, c.model_dump_json(exclude_defaults=True))
                    for c in upserts
                ],
            )
            db.executemany(
                "DELETE FROM intents WHERE job_id = ? AND comm_id = ?",
                [(job.job_id, comm) for comm in withdrawn],
            )

    def put_job(self, job: JobRecord) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET record = ? WHERE job_id = ?",
                (job.model_dump_json(exclude_defaults=True), job.job_id),
            )

    def set_rollback(self, rollback: RollbackRecord | None) -> None:
        with self._tx() as db:
            self._set_meta(db, rollback="" if rollback is None else rollback.model_dump_json())

    def release_job(self, job_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
            for table in ("intents", "bindings", "tombstones"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))

    def set_link_override(self, override: LinkOverride) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO link_overrides (link_id, record) VALUES (?, ?) "
                "ON CONFLICT (link_id) DO UPDATE SET record = excluded.record",
                (override.link_id, override.model_dump_json(exclude_defaults=True)),
            )

    def clear_link_override(self, link_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM link_overrides WHERE link_id = ?", (link_id,))

    def commit_epoch(self, commit: EpochCommit) -> None:
        decision = commit.decision
        epoch = decision.epoch
        with self._tx() as db:
            db.executemany(
                "INSERT INTO bindings (job_id, comm_id, connection, qp, epoch, record) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, comm_id, connection, qp) "
                "DO UPDATE SET epoch = excluded.epoch, record = excluded.record",
                [
                    (*h.key, h.binding.epoch, h.model_dump_json(exclude_defaults=True))
                    for h in commit.upserts
                ],
            )
            db.executemany(
                "DELETE FROM tombstones WHERE job_id = ? AND comm_id = ? AND connection = ? "
                "AND qp = ?",
                [h.key for h in commit.upserts],
            )
            db.executemany(
                "DELETE FROM bindings WHERE job_id = ? AND comm_id = ? AND connection = ? "
                "AND qp = ?",
                list(commit.removals),
            )
            db.executemany(
                "INSERT INTO tombstones (job_id, comm_id, connection, qp, epoch) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (job_id, comm_id, connection, qp) "
                "DO UPDATE SET epoch = excluded.epoch",
                [(*key, epoch) for key in commit.removals],
            )
            db.execute("DELETE FROM tombstones WHERE epoch <= ?", (commit.compacted_epoch,))
            self._insert_decision(db, decision)
            self._set_meta(
                db,
                epoch=epoch,
                fingerprint=decision.fingerprint,
                compacted_epoch=commit.compacted_epoch,
            )

    def log_decision(self, decision: DecisionRecord) -> None:
        with self._tx() as db:
            self._insert_decision(db, decision)

    def _insert_decision(self, db: sqlite3.Connection, decision: DecisionRecord) -> None:
        db.execute(
            "INSERT INTO decisions (sequence, epoch, record) VALUES (?, ?, ?)",
            (decision.sequence, decision.epoch, decision.model_dump_json(exclude_defaults=True)),
        )
        db.execute(
            "DELETE FROM decisions WHERE sequence <= ?", (decision.sequence - DECISIONS_KEPT,)
        )
        self._set_meta(db, decision_sequence=decision.sequence)

    def verify(self) -> str:
        """Why writes are refused for good ("" while the store is its file's one writer):
        the periodic check of :mod:`c4p.service.store_watch`. Without the store's lock (two
        ``stat`` calls): the event loop asks it and must not wait for a long commit."""
        if self._claim is None:
            return ""
        try:
            self._claim.check()
        except StoreError:
            return self._claim.lost
        return ""

    def announce(self, address: str) -> None:
        """Name the serving address in the lock file (a refused second controller shows it)."""
        if self._claim is not None:
            self._claim.lock.note(f"pid {os.getpid()}, address {address}")

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._claim is not None:
                self._claim.close()


def read_decisions(path: Path | str, limit: int = DECISIONS_KEPT) -> list[DecisionRecord]:
    """The newest ``limit`` decisions of a store file, opened read-only (``c4p report`` offline;
    safe beside a running controller: WAL readers never block the writer)."""
    if not Path(path).is_file():
        raise StoreError(f"store {path}: no such file")
    try:
        db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            schema = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if schema is None or schema[0] != SCHEMA:
                raise StoreError(f"store {path}: not a c4p store of schema {SCHEMA!r}")
            rows = db.execute(
                "SELECT record FROM decisions ORDER BY sequence DESC LIMIT ?", (limit,)
            ).fetchall()
        finally:
            db.close()
        return [DecisionRecord.model_validate_json(text) for (text,) in rows]
    except (sqlite3.Error, ValidationError) as exc:
        raise StoreError(f"store {path}: cannot read: {exc}") from exc
