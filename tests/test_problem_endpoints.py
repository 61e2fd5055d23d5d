"""A problem's flow ids and end nodes are remembered between builds of the same flows.

Why a test: the memory is keyed on identity (the same tuple of flows, the same node
numbering), and a key that is too loose would give one fabric's node numbers to another's
problem. Each build here is compared with the ends read from the fabric's own index.
"""

from __future__ import annotations

import numpy as np
import pytest
from planning_cases import SMALL_FAT_TREE, SMALL_TWO_TIER, make_flows, ports, switch_links

from solver.errors import PlanError
from solver.space import tabulate as space_module
from solver.space.problem import build_problem
from solver.workload.flows import Flow
from topology.generators import LeafSpineParams, leaf_spine
from topology.model import Fabric, LinkStatus


def _flows(fabric: Fabric, n: int, seed: int) -> tuple[Flow, ...]:
    rng = np.random.default_rng(seed)
    count = len(ports(fabric))
    pairs = [tuple(rng.choice(count, size=2, replace=False).tolist()) for _ in range(n)]
    return tuple(make_flows(fabric, pairs))


def _ends(fabric: Fabric, flows: tuple[Flow, ...]) -> tuple[list[int], list[int]]:
    node_of = fabric.index.node_of
    return [node_of[f.src] for f in flows], [node_of[f.dst] for f in flows]


def _built_ends(fabric: Fabric, flows: tuple[Flow, ...]) -> tuple[list[int], list[int]]:
    """The end nodes a built problem used, read back through its NIC links."""
    problem = build_problem(fabric, flows, np.ones(len(flows)))
    index = fabric.index
    src = [int(index.res_src[r]) for r in problem.nic_up.tolist()]
    dst = [int(index.res_dst[r]) for r in problem.nic_down.tolist()]
    return src, dst


def test_the_same_flows_on_snapshots_of_one_cabling_share_their_ends() -> None:
    flows = _flows(SMALL_TWO_TIER, 12, 3)
    first = space_module._endpoints(flows, SMALL_TWO_TIER.index.node_of)
    snapshot = SMALL_TWO_TIER.with_link_status({switch_links(SMALL_TWO_TIER)[0]: LinkStatus.DOWN})
    assert snapshot.index.node_of is SMALL_TWO_TIER.index.node_of  # one numbering
    assert space_module._endpoints(flows, snapshot.index.node_of) is first
    assert _built_ends(snapshot, flows) == _ends(snapshot, flows)
    ids, unique, src, dst = first
    assert ids == tuple(f.id for f in flows) and unique
    with pytest.raises(ValueError, match="read-only"):
        src[0] = 0


def test_another_fabric_or_a_list_is_worked_out_again() -> None:
    flows = _flows(SMALL_TWO_TIER, 8, 1)
    on_two = space_module._endpoints(flows, SMALL_TWO_TIER.index.node_of)
    tree_flows = _flows(SMALL_FAT_TREE, 8, 1)
    assert space_module._endpoints(tree_flows, SMALL_FAT_TREE.index.node_of) is not on_two
    assert _built_ends(SMALL_FAT_TREE, tree_flows) == _ends(SMALL_FAT_TREE, tree_flows)
    as_list = list(flows)
    assert space_module._endpoints(as_list, SMALL_TWO_TIER.index.node_of) is not on_two
    assert space_module._endpoints(as_list, SMALL_TWO_TIER.index.node_of) is not (
        space_module._endpoints(as_list, SMALL_TWO_TIER.index.node_of)
    )


def test_the_same_flows_on_another_numbering_are_worked_out_again() -> None:
    """One more spine numbers every NIC port one further on: same names, other nodes."""
    wider = leaf_spine(LeafSpineParams(leaves=4, spines=4, hosts_per_leaf=3))
    flows = _flows(SMALL_TWO_TIER, 10, 4)
    assert _built_ends(SMALL_TWO_TIER, flows) == _ends(SMALL_TWO_TIER, flows)
    assert _ends(wider, flows) != _ends(SMALL_TWO_TIER, flows)
    assert _built_ends(wider, flows) == _ends(wider, flows)


def test_remembered_ends_still_refuse_unknown_and_repeated_flows() -> None:
    flows = _flows(SMALL_TWO_TIER, 4, 2)
    twice = (*flows, flows[0])
    for _ in range(2):  # the second build reads what the first remembered
        with pytest.raises(PlanError, match="appears twice"):
            build_problem(SMALL_TWO_TIER, twice, np.ones(len(twice)))
    stranger = (*flows, Flow("j", "c", 99, 0, "nobody:p0", flows[0].dst))
    for _ in range(2):
        with pytest.raises(PlanError, match="is not a NIC port"):
            build_problem(SMALL_TWO_TIER, stranger, np.ones(len(stranger)))
