"""Job intents: which ranks a job has on which NICs, and how its communicators talk.

Why: C4P plans the flows of collectives, and those flows follow from two facts a launcher knows
before the job runs: where each rank sits (host and NIC) and which pattern each communicator
uses (rail-aligned rings, double binary trees, all-to-all, or an explicit list of rank pairs).
This module is the validated form of those facts, the ``jobs:`` file of ``c4p plan`` and the
body of a flow intent. :mod:`solver.workload.flows` turns it into flows.

Validation happens in two steps, both naming the field path and the reason:

* the models themselves (pydantic, ``extra="forbid"``, frozen) check what needs no fabric:
  exactly one of ``hosts`` / ``ranks``, dense rank numbers, patterns and their options;
* :func:`check_jobs` checks the jobs against a fabric: hosts and NICs exist and are cabled, no
  NIC serves two jobs, rank numbers are in range, explicit pairs do not stay inside one host.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Self

import numpy as np
from pydantic import Field, field_validator, model_validator

from solver.errors import JobError
from topology.base import Frozen
from topology.index import FabricIndex
from topology.model import Fabric, Name

MAX_QPS_PER_CONNECTION = 16
MAX_CHANNELS = 64
MIN_RATE = 1e-3
MAX_RATE = 1e3
"""A flow's relative volume lies in [MIN_RATE, MAX_RATE]: the fair-share arithmetic compares
rates, and a ratio beyond 1e6 (or a subnormal rate such as 5e-324) makes every plan fail."""


class Pattern(StrEnum):
    """How a communicator's ranks connect."""

    RING = "ring"
    ALL_TO_ALL = "all-to-all"
    TREE = "tree"
    EXPLICIT = "explicit"


