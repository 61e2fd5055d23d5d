"""``c4p bench --failures``: the failure ladder — how the planner does when the fabric breaks.

Why a ladder of its own: failures are where a controller earns its keep, and the questions differ
from a healthy fabric's: does a plan on the degraded snapshot still reach the optimum (the bound
accounts for the missing links), how fast does a *re-plan* from the plan in force come back, and
how many live QPs does it move compared with the fewest any plan could move.

Every fabric carries a shuffled ring over every GPU (each host's ranks send to a random other
host, :func:`c4p.figures.ladder.permutation_jobs`): every leaf link is busy, which is what makes a
failure hurt. On each fabric c4p plans the healthy snapshot first (the plan in force), then for each
failure kind:

* **uplink (busiest)** / **uplink (light)**: the leaf-to-spine (leaf-to-agg) link whose upward
  direction carries the most / the fewest (but some) of the plan's flows;
* **downlink**: the link whose downward direction into a leaf carries the most, not the uplink
  above;
* **spine down**: every link of one spine (a core switch in 3 tiers), the busiest;
* **two random links**: two switch-to-switch links drawn with a fixed seed;
* **spine drained**: every link of another spine drained (taken out of planning, still up);
* **restore**: the busiest uplink comes back: the re-plan starts from the plan in force while it
  was down (that row's re-plan) on the healthy snapshot. Nothing is forced to move; flows move
  only to bring the utilization back down.

Columns, all max utilizations in one unit (the busiest switch-to-switch link's load over its
capacity, in NIC line rates, every priority 1): ECMP on the degraded snapshot (median over QP
seeds), greedy and c4p planned from scratch on it, the best lower bound, c4p's re-plan from the
plan in force, the two wall times, and the flows the re-plan moved beside a lower bound on the
flows any plan reaching the same utilization must move: the larger of the planner's counting
bound (:func:`solver.repair.evict.min_moves`) and, where that is below the moves, the relaxation
bound of :func:`solver.repair.moves.fewest_moves` (proven, as is the minimum when the two meet).
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from c4p.figures.ladder import ECMP_SEEDS, permutation_jobs
from solver.bounds.treefewest import previous_options, tree_moves_bound
from solver.bounds.treewithin import fewest_within
from solver.exact.fattree import FatTreeShape, analyse
from solver.planner import flow_weights, plan
from solver.planning.result import Plan
from solver.repair.evict import repair
from solver.repair.moves import FewestMoves, fewest_moves
from solver.space.incremental import match_previous
from solver.space.problem import Problem, build_problem
from solver.workload.flows import Workload
from solver.workload.patterns import derive_workload
from solver.yardstick.ecmp import ecmp_paths
from topology.generators import sized_for_gpus
from topology.index import IntArray
from topology.model import Fabric, LinkStatus

KINDS = (
    "uplink (busiest)",
    "uplink (light)",
    "downlink",
    "spine down",
    "two random links",
    "spine drained",
    "restore",
)
RESTORED = KINDS[0]
"""The failure whose link comes back in the ``restore`` row."""

LOOKAHEAD = 3
"""Flows needing a chain whose every placement the offline repair tries (see
:func:`solver.repair.evict.repair`)."""

LEAST_MOVES_SECONDS = 150.0
"""Time per row for :func:`solver.repair.moves.fewest_moves` where the re-plan's moves are above the
planner's own bound on them (offline figures, not part of the re-plan's time). Its LP rounds
prove the 2-tier rows' minima in 20-40 s on a quiet machine (16,384 GPUs: a model of 4.2
million entries, 2 GB); the time is generous so that a loaded machine proves them too."""


@dataclass(frozen=True)
class FailureRow:
    """One fabric and failure, as it goes into the table."""

    fabric: str
    failure: str
    links: int
    flows: int
    util_ecmp: float
    util_greedy: float
    util_c4p: float
    bound: float
    status: str
    util_replan: float
    replan_status: str
    plan_s: float
    replan_s: float
    plan_cpu_s: float
    replan_cpu_s: float
    moved: int
    min_moves: int
    crossed: int
    minimum_proven: bool = False
    """``min_moves`` is the exact minimum (a plan moving that few was found or is ``moved``)."""
    fewest_found: int = 0
    """The fewest moves of any plan found at that utilization (offline searches included): the
    minimum lies between ``min_moves`` and this."""


def _link_loads(fabric: Fabric, result: Plan) -> tuple[dict[int, int], dict[int, int]]:
    """Per link: flows of the plan going up it out of a leaf, and down it into a leaf."""
    index = fabric.index
    up: dict[int, int] = {}
    down: dict[int, int] = {}
    for path in result.paths:
        for res in path[1:-1]:
            src, dst = int(index.res_src[res]), int(index.res_dst[res])
            if index.tier[src] == 1:
                up[res // 2] = up.get(res // 2, 0) + 1
            elif index.tier[dst] == 1:
                down[res // 2] = down.get(res // 2, 0) + 1
    return up, down


def _switch_links(fabric: Fabric, switch: int) -> list[int]:
    index = fabric.index
    return [
        li
        for li in range(len(fabric.links))
        if switch in (int(index.res_src[2 * li]), int(index.res_dst[2 * li]))
        and index.is_switch(int(index.res_src[2 * li]))
        and index.is_switch(int(index.res_dst[2 * li]))
    ]


def failures(fabric: Fabric, result: Plan, seed: int = 7) -> dict[str, dict[int, LinkStatus]]:
    """The link changes of each failure kind, chosen from the healthy plan's loads."""
    index = fabric.index
    up, down = _link_loads(fabric, result)
    busiest = max(sorted(up), key=lambda li: up[li])
    light = min(sorted(up), key=lambda li: up[li])
    into = max((li for li in sorted(down) if li != busiest), key=lambda li: down[li])
    top = int(index.tier[: index.num_switches].max())
    tops = [s for s in range(index.num_switches) if index.tier[s] == top]
    through = {s: 0 for s in tops}
    for path in result.paths:
        for res in path[1:-1]:
            node = int(index.res_dst[res])
            if node in through:
                through[node] += 1
    by_load = sorted(tops, key=lambda s: (-through[s], s))
    rng = np.random.default_rng(seed)
    inner = [li for li in range(len(fabric.links)) if _switch_links_pair(fabric, li)]
    two = rng.choice(len(inner), size=2, replace=False).tolist()
    down_status, drained = LinkStatus.DOWN, LinkStatus.DRAINED
    return {
        KINDS[0]: {busiest: down_status},
        KINDS[1]: {light: down_status},
        KINDS[2]: {into: down_status},
        KINDS[3]: dict.fromkeys(_switch_links(fabric, by_load[0]), down_status),
        KINDS[4]: {inner[k]: down_status for k in two},
        KINDS[5]: dict.fromkeys(_switch_links(fabric, by_load[-1]), drained),
    }


