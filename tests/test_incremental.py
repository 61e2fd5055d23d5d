"""Re-planning with a previous plan: what stays, what moves, and why.

The controller calls the planner on every event (a link down or drained, a job added, removed
or resized) with the plan in force; moving a live QP costs, so a re-plan must keep every flow
whose path is still valid and move only what the new snapshot or the objective requires.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import (
    SMALL,
    assert_valid,
    flow_sets,
    make_flows,
    switch_links,
)

from solver import JobsGenParams, derive_workload, generate_jobs
from solver.planner import plan
from solver.planning.plans import plan_from_paths
from solver.planning.result import Plan
from solver.space.problem import build_problem
from solver.workload.flows import Flow
from solver.workload.placement import PlacementMode
from topology.generators import LeafSpineParams, RailOptimizedParams, leaf_spine, rail_optimized
from topology.model import Fabric, LinkStatus

RAIL = rail_optimized(RailOptimizedParams(units=4, hosts_per_unit=4, rails=2, spines=4))


def ring_jobs(fabric: Fabric, jobs: int = 2, qps: int = 2) -> list[Flow]:
    params = JobsGenParams(
        jobs=jobs,
        hosts_per_job=16 // jobs,
        qps_per_connection=qps,
        placement=PlacementMode.FRAGMENTED,
        run=1,
    )
    return list(derive_workload(fabric, generate_jobs(fabric, params)).flows)


def busiest_link(plan_: Plan) -> int:
    """The switch link that carries the most flows in a plan."""
    counts: dict[int, int] = {}
    for path in plan_.paths:
        for r in path[1:-1]:
            counts[r // 2] = counts.get(r // 2, 0) + 1
    return max(counts, key=lambda li: (counts[li], -li))


def crossing(plan_: Plan, link: int) -> set[str]:
    return {
        f.id
        for f, path in zip(plan_.flows, plan_.paths, strict=True)
        if 2 * link in path or 2 * link + 1 in path
    }


def unchanged(before: Plan, after: Plan) -> set[str]:
    old = dict(zip(before.flow_ids, before.paths, strict=True))
    return {
        fid for fid, path in zip(after.flow_ids, after.paths, strict=True) if old.get(fid) == path
    }


@pytest.mark.parametrize("status", [LinkStatus.DOWN, LinkStatus.DRAINED])
def test_link_failure_moves_only_the_flows_that_crossed_it(status: LinkStatus) -> None:
    flows = ring_jobs(RAIL)
    before = plan(RAIL, flows)
    link = busiest_link(before)
    snapshot = RAIL.with_link_status({link: status})
    after = plan(snapshot, flows, previous=before)
    assert_valid(after, snapshot)
    hit = crossing(before, link)
    assert hit and set(after.moved) == hit
    assert after.objective.moved == len(hit)
    assert unchanged(before, after) == set(before.flow_ids) - hit
    assert after.objective.max_utilization == after.bounds.best


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_after_any_failure_extra_moves_buy_a_better_objective(data: st.DataObject) -> None:
    fabric = SMALL[data.draw(st.sampled_from(sorted(SMALL)))]
    flows = data.draw(flow_sets(fabric, max_flows=24, rates=data.draw(st.booleans())))
    before = plan(fabric, flows, budget=0.5)
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), min_size=1, max_size=2))
    snapshot = fabric.with_link_status(dict.fromkeys(links, LinkStatus.DOWN))
    after = plan(snapshot, flows, previous=before, budget=0.5)
    assert_valid(after, snapshot)
    hit = set().union(*(crossing(before, li) for li in links)) - set(after.unreachable)
    assert hit <= set(after.moved)  # a path over a dead link cannot be kept
    # Keep everything that may stay, place the rest greedily: extra moves must beat it.
    kept = plan(snapshot, flows, previous=before, strategy="greedy")
    assert set(kept.moved) == hit
    assert after.objective.max_utilization <= kept.objective.max_utilization + 1e-9
    # The objective holds per independent part (a job alone on its links gets its own best):
    # no part is worse, and extra moves must lower some part's own maximum.
    assert len(after.parts) == len(kept.parts)
    pairs = list(zip(after.parts, kept.parts, strict=True))
    assert all(a.max_utilization <= k.max_utilization + 1e-9 for a, k in pairs)
    if set(after.moved) != hit:
        assert any(a.max_utilization < k.max_utilization - 1e-9 for a, k in pairs)


def test_adding_removing_and_resizing_jobs_keeps_the_others() -> None:
    flows = ring_jobs(RAIL, jobs=2)
    first = [f for f in flows if f.job == flows[0].job]
    before = plan(RAIL, first)
    added = plan(RAIL, flows, previous=before)
    assert added.moved == () and unchanged(before, added) == set(before.flow_ids)
    removed = plan(RAIL, first, previous=added)
    assert removed.moved == () and removed.paths == before.paths
    bigger = ring_jobs(RAIL, jobs=2, qps=4)
    resized = plan(RAIL, bigger, previous=added)
    assert resized.moved == ()
    assert unchanged(added, resized) == set(added.flow_ids)
    for result, flows_ in ((added, flows), (removed, first), (resized, bigger)):
        assert_valid(result, RAIL)
        assert result.objective.max_utilization == result.bounds.best
        assert len(result.flows) == len(flows_)


def test_a_plan_file_serves_as_previous_on_the_new_snapshot() -> None:
    flows = ring_jobs(RAIL)
    before = plan(RAIL, flows)
    link = busiest_link(before)
    snapshot = RAIL.with_link_status({link: LinkStatus.DOWN})
    document = before.to_plan_file()
    previous = Plan.from_plan_file(document, snapshot)
    assert previous.paths == before.paths  # read as written, dead link included
    after = plan(snapshot, flows, previous=previous)
    direct = plan(snapshot, flows, previous=before)
    assert after.paths == direct.paths and after.moved == direct.moved
    # and from a snapshot numbered differently: links listed in another order
    shuffled = Fabric(
        name=snapshot.name,
        switches=snapshot.switches,
        hosts=snapshot.hosts,
        links=tuple(reversed(snapshot.links)),
    )
    moved = plan(shuffled, flows, previous=before)
    assert_valid(moved, shuffled)
    assert set(moved.moved) == crossing(before, link)


def two_tier_previous(fabric: Fabric, flows: list[Flow], spines: list[str]) -> Plan:
    """A previous plan putting flow ``i`` through spine ``spines[i]``."""
    index = fabric.index
    paths = []
    for flow, spine in zip(flows, spines, strict=True):
        src_leaf = index.node_names[index.leaf_of(index.node(flow.src))]
        dst_leaf = index.node_names[index.leaf_of(index.node(flow.dst))]
        paths.append(index.path_resources([flow.src, src_leaf, spine, dst_leaf, flow.dst]))
    return Plan.from_plan_file(plan_from_paths(fabric, flows, paths, "hand"), fabric)


@pytest.mark.parametrize("strategy", ["auto", "exact", "cpsat"])
def test_kept_paths_that_block_the_optimum_are_moved(strategy: str) -> None:
    fabric = leaf_spine(LeafSpineParams(leaves=4, spines=2, hosts_per_leaf=2))
    # A: leaf0 -> leaf1 on spine 0, B: leaf2 -> leaf3 on spine 1, then C: leaf0 -> leaf3 arrives.
    a, b, c = make_flows(fabric, [(0, 2), (4, 6), (1, 7)])
    previous = two_tier_previous(fabric, [a, b], ["spine-00", "spine-01"])
    keep_all = plan(fabric, [a, b, c], previous=previous, strategy="greedy")
    assert keep_all.objective.max_utilization == 2.0 and keep_all.moved == ()
    after = plan(fabric, [a, b, c], previous=previous, strategy=strategy)
    assert_valid(after, fabric)
    assert after.objective.max_utilization == 1.0 == after.bounds.best
    assert len(after.moved) == 1


def test_unchanged_inputs_move_nothing_and_keep_every_path() -> None:
    flows = ring_jobs(RAIL)
    before = plan(RAIL, flows)
    again = plan(RAIL, flows, previous=before)
    assert again.paths == before.paths and again.moved == ()
    assert {p.method for p in again.parts} <= {"kept"}
    rng = np.random.default_rng(0)
    shuffled = [flows[i] for i in rng.permutation(len(flows))]
    reordered = plan(RAIL, shuffled, previous=before)
    assert reordered.moved == ()
    assert dict(zip(reordered.flow_ids, reordered.paths, strict=True)) == dict(
        zip(before.flow_ids, before.paths, strict=True)
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_filtered_candidates_equal_a_fresh_enumeration(data: st.DataObject) -> None:
    fabric = SMALL[data.draw(st.sampled_from(sorted(SMALL)))]
    flows = data.draw(flow_sets(fabric, max_flows=24))
    weights = np.ones(len(flows))
    # enumerated tables (a fat-tree's lazy one needs no filtering: tests/test_treecandidates.py)
    before = build_problem(fabric, flows, weights, lazy=False)
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), min_size=1, max_size=4))
    snapshot = fabric.with_link_status(dict.fromkeys(links, LinkStatus.DRAINED))
    reused = build_problem(snapshot, flows, weights, before.candidate_table, lazy=False)
    fresh = build_problem(snapshot, flows, weights, lazy=False)
    for name in ("pair", "pair_leaves", "offset", "table", "hops"):
        assert np.array_equal(getattr(reused, name), getattr(fresh, name)), name
    # a link coming back makes the old table unusable: it must not be reused
    assert not fresh.candidate_table.reusable_on(fabric)
