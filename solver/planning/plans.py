"""Plan files: every flow with the path it is given, as a person can read and edit it.

Why a file format: a plan is the product of ``c4p plan`` (what-if studies, sizing, a fabric
before it exists) and the input of whatever applies it, and an operator may hand-edit one path
to test a theory. So a plan names nodes, not numbers (``h0001:nic0p0 -> leaf-su00-r0 ->
spine-03 -> leaf-su01-r0 -> h0017:nic0p0``), and reading it back checks everything the planner
guarantees: each flow of the jobs exactly once, each path a real path of the fabric that starts
and ends at the flow's NIC ports over usable links, and an *equal-cost* path (the only paths
ECMP can be steered onto with a source port). Problems are reported all at once, each with the
flow id and the reason.

A flow the fabric cannot deliver has an empty path; reading accepts that only while the fabric
really has no path for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from pydantic import Field

from solver.errors import PlanError
from solver.workload.flows import Flow
from topology.base import Frozen
from topology.errors import PathError, TopologyError
from topology.model import Fabric, Name


class PlannedFlow(Frozen):
    """One flow (QP) and its path, node names from source NIC port to destination NIC port."""

    job: Name
    communicator: Name
    connection: int = Field(ge=0)
    qp: int = Field(ge=0)
    src: str
    dst: str
    rate: float = Field(default=1.0, gt=0)
    path: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.job}/{self.communicator}/{self.connection}/{self.qp}"


class PlanFile(Frozen):
    """A whole plan: the fabric it was made for, how it was made, and every flow's path."""

    fabric: Name
    strategy: str = Field(min_length=1, max_length=64)
    seed: int | None = None
    flows: tuple[PlannedFlow, ...] = ()


def plan_from_paths(
    fabric: Fabric,
    flows: Sequence[Flow],
    paths: Sequence[Sequence[int] | None],
    strategy: str,
    seed: int | None = None,
) -> PlanFile:
    """A plan file for ``paths[i]`` (resources; ``None``/empty if unreachable) of ``flows[i]``."""
    if len(paths) != len(flows):
        raise ValueError(f"{len(paths)} paths for {len(flows)} flows")
    index = fabric.index
    return PlanFile(
        fabric=fabric.name,
        strategy=strategy,
        seed=seed,
        flows=tuple(
            PlannedFlow(
                job=f.job,
                communicator=f.communicator,
                connection=f.connection,
                qp=f.qp,
                src=f.src,
                dst=f.dst,
                rate=f.rate,
                path=index.path_nodes(tuple(p)) if p else (),
            )
            for f, p in zip(flows, paths, strict=True)
        ),
    )


class _Encoded(dict[Any, str]):
    """JSON texts by key (a string, a node's number), each computed by ``encode`` on first
    use."""

    def __init__(self, encode: Callable[[Any], str]) -> None:
        super().__init__()
        self._encode = encode

    def __missing__(self, key: Any) -> str:
        text = self[key] = self._encode(key)
        return text