def _switch_links_pair(fabric: Fabric, li: int) -> bool:
    index = fabric.index
    return index.is_switch(int(index.res_src[2 * li])) and index.is_switch(
        int(index.res_dst[2 * li])
    )


def _ecmp_utilization(fabric: Fabric, workload: Workload) -> float:
    """Median over seeds of ECMP's busiest switch-to-switch link, in NIC line rates."""
    flows = workload.flows
    rates = np.array([f.rate for f in flows])
    problem = build_problem(fabric, flows, rates)
    values = []
    for seed in ECMP_SEEDS:
        paths = ecmp_paths(fabric, flows, seed=seed).paths
        values.append(problem.measure(problem.path_loads(paths)).max_utilization)
    return float(statistics.median(values))


def run_fabric(
    name: str,
    fabric: Fabric,
    kinds: Sequence[str] = KINDS,
    progress: Callable[[FailureRow], None] | None = None,
    budget: float = 10.0,
) -> list[FailureRow]:
    """Every failure kind of ``kinds`` on one fabric (see the module docstring)."""
    _ = fabric.index.routing
    workload = derive_workload(fabric, permutation_jobs(2)(fabric))
    healthy = plan(fabric, workload, budget=budget)
    changes = failures(fabric, healthy)
    rows = []
    degraded: dict[str, Plan] = {}
    for kind in kinds:
        if kind == "restore":
            change = changes[RESTORED]
            snapshot, before = fabric, degraded.get(RESTORED)
            if before is None:
                down = fabric.with_link_status(change)
                before = plan(down, workload, healthy, budget=budget)
        else:
            change = changes[kind]
            snapshot, before = fabric.with_link_status(change), healthy
        _ = snapshot.index.routing  # a live controller has its snapshot's index before planning
        greedy = plan(snapshot, workload, strategy="greedy")
        started, cpu = time.perf_counter(), time.process_time()
        full = plan(snapshot, workload, budget=budget)
        plan_s, plan_cpu_s = time.perf_counter() - started, time.process_time() - cpu
        started, cpu = time.perf_counter(), time.process_time()
        again = plan(snapshot, workload, before, budget=budget)
        replan_s, replan_cpu_s = time.perf_counter() - started, time.process_time() - cpu
        degraded[kind] = again
        dead = {2 * li for li in change} | {2 * li + 1 for li in change}
        crossed = sum(1 for path in before.paths if dead.intersection(path))
        least, proven, fewest = len(again.moved), True, len(again.moved)
        if (again.min_moves or 0) < len(again.moved):
            least, proven, fewest = least_moves(
                snapshot, workload, before, again, LEAST_MOVES_SECONDS
            )
        least = max(least, again.min_moves or 0)
        row = FailureRow(
            fabric=name,
            failure=kind,
            links=len(change),
            flows=len(workload.flows),
            util_ecmp=_ecmp_utilization(snapshot, workload),
            util_greedy=greedy.objective.max_utilization,
            util_c4p=full.objective.max_utilization,
            bound=max(full.bounds.best, again.bounds.best),
            status=full.status,
            util_replan=again.objective.max_utilization,
            replan_status=again.status,
            plan_s=plan_s,
            replan_s=replan_s,
            plan_cpu_s=plan_cpu_s,
            replan_cpu_s=replan_cpu_s,
            moved=len(again.moved),
            min_moves=least,
            crossed=crossed,
            minimum_proven=proven or least == len(again.moved),
            fewest_found=min(fewest, len(again.moved)),
        )
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def least_moves(
    snapshot: Fabric, workload: Workload, before: Plan, after: Plan, seconds: float
) -> tuple[int, bool, int]:
    """A proven lower bound on the flows any plan at ``after``'s utilization (per component)
    must move from ``before``, whether it is the exact minimum (:mod:`solver.repair.moves`; on a
    fat-tree first the aggregated LP of :mod:`solver.bounds.treefewest`), and
    the fewest moves found by any means (a repair looking ahead over its chains, one placing
    the stuck flows' chains together, and on a fat-tree the LP restricted to the flows around
    the re-plan's moves, :func:`_fewest_near`; where the minimum is not proven): the minimum
    lies between the first and the last."""
    flows, weight = flow_weights(workload)
    problem = build_problem(snapshot, flows, weight, before.candidates)
    prior = match_previous(problem, before.flows, before.paths, before.snapshot)
    now = match_previous(problem, after.flows, after.paths, after.snapshot)
    shape = analyse(snapshot, ignore_status=True) if problem.tree is not None else None
    total, proven, found_total = 0, True, 0
    components = zip(problem.component_flows(), problem.component_resources(), strict=True)
    for members, resources in components:
        mine = np.where(prior.had[members], prior.choice[members], -2)
        chosen = now.choice[members]
        moves = int(np.count_nonzero((mine != -2) & (chosen != mine)))
        if np.array_equal(mine, chosen) or np.any(chosen < 0):
            found_total += moves
            continue
        z = problem.measure(problem.loads(members, chosen), resources=resources).max_utilization
        tree, exact = None, False
        if isinstance(shape, FatTreeShape):  # the aggregated LP: exact in integers
            tree, _, exact = tree_moves_bound(problem, members, mine, shape, z, TREE_BOUND_SECONDS)
        if tree is not None and tree >= moves:
            total += moves
            found_total += moves
            continue
        if not exact:  # no fat-tree, or its LP not solved (to PDLP's tolerance) in the time
            found = fewest_moves(problem, members, mine, z, chosen, time_limit=seconds)
        else:  # its relaxation grows by links on a fat-tree and proves less than ``tree``
            found = FewestMoves(None, None, 0, False, "fat-tree: the aggregated bound instead")
        bound = max(found.bound, tree or 0)
        total += bound
        best = min(moves, found.moves if found.moves is not None else moves)
        if not found.proven and best > bound:
            deadline = time.perf_counter() + SEARCH_SECONDS
            ahead = repair(problem, members, mine, z, lookahead=LOOKAHEAD, deadline=deadline)
            together = repair(problem, members, mine, z, joint=True)  # a fraction of a second
            for found_by in (ahead, together):
                if found_by.reached:
                    moved = int(np.count_nonzero((mine != -2) & (found_by.choice != mine)))
                    best = min(best, moved)
            if isinstance(shape, FatTreeShape):
                best = min(best, _fewest_near(problem, members, mine, chosen, shape, z))
        proven = proven and (found.proven or best <= bound)
        found_total += best
    return total, proven, found_total


