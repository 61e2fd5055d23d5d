"""A two-tier table's groups of pairs give the components and the bound of the full table.

Why a test: the compressed graph (pairs joined through groups of equal up-link and down-link
sets) and the combinatorial bound read off the groups' first pairs are equivalence arguments;
the references here are label propagation over every (pair, resource) entry of the table and
the bound over every entry, on fabrics with links down or drained, flows of any pairs and
unequal rates.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import TWO_TIER_FABRICS, flow_sets, switch_links

from solver.bounds.combinatorial import combinatorial_bounds
from solver.space import labels as space_module
from solver.space.problem import Problem, build_problem, propagate
from solver.workload.flows import Flow
from topology.generators import DualPlaneParams, dual_plane
from topology.model import Fabric, LinkStatus

FABRICS = {
    **TWO_TIER_FABRICS,
    "dual-plane": dual_plane(DualPlaneParams(units=2, hosts_per_unit=2, rails=2, spines=2)),
}


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Fabric, list[Flow]]:
    """A fabric of :data:`FABRICS` with up to six switch links down or drained, and flows on
    it (of equal or unequal rates)."""
    fabric = FABRICS[draw(st.sampled_from(sorted(FABRICS)))]
    links = draw(st.lists(st.sampled_from(switch_links(fabric)), max_size=6, unique=True))
    status = draw(st.sampled_from([LinkStatus.DOWN, LinkStatus.DRAINED]))
    snapshot = fabric.with_link_status(dict.fromkeys(links, status))
    return snapshot, draw(flow_sets(snapshot, max_flows=60, rates=draw(st.booleans())))


def _reference(problem: Problem) -> tuple[list[int], list[int]]:
    """Component of each pair and of each resource, from the full graph."""
    res, owner = problem._entries
    label = propagate(res, owner, problem.num_pairs, problem.pad)
    first, dense = np.unique(label, return_inverse=True)
    of_res = np.full(problem.pad + 1, -1, dtype=np.int64)
    renumber = np.full(problem.num_pairs, -1, dtype=np.int64)
    renumber[first] = np.arange(len(first))
    real = res < problem.pad
    of_res[res[real]] = renumber[label[owner[real]]]
    return dense.ravel().tolist(), of_res.tolist()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_compressed_components_equal_the_full_graphs(case: tuple[Fabric, list[Flow]]) -> None:
    snapshot, flows = case
    problem = build_problem(snapshot, flows, np.array([f.rate for f in flows]))
    if not problem.num_pairs:
        return
    assert problem._two_hop_graph() is not None  # the compressed graph is what is tested
    pairs, resources = _reference(problem)
    assert problem.label.tolist() == pairs
    assert problem.resource_label.tolist() == resources


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_the_bound_read_off_the_groups_equals_the_full_tables(
    case: tuple[Fabric, list[Flow]],
) -> None:
    snapshot, flows = case
    weights = np.array([f.rate for f in flows])
    grouped = build_problem(snapshot, flows, weights)
    if not grouped.num_pairs:
        return
    assert grouped.two_hop_groups is not None
    whole = build_problem(snapshot, flows, weights)
    whole.__dict__["two_hop_groups"] = None  # every entry of the table, as before the groups
    assert np.array_equal(combinatorial_bounds(grouped), combinatorial_bounds(whole))


def test_rows_that_collide_in_their_hash_are_still_grouped_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = np.array([[1, 2], [3, 4], [1, 2], [2, 1], [3, 4], [1, -1]])
    first, group = space_module._same_rows(rows)
    assert np.array_equal(rows[first[group]], rows)
    assert len(first) == 4
    monkeypatch.setattr(space_module, "_row_keys", lambda r: np.zeros(len(r), np.uint64))
    first, group = space_module._same_rows(rows)  # every hash equal: rows compared whole
    assert np.array_equal(rows[first[group]], rows)
    assert len(first) == 4
