"""Agg swaps (solver.repair.aggswap): an agg that lost a core link on a full fat-tree, where
one-link chains find no repair, repaired at the bound by cycles swapping two aggs, then chains.

The case is the scale ladder's 3-tier 8,192-GPU rung (c4p.figures.scale): a shuffled ring over
every GPU fills every leaf link to the bound, and the drawn agg-core link goes down."""

from __future__ import annotations

import numpy as np

from c4p.figures.ladder import permutation_jobs
from c4p.figures.scale import fat_tree_params, top_link
from solver.planner import flow_weights, plan
from solver.repair.treemoves import replan_choice
from solver.space.incremental import match_previous
from solver.space.problem import build_problem
from solver.workload.patterns import derive_workload
from topology.generators import generate
from topology.model import LinkStatus


def test_agg_swaps_repair_what_one_link_chains_cannot() -> None:
    fabric = generate("fat-tree", **fat_tree_params(8192))
    workload = derive_workload(fabric, permutation_jobs(2)(fabric))
    healthy = plan(fabric, workload, budget=5)
    assert healthy.objective.max_utilization == 2.0
    link = top_link(fabric)
    snapshot = fabric.with_link_status({link: LinkStatus.DOWN})
    problem = build_problem(snapshot, *flow_weights(workload), healthy.candidates)
    prior = match_previous(problem, healthy.flows, healthy.paths, healthy.snapshot).choice
    flows = problem.cross
    before = prior[flows]
    lost = int(np.count_nonzero(before < 0))
    assert lost >= 2  # flows crossed the link that went down
    assert problem.tree is not None
    shape = problem.tree.layout.shape
    assert replan_choice(problem, flows, before, shape, 2, float("inf")) is None
    choice = replan_choice(problem, flows, before, shape, 2, float("inf"), cycles=True)
    assert choice is not None and np.all(choice >= 0)
    util = problem.loads(flows, choice) * problem.scale
    assert util[problem.inner].max() <= 2.0 + 1e-9  # at the bound: no switch link over 2
    assert util[np.flatnonzero(~snapshot.index.res_usable)].max(initial=0.0) == 0.0
    moved = int(np.count_nonzero((before >= 0) & (choice != before)))
    assert moved >= 4  # the cycles move flows that kept their path as well
    assert moved < 60  # and far fewer than every flow of the pod (2,048)
