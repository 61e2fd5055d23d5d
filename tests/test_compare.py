"""Declared vs discovered fabric: every kind of difference is found and named, nothing else.

Pure function tests on generated fabrics; the property test swaps random pairs of host
cables and checks that exactly the swapped ends are reported miswired.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topology.compare import Miswire, WrongLeaf, compare_fabrics
from topology.generators import generate
from topology.model import Fabric, Link, LinkStatus, SwitchRole

RAIL = generate("rail-optimized", units=2, hosts_per_unit=2, rails=2, spines=2)


def with_links(fabric: Fabric, links: list[Link]) -> Fabric:
    return Fabric.model_validate({**fabric.model_dump(), "links": [x.model_dump() for x in links]})


def swap_b(fabric: Fabric, i: int, j: int) -> Fabric:
    """Swap the ``b`` ends of links ``i`` and ``j`` (two cables swapped on the switch side)."""
    links = list(fabric.links)
    links[i], links[j] = (
        links[i].model_copy(update={"b": links[j].b}),
        links[j].model_copy(update={"b": links[i].b}),
    )
    return with_links(fabric, links)


def test_identical_fabrics_are_clean() -> None:
    comparison = compare_fabrics(RAIL, RAIL)
    assert comparison.clean and comparison.differences == 0 and comparison.lines() == []


def test_swapped_host_cables_are_miswired_and_on_the_wrong_leaf() -> None:
    # links[0]: h0000:nic0p0 -> leaf-su00-r0; links[1]: h0000:nic1p0 -> leaf-su00-r1
    declared = swap_b(RAIL, 0, 1)
    comparison = compare_fabrics(declared, RAIL)
    a, b = RAIL.links[0], RAIL.links[1]
    assert comparison.miswired == (
        Miswire(end=a.a, expected=b.b, found=a.b),
        Miswire(end=b.a, expected=a.b, found=b.b),
        Miswire(end=a.b, expected=b.a, found=a.a),
        Miswire(end=b.b, expected=a.a, found=b.a),
    )
    assert comparison.hosts_on_wrong_leaf == (
        WrongLeaf(port=a.a, declared_switch="leaf-su00-r1", found_switch="leaf-su00-r0"),
        WrongLeaf(port=b.a, declared_switch="leaf-su00-r0", found_switch="leaf-su00-r1"),
    )
    assert comparison.missing_links == () and comparison.extra_links == ()
    assert any(
        line.startswith("wrong leaf: h0000:nic0p0 is on leaf-su00-r0")
        for line in comparison.lines()
    )


def test_swapped_uplinks_are_miswired_without_wrong_leaf() -> None:
    first = next(i for i, link in enumerate(RAIL.links) if link.b.startswith("spine"))
    declared = swap_b(RAIL, first, first + 2)  # leaf-su00-r0 and leaf-su00-r1 to spine-00
    comparison = compare_fabrics(declared, RAIL)
    assert len(comparison.miswired) == 4
    assert comparison.hosts_on_wrong_leaf == ()


def test_missing_extra_speed_status() -> None:
    links = list(RAIL.links)
    gone = links.pop(3)
    found = with_links(RAIL, links)
    comparison = compare_fabrics(RAIL, found)
    assert comparison.missing_links == (gone.id,)
    assert compare_fabrics(found, RAIL).extra_links == (gone.id,)

    changed = list(RAIL.links)
    changed[-1] = changed[-1].model_copy(update={"speed_gbps": 200.0, "status": LinkStatus.DOWN})
    found = with_links(RAIL, changed)
    comparison = compare_fabrics(RAIL, found)
    assert [s.found_gbps for s in comparison.speed_mismatches] == [200.0]
    assert [(s.declared, s.found) for s in comparison.status_mismatches] == [
        (LinkStatus.UP, LinkStatus.DOWN)
    ]
    assert compare_fabrics(RAIL, found, statuses=False).status_mismatches == ()
    assert (
        "speed: leaf-su01-r1:Ethernet4--spine-01:Ethernet4 is 200G, declared 400G"
        in comparison.lines()
    )


def test_switches_roles_ports_addresses() -> None:
    data = RAIL.model_dump()
    data["switches"][-1]["role"] = SwitchRole.CORE.value
    data["hosts"][0]["nics"][0]["ports"][0]["address"] = "10.9.9.9"
    found = Fabric.model_validate(data)
    comparison = compare_fabrics(RAIL, found)
    assert [(r.switch, r.declared, r.found) for r in comparison.role_mismatches] == [
        ("spine-01", "spine", "core")
    ]
    assert [(a.port, a.found) for a in comparison.address_mismatches] == [
        ("h0000:nic0p0", "10.9.9.9")
    ]
    assert compare_fabrics(RAIL, found, addresses=False).address_mismatches == ()

    small = generate("rail-optimized", units=1, hosts_per_unit=2, rails=2, spines=2)
    comparison = compare_fabrics(RAIL, small)
    assert comparison.missing_switches == ("leaf-su01-r0", "leaf-su01-r1")
    assert comparison.missing_ports == (
        "h0002:nic0p0",
        "h0002:nic1p0",
        "h0003:nic0p0",
        "h0003:nic1p0",
    )
    assert comparison.extra_links == () and comparison.extra_switches == ()


HOST_LINKS = [i for i, link in enumerate(RAIL.links) if link.a.startswith("h")]


@settings(max_examples=60, deadline=None)
@given(pair=st.lists(st.sampled_from(HOST_LINKS), min_size=2, max_size=2, unique=True))
def test_any_swap_of_two_host_cables_is_found_exactly(pair: list[int]) -> None:
    i, j = pair
    declared = swap_b(RAIL, i, j)
    comparison = compare_fabrics(declared, RAIL)
    swapped = {RAIL.links[i].a, RAIL.links[i].b, RAIL.links[j].a, RAIL.links[j].b}
    assert {m.end for m in comparison.miswired} == swapped
    same_leaf = RAIL.links[i].b.split(":")[0] == RAIL.links[j].b.split(":")[0]
    assert len(comparison.hosts_on_wrong_leaf) == (0 if same_leaf else 2)
    assert comparison.differences == len(comparison.miswired) + len(comparison.hosts_on_wrong_leaf)
