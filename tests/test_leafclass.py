"""Leaf classes (topology.leafclass): the ECMP walk that shares groups between destination
leaves gives exactly the paths of the packet-by-packet walk, also where failures and drains
make the leaves' distance rows differ, and the classes are exactly the rows that agree."""

from __future__ import annotations

import random

import numpy as np
import pytest

from topology.distances import distance_pass
from topology.errors import PathError
from topology.forwarding import forward, forward_many
from topology.generators import FatTreeParams, fat_tree
from topology.leafclass import bottom_switches, leaf_classes
from topology.leafrows import class_pass
from topology.model import Fabric, LinkStatus
from topology.roce import SPORT_MIN, FiveTuple


def _fabric(seed: int) -> Fabric:
    """A 3-tier fat-tree with some switch links down or drained (none when ``seed`` is 0)."""
    base = fat_tree(
        FatTreeParams(pods=4, leaves_per_pod=3, aggs_per_pod=2, cores=4, hosts_per_leaf=2)
    )
    if not seed:
        return base
    rng = random.Random(seed)
    switches = {s.name for s in base.switches}
    between = [
        i
        for i, link in enumerate(base.links)
        if all(end.split(":")[0] in switches for end in link.ends)
    ]
    picked = rng.sample(between, 4)
    return base.with_link_status(
        {i: (LinkStatus.DOWN if k % 2 else LinkStatus.DRAINED) for k, i in enumerate(picked)}
    )


def _classes(fabric: Fabric) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    index, routing = fabric.index, fabric.index.routing
    leaves = np.flatnonzero(bottom_switches(index, routing.down_mask))
    down, up, _ = routing.narrow_rows(leaves)
    bottom = bottom_switches(index, routing.down_mask)
    return leaf_classes(down, up, bottom), down[:, ~bottom], up[:, ~bottom]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_classes_are_the_rows_that_agree_away_from_the_leaves(seed: int) -> None:
    representative, down, up = _classes(_fabric(seed))
    for i in range(len(down)):
        same = [
            j for j in range(len(down)) if (down[j] == down[i]).all() and (up[j] == up[i]).all()
        ]
        assert representative[i] == same[0]
    none = np.zeros(down.shape[1], dtype=bool)  # the columns compared, and only those
    wide = leaf_classes(down.astype(np.int32), up.astype(np.int32), none)
    assert wide.tolist() == representative.tolist()  # the wide integers of very deep fabrics
    if seed == 0:  # healthy: one class per pod, the shortcut has something to share
        assert len(set(representative.tolist())) == 4


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 6, 7])
def test_shared_groups_give_the_packet_by_packet_paths(seed: int) -> None:
    fabric = _fabric(seed)
    index = fabric.index
    ports = [p.node for p in index.ports]
    rng = random.Random(seed)
    pairs = [(s, d) for s in ports for d in ports if s != d]
    sports = [SPORT_MIN + rng.randrange(0, 16000) for _ in pairs]
    src, dst = (np.asarray(column, dtype=np.int64) for column in zip(*pairs, strict=True))
    got = forward_many(fabric, src, dst, np.asarray(sports, dtype=np.int64))
    for (s, d), sport, path in zip(pairs, sports, got, strict=True):
        five = FiveTuple(
            src_ip=index.port_by_node[s].port.address,
            dst_ip=index.port_by_node[d].port.address,
            src_port=sport,
        )
        try:
            want = forward(fabric, five).resources
        except PathError:
            want = ()
        assert path == want


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
def test_one_pass_per_class_gives_the_rows_of_the_plain_pass(seed: int) -> None:
    fabric = _fabric(seed)
    index, routing = fabric.index, fabric.index.routing
    rng = random.Random(seed)
    leaves = sorted({int(index.res_src[index.downlink(p.node)]) for p in index.ports})
    rng.shuffle(leaves)
    steps = routing._tier_steps
    ends, goes = (index.res_src, index.res_dst), (routing.down_mask, routing._up)
    for wanted in (leaves, leaves[: len(leaves) // 2 + 1]):
        got = class_pass(steps, index.num_switches, wanted, ends, goes)
        want = distance_pass(steps, index.num_switches, wanted)
        assert got[2] == want[2]
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
