"""Routing's batched answers equal its per-destination ones.

Why: the ECMP baseline forwards all flows one step at a time and asks routing for every
step's groups in one call (:meth:`Routing.groups_many`) over distance rows computed for all
destination leaves in one pass (:meth:`Routing.distance_rows`). Both replace per-leaf and
per-switch code (:meth:`Routing.table`, :meth:`Routing.next_hops`), which stays the reference:
any difference would silently move ECMP's paths, and with them every ratio c4p reports.
Checked on intact and degraded fabrics (failed links make a tier's runs of links uneven,
which takes the general minimum), keys in any order and both phases mixed in one call.
"""

from __future__ import annotations

import numpy as np
import pytest

from topology import distances
from topology import routing as routing_module
from topology.distances import row_minima
from topology.generators import generate
from topology.model import Fabric, LinkStatus
from topology.routing import Routing

BASES = {
    "leaf-spine": generate("leaf-spine", leaves=4, spines=3, hosts_per_leaf=2, nics_per_host=2),
    "rail": generate("rail-optimized", units=2, hosts_per_unit=4, rails=4, spines=2),
    "fat-tree": generate(
        "fat-tree", pods=3, leaves_per_pod=2, aggs_per_pod=2, cores=4, hosts_per_leaf=2
    ),
}