def _fewest_near(
    problem: Problem,
    members: IntArray,
    mine: IntArray,
    chosen: IntArray,
    shape: FatTreeShape,
    z: float,
) -> int:
    """The fewest moves of the plans that move only flows at the ends of the re-plan's moved
    flows and at the leaves of one more pod (:mod:`solver.bounds.treewithin`), for each of the
    :data:`NEAR_PODS` pods holding most ends of the displaced flows (then of all moved);
    ``len(members)`` if none is found."""
    s, t, _, _ = previous_options(problem, members, mine, shape)
    moved = chosen != mine
    ends = np.union1d(s[moved], t[moved])
    pods = np.arange(shape.pods)
    lost = mine == -1
    by_lost = np.bincount(np.concatenate([shape.pod[s[lost]], shape.pod[t[lost]]]),
                          minlength=shape.pods)  # fmt: skip
    by_moved = np.bincount(shape.pod[ends], minlength=shape.pods)
    order = np.lexsort((pods, -by_moved, -by_lost))
    best = len(members)
    for p in order[by_moved[order] > 0][:NEAR_PODS].tolist():
        leaves = np.union1d(ends, np.flatnonzero(shape.is_leaf & (shape.pod == p)))
        found = fewest_within(problem, members, mine, shape, z, leaves, NEAR_SECONDS)
        if found is not None:
            best = min(best, found.moves)
    return best