class Collective(StrEnum):
    """The nccl-tests operation a communicator runs; it sets the bus-bandwidth factor."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    BROADCAST = "broadcast"


class Layout(StrEnum):
    """How rings and trees are laid over the ranks.

    ``rail``: one ring (or tree) per rail, over NIC *r* of each host in host order, the way
    NCCL keeps inter-node traffic rail-aligned. ``flat``: one over all the ranks in rank order;
    hops between ranks of one host go over NVLink and make no network flow.
    """

    RAIL = "rail"
    FLAT = "flat"


ALLOWED: dict[Pattern, tuple[Collective, ...]] = {
    Pattern.RING: (
        Collective.ALL_REDUCE,
        Collective.ALL_GATHER,
        Collective.REDUCE_SCATTER,
        Collective.BROADCAST,
    ),
    Pattern.TREE: (Collective.ALL_REDUCE, Collective.BROADCAST),
    Pattern.ALL_TO_ALL: (Collective.ALL_TO_ALL,),
    Pattern.EXPLICIT: tuple(Collective),
}
"""Collectives each pattern can run; the first is the default."""

ONLY_FOR: dict[str, tuple[Pattern, ...]] = {
    "ring": (Pattern.RING, Pattern.TREE),
    "trees": (Pattern.TREE,),
    "rail_only": (Pattern.ALL_TO_ALL,),
    "connections": (Pattern.EXPLICIT,),
}
"""Options that mean something for some patterns only; setting them elsewhere is refused."""


class ConnectionSpec(Frozen):
    """One rank pair of an explicit communicator (traffic from ``src_rank`` to ``dst_rank``)."""

    src_rank: int = Field(ge=0)
    dst_rank: int = Field(ge=0)
    qps: int | None = Field(default=None, ge=1, le=MAX_QPS_PER_CONNECTION)
    rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        if self.src_rank == self.dst_rank:
            raise ValueError(f"src_rank and dst_rank are both {self.src_rank}")
        return self


class CommunicatorSpec(Frozen):
    """A communicator: its pattern and collective, over all the job's ranks or a subset."""

    id: Name
    pattern: Pattern = Field(default=Pattern.RING, description="How the ranks connect.")
    collective: Collective = Field(
        default=Collective.ALL_REDUCE,
        description="The operation; when left out, the pattern's own (all-to-all for all-to-all).",
    )
    ranks: tuple[int, ...] | None = Field(
        default=None, min_length=2, description="A subset of the job's ranks; default all."
    )
    ring: Layout = Field(
        default=Layout.RAIL, description="Rings and trees: one per rail, or one over all ranks."
    )
    trees: int = Field(default=2, ge=1, le=2, description="Trees: 2 is NCCL's double tree.")
    rail_only: bool = Field(
        default=False, description="All-to-all: network pairs on the same rail only (PXN)."
    )
    channels: int = Field(default=1, ge=1, le=MAX_CHANNELS, description="NCCL channels.")
    qps_per_connection: int = Field(
        default=1, ge=1, le=MAX_QPS_PER_CONNECTION, description="NCCL_IB_QPS_PER_CONNECTION."
    )
    rate: float = Field(
        default=1.0,
        ge=MIN_RATE,
        le=MAX_RATE,
        description=f"Relative volume of each flow, {MIN_RATE:g}..{MAX_RATE:g}.",
    )
    connections: tuple[ConnectionSpec, ...] = Field(
        default=(), description="Explicit: the rank pairs."
    )

    @model_validator(mode="before")
    @classmethod
    def _default_collective(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("collective") is None:
            try:
                pattern = Pattern(data.get("pattern", Pattern.RING))
            except ValueError:
                pattern = Pattern.RING  # the field check reports the bad pattern, not this
            data = {**data, "collective": ALLOWED[pattern][0]}
        return data

    @field_validator("ranks")
    @classmethod
    def _ranks_unique(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None:
            seen: set[int] = set()
            for rank in value:
                if rank < 0:
                    raise ValueError(f"rank {rank} is negative")
                if rank in seen:
                    raise ValueError(f"rank {rank} is listed twice")
                seen.add(rank)
        return value

    @model_validator(mode="after")
    def _options_fit_pattern(self) -> Self:
        if self.collective not in ALLOWED[self.pattern]:
            allowed = ", ".join(c.value for c in ALLOWED[self.pattern])
            raise ValueError(
                f"collective {self.collective.value!r} cannot run on pattern "
                f"{self.pattern.value!r} (allowed: {allowed})"
            )
        for option, patterns in ONLY_FOR.items():
            # Set to something other than its default: a full dump (defaults written out)
            # still reads back.
            default = type(self).model_fields[option].default
            chosen = option in self.model_fields_set and getattr(self, option) != default
            if chosen and self.pattern not in patterns:
                raise ValueError(
                    f"{option!r} applies to pattern {' or '.join(p.value for p in patterns)}, "
                    f"not {self.pattern.value!r}"
                )
        if self.pattern is Pattern.EXPLICIT and not self.connections:
            raise ValueError("pattern 'explicit' needs at least one entry in 'connections'")
        return self


class RankSpec(Frozen):
    """An explicit rank: which NIC of which host it uses."""

    rank: int = Field(ge=0)
    host: Name
    nic: Name


class JobSpec(Frozen):
    """A job: its ranks on host NICs (``hosts`` or ``ranks``) and its communicators.

    ``hosts``: every NIC of each host gets the next rank, in host order and then NIC order (an
    8-NIC host holds 8 consecutive ranks). ``ranks``: each rank names its host and NIC; rank
    numbers are ``0..n-1``, each once.
    """

    id: Name
    priority: int = Field(default=1, gt=0)
    hosts: tuple[Name, ...] | None = Field(default=None, min_length=1)
    ranks: tuple[RankSpec, ...] | None = Field(default=None, min_length=1)
    communicators: tuple[CommunicatorSpec, ...]

    @field_validator("ranks")
    @classmethod
    def _ranks_dense(cls, value: tuple[RankSpec, ...] | None) -> tuple[RankSpec, ...] | None:
        if value is None:
            return value
        where: dict[int, int] = {}
        nics: dict[tuple[str, str], int] = {}
        for k, spec in enumerate(value):
            if spec.rank in where:
                raise ValueError(f"rank {spec.rank} is given twice ([{where[spec.rank]}], [{k}])")
            where[spec.rank] = k
            nic = (spec.host, spec.nic)
            if nic in nics:
                raise ValueError(
                    f"NIC {spec.host}:{spec.nic} holds two ranks ([{nics[nic]}], [{k}])"
                )
            nics[nic] = k
        missing = sorted(set(range(len(value))) - set(where))
        if missing:
            raise ValueError(f"ranks must be numbered 0..{len(value) - 1}; missing {missing[:10]}")
        return tuple(sorted(value, key=lambda s: s.rank))

    @model_validator(mode="after")
    def _one_placement(self) -> Self:
        if (self.hosts is None) == (self.ranks is None):
            raise ValueError("give exactly one of 'hosts' and 'ranks'")
        if not self.communicators:
            raise ValueError("'communicators' needs at least one entry")
        seen: dict[str, int] = {}
        for j, comm in enumerate(self.communicators):
            if comm.id in seen:
                raise ValueError(
                    f"communicators[{j}].id: {comm.id!r} is already communicators[{seen[comm.id]}]"
                )
            seen[comm.id] = j
        return self


class JobsFile(Frozen):
    """The ``jobs:`` file: jobs with unique ids that never share a NIC."""

    jobs: tuple[JobSpec, ...] = ()

    @field_validator("jobs")
    @classmethod
    def _unique_ids(cls, value: tuple[JobSpec, ...]) -> tuple[JobSpec, ...]:
        seen: dict[str, int] = {}
        for i, job in enumerate(value):
            if job.id in seen:
                raise ValueError(f"[{i}].id: job id {job.id!r} is already used by [{seen[job.id]}]")
            seen[job.id] = i
        return value


# -- ranks on the fabric ----------------------------------------------------------------------


@dataclass(frozen=True)
class RankNic:
    """Where one rank sits: host, NIC, rail (NIC position in its host) and NIC port nodes."""

    rank: int
    host: str
    nic: str
    rail: int
    ports: tuple[str, ...]
    where: str
    """The field path that placed this rank, for error messages."""
    line_rate: float = 0.0
    """The NIC's line rate: the sum of its cabled ports' speeds (Gb/s), as
    :func:`solver.workload.flows.nic_line_rate` gives it."""


def _rank_nic(
    rank: int, host: str, nic: str, rail: int, ports: tuple[str, ...], where: str, rate: float
) -> RankNic:
    """``RankNic(rank, host, nic, rail, ports, where, rate)`` as its constructor makes it: the
    fields in the instance's ``__dict__`` in field order (no ``__post_init__``; the tests hold
    the two to each other). Why: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, 1.9 us for these seven against 0.9, and the jobs check places
    every rank (16,384 at 16k GPUs). The price: the instance holds a dict of its own (some
    180 bytes more than the constructor's inline values; attribute reads ~10% slower)."""
    placed: RankNic = object.__new__(RankNic)
    placed.__dict__.update(
        rank=rank, host=host, nic=nic, rail=rail, ports=ports, where=where, line_rate=rate
    )
    return placed


NicMap = dict[str, dict[str, tuple[int, tuple[str, ...], float]]]
_NIC_MAPS: weakref.WeakKeyDictionary[FabricIndex, NicMap] = weakref.WeakKeyDictionary()


def _nics_of_host(fabric: Fabric) -> NicMap:
    """Host -> NIC -> (rail, port nodes, line rate), built once per fabric snapshot (kept with
    its index).

    Read NIC by NIC: the index numbers NIC ports host by host, NIC by NIC, port by port from
    ``num_switches`` on, so a NIC's port nodes are one slice of the node names and its line
    rate the sum of its cabled ports' speeds in port order (from 0, as ``nic_line_rate``
    adds them); per port it was 24 ms at 16k GPUs (a test holds the two to each other)."""
    index = fabric.index
    found = _NIC_MAPS.get(index)
    if found is None:
        names = index.node_names
        uplinks = index.port_uplinks
        cabled = (uplinks >= 0).tolist()
        speed = index.res_capacity[np.maximum(uplinks, 0)].tolist()
        every = all(cabled[index.num_switches :])
        found = {}
        node = index.num_switches
        for host in fabric.hosts:  # a host always has NICs, a NIC always ports
            nics: dict[str, tuple[int, tuple[str, ...], float]] = {}
            for rail, nic in enumerate(host.nics):
                end = node + len(nic.ports)
                if every and end == node + 1:  # one port: 0 + its speed is its speed
                    nics[nic.name] = (rail, (names[node],), speed[node])
                else:
                    rate = sum(speed[n] for n in range(node, end) if cabled[n])
                    nics[nic.name] = (rail, names[node:end], rate)
                node = end
            found[host.name] = nics
        _NIC_MAPS[index] = found
        out = index.out_resources
        _UNCABLED[index] = frozenset(names[p.node] for p in index.ports if not out[p.node])
    return found


_UNCABLED: weakref.WeakKeyDictionary[FabricIndex, frozenset[str]] = weakref.WeakKeyDictionary()
"""Per fabric snapshot, the NIC port nodes with no link (usually none): the jobs check looks
a rank's ports up here only when there are any, not port by port."""


def _placement(
    fabric: Fabric, job: JobSpec, where: str, problems: list[tuple[str, str]]
) -> list[RankNic]:
    hosts = _nics_of_host(fabric)
    placed: list[RankNic] = []
    if job.hosts is not None:
        first: dict[str, int] = {}
        for k, host in enumerate(job.hosts):
            at = f"{where}.hosts[{k}]"
            if host not in hosts:
                problems.append((at, f"host {host!r} is not in fabric {fabric.name!r}"))
            elif host in first:
                problems.append((at, f"host {host!r} is already {where}.hosts[{first[host]}]"))
            else:
                first[host] = k
                for nic, (rail, ports, rate) in hosts[host].items():
                    placed.append(_rank_nic(len(placed), host, nic, rail, ports, at, rate))
        return placed
    assert job.ranks is not None
    for k, spec in enumerate(job.ranks):
        at = f"{where}.ranks[{k}]"
        if spec.host not in hosts:
            problems.append((f"{at}.host", f"host {spec.host!r} is not in fabric {fabric.name!r}"))
        elif spec.nic not in hosts[spec.host]:
            problems.append((f"{at}.nic", f"host {spec.host!r} has no NIC {spec.nic!r}"))
        else:
            rail, ports, rate = hosts[spec.host][spec.nic]
            placed.append(_rank_nic(spec.rank, spec.host, spec.nic, rail, ports, at, rate))
    return placed


def job_ranks(fabric: Fabric, job: JobSpec) -> tuple[RankNic, ...]:
    """The job's ranks in rank order; raises :class:`JobError` if the placement does not fit."""
    problems: list[tuple[str, str]] = []
    ranks = _placement(fabric, job, f"job {job.id!r}", problems)
    if problems:
        raise JobError(problems)
    return tuple(ranks)


def find_job_problems(fabric: Fabric, jobs: JobsFile) -> Iterator[tuple[str, str]]:
    """Every way the jobs do not fit the fabric, as ``(field path, reason)``."""
    return _job_problems(fabric, jobs, [])


def checked_placements(
    fabric: Fabric, jobs: JobsFile, source: str | None = None
) -> list[tuple[RankNic, ...]]:
    """Each job's ranks in rank order (as :func:`job_ranks`), once :func:`check_jobs` found
    nothing wrong: the check places every rank anyway, so the placement is not done twice."""
    placed: list[list[RankNic]] = []
    problems = list(_job_problems(fabric, jobs, placed))
    if problems:
        raise JobError(problems, source)
    return [tuple(ranks) for ranks in placed]  # in rank order, as job_ranks gives them


def _job_problems(
    fabric: Fabric, jobs: JobsFile, placed: list[list[RankNic]]
) -> Iterator[tuple[str, str]]:
    _nics_of_host(fabric)
    uncabled = _UNCABLED[fabric.index]
    owner: dict[tuple[str, str], tuple[str, str]] = {}
    for i, job in enumerate(jobs.jobs):
        where = f"jobs[{i}]"
        problems: list[tuple[str, str]] = []
        ranks = _placement(fabric, job, where, problems)
        placed.append(ranks)
        yield from problems
        for r in ranks:
            key = (r.host, r.nic)
            if key in owner:
                other, other_at = owner[key]
                yield r.where, f"NIC {r.host}:{r.nic} is already used by job {other!r} ({other_at})"
                continue
            owner[key] = (job.id, where)
            if uncabled:
                for port in r.ports:
                    if port in uncabled:
                        yield r.where, f"NIC port {port!r} is not cabled"
        if problems:
            continue  # rank numbers are unknown while the placement is wrong
        yield from _communicator_problems(job, ranks, where)


def _connections_fit(comm: CommunicatorSpec, ranks: list[RankNic]) -> bool:
    """True only if :func:`_communicator_problems` finds nothing wrong with ``comm``'s
    explicit connections: every rank in range (a communicator over all ranks), no pair on
    one host, asked of whole columns. Why: a shuffled ring names 16,384 rank pairs at 16k
    GPUs, and asking each pair's questions one by one was some 15 ms; any doubt (a subset of
    ranks, a rank out of range, a pair on one host) goes to the per-pair checks, which say
    what and where."""
    if comm.ranks is not None or not comm.connections:
        return False
    src = np.fromiter(map(_SRC_RANK, comm.connections), np.int64, len(comm.connections))
    dst = np.fromiter(map(_DST_RANK, comm.connections), np.int64, len(comm.connections))
    if int(np.minimum(src, dst).min()) < 0 or int(np.maximum(src, dst).max()) >= len(ranks):
        return False
    number: dict[str, int] = {}
    host = np.fromiter(
        (number.setdefault(r.host, len(number)) for r in ranks), np.int64, len(ranks)
    )
    return not bool((host[src] == host[dst]).any())


_SRC_RANK, _DST_RANK = operator.attrgetter("src_rank"), operator.attrgetter("dst_rank")


def _communicator_problems(
    job: JobSpec, ranks: list[RankNic], where: str
) -> Iterator[tuple[str, str]]:
    n = len(ranks)
    span = f"0..{n - 1}"
    for j, comm in enumerate(job.communicators):
        if _connections_fit(comm, ranks):
            continue
        at = f"{where}.communicators[{j}]"
        for k, rank in enumerate(comm.ranks or ()):
            if rank >= n:
                yield f"{at}.ranks[{k}]", f"rank {rank} is out of range {span} (job has {n})"
        members = set(range(n)) if comm.ranks is None else set(comm.ranks)
        for k, conn in enumerate(comm.connections):
            for side in ("src_rank", "dst_rank"):
                rank = getattr(conn, side)
                if rank >= n:
                    yield f"{at}.connections[{k}].{side}", f"rank {rank} is out of range {span}"
                elif rank not in members:
                    yield f"{at}.connections[{k}].{side}", f"rank {rank} is not in 'ranks'"
            if conn.src_rank < n and conn.dst_rank < n:
                a, b = ranks[conn.src_rank], ranks[conn.dst_rank]
                if a.host == b.host:
                    yield (
                        f"{at}.connections[{k}]",
                        f"ranks {conn.src_rank} and {conn.dst_rank} are both on host {a.host!r}; "
                        "traffic inside a host does not cross the fabric",
                    )


def check_jobs(fabric: Fabric, jobs: JobsFile, source: str | None = None) -> None:
    """Refuse jobs that do not fit the fabric, listing every problem with its field path."""
    checked_placements(fabric, jobs, source)
