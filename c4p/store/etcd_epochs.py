"""A job's bindings in etcd as a base snapshot plus per-epoch differences.

Why: a re-plan moves a few bindings of a job that holds thousands (a 1,024-rank job with 8
channels and 2 QPs per connection holds 16,384). Rewriting the job's whole binding set per epoch
(compress 5 MB of JSON, write it in chunks, switch, delete the old version: several raft
round trips, each fsynced by a quorum) capped the etcd store at 6-10 commits/s where SQLite,
writing only the changed rows, reached 64-117/s. Here an epoch writes only what it changed:

* **diff** ``blob/bdiff/<job>/<epoch>/<n>``: the bindings the epoch set (their JSON) and the QPs
  it withdrew (each becomes a tombstone at that epoch), zlib'd, usually one small chunk written
  in the same transaction as the manifest that references it: one fenced transaction per epoch.
* **base** ``blob/bindings/<job>/<epoch>/<n>``: the job's whole set at some epoch (the format every
  store had before diffs; a store written then reads as bases without diffs, no migration).
* the **manifest** lists per job its base and its diffs, oldest first. What the manifest does not
  reference does not exist for a reader: a diff or base written ahead of its manifest (too large
  for one transaction) is invisible until the manifest switches to it, and a crash before that
  leaves an orphan that the job's next compaction deletes.

**Compaction** bounds what a reader replays: when a job has :data:`MAX_DIFFS` diffs, or its
diffs together outweigh its base, or one epoch changes so much that its diff would be as large
as half the base, that epoch writes a new base instead of a diff and the manifest switches to
``base=new, diffs=[]`` in the epoch's own fenced transaction. Only after that commit are the old
base and diffs deleted. A reader therefore reconstructs the same state before and after a
compaction (old base + diffs, or the new base that is their sum), and a crash at any step leaves
one of the two.

This module is pure (no etcd calls): it encodes, decodes and decides; :mod:`c4p.store.etcd` does
the fenced writes.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from c4p.store.base import EpochCommit, HeldBinding
from southbound.routes import QpKey

MAX_DIFFS = 32
"""Diffs a job keeps before its next epoch compacts them into a base. A reader replays at most
this many; at the 1%-of-1,024-ranks re-plan rate one base rewrite costs about as much as ten
diff commits, so compaction adds a few percent to the average commit."""


class BlobRef(BaseModel):
    """Where a blob (base or diff) lives: its version (for a diff: its epoch), its chunk count,
    and its packed size (0 in stores written before diffs; only the compaction policy uses it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    chunks: int
    size: int = 0


class Manifest(BaseModel):
    """The one key that says what is current: the epoch and, per job, its base and diffs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epoch: int = 0
    fingerprint: str = ""
    compacted_epoch: int = 0
    bindings: dict[str, BlobRef] = {}
    """Per job its base."""
    diffs: dict[str, list[BlobRef]] = {}
    """Per job the epochs' differences on top of its base, oldest first (absent in stores
    written before differences: they read as bases alone)."""


def seq(n: int) -> str:
    """A number as a key part that sorts as the number."""
    return f"{n:016d}"


def pack(data: bytes) -> bytes:
    return zlib.compress(data, 1)  # 4x faster than the default level, 40% larger


def chunked(packed: bytes, chunk: int) -> list[bytes]:
    return [packed[i : i + chunk] for i in range(0, len(packed), chunk)] or [b""]


def read_blob(kv: Mapping[str, bytes], name: str, ref: BlobRef) -> object:
    """The JSON value of a blob from a key map (names relative to the store's prefix)."""
    base = f"{name}/{seq(ref.version)}/"
    parts = []
    for i in range(ref.chunks):
        chunk = kv.get(f"{base}{i:05d}")
        if chunk is None:
            raise ValueError(f"{name}: chunk {i} of version {ref.version} is missing")
        parts.append(chunk)
    return json.loads(zlib.decompress(b"".join(parts)))


Held = str | HeldBinding
"""A binding in a store's cache: as written (its JSON, made once for the difference) or as read
(parsed; turned into JSON again only when a base is written)."""


def base_body(held: Mapping[QpKey, Held], stones: Mapping[QpKey, int]) -> bytes:
    """A job's whole set: every binding's JSON, and its tombstones ``[comm, conn, qp, epoch]``."""
    bindings = ",".join(
        h if isinstance(h, str) else h.model_dump_json(exclude_defaults=True) for h in held.values()
    )
    tomb = json.dumps([[k[1], k[2], k[3], e] for k, e in sorted(stones.items())])
    return f'{{"bindings":[{bindings}],"tombstones":{tomb}}}'.encode()


def diff_body(epoch: int, upserts: Iterable[str], removals: Iterable[QpKey]) -> bytes:
    """What one epoch changed in one job: bindings set (JSON) and QPs withdrawn."""
    gone = json.dumps([[k[1], k[2], k[3]] for k in removals])
    return f'{{"epoch":{epoch},"upserts":[{",".join(upserts)}],"removals":{gone}}}'.encode()


@dataclass(frozen=True)
class JobBindings:
    """A job's bindings as read from one base and a run of differences (tombstones not yet
    filtered by the compacted epoch). Kept by a follower's warm copy: the next read of the
    same base with more differences parses only those (:func:`advance`)."""

    base: BlobRef | None
    diffs: tuple[BlobRef, ...]
    held: dict[QpKey, HeldBinding]
    stones: dict[QpKey, int]


def _parse(job: str, item: object) -> HeldBinding:
    h = HeldBinding.model_validate(item)
    if h.key[0] != job:
        raise ValueError(f"{job}: binding {h.key} stored under job {job}")
    return h


def advance(
    kv: Mapping[str, bytes],
    job: str,
    base: BlobRef | None,
    diffs: Iterable[BlobRef],
    have: JobBindings | None = None,
) -> JobBindings:
    """A job's bindings and tombstones: its base, then each difference in epoch order, a later
    epoch overriding an earlier one exactly as the commits did. With ``have`` read from the same
    base and a prefix of these differences, only the differences after it are read. (A base or
    difference, once a manifest named it, never changes: epochs only grow.)"""
    run = tuple(sorted(diffs, key=lambda r: r.version))
    if have is not None and have.base == base and have.diffs == run[: len(have.diffs)]:
        held, stones, start = dict(have.held), dict(have.stones), len(have.diffs)
    else:
        held, stones, start = {}, {}, 0
        if base is not None:
            body = read_blob(kv, f"blob/bindings/{job}", base)
            assert isinstance(body, dict)
            for item in body["bindings"]:
                h = _parse(job, item)
                held[h.key] = h
            for comm, conn, qp, epoch in body["tombstones"]:
                stones[(job, comm, conn, qp)] = epoch
    for ref in run[start:]:
        diff = read_blob(kv, f"blob/bdiff/{job}", ref)
        assert isinstance(diff, dict)
        if diff["epoch"] != ref.version:
            raise ValueError(f"{job}: diff {ref.version} says epoch {diff['epoch']}")
        for item in diff["upserts"]:
            h = _parse(job, item)
            held[h.key] = h
            stones.pop(h.key, None)
        for comm, conn, qp in diff["removals"]:
            key = (job, comm, conn, qp)
            held.pop(key, None)
            stones[key] = ref.version
    return JobBindings(base, run, held, stones)


def read_bindings(
    kv: Mapping[str, bytes], manifest: Manifest, have: Mapping[str, JobBindings] | None = None
) -> dict[str, JobBindings]:
    """Every job of the manifest (see :func:`advance`; ``have``: what was read before)."""
    have = have or {}
    return {
        job: advance(
            kv, job, manifest.bindings.get(job), manifest.diffs.get(job, []), have.get(job)
        )
        for job in sorted(set(manifest.bindings) | set(manifest.diffs))
    }


def should_compact(base: BlobRef | None, diffs: list[BlobRef], diff_size: int) -> bool:
    """Whether this epoch writes a new base rather than a diff of ``diff_size`` packed bytes
    (see the module docstring: bounded replay, and never more diff bytes than base bytes)."""
    if base is None:
        return not diffs and diff_size > 0  # a job's first set is its base
    if len(diffs) + 1 > MAX_DIFFS:
        return True
    if base.size == 0:  # a base from before diffs: size unknown, the count alone decides
        return False
    return 2 * diff_size >= base.size or sum(d.size for d in diffs) + diff_size > base.size


@dataclass
class EpochWrite:
    """What one epoch writes, decided before anything is written (:func:`plan_epoch`)."""

    held: dict[str, dict[QpKey, Held]]
    """The touched jobs' bindings after the epoch (JSON per QP): the store's cache once it
    committed."""
    stones: dict[str, dict[QpKey, int]]
    refs: dict[str, BlobRef]
    """The manifest's bases after the epoch; a job in :attr:`bases` gets its ref once written."""
    diffs: dict[str, list[BlobRef]]
    """The manifest's differences after the epoch."""
    bases: dict[str, bytes] = field(default_factory=dict)
    """Jobs compacted at this epoch: their new base, written ahead of the manifest."""
    chunks: list[tuple[str, bytes]] = field(default_factory=list)
    """The differences' chunks (key relative to the prefix, value), written with the manifest."""
    replaced: list[str] = field(default_factory=list)
    """Jobs whose older bases and differences are deleted once the manifest committed."""


def plan_epoch(
    commit: EpochCommit,
    held: Mapping[str, dict[QpKey, Held]],
    stones: Mapping[str, dict[QpKey, int]],
    refs: Mapping[str, BlobRef],
    diffs: Mapping[str, list[BlobRef]],
    chunk_bytes: int,
) -> EpochWrite:
    """The epoch applied to the cached sets of the jobs it touches, and per job a difference or,
    when :func:`should_compact` says so, a new base (a job left with neither bindings nor
    tombstones loses both)."""
    epoch = commit.decision.epoch
    changed: dict[str, tuple[list[str], list[QpKey]]] = {}
    out = EpochWrite({}, {}, dict(refs), dict(diffs))
    for h in commit.upserts:
        job = h.key[0]
        if job not in changed:
            changed[job] = ([], [])
            out.held[job], out.stones[job] = dict(held.get(job, {})), dict(stones.get(job, {}))
        text = h.model_dump_json(exclude_defaults=True)
        changed[job][0].append(text)
        out.held[job][h.key] = text
        out.stones[job].pop(h.key, None)
    for key in commit.removals:
        job = key[0]
        if job not in changed:
            changed[job] = ([], [])
            out.held[job], out.stones[job] = dict(held.get(job, {})), dict(stones.get(job, {}))
        changed[job][1].append(key)
        out.held[job].pop(key, None)
        out.stones[job][key] = epoch
    for job in sorted(changed):
        live = {k: e for k, e in out.stones[job].items() if e > commit.compacted_epoch}
        out.stones[job] = live
        if not out.held[job] and not live:
            if job in out.refs or job in out.diffs:
                out.replaced.append(job)
            out.refs.pop(job, None)
            out.diffs.pop(job, None)
            continue
        packed = pack(diff_body(epoch, *changed[job]))
        if should_compact(out.refs.get(job), out.diffs.get(job, []), len(packed)):
            out.bases[job] = base_body(out.held[job], live)
            out.diffs.pop(job, None)
            out.replaced.append(job)
            continue
        parts = chunked(packed, chunk_bytes)
        name = f"blob/bdiff/{job}/{seq(epoch)}/"
        out.chunks += [(name + f"{i:05d}", c) for i, c in enumerate(parts)]
        ref = BlobRef(version=epoch, chunks=len(parts), size=len(packed))
        out.diffs[job] = [*out.diffs.get(job, []), ref]
    return out
