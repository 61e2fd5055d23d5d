"""A fat-tree's lazily computed candidates against routing and against the enumerated table.

Why: the lazy table (:mod:`solver.space.treecandidates`) never lists paths; it claims that a pair's
equal-cost paths are the (agg, core) choices whose links are usable, in routing's member order,
and answers the whole-table questions (components, bound families, which candidate a path is)
from the structure. Routing's own enumeration (:meth:`Routing.switch_paths`, destination tables
and ECMP groups) is the independent reference for the paths; the enumerated table, built by the
code that predates the lazy one, is the reference for everything derived from them.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import flow_sets, make_flows, ports, switch_links

from solver import planner
from solver.bounds.combinatorial import combinatorial_bounds, integral_units
from solver.planner import plan
from solver.space.incremental import match_middles
from solver.space.problem import Problem, build_problem
from solver.space.treecandidates import TreeLayout
from solver.workload.flows import Flow
from topology.generators import FatTreeParams, fat_tree
from topology.model import Fabric, LinkStatus

K4 = fat_tree(FatTreeParams.model_validate({"k": 4}))
K6 = fat_tree(FatTreeParams.model_validate({"k": 6}))
TREES = {"k4": K4, "k6": K6}

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tier(fabric: Fabric, switch: str) -> int:
    return int(fabric.index.tier[fabric.index.node(switch)])


def _first(fabric: Fabric, tier: int) -> str:
    return next(s.name for s in fabric.switches if _tier(fabric, s.name) == tier)


def _links_to(fabric: Fabric, switch: str, tier: int) -> list[tuple[int, str]]:
    """``(link number, interface of switch)`` of the switch's links to switches of ``tier``."""
    switches = {s.name for s in fabric.switches}
    out = []
    for li, link in enumerate(fabric.links):
        (x, xp), (y, yp) = link.a.split(":"), link.b.split(":")
        for here, port, there in ((x, xp, y), (y, yp, x)):
            if here == switch and there in switches and _tier(fabric, there) == tier:
                out.append((li, port))
    return out


def _all_flows(fabric: Fabric) -> list[Flow]:
    """One flow from every port to every other port (every leaf pair, both ways)."""
    n = len(ports(fabric))
    return make_flows(fabric, [(a, b) for a in range(n) for b in range(n) if a != b])


def named_failures(fabric: Fabric) -> dict[str, dict[int, LinkStatus]]:
    """The failure kinds the brief names: an uplink, an agg-core link, a whole core, a leaf
    losing every uplink, a drained agg, and a mix of downs and drains."""
    leaf, agg, core = (_first(fabric, t) for t in (1, 2, 3))
    uplinks = [li for li, _ in _links_to(fabric, leaf, 2)]
    agg_core = [li for li, _ in _links_to(fabric, agg, 3)]
    down, drained = LinkStatus.DOWN, LinkStatus.DRAINED
    return {
        "uplink": {uplinks[0]: down},
        "agg-core link": {agg_core[-1]: down},
        "whole core": {li: down for li, _ in _links_to(fabric, core, 2)},
        "leaf without uplinks": dict.fromkeys(uplinks, down),
        "agg drained": {li: drained for t in (1, 3) for li, _ in _links_to(fabric, agg, t)},
        "mixed": {uplinks[-1]: drained, agg_core[0]: down, agg_core[-1]: drained},
    }


def assert_same_as_routing(problem: Problem) -> None:
    assert problem.tree is not None and problem.dense is None
    routing = problem.fabric.index.routing
    for p, (u, v) in enumerate(problem.pair_leaves.tolist()):
        expected = [list(path) for path in routing.switch_paths(u, v)]
        assert problem.candidates(p)[:, : problem.hops[p]].tolist() == expected
    # the pairs without a candidate are exactly routing's unreachable ones
    index = problem.fabric.index
    for f, flow in enumerate(problem.flows):
        up, down = int(problem.nic_up[f]), int(problem.nic_down[f])
        if problem.pair[f] == -2 and min(up, down) >= 0 and index.res_usable[[up, down]].all():
            u, v = int(index.res_dst[up]), int(index.res_src[down])
            assert routing.switch_paths(u, v) == (), flow