NEAR_PODS = 3
"""Pods tried by :func:`_fewest_near`: at 16,384 GPUs (3-tier light uplink) the re-plan's
ends lie in 9 pods; with pod 15's leaves free 15 moves (3.4 s), pod 0's 16, neither 18. By
the moved flows' ends alone pod 15 came fourth (the ladder's run at `f5f1259`: 13-16); the
displaced flows' ends (pods 0, 15 and 2) put it second."""

NEAR_SECONDS = 120.0
"""Time for each restricted LP of :func:`_fewest_near` (3-10 s at 16,384 GPUs)."""

SEARCH_SECONDS = 20.0
"""Time for the repairs that look ahead over their chains, where the minimum is not proven
(the fewest moves found, the upper end of a range)."""

TREE_BOUND_SECONDS = 420.0
"""Time for the fat-tree moves bound's LP (:mod:`solver.bounds.treefewest`): 6-150 s at 4,096 GPUs
on a loaded machine (HiGHS's simplex); at 16,384, PDLP with every row, about 70 s (the 3-tier
light uplink: 15, where HiGHS with generated rows reached 13 in this time)."""


def _maker(kind: str, gpus: int) -> Callable[[], Fabric]:
    return lambda: sized_for_gpus(kind, gpus)


def fabrics(quick: bool) -> list[tuple[str, Callable[[], Fabric]]]:
    """The ladder's fabrics: 2-tier rail-optimized and 3-tier fat-tree, 4,096 and 16,384 GPUs
    (4,096 only with ``quick``)."""
    sizes = (4096,) if quick else (4096, 16384)
    return [
        (f"{label} {gpus:,} GPUs", _maker(kind, gpus))
        for kind, label in (("rail-optimized", "2-tier"), ("fat-tree", "3-tier"))
        for gpus in sizes
    ]


