"""The embedded store's claim on its file: one writer per store, and the same file throughout.

Why an advisory lock beside the database: SQLite lets any number of processes write one file,
so two controllers started on the same ``store.path`` both run, each with its own plan in
memory, and interleave epochs and decision numbers in one log (split brain). A lock file
``<store>.lock`` is taken with ``flock(LOCK_EX | LOCK_NB)`` before the database is opened and
held while the store is open (the process's life for ``c4p serve``); a second controller finds
it taken and refuses to start with one line naming the holder's pid and address (written into
the lock file, which only ever holds that note). The kernel drops the lock when the holder
exits, also on ``kill -9``: a stale lock file is never a reason to refuse.

Why file identity (``st_dev``, ``st_ino``) checked before every commit: an open SQLite
connection keeps writing to a database file that was deleted or replaced under it (``rm``, a
restore from backup, another tool's ``mv``); every write is acknowledged and lost at the next
start. The same holds for the lock file: if it is deleted, a second controller could lock a
new one. So before each commit, and periodically (:mod:`c4p.service.store_watch`), the store
compares what it opened with what the paths name now; once they differ the store refuses every
further write (:class:`~c4p.store.base.StoreError`, UNAVAILABLE to callers) for good: only a
restart, which reads the file that is really there, may write again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path

from c4p.store.base import StoreError

log = logging.getLogger("c4p.store")


def identity(path: Path) -> tuple[int, int] | None:
    """The file's ``(st_dev, st_ino)``; ``None`` if nothing is at ``path``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class StoreLock:
    """The exclusive lock on ``<store>.lock``, held from construction until :meth:`close`."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.path = store.with_name(store.name + ".lock")
        old = os.umask(0o077)
        try:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:  # a read-only file system: lock anyway, the store's write check
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)  # then says why it fails
        except OSError as exc:
            raise StoreError(
                f"store {store}: cannot open its lock file {self.path}: {exc.strerror or exc}"
            ) from None
        finally:
            os.umask(old)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_note(fd)
            os.close(fd)
            raise StoreError(
                f"store {store}: in use by another controller ({holder or 'holder unknown'}); "
                "one store has one writer: stop it, or give this one another store.path"
            ) from None
        self._fd: int | None = fd
        st = os.fstat(fd)
        self._identity = (st.st_dev, st.st_ino)
        self.note(f"pid {os.getpid()}")

    def note(self, text: str) -> None:
        """Say who holds the lock (``pid N``, later ``pid N, address A``) for a refused peer."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text.encode() + b"\n", 0)
        except OSError:  # read-only: the note is a courtesy, the lock is what counts
            pass

    def lost(self) -> str:
        """Why the lock no longer guards the store ("" while it does)."""
        if self._fd is None:
            return "the store is closed"
        if identity(self.path) != self._identity:
            return f"its lock file {self.path} was deleted or replaced"
        return ""

    def close(self) -> None:
        """Release the lock (the file stays: removing it would race a peer that opened it)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None


def _read_note(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


class FileClaim:
    """The store's lock and the identity of its database file, checked before every commit."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.lock = StoreLock(store)
        self._identity: tuple[int, int] | None = None
        self._lost = ""
        self._checking = threading.Lock()  # a commit and the periodic check may race

    def opened(self) -> None:
        """The database file is open now: remember which file it is."""
        self._identity = identity(self.store)

    def check(self) -> None:
        """Raise :class:`StoreError` if writes would not reach the file a restart reads (the
        first time: one log line; afterwards the same refusal, without re-checking)."""
        with self._checking:
            if not self._lost:
                self._lost = self._why()
                if self._lost:
                    log.error(
                        "store lost: %s; no more writes until a restart",
                        self._lost,
                        extra={
                            "event": "store-lost",
                            "store": str(self.store),
                            "reason": self._lost,
                        },
                    )
        if self._lost:
            raise StoreError(
                f"store {self.store}: {self._lost} while serving; writes stop (acknowledging "
                "them would lose them at the next start); restart the controller"
            )

    def _why(self) -> str:
        why = self.lock.lost()
        if not why and self._identity is not None and identity(self.store) != self._identity:
            why = "its database file was deleted or replaced"
        return why

    @property
    def lost(self) -> str:
        return self._lost

    def close(self) -> None:
        self.lock.close()