def plan_json_text(
    fabric: Fabric,
    flows: Sequence[Flow],
    paths: Sequence[Sequence[int] | None],
    strategy: str,
    seed: int | None = None,
) -> str:
    """The JSON text ``plan_from_paths(...)`` would be written as (same keys, defaults left
    out, one flow per line), built straight from the flows and paths.

    Why: a 16k-GPU plan has 32,768 flows, and building a validated model per flow only to dump
    it again costs more than the planning; everything here is already valid by construction.
    """
    if len(paths) != len(flows):
        raise ValueError(f"{len(paths)} paths for {len(flows)} flows")
    PlanFile(fabric=fabric.name, strategy=strategy, seed=seed)  # the header's own checks
    index = fabric.index
    src, dst = index.res_src.tolist(), index.res_dst.tolist()
    dumps = json.dumps
    head: dict[str, object] = {"fabric": fabric.name, "strategy": strategy}
    if seed is not None:
        head["seed"] = seed
    # Every string is encoded once per distinct value (node names, ids), and each line is
    # put together from those pieces in the order json.dumps(item) writes them: the same
    # bytes as before, at a third of the cost.
    # A string's JSON is encode_basestring_ascii's: json.dumps of a str with the default
    # options returns exactly that, after a Python pass through its encoder (0.57 us a call
    # against 0.13; a 16k-GPU plan encodes some 37,000 distinct names and ids).
    enc = _Encoded(encode_basestring_ascii).__getitem__  # a dictionary's own lookup on a hit

    names = index.node_names
    # A path's nodes: where its first resource starts, then where each resource ends, each
    # node's name encoded once (a dictionary filled on first use); ``map`` through the
    # resources' far ends and that dictionary joins a path without a Python step per hop.
    node = _Encoded(lambda n: enc(names[n]))
    text_of, far_end = node.__getitem__, dst.__getitem__
    lines = []
    for f, p in zip(flows, paths, strict=True):
        line = (
            f'{{"job": {enc(f.job)}, "communicator": {enc(f.communicator)}, '
            f'"connection": {f.connection:d}, "qp": {f.qp:d}, '
            f'"src": {enc(f.src)}, "dst": {enc(f.dst)}'
        )
        if f.rate != 1.0:
            line += f', "rate": {dumps(f.rate)}'
        if p:
            line += f', "path": [{node[src[p[0]]]}, {", ".join(map(text_of, map(far_end, p)))}]'
        lines.append(line + "}")
    fields = [f" {dumps(k)}: {dumps(v)}" for k, v in head.items()]
    if lines:
        fields.append(' "flows": [\n  ' + ",\n  ".join(lines) + "\n ]")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def _check_path(
    fabric: Fabric, flow: Flow, planned: PlannedFlow
) -> tuple[str | None, tuple[int, ...]]:
    """``(reason, resources)``: the reason is ``None`` when the planned path is acceptable."""
    index = fabric.index
    routing = index.routing
    src, dst = index.node(flow.src), index.node(flow.dst)
    if not planned.path:
        try:
            count = len(routing.equal_cost_paths(src, dst))
        except PathError:  # unreachable, or a NIC port without a cable
            return None, ()
        return f"has no path, but the fabric has {count} equal-cost paths for it", ()
    try:
        resources = index.path_resources(planned.path)
    except TopologyError as exc:
        return f"path is not a path of fabric {fabric.name!r}: {exc}", ()
    if planned.path[0] != flow.src:
        return f"path starts at {planned.path[0]!r}, not at its source {flow.src!r}", ()
    if planned.path[-1] != flow.dst:
        return f"path ends at {planned.path[-1]!r}, not at its destination {flow.dst!r}", ()
    down = [index.resource_name(r) for r in resources if not index.res_usable[r]]
    if down:
        return f"path uses links that are not up: {', '.join(down)}", ()
    try:
        equal = routing.is_equal_cost_path(src, dst, resources)
    except PathError as exc:
        return f"path cannot be checked: {exc}", ()
    if not equal:
        return "path is not an equal-cost (shortest valley-free) path between its NIC ports", ()
    return None, resources


def paths_from_plan(
    fabric: Fabric, flows: Sequence[Flow], plan: PlanFile, source: str | None = None
) -> list[tuple[int, ...]]:
    """The resources of each flow's planned path, in ``flows`` order (``()`` if unreachable).

    Raises :class:`PlanError` listing every problem, each named by its flow id: a plan for
    another fabric, a flow missing, repeated or unknown, endpoints or rate that differ from the
    jobs', a path that is not a path, does not join the flow's NIC ports, crosses a link that is
    not up, or is not an equal-cost path.
    """
    problems: list[tuple[str, str]] = []
    if plan.fabric != fabric.name:
        problems.append(("fabric", f"plan is for fabric {plan.fabric!r}, not {fabric.name!r}"))
    wanted = {f.id: i for i, f in enumerate(flows)}
    unknown = sum(1 for planned in plan.flows if planned.id not in wanted)
    absent = len(flows) - (len(plan.flows) - unknown)
    if plan.flows and flows and (2 * unknown > len(plan.flows) or 2 * absent > len(flows)):
        # Most flows differ: the files do not belong together; say so once, not 1,000 times.
        problems.append(
            (
                "",
                f"the plan does not belong to these jobs: {unknown:,} of its "
                f"{len(plan.flows):,} flows are not flows of the jobs, and {max(absent, 0):,} "
                f"of the jobs' {len(flows):,} flows are not in it (a plan of another jobs file?)",
            )
        )
        raise PlanError(problems, source)
    chosen: dict[int, PlannedFlow] = {}
    for k, planned in enumerate(plan.flows):
        fid = planned.id
        if fid not in wanted:
            problems.append((fid, f"flows[{k}] is not a flow of the jobs"))
        elif wanted[fid] in chosen:
            problems.append((fid, f"flows[{k}] repeats a flow already planned"))
        else:
            chosen[wanted[fid]] = planned
    out: list[tuple[int, ...]] = []
    for i, flow in enumerate(flows):
        if i not in chosen:
            problems.append((flow.id, "is missing from the plan"))
            out.append(())
            continue
        planned = chosen[i]
        mismatch = [
            f"{name} is {got!r} in the plan but {want!r} in the jobs"
            for name, got, want in (
                ("src", planned.src, flow.src),
                ("dst", planned.dst, flow.dst),
                ("rate", planned.rate, flow.rate),
            )
            if got != want
        ]
        if mismatch:
            problems.append((flow.id, "; ".join(mismatch)))
            out.append(())
            continue
        reason, resources = _check_path(fabric, flow, planned)
        if reason is not None:
            problems.append((flow.id, reason))
        out.append(resources)
    if problems:
        raise PlanError(problems, source)
    return out
