"""Routing and lookups on generated fabrics: link names, drained links, counted vs listed paths."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.errors import PathError, UnknownNameError
from topology.generators import generate
from topology.model import LinkStatus


def test_link_number_accepts_ends_node_names_and_one_end() -> None:
    fabric = generate("fat-tree", k=4)
    index = fabric.index
    for number, link in enumerate(fabric.links[:40]):
        a_node = index.node_names[index.res_src[2 * number]]
        b_node = index.node_names[index.res_dst[2 * number]]
        assert index.link_number(link.id) == number
        assert index.link_number(f"{link.b}--{link.a}") == number
        assert index.link_number(f"{b_node}--{a_node}") == number
        assert index.link_number(link.a) == number
    with pytest.raises(UnknownNameError, match="no link"):
        index.link_number("leaf-p00-00--leaf-p00-01")
    with pytest.raises(UnknownNameError):
        index.link_number("nowhere:Ethernet1")


@pytest.mark.parametrize("status", [LinkStatus.DOWN, LinkStatus.DRAINED])
def test_down_and_drained_links_leave_every_path(status: LinkStatus) -> None:
    fabric = generate("leaf-spine", leaves=3, spines=4, hosts_per_leaf=2)
    index = fabric.index
    uplink = next(
        i for i, link in enumerate(fabric.links) if link.a.startswith("leaf-00:")
        and "spine" in link.b
    )  # fmt: skip
    changed = fabric.with_link_status({uplink: status})
    src, dst = changed.index.node("h0000:nic0p0"), changed.index.node("h0004:nic0p0")
    before = index.routing.equal_cost_paths(src, dst)
    after = changed.index.routing.equal_cost_paths(src, dst)
    assert len(before) == 4 and len(after) == 3
    assert all(2 * uplink not in p and 2 * uplink + 1 not in p for p in after)
    assert fabric.links[uplink].status is LinkStatus.UP  # the old snapshot is untouched


def test_nic_link_down_is_unreachable_and_same_port_is_refused() -> None:
    fabric = generate("leaf-spine", leaves=2, spines=2, hosts_per_leaf=1)
    host_link = next(i for i, link in enumerate(fabric.links) if link.a.startswith("h0000:"))
    changed = fabric.with_link_status({host_link: LinkStatus.DOWN})
    index = changed.index
    src, dst = index.node("h0000:nic0p0"), index.node("h0001:nic0p0")
    with pytest.raises(PathError, match="not up"):
        index.routing.equal_cost_paths(src, dst)
    with pytest.raises(PathError, match="both source and destination"):
        index.routing.equal_cost_paths(dst, dst)
    with pytest.raises(IndexError):
        fabric.with_link_status({len(fabric.links): LinkStatus.DOWN})


@settings(max_examples=25, deadline=None)
@given(k=st.sampled_from([4, 6]), failures=st.lists(st.integers(0, 10_000), max_size=4))
def test_counted_paths_equal_listed_paths(k: int, failures: list[int]) -> None:
    fabric = generate("fat-tree", k=k)
    fabric = fabric.with_link_status({f % len(fabric.links): LinkStatus.DOWN for f in failures})
    routing = fabric.index.routing
    leaves = [i for i, s in enumerate(fabric.switches) if s.role == "leaf"]
    for a in leaves[:: max(1, len(leaves) // 6)]:
        for b in leaves:
            listed = routing.switch_paths(a, b)
            assert routing.path_count(a, b) == len(listed)
            assert len(set(listed)) == len(listed)