def assert_same_as_enumerated(lazy: Problem, dense: Problem) -> None:
    """Everything a consumer reads from a Problem is the same, lazy or enumerated."""
    assert lazy.tree is not None and dense.tree is None
    for name in ("pair", "pair_leaves", "offset", "hops", "nic_up", "nic_down"):
        assert np.array_equal(getattr(lazy, name), getattr(dense, name)), name
    width = dense.width
    assert np.array_equal(lazy.table[:, :width], dense.table)
    assert np.all(lazy.table[:, width:] == lazy.pad)
    rows = np.arange(len(dense.table))[::3]
    assert np.array_equal(lazy.row_paths(rows)[:, :width], dense.row_paths(rows))
    for p in range(lazy.num_pairs):
        assert np.array_equal(lazy.candidates(p)[:, :width], dense.candidates(p))
    assert np.array_equal(lazy.label, dense.label)
    assert np.array_equal(lazy.resource_label, dense.resource_label)
    assert np.array_equal(combinatorial_bounds(lazy), combinatorial_bounds(dense))
    assert np.array_equal(integral_units(lazy), integral_units(dense), equal_nan=True)
    assert np.array_equal(lazy.lightest_scale, dense.lightest_scale)
    cross = lazy.cross
    if cross.size:  # every candidate of every flow is found again, and foreign paths are not
        for k in range(int(lazy.num_candidates().max())):
            has = lazy.num_candidates(lazy.pair[cross]) > k
            flows = cross[has]
            middles = dense.row_paths(dense.rows(flows, np.full(len(flows), k)))
            assert np.array_equal(match_middles(lazy, flows, middles), np.full(len(flows), k))
            shifted = np.roll(middles, 1, axis=0)
            assert np.array_equal(
                match_middles(lazy, flows, shifted), match_middles(dense, flows, shifted)
            )


@pytest.mark.parametrize("tree", sorted(TREES))
def test_healthy_lazy_candidates_are_routings_paths_and_equal_the_enumeration(tree: str) -> None:
    fabric = TREES[tree]
    flows = _all_flows(fabric)
    lazy = build_problem(fabric, flows, np.ones(len(flows)))
    assert_same_as_routing(lazy)
    assert_same_as_enumerated(lazy, build_problem(fabric, flows, np.ones(len(flows)), lazy=False))


@pytest.mark.parametrize("tree", sorted(TREES))
def test_kept_row_answers_are_the_rows_asked_and_read_only(tree: str) -> None:
    """``TreeCandidates.rows`` keeps its last answers: asked again, in any order and for more
    questions than it keeps, every answer is still the table's rows, and none can be written
    into (a caller changing one would change the next caller's)."""
    fabric = TREES[tree]
    flows = _all_flows(fabric)
    lazy = build_problem(fabric, flows, np.ones(len(flows)))
    dense = build_problem(fabric, flows, np.ones(len(flows)), lazy=False)
    width = dense.width
    rng = np.random.default_rng(5)
    questions = [rng.integers(0, len(dense.table), size=n) for n in (40, 40, 7, 1, 0)]
    for q in [*questions, *questions[::-1], questions[1], questions[0], questions[1]]:
        got = lazy.row_paths(q)
        assert got.shape == (len(q), lazy.width)
        assert np.array_equal(got[..., :width], dense.table[q])
        assert not got.flags.writeable


@pytest.mark.parametrize("kind", sorted(named_failures(K4)))
@pytest.mark.parametrize("tree", sorted(TREES))
def test_lazy_candidates_after_named_failures(tree: str, kind: str) -> None:
    fabric = TREES[tree]
    snapshot = fabric.with_link_status(named_failures(fabric)[kind])
    flows = _all_flows(fabric)
    lazy = build_problem(snapshot, flows, np.ones(len(flows)))
    assert_same_as_routing(lazy)
    dense = build_problem(snapshot, flows, np.ones(len(flows)), lazy=False)
    assert_same_as_enumerated(lazy, dense)
    if kind == "leaf without uplinks":  # its pairs have no path at all: unreachable
        assert np.count_nonzero(lazy.pair == -2) > 0