def variants(base: Fabric) -> list[Fabric]:
    """The fabric and four copies with links down (some switch-to-switch ones, at random)."""
    rng = np.random.default_rng(11)
    index = base.index
    between = [
        i
        for i in range(len(base.links))
        if index.res_src[2 * i] < index.num_switches and index.res_dst[2 * i] < index.num_switches
    ]
    return [base] + [
        base.with_link_status(
            {int(i): LinkStatus.DOWN for i in rng.choice(between, count, replace=False)}
        )
        for count in (1, 2, 4, len(between) // 2)
    ]


CASES = [(name, k) for name in BASES for k in range(5)]


def fabric_of(name: str, k: int) -> Fabric:
    return variants(BASES[name])[k]


@pytest.mark.parametrize("cells", [None, 1, 50])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize(("name", "k"), CASES)
def test_distance_rows_equal_the_per_leaf_tables(
    name: str, k: int, wide: bool, cells: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In bytes (every Clos) and in the 32-bit integers taken beyond 125 tier steps; also in
    slices of one or a few leaves (``PASS_CELLS`` small), as a large fabric's pass is."""
    if cells is not None:
        monkeypatch.setattr(distances, "PASS_CELLS", cells)
    if wide:
        monkeypatch.setattr(distances, "distance_type", lambda steps: (np.int32, 1 << 30))
    fabric = fabric_of(name, k)
    leaves = np.arange(fabric.index.num_switches)[::-1].copy()  # not in numbering order
    batch = Routing(fabric.index)
    down, up = batch.distance_rows(leaves)
    single = Routing(fabric.index)
    for row, leaf in enumerate(leaves.tolist()):
        table = single.table(leaf)
        assert down[row].tolist() == table.down_dist.tolist()
        assert up[row].tolist() == table.up_dist.tolist()
        assert batch.table(leaf).down_dist.tolist() == table.down_dist.tolist()
    # In bytes with their sentinel (what forward_many uses), and tables made from them.
    narrow = Routing(fabric.index)
    narrow_down, narrow_up, far = narrow.narrow_rows(leaves)
    for got, want in ((narrow_down, down), (narrow_up, up)):
        widened = got.astype(np.int64)
        widened[widened >= far] = routing_module.UNREACHABLE
        assert widened.tolist() == want.tolist()
    for leaf in leaves.tolist():
        assert narrow.table(leaf).down_dist.tolist() == single.table(leaf).down_dist.tolist()
        assert narrow.table(leaf).up_dist.tolist() == single.table(leaf).up_dist.tolist()
        assert narrow.table(leaf).down_dist.dtype == np.int64
    again = Routing(fabric.index).narrow_rows(np.array([0, 0, *leaves.tolist()]))
    assert again[0][2:].tolist() == narrow_down.tolist()
    assert again[1][:2].tolist() == [narrow_up[-1].tolist()] * 2  # leaf 0 is the last row
    # Asked again, partly cached and with repeats: the same rows.
    again_down, again_up = batch.distance_rows(np.array([0, 0, *leaves.tolist()]))
    assert again_down[2:].tolist() == down.tolist()
    assert again_up[2:].tolist() == up.tolist()


def test_distance_type_leaves_room_above_every_distance() -> None:
    """A finite distance after ``steps`` tier steps is at most ``steps``; a step adds one to
    at most the sentinel: both must fit the type."""
    for steps in range(0, 300):
        dtype, far = distances.distance_type(steps)
        assert steps < far and far + 1 <= np.iinfo(dtype).max


@pytest.mark.parametrize("cells", [None, 1, 7, 64])
@pytest.mark.parametrize(("name", "k"), CASES)
def test_groups_many_equal_next_hops(
    name: str, k: int, cells: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also in slices of a few keys (``GROUP_CELLS`` small), as a large fabric's are."""
    if cells is not None:
        monkeypatch.setattr(routing_module, "GROUP_CELLS", cells)
    fabric = fabric_of(name, k)
    routing = Routing(fabric.index)
    switches = fabric.index.num_switches
    leaves = np.arange(switches)
    down, up = routing.distance_rows(leaves)
    keys = [(s, row, phase) for s in range(switches) for row in range(switches) for phase in (0, 1)]
    order = np.random.default_rng(k).permutation(len(keys))
    at, rows, phase = (np.array(column, dtype=np.int64) for column in zip(*keys, strict=True))
    at, rows, phase = at[order], rows[order], phase[order].astype(np.bool_)
    calls = [np.arange(len(keys)), np.flatnonzero(phase), np.flatnonzero(~phase)]
    for pick in calls:  # both phases in one call, and each phase alone
        members, starts, sizes = routing.groups_many(at[pick], down, up, rows[pick], phase[pick])
        assert len(starts) == len(sizes) == pick.size
        for i, key in enumerate(pick.tolist()):
            want = routing.next_hops(int(at[key]), int(leaves[rows[key]]), bool(phase[key]))
            got = members[starts[i] : starts[i] + sizes[i]].tolist()
            assert got == list(want), (int(at[key]), int(rows[key]), bool(phase[key]))
    # The same groups from the narrow rows and their sentinel.
    narrow_down, narrow_up, far = Routing(fabric.index).narrow_rows(leaves)
    for pick in calls:
        want_groups = routing.groups_many(at[pick], down, up, rows[pick], phase[pick])
        got_groups = routing.groups_many(
            at[pick], narrow_down, narrow_up, rows[pick], phase[pick], unreachable=far
        )
        for got_part, want_part in zip(got_groups, want_groups, strict=True):
            assert got_part.tolist() == want_part.tolist()
        # Keys one hop from their leaf by lookup (the leaf of every row given): the same,
        # whenever the lookup is used (every step, never, every step where most keys are).
        for rows_down, rows_up, sentinel, share in (
            (down, up, routing_module.UNREACHABLE, 0.0),
            (narrow_down, narrow_up, far, 0.0),
            (narrow_down, narrow_up, far, 0.5),
            (narrow_down, narrow_up, far, 2.0),
        ):
            monkeypatch.setattr(routing_module, "LOOKUP_FROM", share)
            split = routing.groups_many(
                at[pick], rows_down, rows_up, rows[pick], phase[pick], unreachable=sentinel,
                leaves=leaves,
            )  # fmt: skip
            for got_part, want_part in zip(split, want_groups, strict=True):
                assert got_part.tolist() == want_part.tolist()


def test_row_minima_equal_reduceat() -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 50, size=(24, 5)).astype(np.int32)
    for starts in ([0, 4, 8, 12, 16, 20], [0, 1, 5, 6, 20], [0], [0, 12], [0, 23]):
        at = np.array(starts, dtype=np.int64)
        assert row_minima(values, at).tolist() == np.minimum.reduceat(values, at, axis=0).tolist()


def test_even_runs_give_the_minima_of_reduceat() -> None:
    """Short runs filled up with their own first target: the same minimum per run."""
    rng = np.random.default_rng(5)
    values = rng.integers(0, 50, size=(30, 4)).astype(np.uint8)
    for starts in ([0, 4, 8, 12], [0, 1, 5, 6, 20], [0], [0, 3, 4, 9, 10, 11]):
        at = np.array(starts, dtype=np.int64)
        targets = rng.permutation(30)[:24]
        runs = distances.even_runs(targets, at)
        assert runs.shape[0] == len(starts)
        got = values[runs.ravel()].reshape(*runs.shape, -1).min(axis=1)
        want = np.minimum.reduceat(values[targets], at, axis=0)
        assert got.tolist() == want.tolist()
