"""The proof: bindings applied in the data plane realize the plan, link by link, on every
fabric kind, predicted and learned, and again after a link fails."""

from __future__ import annotations

import numpy as np
import pytest
from southbound_cases import (
    KINDS,
    busiest_switch_link,
    fabric_pair,
    node_pairs,
    replan,
    ring_routes,
)

from southbound import (
    ModeledProber,
    PathTable,
    PredictedPorts,
    ProbePlanner,
    bindings_for_paths,
    diff_bindings,
    verify,
)
from topology.model import LinkStatus
from topology.roce import flow_label_for_sport


@pytest.mark.parametrize("kind", KINDS)
def test_predicted_bindings_realize_the_plan(kind: str) -> None:
    fabric, _ = fabric_pair(kind)
    routes = ring_routes(fabric)
    report = verify(fabric, bindings_for_paths(fabric, routes, epoch=1), routes)
    assert report.as_planned and report.checked == len(routes)
    assert np.array_equal(report.planned_load, report.realized_load)
    assert report.planned_load.max() > 0 and report.differing_links == 0
    assert "verdict: as planned" in report.summary()


@pytest.mark.parametrize("kind", KINDS)
def test_learned_bindings_realize_the_plan_where_the_hash_model_is_wrong(kind: str) -> None:
    public, truth = fabric_pair(kind)
    routes = ring_routes(public)
    # Predicting with the public (wrong) hash model misroutes QPs in the real fabric ...
    wrong = verify(truth, bindings_for_paths(public, routes, epoch=1), routes)
    assert not wrong.ok and wrong.differing_links > 0
    # ... while a table learned by probing the real fabric, never told its hashes, does not.
    table = PathTable(public)
    assert ProbePlanner(table, ModeledProber(truth)).cover(node_pairs(public, routes)).complete
    learned = bindings_for_paths(public, routes, epoch=1, mode="learned", table=table)
    report = verify(truth, learned, routes)
    assert report.as_planned and report.differing_links == 0


@pytest.mark.parametrize("kind", KINDS)
def test_after_a_link_failure_stale_entries_are_reprobed_and_bindings_rederived(
    kind: str,
) -> None:
    public, truth = fabric_pair(kind)
    routes = ring_routes(public)
    table = PathTable(public)
    prober = ModeledProber(truth)
    planner = ProbePlanner(table, prober)
    planner.cover(node_pairs(public, routes))
    before = bindings_for_paths(public, routes, epoch=1, mode="learned", table=table)
    link = busiest_switch_link(public, routes)
    view = public.with_link_status({link: LinkStatus.DOWN})
    real = truth.with_link_status({link: LinkStatus.DOWN})
    prober.set_fabric(real)
    # The old bindings no longer realize the plan: the failed link is gone.
    assert not verify(real, before).ok
    invalidation = table.invalidate(view)
    assert invalidation.stale
    report = planner.reprobe(invalidation)
    assert report.reprobed + report.settled == len(invalidation.stale) and report.complete
    replanned = replan(view, routes)
    after = bindings_for_paths(
        view, replanned, epoch=2, mode="learned", table=table, previous=before
    )
    proof = verify(real, after, replanned)
    assert proof.as_planned and proof.differing_links == 0
    diff = diff_bindings(before, after)
    assert not diff.added and not diff.removed
    # Only QPs whose path or ECMP groups changed get a new port.
    touched = {key for key, _ in invalidation.stale}
    for old, _ in diff.changed:
        index = public.index
        key = table.key_of(index.node(old.src), index.node(old.dst))
        moved_path = old.path != view.index.path_nodes(
            next(r.path for r in replanned if r.key == old.key)
        )
        assert key in touched or moved_path


def test_a_wrong_port_is_caught_and_named() -> None:
    fabric, _ = fabric_pair("rail-optimized")
    routes = ring_routes(fabric)
    bindings = bindings_for_paths(fabric, routes, epoch=1)
    k = next(i for i, r in enumerate(routes) if len(r.path) > 2)
    good = bindings.bindings[k]
    index = fabric.index
    src, dst = index.node(good.src), index.node(good.dst)
    others = PredictedPorts(fabric).alternatives(src, dst)
    bound = tuple(index.path_resources(good.path)[1:-1])
    wrong_port = next(p for m, ports in others.items() if m != bound for p in ports)
    tampered = good.model_copy(
        update={"sport": wrong_port, "flow_label": flow_label_for_sport(wrong_port)}
    )
    broken = bindings.model_copy(
        update={"bindings": (*bindings.bindings[:k], tampered, *bindings.bindings[k + 1 :])}
    )
    report = verify(fabric, broken, routes)
    assert not report.ok and [m.id for m in report.mismatches] == [good.id]
    assert report.differing_links >= 2 and "FAILED" in report.summary()


def test_verify_without_the_plan_uses_the_sets_own_record() -> None:
    fabric, _ = fabric_pair("leaf-spine")
    routes = ring_routes(fabric)
    bindings = bindings_for_paths(fabric, routes, epoch=1)
    with_plan = verify(fabric, bindings, routes)
    alone = verify(fabric, bindings)
    assert alone.as_planned and np.array_equal(alone.planned_load, with_plan.planned_load)
