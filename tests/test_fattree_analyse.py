"""The fat-tree analysis over the index's arrays against the plain pass over the links.

Why: :func:`solver.exact.fattree.analyse` was rewritten from a loop over every link (a dictionary
lookup per table cell) into whole-array steps for speed. The loop, kept here as it was, is the
reference: on intact trees, after failures and drains (with and without ``ignore_status``),
with interfaces renamed, links listed in another order or reversed, and on cablings that are
not fat-trees (each must give the same reason, naming the same first faulty link).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_cases import switch_links

from solver.exact.fattree import FatTreeShape, analyse
from topology.generators import FatTreeParams, LeafSpineParams, fat_tree, leaf_spine
from topology.model import Fabric, LinkStatus

K4 = fat_tree(FatTreeParams.model_validate({"k": 4}))
K6 = fat_tree(FatTreeParams.model_validate({"k": 6}))
TREES = {"k4": K4, "k6": K6}


def _by_neighbours_loop(adjacent: dict[int, set[int]]) -> list[tuple[frozenset[int], list[int]]]:
    """Nodes grouped by their neighbour set, groups ordered by their first node."""
    groups: dict[frozenset[int], list[int]] = {}
    for node, near in adjacent.items():
        groups.setdefault(frozenset(near), []).append(node)
    return sorted(groups.items(), key=lambda kv: min(kv[1]))


def analyse_loop(fabric: Fabric, *, ignore_status: bool = False) -> FatTreeShape | str:
    """The fabric's fat-tree shape, or why it has none (see the module docstring).

    ``ignore_status`` reads the shape of the cabling with every link taken as up: the planner
    colours the intact tree and then repairs around the links that are down or drained.
    """
    index = fabric.index
    n, tier = index.num_switches, index.tier[: index.num_switches]
    if not (tier == 3).any():
        return "not a 3-tier fabric: no core switches"
    above: dict[int, set[int]] = {int(v): set() for v in np.flatnonzero(tier < 3)}
    below: dict[int, set[int]] = {int(v): set() for v in np.flatnonzero(tier > 1)}
    speeds: set[float] = set()
    for li, link in enumerate(fabric.links):
        a, b = int(index.res_src[2 * li]), int(index.res_dst[2 * li])
        if a >= n or b >= n:
            continue
        if link.status is not LinkStatus.UP and not ignore_status:
            return f"link {link.id} is {link.status.value}"
        low, high = (a, b) if tier[a] < tier[b] else (b, a)
        if tier[high] != tier[low] + 1 or high in above[low]:
            return f"link {link.id} is parallel to another or skips a tier"
        above[low].add(high)
        below[high].add(low)
        speeds.add(link.speed_gbps)
    if len(speeds) > 1:
        return f"switch links have unequal speeds {sorted(speeds)} Gb/s"
    pods = _by_neighbours_loop({v: s for v, s in above.items() if tier[v] == 1})
    groups = _by_neighbours_loop({v: s for v, s in above.items() if tier[v] == 2})
    cores = [sorted(key) for key, _ in groups]
    if any(not key for key, _ in pods) or any(not c for c in cores):
        return "a leaf or an aggregation switch has no uplink"
    covered = sorted(c for group in cores for c in group)
    if len({len(c) for c in cores}) > 1 or covered != np.flatnonzero(tier == 3).tolist():
        return "agg uplinks do not split the cores into disjoint groups of one size"
    if sum(len(key) for key, _ in pods) != int((tier == 2).sum()):
        return "an aggregation switch serves no pod or several"
    group_of = {agg: j for j, (_, aggs) in enumerate(groups) for agg in aggs}
    a, g, p = len(groups), len(cores[0]), len(pods)
    pod = np.full(n, -1, dtype=np.int64)
    up, down = np.full((n, a), -1, dtype=np.int64), np.full((n, a), -1, dtype=np.int64)
    agg_up, agg_down = np.empty((p, a, g), dtype=np.int64), np.empty((p, a, g), dtype=np.int64)
    choice = np.full(index.num_resources, -1, dtype=np.int64)
    hop = index.resource_between
    for i, (key, leaves) in enumerate(pods):
        name = index.node_names[leaves[0]]
        if sorted(group_of[x] for x in key) != list(range(a)):
            return f"the pod of {name} does not have one agg per core group"
        if any(below[x] != set(leaves) for x in key):
            return f"the pod of {name} is not complete: a leaf misses an agg or an agg a leaf"
        pod[leaves] = i
        for x in key:
            j = group_of[x]
            pod[x] = i
            for leaf in leaves:
                up[leaf, j], down[leaf, j] = hop[leaf, x], hop[x, leaf]
            for k, core in enumerate(cores[j]):
                agg_up[i, j, k], agg_down[i, j, k] = hop[x, core], hop[core, x]
        choice[up[leaves]] = np.arange(a)
        choice[agg_up[i]] = np.arange(g)
    return FatTreeShape(pod, tier == 1, up, down, agg_up, agg_down, choice, a, g, p)


def assert_same(fabric: Fabric, ignore_status: bool) -> None:
    fast, loop = (
        analyse(fabric, ignore_status=ignore_status),
        analyse_loop(fabric, ignore_status=ignore_status),
    )
    if isinstance(loop, str):
        assert fast == loop
        return
    assert isinstance(fast, FatTreeShape)
    for name in ("pod", "is_leaf", "up", "down", "agg_up", "agg_down", "choice"):
        assert np.array_equal(getattr(fast, name), getattr(loop, name)), name
    assert (fast.aggs, fast.cores_per_group, fast.pods) == (
        loop.aggs,
        loop.cores_per_group,
        loop.pods,
    )


def _edited(fabric: Fabric, edit: str, rng: random.Random) -> Fabric:
    data = fabric.model_dump()
    links = data["links"] = list(data["links"])
    inner = [link for link in links if all(end.split(":")[0].startswith(("leaf", "spine",
             "core", "agg")) for end in (link["a"], link["b"]))]  # fmt: skip
    if edit == "shuffled":
        rng.shuffle(links)
    elif edit == "reversed ends":
        for link in rng.sample(inner, len(inner) // 2):
            link["a"], link["b"] = link["b"], link["a"]
    elif edit == "renamed":  # two interfaces of every switch swap names
        by_switch: dict[str, list[str]] = {}
        for link in links:
            for end in (link["a"], link["b"]):
                by_switch.setdefault(end.split(":")[0], []).append(end)
        swap: dict[str, str] = {}
        for ends in by_switch.values():
            if len(ends) > 1:
                x, y = rng.sample(ends, 2)
                swap |= {x: y, y: x}
        for link in links:
            link["a"], link["b"] = swap.get(link["a"], link["a"]), swap.get(link["b"], link["b"])
    elif edit == "missing link":
        links.remove(rng.choice(inner))
    elif edit == "slower link":
        rng.choice(inner)["speed_gbps"] /= 2
    return Fabric.model_validate(data)


EDITS = ["none", "shuffled", "reversed ends", "renamed", "missing link", "slower link"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_array_analysis_equals_the_pass_over_links(data: st.DataObject) -> None:
    fabric = TREES[data.draw(st.sampled_from(sorted(TREES)))]
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    fabric = _edited(fabric, data.draw(st.sampled_from(EDITS)), rng)
    links = data.draw(st.lists(st.sampled_from(switch_links(fabric)), max_size=4, unique=True))
    status = data.draw(st.sampled_from([LinkStatus.DOWN, LinkStatus.DRAINED]))
    snapshot = fabric.with_link_status(dict.fromkeys(links, status))
    for ignore_status in (True, False):
        assert_same(snapshot, ignore_status)


@pytest.mark.parametrize("edit", EDITS)
def test_each_edit_keeps_or_names_the_same_fault(edit: str) -> None:
    fabric = _edited(K4, edit, random.Random(7))
    assert_same(fabric, False)
    if edit in ("none", "shuffled", "reversed ends", "renamed"):
        assert isinstance(analyse(fabric), FatTreeShape)  # the edit kept a fat-tree
    else:
        assert isinstance(analyse(fabric), str)


def test_not_a_fat_tree() -> None:
    two_tier = leaf_spine(LeafSpineParams(leaves=4, spines=2, hosts_per_leaf=2))
    assert analyse(two_tier) == analyse_loop(two_tier) == "not a 3-tier fabric: no core switches"
