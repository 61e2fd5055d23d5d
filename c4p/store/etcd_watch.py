"""A follower's warm copy of the store: every key under the prefix, kept current by etcd Watch.

Why: a follower that becomes the leader must start from exactly what the old leader committed.
Without a copy it reads the whole prefix then (a scan of every blob, at the worst moment: right
after a failover, with clients retrying). With this copy it reads nothing: it waits until the
copy has seen the revision at which it won the election, and loads from memory.

Why that revision is enough: every write of the old leader is fenced by its leader key
(:mod:`c4p.store.etcd`), so none can land after that key was deleted, and the new leader key is
created after that deletion, at the new fence's revision. A copy that has applied every event up
to and including the new leader key's creation therefore holds everything the old leader ever
committed, and nothing can change under it before the new leader writes itself.

How it stays current: one full read (at one revision), then a Watch of the prefix from the next
revision, applying puts and deletes as they come; a broken stream (a member died) resumes from
the last revision applied, on the next member; a revision etcd has compacted away meanwhile
cannot be resumed from, so the copy falls back to a full read (counted in
:attr:`WarmCopy.full_reads`). The copy's revision is the newest event it applied (a watch
answer's header may run ahead of the events still to come, so it is never used).

Why it also parses the bindings: at a 1,024-rank job's size the read is the small part of a
promotion; turning 16,384 bindings into records is most of it (0.3-0.7 s here). So whenever the
manifest changes the copy advances its parsed bindings (:func:`~c4p.store.etcd_epochs.advance`:
only the new differences, the whole set only after a compaction), and a promotion hands them
to :meth:`~c4p.store.etcd.EtcdStore.load_from`, which checks them against the manifest it loads
and parses only what is newer.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence

from c4p.store.etcd_epochs import JobBindings, Manifest, read_bindings
from c4p.store.etcdclient import EtcdClient, WatchStream, prefix_end
from c4p.store.etcdpb import etcd_rpc_pb2 as pb

log = logging.getLogger("c4p.store.watch")

RETRY_S = 0.2
"""Pause before resuming a broken watch (bounded retry: the loop runs until stopped)."""


class WarmCopy:
    """Every key under ``prefix`` (names relative to it) and the revision it is current to."""

    def __init__(self, client: EtcdClient, prefix: bytes) -> None:
        self.client = client
        self.prefix = prefix
        self.full_reads = 0
        self.resumed = 0
        self.endpoint = ""
        """The member the watch is on (the last one it opened)."""
        self._kv: dict[bytes, bytes] = {}
        self._bindings: dict[str, JobBindings] = {}
        self.parsing = True
        """Whether to parse bindings ahead: off while this replica leads (its store holds them;
        parsing its own writes would only take CPU from planning), on again as a follower."""
        self._stale = False
        """Parsing was skipped: the next event (not only a manifest change) parses."""
        self._revision = 0
        """The newest revision applied (0: no full read yet, or one is needed)."""
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._stream: WatchStream | None = None
        self._thread = threading.Thread(target=self._run, name="c4p-warm-copy", daemon=True)

    def start(self) -> WarmCopy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()
        with self._changed:
            self._changed.notify_all()
        self._thread.join(5.0)

    @property
    def revision(self) -> int:
        with self._changed:
            return self._revision

    def snapshot(self, at_least: int, timeout: float) -> dict[str, bytes] | None:
        """The copy once it has applied revision ``at_least`` (names relative to the prefix),
        or ``None`` if it does not get there within ``timeout`` seconds (then read etcd)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._revision < at_least:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping.is_set():
                    return None
                self._changed.wait(left)
            n = len(self.prefix)
            return {k[n:].decode(): v for k, v in self._kv.items()}

    def bindings(self) -> dict[str, JobBindings]:
        """The bindings parsed as of the newest manifest seen (a cache: the loader checks it)."""
        with self._changed:
            return dict(self._bindings)

    def _parse(self) -> None:
        """Advance the parsed bindings to the manifest in the copy (this thread is the only
        writer of the copy, so it reads it without the lock)."""
        if not self.parsing:
            with self._changed:
                self._bindings = {}
            self._stale = True
            return
        self._stale = False
        kv = _Under(self._kv, self.prefix)
        raw = self._kv.get(self.prefix + b"manifest", b"{}")
        try:
            found = read_bindings(kv, Manifest.model_validate_json(raw), self._bindings)
        except Exception as exc:  # a cache: a failure costs the promotion a parse, no more
            log.info("warm parse failed", extra={"event": "watch", "error": str(exc)})
            found = {}
        with self._changed:
            self._bindings = found

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self.revision == 0:
                    self._full_read()
                self._follow()
            except Exception as exc:  # never let the copy's only thread die: resume, bounded
                log.info("watch broken; resuming", extra={"event": "watch", "error": str(exc)})
            if not self._stopping.is_set():
                self.resumed += 1
                self._stopping.wait(RETRY_S)

    def _full_read(self) -> None:
        revision, kvs = self.client.scan(self.prefix)
        with self._changed:
            self._kv = {kv.key: kv.value for kv in kvs}
            self._revision = revision
            self.full_reads += 1
        self._parse()
        with self._changed:
            self._changed.notify_all()

    def _follow(self) -> None:
        """Apply the watch's events until it breaks, is compacted away, or the copy stops."""
        stream = self.client.watch(self.prefix, prefix_end(self.prefix), self.revision + 1)
        self._stream, self.endpoint = stream, stream.endpoint
        if self._stopping.is_set():
            stream.cancel()
        try:
            for answer in stream:
                if answer.compact_revision:  # our next revision is gone: read everything again
                    with self._changed:
                        self._revision = 0
                    return
                if answer.canceled:
                    return
                if answer.events:
                    self._apply(answer.events)
        finally:
            self._stream = None
            with contextlib.suppress(Exception):
                stream.cancel()

    def _apply(self, events: Sequence[pb.Event]) -> None:
        manifest = self.prefix + b"manifest"
        changed = False
        with self._changed:
            for event in events:
                if event.type == pb.Event.DELETE:
                    self._kv.pop(event.kv.key, None)
                else:
                    self._kv[event.kv.key] = event.kv.value
                changed = changed or event.kv.key == manifest
            revision = max(self._revision, *(e.kv.mod_revision for e in events))
        if changed or self._stale:  # before the revision is announced: a promotion finds them
            self._parse()
        with self._changed:
            self._revision = revision
            self._changed.notify_all()


class _Under(Mapping[str, bytes]):
    """The copy's keys under the prefix, by names relative to it (no copy of the map)."""

    def __init__(self, kv: dict[bytes, bytes], prefix: bytes) -> None:
        self._kv, self._prefix = kv, prefix

    def __getitem__(self, name: str) -> bytes:
        return self._kv[self._prefix + name.encode()]

    def __iter__(self) -> Iterator[str]:
        n = len(self._prefix)
        return (k[n:].decode() for k in self._kv if k.startswith(self._prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)
