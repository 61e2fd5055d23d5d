"""What a reconcile step changes, per job: the bindings it pushes and the QPs it withdraws;
and the plan the bindings in force realize (the previous plan after a restart or re-wiring).

Why apart from :mod:`c4p.controller.reconcile`: the step plans and commits; this compares the
bindings it derived with the bindings in force, which is where zero churn is decided (a QP
whose client-visible binding is unchanged is not pushed; a job an in-place re-wiring does not
touch keeps every binding it holds), and it needs neither the planner nor the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from c4p.controller.intents import PlanInputs
from c4p.controller.rewire import Rewiring
from c4p.store.base import ControlMode, HeldBinding
from solver.planning.plans import PlanFile, PlannedFlow
from solver.planning.result import Plan
from solver.workload.flows import Connection, Workload
from southbound.bindings import Binding
from southbound.routes import QpKey
from topology.errors import TopologyError
from topology.model import Fabric


def previous_plan(fabric: Fabric, held: dict[str, dict[QpKey, HeldBinding]]) -> Plan | None:
    """The plan in force, rebuilt from the bindings in force (after a restart)."""
    flows = [
        PlannedFlow(
            job=b.job,
            communicator=b.communicator,
            connection=b.connection,
            qp=b.qp,
            src=b.src,
            dst=b.dst,
            rate=b.rate,
            path=b.path,
        )
        for job in sorted(held)
        for b in (h.binding for h in held[job].values())
    ]
    if not flows:
        return None
    return Plan.from_plan_file(
        PlanFile(fabric=fabric.name, strategy="restored", flows=flows), fabric
    )


def on_fabric(
    fabric: Fabric, held: dict[str, dict[QpKey, HeldBinding]]
) -> dict[str, dict[QpKey, HeldBinding]]:
    """The bindings whose paths ``fabric`` has (after a re-wiring, some kept fail-static do
    not: they cannot seed a previous plan, and their flows are placed anew)."""
    index = fabric.index
    out: dict[str, dict[QpKey, HeldBinding]] = {}
    for job, bindings in held.items():
        for key, h in bindings.items():
            try:
                index.path_resources(h.binding.path)
            except TopologyError:
                continue
            out.setdefault(job, {})[key] = h
    return out


@dataclass
class BindingDiff:
    """What a step changes, per job and per QP (:func:`diff_bindings`)."""

    upserts: dict[str, list[HeldBinding]]
    removals: dict[str, list[QpKey]]
    bound: dict[QpKey, HeldBinding]
    shadow: dict[str, dict[QpKey, HeldBinding]]
    """Per shadow job: its planned bindings (never pushed)."""
    pushed: dict[str, int]
    """Per job: QPs whose binding is pushed (active) or would be (shadow)."""


def diff_bindings(
    inputs: PlanInputs, workload: Workload | None, bound: Sequence[Binding]
) -> BindingDiff:
    """Per job: what to push and what to withdraw."""
    conns: dict[tuple[str, str, int], Connection] = {}
    wanted: dict[str, set[QpKey]] = {}
    modes = {j.job_id: j.mode for j in inputs.jobs}
    if workload is not None:
        conns = {(c.job, c.communicator, c.index): c for c in workload.connections}
        for f in workload.flows:
            if modes.get(f.job) is ControlMode.ACTIVE:  # only these hold bindings in force
                wanted.setdefault(f.job, set()).add((f.job, f.communicator, f.connection, f.qp))
    diff = BindingDiff({}, {}, {}, {}, {})
    for b in bound:
        c = conns[(b.job, b.communicator, b.connection)]
        fresh = HeldBinding(binding=b, src_rank=c.src_rank, dst_rank=c.dst_rank, channel=c.channel)
        diff.bound[b.key] = fresh
        if modes.get(b.job) is ControlMode.SHADOW:
            diff.shadow.setdefault(b.job, {})[b.key] = fresh
            old = inputs.shadow.get(b.job, {}).get(b.key)
        else:
            old = inputs.held.get(b.job, {}).get(b.key)
        if old is None or not unchanged(old, fresh):
            diff.pushed[b.job] = diff.pushed.get(b.job, 0) + 1
            if modes.get(b.job) is ControlMode.ACTIVE:
                diff.upserts.setdefault(b.job, []).append(fresh)
    for job in inputs.jobs:
        if job.job_id in inputs.unplaced:
            continue  # left out of the plan: its bindings stay in force (fail-static)
        keep = wanted.get(job.job_id, set())
        gone = [k for k in inputs.held.get(job.job_id, {}) if k not in keep]
        if gone:
            diff.removals[job.job_id] = sorted(gone)
    if inputs.rewiring is not None:
        untouched_stay(inputs, inputs.rewiring, diff)
    return diff


def untouched_stay(inputs: PlanInputs, rewiring: Rewiring, diff: BindingDiff) -> None:
    """On the step that swapped a snapshot in, a job the change does not touch keeps every
    binding it holds (zero churn: the planner may have moved its flows to make room, which the
    touched jobs do without); its new or withdrawn QPs (intents changed meanwhile) still go."""
    for job, upserts in list(diff.upserts.items()):
        if job in rewiring.touched:
            continue
        held = inputs.held.get(job, {})
        kept = [h for h in upserts if h.key not in held]
        for h in upserts:
            if h.key in held:
                diff.bound[h.key] = held[h.key]
        if kept:
            diff.upserts[job] = kept
        else:
            del diff.upserts[job]
        diff.pushed[job] = len(kept)


def unchanged(old: HeldBinding, new: HeldBinding) -> bool:
    """Everything a client sees is the same (the epoch aside)."""
    a, b = old.binding, new.binding
    return (
        a.applies_same(b)
        and a.path == b.path
        and a.rate == b.rate
        and a.verified == b.verified
        and (old.src_rank, old.dst_rank, old.channel) == (new.src_rank, new.dst_rank, new.channel)
    )
