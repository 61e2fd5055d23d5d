"""The evidence of a reconcile step: each job's predicted bus bandwidth on the paths its
bindings realize, beside ECMP's, and the links over line rate either way.

Why apart from :mod:`c4p.controller.reconcile`: the step decides and commits; this only
measures what it decided (``solver.yardstick.evaluate``) for the decision log and a staged
rollout, and reads nothing the step does not hand it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from c4p.controller.bindingdiff import BindingDiff
from c4p.controller.intents import PlanInputs
from c4p.store.base import JobPredictionRecord
from solver.workload.flows import Workload
from solver.yardstick.evaluate import OVER_TOLERANCE, evaluate
from solver.yardstick.evaluate import switch_resources as inner_resources
from topology.errors import TopologyError
from topology.model import Fabric


def finite_or_zero(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) else 0.0


def predict(
    snapshot: Fabric,
    workload: Workload,
    inputs: PlanInputs,
    diff: BindingDiff,
    moved: Sequence[str],
    ecmp: list[tuple[int, ...]],
    resources: dict[tuple[str, ...], tuple[int, ...]] | None = None,
) -> tuple[dict[str, JobPredictionRecord], tuple[str, ...], tuple[int, int]]:
    """Max-min fair rates on the paths the bindings realize (unbound QPs: their binding
    in force if any, else no path) and on ECMP paths (the kernel's ports for QP numbers
    drawn from the planner's seed); per job and in all, the links over line rate either
    way; and the hottest links, for the decision log. ``ecmp`` is each flow's path under
    ECMP (the reconciler caches them per snapshot). ``resources``: the resources of each
    node path seen before on this wiring (the reconciler's, so that an unchanged binding is
    not looked up name by name again); updated to the paths of this step."""
    index = snapshot.index
    known = {} if resources is None else dict(resources)
    if resources is not None:
        resources.clear()
    paths: list[tuple[int, ...]] = []
    for f in workload.flows:
        key = (f.job, f.communicator, f.connection, f.qp)
        held = diff.bound.get(key) or inputs.held.get(f.job, {}).get(key)
        if held is None:
            paths.append(())
            continue
        path = known.get(held.binding.path)
        if path is None:
            try:
                path = index.path_resources(held.binding.path)
            except TopologyError:
                path = ()
        if resources is not None:
            resources[held.binding.path] = path
        paths.append(path)
    evaluation = evaluate(snapshot, workload, paths, top=5)
    baseline = evaluate(snapshot, workload, ecmp, top=1)
    over_planned = over_line_rate(snapshot, workload, paths)
    over_ecmp = over_line_rate(snapshot, workload, ecmp)
    crossed_planned = crossed(workload, paths, over_planned)
    crossed_ecmp = crossed(workload, ecmp, over_ecmp)
    moved_by_job: dict[str, int] = {}
    for flow_id in moved:
        job = flow_id.partition("/")[0]
        moved_by_job[job] = moved_by_job.get(job, 0) + 1
    ecmp_busbw = {j.job: j.busbw_gbps or 0.0 for j in baseline.jobs}
    modes = {j.job_id: j.mode for j in inputs.jobs}
    hottest = tuple(f"{h.name}: {h.utilization:.2f}" for h in evaluation.hottest)
    predictions = {
        j.job: JobPredictionRecord(
            job_id=j.job,
            busbw_gbps=finite_or_zero(j.busbw_gbps),
            line_rate_gbps=finite_or_zero(j.line_rate_gbps),
            busbw_fraction=finite_or_zero(j.busbw_fraction),
            slowest_communicator=j.slowest_communicator or "",
            control=modes[j.job],
            ecmp_busbw_gbps=ecmp_busbw.get(j.job, 0.0),
            moved=moved_by_job.get(j.job, 0),
            bindings_pushed=diff.pushed.get(j.job, 0),
            links_over_ecmp=len(crossed_ecmp.get(j.job, ())),
            links_over_planned=len(crossed_planned.get(j.job, ())),
        )
        for j in evaluation.jobs
        if j.busbw_fraction is not None
    }
    return predictions, hottest, (len(over_ecmp), len(over_planned))


def over_line_rate(
    fabric: Fabric, workload: Workload, paths: Sequence[Sequence[int] | None]
) -> set[int]:
    """Switch-to-switch link directions whose *offered* load exceeds their line rate.

    Offered load: every NIC port sends at its own line rate (the speed of its first link),
    shared over the QPs leaving it in proportion to their ``rate``; a link direction is over
    line rate when the QPs crossing it offer more than its speed. This is what "a collision"
    means on the wire (two full-rate QPs on one link), independent of how the planner
    normalizes load."""
    index = fabric.index
    share: dict[str, float] = {}
    for f in workload.flows:
        share[f.src] = share.get(f.src, 0.0) + f.rate
    inner = {int(r) for r in inner_resources(fabric)}
    offered: dict[int, float] = {}
    for f, path in zip(workload.flows, paths, strict=True):
        if not path:
            continue
        rate = float(index.res_capacity[path[0]]) * f.rate / share[f.src]
        for r in path:
            if r in inner:
                offered[r] = offered.get(r, 0.0) + rate
    return {
        r
        for r, load in offered.items()
        if load > float(index.res_capacity[r]) * (1.0 + OVER_TOLERANCE)
    }


def crossed(
    workload: Workload, paths: Sequence[Sequence[int] | None], hot: set[int]
) -> dict[str, set[int]]:
    """Per job: the resources of ``hot`` its flows cross."""
    out: dict[str, set[int]] = {}
    if not hot:
        return out
    for f, path in zip(workload.flows, paths, strict=True):
        found = hot.intersection(path or ())
        if found:
            out.setdefault(f.job, set()).update(found)
    return out