@SETTINGS
@given(st.data())
def test_lazy_and_enumerated_problems_agree_on_random_failures(data: st.DataObject) -> None:
    fabric = TREES[data.draw(st.sampled_from(sorted(TREES)))]
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), max_size=8, unique=True))
    status = data.draw(st.lists(st.sampled_from([LinkStatus.DOWN, LinkStatus.DRAINED]),
                                min_size=len(links), max_size=len(links)))  # fmt: skip
    snapshot = fabric.with_link_status(dict(zip(links, status, strict=True)))
    flows = data.draw(flow_sets(snapshot, max_flows=30, rates=True))
    weights = np.array([f.rate for f in flows])
    lazy = build_problem(snapshot, flows, weights)
    assert_same_as_routing(lazy)
    assert_same_as_enumerated(lazy, build_problem(snapshot, flows, weights, lazy=False))


@SETTINGS
@given(st.data())
def test_lazy_and_enumerated_plans_are_identical(data: st.DataObject) -> None:
    """The planner reads the same problem either way, so it makes the same plan: fresh, as a
    re-plan after failures and after the links come back."""
    fabric = TREES[data.draw(st.sampled_from(sorted(TREES)))]
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), min_size=1, max_size=4,
                               unique=True))  # fmt: skip
    snapshot = fabric.with_link_status(dict.fromkeys(links, LinkStatus.DOWN))
    flows = data.draw(flow_sets(snapshot, max_flows=24, rates=data.draw(st.booleans())))
    results = []
    for lazy in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(planner, "build_problem", functools.partial(build_problem, lazy=lazy))
            healthy = plan(fabric, flows, budget=2)
            after = plan(snapshot, flows, healthy, budget=2)
            restored = plan(fabric, flows, after, budget=2)
        assert isinstance(healthy.candidates, TreeLayout) == lazy  # the patch took effect
        results.append((healthy, after, restored))
    for one, other in zip(*results, strict=True):
        assert one.paths == other.paths
        assert one.objective == other.objective
        assert one.bounds.best == other.bounds.best
        assert one.moved == other.moved and one.min_moves == other.min_moves


@SETTINGS
@given(st.data())
def test_greedy_on_the_lazy_grid_chooses_as_on_enumerated_rows(data: st.DataObject) -> None:
    """Greedy places cross-pod flows on cached (agg, core) grids, shared by pairs with the same
    pod pair and usable cells: with lost leaf and core links the choices must be the ones the
    plain row-by-row greedy makes on the enumerated table."""
    fabric = TREES[data.draw(st.sampled_from(sorted(TREES)))]
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), max_size=5, unique=True))
    snapshot = fabric.with_link_status(dict.fromkeys(links, LinkStatus.DOWN))
    flows = data.draw(flow_sets(snapshot, max_flows=40, rates=data.draw(st.booleans())))
    paths = []
    for lazy in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(planner, "build_problem", functools.partial(build_problem, lazy=lazy))
            paths.append(plan(snapshot, flows, strategy="greedy").paths)
    assert paths[0] == paths[1]


def test_greedy_grids_are_not_shared_across_a_lost_leaf_link() -> None:
    """Two leaves of one pod send to the same far leaf; the second has lost its first uplink.
    A grid cached for the first must not serve the second (its first agg is gone)."""
    names = ports(K4)
    lost = next(
        i
        for i, link in enumerate(K4.links)
        if {link.a.split(":")[0], link.b.split(":")[0]} == {"leaf-p00-01", "spine-p00-00"}
    )
    snapshot = K4.with_link_status({lost: LinkStatus.DOWN})
    far = names.index("h0004:nic0p0")
    flows = make_flows(
        snapshot, [(names.index("h0000:nic0p0"), far), (names.index("h0002:nic0p0"), far)]
    )
    result = plan(snapshot, flows, strategy="greedy")
    dead = {2 * lost, 2 * lost + 1}
    assert not any(dead.intersection(path) for path in result.paths)


def _renamed(fabric: Fabric, switch: str, a: str, b: str) -> Fabric:
    """``fabric`` with interfaces ``a`` and ``b`` of ``switch`` swapping names (so their
    member order swaps)."""
    swap = {f"{switch}:{a}": f"{switch}:{b}", f"{switch}:{b}": f"{switch}:{a}"}
    data = fabric.model_dump()
    for link in data["links"]:
        link["a"], link["b"] = swap.get(link["a"], link["a"]), swap.get(link["b"], link["b"])
    return Fabric.model_validate(data)