def run(
    quick: bool = False,
    only: str | None = None,
    progress: Callable[[FailureRow], None] | None = None,
) -> list[FailureRow]:
    """The ladder over :func:`fabrics` whose name contains ``only`` (alternatives split by
    ``|``), every failure kind on each."""
    rows: list[FailureRow] = []
    wanted = [w for w in (only or "").split("|") if w]
    for name, make in fabrics(quick):
        if wanted and not any(w in name for w in wanted):
            continue
        rows.extend(run_fabric(name, make(), progress=progress))
    return rows


def _minimum(r: FailureRow) -> str:
    """The fewest moves: exact, or the range between the proven bound and the fewest found."""
    if r.minimum_proven or r.fewest_found <= r.min_moves:
        return str(r.min_moves)
    return f"{r.min_moves}-{r.fewest_found}"


def markdown(rows: Sequence[FailureRow], command: str, seconds: float) -> str:
    head = (
        "| fabric | failure | links | flows | ECMP | greedy | c4p | bound | c4p re-plan "
        "| plan s (CPU) | re-plan s (CPU) | moved | min moves | crossed |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        mark = "" if r.status == "optimal" else " (feasible)"
        again = "" if r.replan_status == "optimal" else " (feasible)"
        lines.append(
            f"| {r.fabric} | {r.failure} | {r.links} | {r.flows:,} | {r.util_ecmp:.2f}"
            f" | {r.util_greedy:.2f} | {r.util_c4p:.2f}{mark} | {r.bound:.2f}"
            f" | {r.util_replan:.2f}{again} | {r.plan_s:.3f} ({r.plan_cpu_s:.3f})"
            f" | {r.replan_s:.3f} ({r.replan_cpu_s:.3f}) | {r.moved}"
            f" | {_minimum(r)} | {r.crossed} |"
        )
    machine = f"{platform.machine()}, Python {platform.python_version()}"
    return (
        "# Failure ladder\n\n"
        f"Produced by `{command}` in {seconds:.0f} s on {machine}, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}; the method is in "
        "`c4p/figures/failures.py`'s docstring. Times are wall-clock, with the process's CPU "
        "time in brackets, on a 2-core machine shared with other work: wall times are "
        "inflated by the load, CPU times much less so.\n\n"
        "Every utilization is the busiest switch-to-switch link's load over its capacity in "
        "NIC line rates (1.00 = one full-rate flow). *ECMP*, *greedy* and *c4p* plan the "
        "degraded snapshot from scratch; *bound* is the best lower bound (it counts the "
        "missing links); *c4p re-plan* starts from the healthy plan in force. *plan s* / "
        "*re-plan s* are `plan()` wall times (snapshot index built beforehand, as in the "
        "controller). *moved* is what the re-plan moved, *min moves* the fewest flows any plan "
        "reaching the re-plan's utilization must move, or where that is not known the range "
        "from a proven lower bound to the fewest moves any search found, *crossed* the "
        "flows whose path used a failed link. *restore* brings the busiest uplink back and "
        "re-plans from the plan in force while it was down. (feasible) marks a plan not "
        "proven optimal.\n\n"
        + head
        + "\n".join(lines)
        + "\n\n![re-plan time and moves](benchmarks-failures.png)\n"
    )


def plot(rows: Sequence[FailureRow], path: Path) -> None:
    """Re-plan time per row (log scale), and moved beside the lower bound on moves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    xs = np.arange(len(rows))
    left.bar(xs - 0.2, [max(r.plan_s, 1e-4) for r in rows], 0.4, label="full plan")
    left.bar(xs + 0.2, [max(r.replan_s, 1e-4) for r in rows], 0.4, label="re-plan")
    left.set_yscale("log")
    left.set_ylabel("seconds")
    left.set_title("plan and re-plan time per failure")
    right.bar(xs - 0.2, [max(r.moved, 1) for r in rows], 0.4, label="moved")
    right.bar(xs + 0.2, [max(r.min_moves, 1) for r in rows], 0.4,
              label="fewest moves (or a lower bound)")  # fmt: skip
    right.set_yscale("log")
    right.set_ylabel("flows (log scale)")
    right.set_title("flows moved by the re-plan")
    for ax in (left, right):
        ax.set_xticks(list(xs))
        ax.set_xticklabels([str(i + 1) for i in xs])
        ax.set_xlabel("row of the table")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rows_json(rows: Sequence[FailureRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
