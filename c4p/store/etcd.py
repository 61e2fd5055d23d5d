"""The replicated store: the controller's records in etcd, every write fenced by leadership.

Why etcd: two or three ``c4p serve`` replicas must share one durable state and agree on one
writer; etcd gives both (raft-replicated keys, leases, transactions that compare before they
write). This store keeps the :class:`~c4p.store.base.Store` promises:

* **atomic**: each method's effect becomes visible in one etcd transaction (below: large values
  are written first under new keys nobody reads, then one small transaction switches to them);
* **durable before return**: etcd answers a transaction only after a quorum of members has it
  in its log, so a ``kill -9`` of the controller, or of one etcd member, loses nothing
  acknowledged.

**Fencing.** A store is writable only while :attr:`fence` is set: the leader key's name and the
revision at which this replica created it (see :mod:`c4p.store.election`). Every write
transaction compares that key's create revision; once the lease behind the key expired (this
replica was stopped or cut off) the key is gone or belongs to another replica, the comparison
fails and nothing is written: :class:`FencedError`. A partitioned old leader therefore cannot
write after losing leadership, however late its request arrives.

**Layout** under ``prefix`` (values are the pydantic JSON of the records)::

    meta/schema, meta/secret, meta/incarnation, meta/decision_sequence, meta/rollback
    manifest                     epoch, fingerprint, compacted epoch, per job its binding base
                                 and the epochs' differences on top of it
    jobs/<job>                   the job record and the reference of its intents blob
    blob/<kind>/<job>/<version>/<n>   zlib'd JSON in chunks of at most CHUNK_BYTES; kinds
                                 ``intents``, ``bindings`` (bases), ``bdiff`` (differences)
    overrides/<link>             an operator's drain
    decisions/<sequence>         the decision log (the newest DECISIONS_KEPT)
    leader                       the election key (not data)

**Large values.** etcd refuses a request over ``--max-request-bytes`` (1.5 MiB by default) or
of more than ``--max-txn-ops`` (128) operations. A job's bindings (a 1,024-rank job holds
thousands) and its intents are therefore blobs: compressed, split into chunks written under a
new version in batches below both limits, made current by the small transaction that writes the
job record or the manifest, the old version deleted after. A crash in between leaves an
unreferenced version that :meth:`load` ignores and the next write of that blob removes. An epoch
writes only each job's *difference* (one small transaction), with a new base now and then:
:mod:`c4p.store.etcd_epochs`.

**History.** etcd keeps every revision until compacted; the store compacts to the revision of
its last commit every ``compact_every`` commits. **Cache.** The store keeps what it loaded and
wrote since: the controller is the only writer, so a new blob is built without reading back.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from c4p.store.base import (
    CommunicatorRecord,
    DecisionRecord,
    DecisionResult,
    EpochCommit,
    JobRecord,
    LinkOverride,
    RollbackRecord,
    StoredState,
    StoreError,
)
from c4p.store.etcd_epochs import (
    BlobRef,
    Held,
    JobBindings,
    Manifest,
    chunked,
    pack,
    plan_epoch,
    read_bindings,
    read_blob,
    seq,
)
from c4p.store.etcdclient import (
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    created_at,
    delete_op,
    prefix_end,
    put_op,
)
from c4p.store.etcdpb import etcd_rpc_pb2 as pb
from southbound.routes import QpKey

SCHEMA = "c4p-etcd-1"
DECISIONS_KEPT = 10_000
CHUNK_BYTES = 512 * 1024
"""One chunk of a blob: a third of etcd's default request limit, leaving room for the rest."""
BATCH_BYTES = 1024 * 1024
BATCH_OPS = 100
"""A write batch stays below etcd's defaults (1.5 MiB request, 128 operations)."""


class FencedError(StoreError):
    """This replica is not (or no longer) the leader: etcd refused the write.

    Terminal for this replica as a writer: it must step down and follow.
    """

    retryable = False


@dataclass(frozen=True)
class Fence:
    """The leadership a write is conditioned on: the leader key and its create revision."""

    key: bytes
    revision: int


class JobDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    record: JobRecord
    intents: BlobRef | None = None


class EtcdStore:
    """A :class:`~c4p.store.base.Store` in etcd (see the module docstring)."""

    def __init__(
        self,
        client: EtcdClient,
        prefix: str = "/c4p/",
        compact_every: int = 200,
        *,
        owns_client: bool = True,
    ) -> None:
        if not prefix.endswith("/"):
            prefix += "/"
        self.client = client
        self.owns_client = owns_client
        self.fenced = threading.Event()
        """Set once etcd refused a write for lost leadership (the replica then steps down)."""
        self.on_fenced: Callable[[], object] | None = None
        self.uncertain = threading.Event()
        """Set when a write got no answer: etcd may still commit it (a request that timed out
        while the quorum was lost is applied when it returns), so this store's cache, and the
        controller state built beside it, may differ from etcd. The replica then reloads."""
        self.prefix = prefix.encode()
        self.compact_every = compact_every
        self.fence: Fence | None = None
        self._holding: str | None = None
        """Why writes are refused for now (:meth:`hold_writes`), or ``None``."""
        self._lock = threading.RLock()
        self._manifest = Manifest()
        self._jobs: dict[str, JobDoc] = {}
        self._intents: dict[str, dict[str, CommunicatorRecord]] = {}
        self._held: dict[str, dict[QpKey, Held]] = {}
        """Per job, each binding in force (JSON, or as loaded its record): a re-plan serializes
        only what moved."""
        self._stones: dict[str, dict[QpKey, int]] = {}
        self._commits = 0
        self._loaded = False
        try:
            self._init_meta()
        except EtcdError as exc:
            raise StoreError(f"etcd store {prefix}: cannot open: {exc}") from exc

    @property
    def leader_key(self) -> bytes:
        return self.prefix + b"leader"

    def _key(self, *parts: str | int) -> bytes:
        return self.prefix + "/".join(str(p) for p in parts).encode()

    def _init_meta(self) -> None:
        schema = self._key("meta", "schema")
        found = self.client.get(schema)
        if found is None:  # the first replica ever: create once, whoever wins
            self.client.txn(
                [created_at(schema, 0)],
                [
                    put_op(schema, SCHEMA.encode()),
                    put_op(self._key("meta", "secret"), secrets.token_hex(32).encode()),
                ],
            )
            found = self.client.get(schema)
        if found is None or found.value.decode() != SCHEMA:
            have = None if found is None else found.value.decode()
            raise StoreError(f"etcd store: schema {have!r}, this c4p needs {SCHEMA!r}")

    # -- reads -----------------------------------------------------------------------------------

    def token_secret(self) -> bytes:
        try:
            found = self.client.get(self._key("meta", "secret"))
        except EtcdError as exc:
            raise StoreError(f"etcd store: cannot read the token secret: {exc}") from exc
        if found is None:
            raise StoreError("etcd store: no token secret")
        return bytes.fromhex(found.value.decode())

    def load(self) -> StoredState:
        """Everything under the prefix, read at one revision; also (re)fills the cache."""
        with self._lock:  # no write of this store between the read and the cache it fills
            try:
                _, kvs = self.client.scan(self.prefix)
            except EtcdError as exc:
                raise StoreError(f"etcd store: cannot read: {exc}") from exc
            return self.load_from({kv.key[len(self.prefix) :].decode(): kv.value for kv in kvs})

    def load_from(
        self, kv: dict[str, bytes], warm: dict[str, JobBindings] | None = None
    ) -> StoredState:
        """:meth:`load` from keys already read at one revision (names relative to the prefix):
        a follower's warm copy (:mod:`c4p.store.etcd_watch`) instead of a read of etcd, with
        the bindings it has parsed already (``warm``: only what is newer is parsed)."""
        with self._lock:
            try:
                return self._load(kv, warm)
            except (ValidationError, ValueError, zlib.error) as exc:
                raise StoreError(f"etcd store: a record does not parse: {exc}") from exc

    def _load(self, kv: dict[str, bytes], warm: dict[str, JobBindings] | None) -> StoredState:
        manifest = Manifest.model_validate_json(kv.get("manifest", b"{}"))
        state = StoredState(
            epoch=manifest.epoch,
            fingerprint=manifest.fingerprint,
            compacted_epoch=manifest.compacted_epoch,
            incarnation=int(kv.get("meta/incarnation", b"0")),
            decision_sequence=int(kv.get("meta/decision_sequence", b"0")),
        )
        if "meta/rollback" in kv:
            state.rollback = RollbackRecord.model_validate_json(kv["meta/rollback"])
        self._manifest = manifest
        self._jobs, self._intents, self._held, self._stones = {}, {}, {}, {}
        for name, value in kv.items():
            if not name.startswith("jobs/"):
                continue
            doc = JobDoc.model_validate_json(value)
            job_id = doc.record.job_id
            self._jobs[job_id] = doc
            comms: dict[str, CommunicatorRecord] = {}
            if doc.intents is not None:
                items = read_blob(kv, f"blob/intents/{job_id}", doc.intents)
                assert isinstance(items, list)
                for item in items:
                    comm = CommunicatorRecord.model_validate(item)
                    comms[comm.spec.id] = comm
            self._intents[job_id] = comms
            state.jobs[job_id] = doc.record
            state.intents[job_id] = dict(comms)
        for job_id, read in read_bindings(kv, manifest, warm).items():
            stones = {k: e for k, e in read.stones.items() if e > manifest.compacted_epoch}
            self._held[job_id], self._stones[job_id] = dict(read.held), stones
            if read.held:
                state.bindings[job_id] = dict(read.held)
            if stones:
                state.tombstones[job_id] = dict(stones)
        for name, value in kv.items():
            if name.startswith("overrides/"):
                override = LinkOverride.model_validate_json(value)
                state.overrides[override.link_id] = override
        names = sorted((n for n in kv if n.startswith("decisions/")), reverse=True)
        for name in names:
            decision = DecisionRecord.model_validate_json(kv[name])
            state.last_decision = state.last_decision or decision
            if decision.result is DecisionResult.PLANNED:
                state.last_planned = decision
                break
        self._loaded = True
        return state

    def decisions(self, limit: int, before_sequence: int = 0) -> list[DecisionRecord]:
        start = self._key("decisions", "")
        end = self._key("decisions", seq(before_sequence)) if before_sequence > 0 else None
        try:
            reply = self.client.range(start, end or prefix_end(start), limit=limit, descending=True)
        except EtcdError as exc:
            raise StoreError(f"etcd store: cannot read decisions: {exc}") from exc
        return [DecisionRecord.model_validate_json(kv.value) for kv in reply.kvs]

    # -- writes ----------------------------------------------------------------------------------

    def hold_writes(self, why: str | None) -> None:
        """Refuse every write with a retryable :class:`StoreError` saying ``why`` (``None``:
        take them again). Returns once no write is in flight (writes run under the store's
        lock). Why: a replica reloading from etcd reads it with another store; a write this one
        took after that read would be in etcd and missing from the reloaded state, an accepted
        registration lost from the controller (its token then opens nothing). Refused, the
        client retries and reaches the reloaded runtime."""
        with self._lock:
            self._holding = why

    def _txn(self, ops: Sequence[pb.RequestOp], absent: bytes | None = None) -> pb.TxnResponse:
        """One fenced transaction: it writes only while this replica holds the leader key (and,
        with ``absent``, only if that key does not exist)."""
        if self._holding is not None:
            raise StoreError(f"etcd store: writes held ({self._holding}); try again")
        if self.fence is None:
            raise FencedError("etcd store: this replica is not the leader; it does not write")
        if not self._loaded:
            raise StoreError("etcd store: load() before the first write")
        compare = [created_at(self.fence.key, self.fence.revision)]
        if absent is not None:
            compare.append(created_at(absent, 0))
        try:
            reply = self.client.txn(compare, ops)
            if not reply.succeeded and absent is not None:
                found = self.client.get(self.fence.key)
                if found is not None and found.create_revision == self.fence.revision:
                    raise StoreError(f"etcd store: {absent.decode()} exists already")
        except EtcdUnavailable as exc:
            self.uncertain.set()  # it may still commit: what we hold may not be what etcd has
            raise StoreError(f"etcd store: write failed: {exc}") from exc
        except EtcdError as exc:
            raise StoreError(f"etcd store: write failed: {exc}") from exc
        if not reply.succeeded:
            self.fenced.set()
            if self.on_fenced is not None:
                self.on_fenced()
            raise FencedError(
                "etcd store: leadership lost (the leader key is no longer the one this replica "
                f"created at revision {self.fence.revision}); write refused"
            )
        return reply

    def _batches(self, ops: Sequence[pb.RequestOp]) -> None:
        """Many operations in fenced transactions below etcd's size and count limits."""
        batch: list[pb.RequestOp] = []
        size = 0
        for op in ops:
            n = op.ByteSize()
            if batch and (size + n > BATCH_BYTES or len(batch) >= BATCH_OPS):
                self._txn(batch)
                batch, size = [], 0
            batch.append(op)
            size += n
        if batch:
            self._txn(batch)

    def _write_blob(self, name: str, version: int, data: bytes) -> BlobRef:
        """Write a new version of a blob (not yet referenced by anything)."""
        packed = pack(data)
        chunks = chunked(packed, CHUNK_BYTES)
        base = f"blob/{name}/{seq(version)}/"
        self._batches([put_op(self._key(base + f"{i:05d}"), c) for i, c in enumerate(chunks)])
        return BlobRef(version=version, chunks=len(chunks), size=len(packed))

    def _others(self, name: str, keep: int | None) -> list[pb.RequestOp]:
        """Deleting every version of a blob but ``keep`` (after the switch to it committed)."""
        start = self._key(f"blob/{name}/")
        if keep is None:
            return [delete_op(start, prefix_end(start))]
        mine = self._key(f"blob/{name}/{seq(keep)}/")
        return [delete_op(start, mine), delete_op(prefix_end(mine), prefix_end(start))]

    def register_job(self, job: JobRecord, incarnation: int) -> None:
        with self._lock:
            doc = JobDoc(record=job)
            key = self._key("jobs", job.job_id)
            self._txn(
                [
                    put_op(key, doc.model_dump_json().encode()),
                    put_op(self._key("meta", "incarnation"), str(incarnation).encode()),
                ],
                absent=key,
            )
            self._jobs[job.job_id] = doc
            self._intents[job.job_id] = {}

    def put_intents(
        self, job: JobRecord, upserts: Sequence[CommunicatorRecord], withdrawn: Sequence[str]
    ) -> None:
        with self._lock:
            comms = dict(self._intents.get(job.job_id, {}))
            for comm in upserts:
                comms[comm.spec.id] = comm
            for comm_id in withdrawn:
                comms.pop(comm_id, None)
            name = f"intents/{job.job_id}"
            body = "[" + ",".join(c.model_dump_json(exclude_defaults=True) for c in comms.values())
            ref = self._write_blob(name, job.revision, (body + "]").encode())
            doc = JobDoc(record=job, intents=ref)
            self._txn([put_op(self._key("jobs", job.job_id), doc.model_dump_json().encode())])
            self._jobs[job.job_id] = doc
            self._intents[job.job_id] = comms
            self._txn(self._others(name, ref.version))

    def put_job(self, job: JobRecord) -> None:
        """Replace a job's record (its control-mode pin), keeping its intents' blob."""
        with self._lock:
            old = self._jobs.get(job.job_id)
            doc = JobDoc(record=job, intents=None if old is None else old.intents)
            self._txn([put_op(self._key("jobs", job.job_id), doc.model_dump_json().encode())])
            self._jobs[job.job_id] = doc

    def set_rollback(self, rollback: RollbackRecord | None) -> None:
        """Engage (a record) or clear (``None``) the rollback of every job."""
        with self._lock:
            key = self._key("meta", "rollback")
            if rollback is None:
                self._txn([delete_op(key)])
            else:
                self._txn([put_op(key, rollback.model_dump_json().encode())])

    def release_job(self, job_id: str) -> None:
        with self._lock:
            bindings = dict(self._manifest.bindings)
            bindings.pop(job_id, None)
            diffs = dict(self._manifest.diffs)
            diffs.pop(job_id, None)
            manifest = self._manifest.model_copy(update={"bindings": bindings, "diffs": diffs})
            ops = [
                delete_op(self._key("jobs", job_id)),
                put_op(self._key("manifest"), manifest.model_dump_json().encode()),
            ]
            for kind in ("intents", "bindings", "bdiff"):
                start = self._key(f"blob/{kind}/{job_id}/")
                ops.append(delete_op(start, prefix_end(start)))
            self._txn(ops)
            self._manifest = manifest
            for cache in (self._jobs, self._intents, self._held, self._stones):
                cache.pop(job_id, None)

    def set_link_override(self, override: LinkOverride) -> None:
        value = override.model_dump_json(exclude_defaults=True).encode()
        with self._lock:
            self._txn([put_op(self._key("overrides", override.link_id), value)])

    def clear_link_override(self, link_id: str) -> None:
        with self._lock:
            self._txn([delete_op(self._key("overrides", link_id))])

    def commit_epoch(self, commit: EpochCommit) -> None:
        """One fenced transaction: per touched job its difference (or, when due, a new base:
        :mod:`c4p.store.etcd_epochs`), the manifest naming them, the decision. What a
        compaction replaced is deleted only after that transaction committed."""
        decision = commit.decision
        with self._lock:
            plan = plan_epoch(
                commit,
                self._held,
                self._stones,
                self._manifest.bindings,
                self._manifest.diffs,
                CHUNK_BYTES,
            )
            refs = plan.refs
            for job, body in plan.bases.items():
                refs[job] = self._write_blob(f"bindings/{job}", decision.epoch, body)
            ahead = [put_op(self._key(name), value) for name, value in plan.chunks]
            manifest = Manifest(
                epoch=decision.epoch,
                fingerprint=decision.fingerprint,
                compacted_epoch=commit.compacted_epoch,
                bindings=refs,
                diffs=plan.diffs,
            )
            ops = [put_op(self._key("manifest"), manifest.model_dump_json().encode())]
            ops += self._decision_ops(decision)
            size = sum(op.ByteSize() for op in ahead + ops)
            if size > BATCH_BYTES or len(ahead) + len(ops) > BATCH_OPS:
                self._batches(ahead)  # unreferenced until the manifest below names them
                ahead = []
            reply = self._txn(ahead + ops)
            self._manifest = manifest
            self._held.update(plan.held)
            self._stones.update(plan.stones)
            for job in plan.replaced:  # what a compaction replaced, now that nobody reads it
                base = refs.get(job)
                keep = None if base is None else base.version
                self._txn(
                    self._others(f"bindings/{job}", keep) + self._others(f"bdiff/{job}", None)
                )
            self._commits += 1
            if self.compact_every and self._commits % self.compact_every == 0:
                with contextlib.suppress(EtcdError):  # a failure only delays it to next time
                    self.client.compact(reply.header.revision)

    def log_decision(self, decision: DecisionRecord) -> None:
        with self._lock:
            self._txn(self._decision_ops(decision))

    def _decision_ops(self, decision: DecisionRecord) -> list[pb.RequestOp]:
        ops = [
            put_op(
                self._key("decisions", seq(decision.sequence)),
                decision.model_dump_json(exclude_defaults=True).encode(),
            ),
            put_op(self._key("meta", "decision_sequence"), str(decision.sequence).encode()),
        ]
        oldest = decision.sequence - DECISIONS_KEPT
        if oldest > 0:
            ops.append(
                delete_op(self._key("decisions", ""), self._key("decisions", seq(oldest + 1)))
            )
        return ops

    def close(self) -> None:
        if self.owns_client:
            self.client.close()
