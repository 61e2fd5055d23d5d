"""The degraded fat-tree colouring (:mod:`solver.repair.degraded`) against routing and a lower
bound.

Why: the colouring claims that a result takes only usable links (so only routing's equal-cost
paths) and loads no switch link above its target; when the target is a lower bound that makes
it optimal. Routing's paths on the snapshot are the independent check of the first claim, a
count of flows per link the check of the second.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import make_flows, ports, switch_links

from solver.bounds.combinatorial import combinatorial_bounds
from solver.exact.fattree import FatTreeShape, analyse
from solver.planner import plan
from solver.repair.degraded import assign_degraded
from solver.space.problem import build_problem
from topology.generators import FatTreeParams, fat_tree
from topology.model import Fabric, LinkStatus

TREES = {k: fat_tree(FatTreeParams.model_validate({"k": k})) for k in (4, 6)}


def _shape(fabric: Fabric) -> FatTreeShape:
    shape = analyse(fabric, ignore_status=True)
    assert isinstance(shape, FatTreeShape)
    return shape


def _check(snapshot: Fabric, src: np.ndarray, dst: np.ndarray, paths: list, target: int) -> None:
    routing = snapshot.index.routing
    load: dict[int, int] = {}
    for u, v, path in zip(src.tolist(), dst.tolist(), paths, strict=True):
        if u == v:
            assert path == ()
            continue
        assert path in routing.switch_paths(u, v)
        for r in path:
            load[r] = load.get(r, 0) + 1
    assert max(load.values(), default=0) <= target


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_degraded_colouring_takes_usable_paths_within_its_target(data: st.DataObject) -> None:
    fabric = TREES[data.draw(st.sampled_from(sorted(TREES)))]
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), min_size=1, max_size=5,
                               unique=True))  # fmt: skip
    status = data.draw(st.sampled_from([LinkStatus.DOWN, LinkStatus.DRAINED]))
    snapshot = fabric.with_link_status(dict.fromkeys(links, status))
    n = len(ports(fabric))
    raw = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                             min_size=1, max_size=60))  # fmt: skip
    flows = make_flows(snapshot, [(a, b) for a, b in raw if a != b] or [(0, n - 1)])
    problem = build_problem(snapshot, flows, np.ones(len(flows)))
    cross = problem.cross
    leaves = problem.pair_leaves[problem.pair[cross]]
    target = data.draw(st.integers(1, 4))
    result = assign_degraded(
        _shape(fabric), snapshot.index.res_usable, leaves[:, 0], leaves[:, 1], target
    )
    if result is not None:
        _check(snapshot, leaves[:, 0], leaves[:, 1], result.paths, target)
        assert result.max_load <= target


def _tight(fabric: Fabric) -> list:
    """Every host sends to the host half the fabric away: every leaf uplink busy."""
    n = len(ports(fabric))
    return make_flows(fabric, [(a, (a + n // 2) % n) for a in range(n)])


def test_a_tight_fat_tree_losing_a_core_is_coloured_at_its_bound() -> None:
    """A k=6 fat-tree under half-shift traffic (every agg-core link carries one flow) loses a
    core: the cores left must carry the flows of the lost one, which the rooms spread."""
    fabric = TREES[6]
    flows = _tight(fabric)
    index = fabric.index
    core = next(s.name for s in fabric.switches if int(index.tier[index.node(s.name)]) == 3)
    lost = [li for li, link in enumerate(fabric.links)
            if core in (link.a.split(":")[0], link.b.split(":")[0])]  # fmt: skip
    snapshot = fabric.with_link_status(dict.fromkeys(lost, LinkStatus.DOWN))
    problem = build_problem(snapshot, flows, np.ones(len(flows)))
    bound = int(np.ceil(combinatorial_bounds(problem).max() - 1e-9))
    leaves = problem.pair_leaves[problem.pair[problem.cross]]
    result = assign_degraded(
        _shape(fabric), snapshot.index.res_usable, leaves[:, 0], leaves[:, 1], bound
    )
    assert result is not None
    _check(snapshot, leaves[:, 0], leaves[:, 1], result.paths, bound)
    planned = plan(snapshot, flows, budget=5)
    assert planned.status == "optimal"
    assert planned.objective.max_utilization == bound
