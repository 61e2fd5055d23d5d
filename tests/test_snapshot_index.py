"""A status-only snapshot (:meth:`Fabric.with_link_status`) shares its parent's index structure.

Why a test: the snapshot is no longer rebuilt by the constructor (checks and numbering again),
so its index is derived from the parent's. The reference is an index built from scratch on a
fabric validated from the snapshot's own data: every array and table must be equal, routing
must see the new statuses, and the parent must be untouched.
"""

from __future__ import annotations

import numpy as np
import pytest
from planning_cases import SMALL_FAT_TREE, SMALL_TWO_TIER, switch_links

from topology.index import FabricIndex
from topology.model import Fabric, LinkStatus


def assert_same_index(one: FabricIndex, other: FabricIndex) -> None:
    for name in ("res_src", "res_dst", "res_capacity", "res_usable", "tier", "plane",
                 "port_uplinks", "port_addresses"):  # fmt: skip
        assert np.array_equal(getattr(one, name), getattr(other, name)), name
    for name in ("node_names", "out_resources", "res_interface", "resource_between",
                 "link_of_end", "node_of"):  # fmt: skip
        assert getattr(one, name) == getattr(other, name), name


@pytest.mark.parametrize("fabric", [SMALL_TWO_TIER, SMALL_FAT_TREE], ids=["2-tier", "3-tier"])
@pytest.mark.parametrize("built", [True, False], ids=["index built", "index not built"])
def test_snapshot_index_equals_a_fresh_one(fabric: Fabric, built: bool) -> None:
    parent = Fabric.model_validate(fabric.model_dump())
    if built:
        assert parent.index.routing.next_hops(0, 0, False) is not None  # routing cached
    links = switch_links(parent)[:3]
    snapshot = parent.with_link_status(
        {links[0]: LinkStatus.DOWN, links[1]: LinkStatus.DRAINED, links[2]: LinkStatus.DOWN}
    )
    fresh = Fabric.model_validate(snapshot.model_dump())
    assert snapshot == fresh
    assert_same_index(snapshot.index, fresh.index)
    assert snapshot.index.fabric is snapshot
    assert not snapshot.index.res_usable[2 * links[0]]
    assert parent.index.res_usable.all()  # the parent's snapshot is unchanged
    # routing is the snapshot's own: no group of the snapshot uses a link that is down
    dead = {2 * i + d for i in links for d in (0, 1)}
    routing = snapshot.index.routing
    assert routing is not parent.index.routing
    for switch in range(snapshot.index.num_switches):
        for leaf in range(snapshot.index.num_switches):
            if snapshot.index.tier[leaf] == 1:
                assert not dead & set(routing.next_hops(switch, leaf, False))
                assert routing.next_hops(switch, leaf, False) == fresh.index.routing.next_hops(
                    switch, leaf, False
                )


def test_bad_status_changes_are_refused() -> None:
    with pytest.raises(IndexError):
        SMALL_TWO_TIER.with_link_status({len(SMALL_TWO_TIER.links): LinkStatus.DOWN})
    with pytest.raises(ValueError):
        SMALL_TWO_TIER.with_link_status({0: "sideways"})  # type: ignore[dict-item]
    plain = SMALL_TWO_TIER.with_link_status({0: "down"})  # type: ignore[dict-item]
    assert plain.links[0].status is LinkStatus.DOWN
