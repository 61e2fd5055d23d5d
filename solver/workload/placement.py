"""Where jobs land: a seeded placer of jobs on hosts, and a generator of job files.

Why: how badly ECMP collides, and how much planning helps, depends on placement. A job packed
into one scalable unit keeps rail rings under one leaf each and barely touches the spines; the
same job scattered over a fragmented cluster sends nearly every ring hop through a spine. A
what-if study (``c4p jobs generate``, ``c4p plan``, the benchmarks) needs both ends and the
middle, reproducibly, so every choice here is driven by a seed.

Modes (hosts already used by another job are never offered):

* ``contiguous``: the first free hosts in fabric order, as a scheduler filling a cluster does;
* ``random``: a seeded sample of the free hosts;
* ``fragmented``: free hosts taken in short runs (``run`` hosts) from each leaf group in turn,
  groups in a seeded order, so a job spans as many leaves (units, for rail-optimized fabrics)
  as it can. A host's group is the switch its first NIC port is cabled to.

Whatever the mode, the chosen hosts come back in fabric order: that is how a launcher lists
them, and so the order ranks are numbered in.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum

import numpy as np
from pydantic import Field, model_validator

from solver.errors import PlacementError
from solver.workload.jobs import (
    MAX_CHANNELS,
    MAX_QPS_PER_CONNECTION,
    Collective,
    CommunicatorSpec,
    JobsFile,
    JobSpec,
    Layout,
    Pattern,
)
from topology.base import Frozen
from topology.model import Fabric


class PlacementMode(StrEnum):
    CONTIGUOUS = "contiguous"
    RANDOM = "random"
    FRAGMENTED = "fragmented"


def host_groups(fabric: Fabric) -> dict[str, str]:
    """Host name -> the switch its first cabled NIC port attaches to (``""`` if none)."""
    index = fabric.index
    groups: dict[str, str] = {}
    for port in index.ports:
        name = port.host.name
        if name not in groups or not groups[name]:
            out = index.out_resources[port.node]
            groups[name] = index.node_names[index.res_dst[out[0]]] if out else ""
    return groups


def place_hosts(
    fabric: Fabric,
    count: int,
    mode: PlacementMode | str = PlacementMode.CONTIGUOUS,
    seed: int = 0,
    exclude: Collection[str] = frozenset(),
    *,
    run: int = 2,
) -> list[str]:
    """``count`` free hosts (not in ``exclude``) chosen by ``mode``, in fabric order.

    Raises :class:`PlacementError` if fewer than ``count`` hosts are free.
    """
    mode = PlacementMode(mode)
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if run < 1:
        raise ValueError(f"run must be >= 1, got {run}")
    excluded = set(exclude)
    free = [h.name for h in fabric.hosts if h.name not in excluded]
    if count > len(free):
        raise PlacementError(
            f"need {count} free hosts, fabric {fabric.name!r} has {len(free)} "
            f"({len(fabric.hosts)} hosts, {len(fabric.hosts) - len(free)} taken)"
        )
    position = {h.name: i for i, h in enumerate(fabric.hosts)}
    rng = np.random.default_rng(seed)
    if mode is PlacementMode.CONTIGUOUS:
        chosen = free[:count]
    elif mode is PlacementMode.RANDOM:
        picks = rng.choice(len(free), size=count, replace=False)
        chosen = [free[int(i)] for i in picks]
    else:
        chosen = _fragmented(fabric, free, count, run, rng)
    return sorted(chosen, key=position.__getitem__)


def _fragmented(
    fabric: Fabric, free: list[str], count: int, run: int, rng: np.random.Generator
) -> list[str]:
    group_of = host_groups(fabric)
    groups: dict[str, list[str]] = {}
    for name in free:
        groups.setdefault(group_of.get(name, ""), []).append(name)
    queues: list[list[str]] = []
    for g in rng.permutation(len(groups)):
        members = list(groups.values())[int(g)]
        start = int(rng.integers(len(members)))
        queues.append(members[start:] + members[:start])
    chosen: list[str] = []
    while len(chosen) < count:
        for queue in queues:
            take = min(run, count - len(chosen), len(queue))
            chosen.extend(queue[:take])
            del queue[:take]
            if len(chosen) == count:
                break
    return chosen


class JobsGenParams(Frozen):
    """What ``c4p jobs generate`` makes: ``jobs`` jobs of ``hosts_per_job`` hosts each, one
    communicator each, placed by ``placement``; jobs never share a host."""

    jobs: int = Field(default=1, ge=1, le=100_000)
    hosts_per_job: int = Field(ge=1)
    pattern: Pattern = Pattern.RING
    collective: Collective | None = None
    ring: Layout = Layout.RAIL
    trees: int = Field(default=2, ge=1, le=2)
    rail_only: bool = False
    placement: PlacementMode = PlacementMode.CONTIGUOUS
    run: int = Field(default=2, ge=1, description="Run length of fragmented placement.")
    channels: int = Field(default=1, ge=1, le=MAX_CHANNELS)
    qps_per_connection: int = Field(default=1, ge=1, le=MAX_QPS_PER_CONNECTION)
    rate: float = Field(default=1.0, gt=0)
    seed: int = 0
    prefix: str = Field(default="job", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)

    @model_validator(mode="after")
    def _generable(self) -> JobsGenParams:
        if self.pattern is Pattern.EXPLICIT:
            raise ValueError("pattern 'explicit' needs connections; write that job by hand")
        return self

    def communicator(self) -> CommunicatorSpec:
        """The communicator every generated job gets, with only the options its pattern has."""
        spec: dict[str, object] = {
            "id": "c0",
            "pattern": self.pattern,
            "collective": self.collective,
            "channels": self.channels,
            "qps_per_connection": self.qps_per_connection,
            "rate": self.rate,
        }
        if self.pattern in (Pattern.RING, Pattern.TREE):
            spec["ring"] = self.ring
        if self.pattern is Pattern.TREE:
            spec["trees"] = self.trees
        if self.pattern is Pattern.ALL_TO_ALL:
            spec["rail_only"] = self.rail_only
        return CommunicatorSpec.model_validate(spec)


def generate_jobs(fabric: Fabric, params: JobsGenParams) -> JobsFile:
    """Jobs placed one after the other on hosts not yet taken, each with its own seed."""
    communicator = params.communicator()
    taken: set[str] = set()
    jobs: list[JobSpec] = []
    width = len(str(params.jobs - 1))
    for i in range(params.jobs):
        seed = int(np.random.SeedSequence([params.seed, i]).generate_state(1)[0])
        hosts = place_hosts(
            fabric, params.hosts_per_job, params.placement, seed, taken, run=params.run
        )
        taken.update(hosts)
        jobs.append(
            JobSpec(
                id=f"{params.prefix}{str(i).zfill(width)}",
                hosts=tuple(hosts),
                communicators=(communicator,),
            )
        )
    return JobsFile(jobs=tuple(jobs))
