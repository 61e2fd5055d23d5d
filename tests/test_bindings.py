"""Bindings: port and flow label per QP, validated as the kernel would apply them, kept across
re-plans where they still work, and diffed so the controller pushes only what changed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from southbound_cases import KINDS, MAKERS, ring_routes

from southbound import (
    Binding,
    BindingSet,
    IssueKind,
    PathTable,
    QpRoute,
    bindings_for_paths,
    diff_bindings,
)
from topology.formats import TextFormat, dump_model, parse_model
from topology.model import LinkStatus
from topology.roce import (
    SPORT_MAX,
    SPORT_MIN,
    flow_label_for_sport,
    rdma_flow_label_to_udp_sport,
)


def _binding(**changes: object) -> Binding:
    fields: dict[str, object] = {
        "job": "j",
        "communicator": "c",
        "connection": 0,
        "qp": 0,
        "src": "h0:nic0p0",
        "dst": "h1:nic0p0",
        "sport": 0xC001,
        "flow_label": 1,
        "path": ("h0:nic0p0", "leaf-00", "h1:nic0p0"),
        "epoch": 1,
    }
    fields.update(changes)
    return Binding.model_validate(fields)


@settings(max_examples=300, deadline=None)
@given(sport=st.integers(SPORT_MIN, SPORT_MAX))
def test_the_flow_label_of_every_port_makes_the_kernel_use_that_port(sport: int) -> None:
    label = flow_label_for_sport(sport)
    assert label != 0  # 0 would mean "derive from the QP numbers"
    assert rdma_flow_label_to_udp_sport(label) == sport
    assert _binding(sport=sport, flow_label=label).sport == sport


def test_a_binding_refuses_a_label_that_gives_another_port_and_a_foreign_path() -> None:
    with pytest.raises(ValidationError, match="makes the kernel use port 0xc002"):
        _binding(sport=0xC001, flow_label=2)
    with pytest.raises(ValidationError, match="flow_label"):
        _binding(flow_label=0)
    with pytest.raises(ValidationError, match="sport"):
        _binding(sport=0x1234, flow_label=0x1234)
    with pytest.raises(ValidationError, match="path must run from src"):
        _binding(path=("h9:nic0p0", "leaf-00", "h1:nic0p0"))
    with pytest.raises(ValidationError, match="bound twice"):
        BindingSet(fabric="f", epoch=1, mode="predicted", bindings=(_binding(), _binding()))
    with pytest.raises(ValidationError, match="epoch 2 is after the set's 1"):
        BindingSet(fabric="f", epoch=1, mode="predicted", bindings=(_binding(epoch=2),))
    kept = BindingSet(fabric="f", epoch=3, mode="predicted", bindings=(_binding(epoch=1),))
    assert kept.bindings[0].epoch == 1  # a set in force holds bindings from older epochs


@pytest.mark.parametrize("kind", KINDS)
def test_every_bound_port_and_label_agree_with_the_kernel_formula(kind: str) -> None:
    fabric = MAKERS[kind]()
    routes = ring_routes(fabric, qps=3)
    bindings = bindings_for_paths(fabric, routes, epoch=7)
    assert not bindings.issues and len(bindings.bindings) == len(routes)
    for b in bindings.bindings:
        assert rdma_flow_label_to_udp_sport(b.flow_label) == b.sport
        assert b.epoch == 7
    index = fabric.index
    for route, b in zip(routes, bindings.bindings, strict=True):
        assert b.key == route.key and b.path == index.path_nodes(route.path)


def test_qps_of_one_pair_on_one_path_get_distinct_ports() -> None:
    fabric = MAKERS["rail-optimized"]()
    route = next(r for r in ring_routes(fabric) if len(r.path) > 2)
    same = [
        QpRoute(
            route.job, route.communicator, route.connection, q, route.src, route.dst, route.path
        )
        for q in range(6)
    ]
    bindings = bindings_for_paths(fabric, same, epoch=1)
    assert len({b.sport for b in bindings.bindings}) == 6


def test_a_set_survives_a_round_trip_through_both_file_formats() -> None:
    fabric = MAKERS["fat-tree"]()
    bindings = bindings_for_paths(fabric, ring_routes(fabric), epoch=2)
    for fmt in TextFormat:
        text = dump_model(bindings, fmt)
        assert parse_model(BindingSet, text, fmt, "bindings") == bindings


def test_rebinding_the_same_plan_changes_nothing_and_a_moved_qp_changes_alone() -> None:
    fabric = MAKERS["fat-tree"]()
    routes = ring_routes(fabric)
    first = bindings_for_paths(fabric, routes, epoch=1)
    again = bindings_for_paths(fabric, routes, epoch=2, previous=first)
    assert diff_bindings(first, again).empty
    index = fabric.index
    k = next(i for i, r in enumerate(routes) if len(r.path) > 2)
    moved = routes[k]
    others = [
        p
        for p in index.routing.equal_cost_paths(index.node(moved.src), index.node(moved.dst))
        if p != moved.path
    ]
    routes[k] = QpRoute(
        moved.job, moved.communicator, moved.connection, moved.qp, moved.src, moved.dst, others[0]
    )
    dropped = routes.pop()
    extra = QpRoute("extra", "c0", 0, 0, routes[0].src, routes[0].dst, routes[0].path)
    third = bindings_for_paths(fabric, [*routes, extra], epoch=3, previous=again)
    diff = diff_bindings(again, third)
    assert [b.key for b in diff.added] == [extra.key]
    assert [b.key for b in diff.removed] == [dropped.key]
    assert [new.key for _, new in diff.changed] == [moved.key] or diff.repathed == 1
    assert {b.key for b in diff.to_push} <= {extra.key, moved.key}
    assert diff.unchanged == len(routes) - len(diff.changed)


def test_qps_that_cannot_be_bound_are_reported_not_dropped_silently() -> None:
    fabric = MAKERS["leaf-spine"]()
    routes = ring_routes(fabric)
    index = fabric.index
    victim = routes[0]
    nic_link = index.link_of_end[victim.src]
    broken = fabric.with_link_status({nic_link: LinkStatus.DOWN})
    unknown = QpRoute("j", "c", 9, 0, "nohost:nic0p0", victim.dst, ())
    other = next(r for r in routes if victim.src not in (r.src, r.dst) and len(r.path) > 2)
    unplanned = QpRoute("j", "c", 8, 0, other.src, other.dst, ())
    bindings = bindings_for_paths(broken, [*routes, unknown, unplanned], epoch=1)
    issues = {i.id: i for i in bindings.issues}
    assert issues[victim.id].kind is IssueKind.UNBOUND and "not up" in issues[victim.id].reason
    assert issues[unknown.id].kind is IssueKind.UNBOUND and "nohost" in issues[unknown.id].reason
    assert issues[unplanned.id].kind is IssueKind.FALLBACK  # bound to some path, and said so
    assert unplanned.key in bindings.by_key() and victim.key not in bindings.by_key()
    lost = [r for r in routes if victim.src in (r.src, r.dst)]
    assert {i.id for i in bindings.unbound} == {r.id for r in lost} | {unknown.id}
    assert len(bindings.unbound) + len(bindings.bindings) == len(routes) + 2


def test_learned_mode_needs_a_table_of_this_snapshot() -> None:
    fabric = MAKERS["leaf-spine"]()
    routes = ring_routes(fabric)
    with pytest.raises(ValueError, match="needs a PathTable"):
        bindings_for_paths(fabric, routes, 1, mode="learned")
    table = PathTable(fabric)
    later = fabric.with_link_status({len(fabric.links) - 1: LinkStatus.DOWN})
    with pytest.raises(ValueError, match="another snapshot"):
        bindings_for_paths(later, routes, 1, mode="learned", table=table)
    # An empty table knows no port for a path that has a choice: all fall back or stay unbound.
    empty = bindings_for_paths(fabric, routes, 1, mode="learned", table=table)
    crossing = [r for r in routes if len(r.path) > 2]
    assert len(empty.unbound) == len(crossing)
    assert all("no trusted learned port" in i.reason for i in empty.unbound)


def test_a_qp_routed_twice_is_refused_by_name() -> None:
    fabric = MAKERS["leaf-spine"]()
    routes = ring_routes(fabric)
    with pytest.raises(ValueError, match=f"QP {routes[0].id} appears more than once"):
        bindings_for_paths(fabric, [*routes, routes[0]], epoch=1)


def test_a_stale_or_foreign_planned_path_falls_back_with_the_reason() -> None:
    fabric = MAKERS["rail-optimized"]()
    crossing = [r for r in ring_routes(fabric) if len(r.path) > 2]
    first = crossing[0]
    second = next(r for r in crossing if r.src != first.src)
    garbage = QpRoute(
        first.job,
        first.communicator,
        first.connection,
        first.qp,
        first.src,
        first.dst,
        (first.path[0], 10**6, first.path[-1]),
    )
    elsewhere = QpRoute(
        second.job,
        second.communicator,
        second.connection,
        second.qp,
        second.src,
        second.dst,
        first.path,
    )
    bindings = bindings_for_paths(fabric, [garbage, elsewhere], epoch=1)
    reasons = {i.id: i.reason for i in bindings.fallbacks}
    assert "links the fabric lacks" in reasons[garbage.id]
    assert "not an equal-cost path" in reasons[elsewhere.id]
    assert len(bindings.bindings) == 2