def test_member_order_other_than_the_structures_is_routings() -> None:
    """A leaf whose uplinks and an agg whose core links are cabled in another interface order
    than the agg and core numbering: the lazy order is still routing's hash order."""
    leaf, agg = _first(K4, 1), _first(K4, 2)
    up = sorted(port for _, port in _links_to(K4, leaf, 2))
    high = sorted(port for _, port in _links_to(K4, agg, 3))
    fabric = _renamed(_renamed(K4, leaf, up[0], up[-1]), agg, high[0], high[-1])
    layout = TreeLayout.of(fabric)
    assert isinstance(layout, TreeLayout)
    node = fabric.index.node(leaf)
    assert not np.array_equal(layout.jorder[node], np.arange(layout.shape.aggs))
    pod = int(layout.shape.pod[fabric.index.node(agg)])
    assert not np.array_equal(layout.gorder[pod, 0], np.arange(layout.shape.cores_per_group))
    flows = _all_flows(fabric)
    lazy = build_problem(fabric, flows, np.ones(len(flows)))
    assert_same_as_routing(lazy)
    assert_same_as_enumerated(lazy, build_problem(fabric, flows, np.ones(len(flows)), lazy=False))
    for snapshot in (fabric.with_link_status(named_failures(fabric)["mixed"]),):
        lazy = build_problem(snapshot, flows, np.ones(len(flows)))
        assert_same_as_routing(lazy)


def test_a_replan_reuses_the_layout_and_a_restore_needs_no_old_table() -> None:
    """The plan carries the cabling's layout, not a table: a re-plan on a failure and one on
    the restored fabric both use it (no second analysis of the cabling)."""
    flows = _all_flows(K4)
    healthy = plan(K4, flows, budget=2)
    assert isinstance(healthy.candidates, TreeLayout)
    snapshot = K4.with_link_status(named_failures(K4)["whole core"])
    after = plan(snapshot, flows, healthy, budget=2)
    assert after.candidates is healthy.candidates
    restored = plan(K4, flows, after, budget=2)
    assert restored.candidates is healthy.candidates
    assert restored.objective.max_utilization == healthy.objective.max_utilization


def _core_tables_by_sorting(
    layout: TreeLayout, ok: np.ndarray, pod_pairs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The core tables the way they were made before the per-pod shortcut: every row masked,
    sorted and ranked (the reference for :func:`_core_tables`)."""
    shape = layout.shape
    src, dst = pod_pairs[:, 0, None, None], pod_pairs[:, 1, None, None]
    jj = np.arange(shape.aggs)[None, :, None]
    go = layout.gorder[pod_pairs[:, 0]]
    core_ok = ok[shape.agg_up[src, jj, go]] & ok[shape.agg_down[dst, jj, go]]
    order = np.argsort(~core_ok, axis=2, kind="stable")
    gnth = np.take_along_axis(go, order, axis=2)
    grank = np.full_like(go, -1)
    np.put_along_axis(grank, go, np.where(core_ok, np.cumsum(core_ok, axis=2) - 1, -1), 2)
    return core_ok, gnth, grank


@pytest.mark.parametrize("name", sorted(TREES))
def test_core_tables_equal_the_sort_of_every_row(name: str) -> None:
    """Per-pod core tables (pod pairs away from any lost agg-core link) are the rows a sort
    of every row gives, healthy and after each named failure, in a non-default member order."""
    from solver.space.treecandidates import _core_tables

    base = TREES[name]
    agg = _first(base, 2)
    high = sorted(port for _, port in _links_to(base, agg, 3))
    fabric = _renamed(base, agg, high[0], high[-1])  # a pod whose core order is not numbering
    layout = TreeLayout.of(fabric)
    assert isinstance(layout, TreeLayout)
    pods = layout.shape.pods
    pod_pairs = np.array([(p, q) for p in range(pods) for q in range(pods) if p != q])
    cases = {"healthy": {}, **named_failures(fabric)}
    for case, changes in cases.items():
        snapshot = fabric.with_link_status(changes) if changes else fabric
        ok = np.append(snapshot.index.res_usable, True)
        got = _core_tables(layout, ok, pod_pairs)
        want = _core_tables_by_sorting(layout, ok, pod_pairs)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b), case
