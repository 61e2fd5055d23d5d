"""The seeded job placer and the job-file generator."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import (
    JobsFile,
    JobsGenParams,
    PlacementError,
    PlacementMode,
    check_jobs,
    flows_for_jobs,
    generate_jobs,
    place_hosts,
)
from solver.workload.placement import host_groups
from topology.formats import TextFormat, dump_model, parse_model
from topology.generators import (
    LeafSpineParams,
    RailOptimizedParams,
    leaf_spine,
    rail_optimized,
)
from topology.model import Fabric

FABRIC = rail_optimized(RailOptimizedParams(units=4, hosts_per_unit=8, rails=2, spines=8))
MODES = list(PlacementMode)


def units(fabric: Fabric, hosts: list[str]) -> set[str]:
    groups = host_groups(fabric)
    return {groups[h] for h in hosts}


@pytest.mark.parametrize("mode", MODES)
def test_same_seed_same_hosts(mode: PlacementMode) -> None:
    assert place_hosts(FABRIC, 6, mode, seed=4) == place_hosts(FABRIC, 6, mode, seed=4)


@pytest.mark.parametrize("mode", [PlacementMode.RANDOM, PlacementMode.FRAGMENTED])
def test_seeds_matter_where_the_mode_is_random(mode: PlacementMode) -> None:
    picks = {tuple(place_hosts(FABRIC, 6, mode, seed=s)) for s in range(6)}
    assert len(picks) > 1


def test_contiguous_takes_the_first_free_hosts() -> None:
    assert place_hosts(FABRIC, 3, "contiguous") == ["h0000", "h0001", "h0002"]
    assert place_hosts(FABRIC, 3, "contiguous", exclude={"h0001"}) == ["h0000", "h0002", "h0003"]


def test_fragmented_spans_more_leaves_than_contiguous() -> None:
    contiguous = place_hosts(FABRIC, 8, "contiguous")
    fragmented = place_hosts(FABRIC, 8, "fragmented", seed=1)
    assert len(units(FABRIC, contiguous)) == 1
    assert len(units(FABRIC, fragmented)) == 4
    assert len(units(FABRIC, place_hosts(FABRIC, 3, "fragmented", seed=2, run=1))) == 3


def test_fragmented_on_a_leaf_spine_spreads_over_leaves() -> None:
    fabric = leaf_spine(LeafSpineParams(leaves=4, hosts_per_leaf=4, spines=4))
    assert len(units(fabric, place_hosts(fabric, 4, "fragmented", seed=0, run=1))) == 4
    assert len(units(fabric, place_hosts(fabric, 4, "contiguous"))) == 1


def test_not_enough_free_hosts() -> None:
    with pytest.raises(PlacementError, match="need 30 free hosts.*has 28"):
        place_hosts(FABRIC, 30, "random", exclude={"h0000", "h0001", "h0002", "h0003"})
    assert PlacementError.retryable


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        place_hosts(FABRIC, 0)
    with pytest.raises(ValueError):
        place_hosts(FABRIC, 2, "scattered")


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=32),
    mode=st.sampled_from(MODES),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    taken=st.sets(st.integers(min_value=0, max_value=31), max_size=16),
    run=st.integers(min_value=1, max_value=4),
)
def test_placement_properties(
    count: int, mode: PlacementMode, seed: int, taken: set[int], run: int
) -> None:
    exclude = {FABRIC.hosts[i].name for i in taken}
    if count > 32 - len(exclude):
        with pytest.raises(PlacementError):
            place_hosts(FABRIC, count, mode, seed, exclude, run=run)
        return
    hosts = place_hosts(FABRIC, count, mode, seed, exclude, run=run)
    assert len(hosts) == len(set(hosts)) == count
    assert not set(hosts) & exclude
    order = [h.name for h in FABRIC.hosts]
    assert hosts == sorted(hosts, key=order.index)


@pytest.mark.parametrize("mode", MODES)
def test_generated_jobs_share_no_host_and_fit_the_fabric(mode: PlacementMode) -> None:
    params = JobsGenParams(jobs=5, hosts_per_job=6, placement=mode, channels=2, seed=9)
    jobs = generate_jobs(FABRIC, params)
    assert [j.id for j in jobs.jobs] == ["job0", "job1", "job2", "job3", "job4"]
    used = [h for j in jobs.jobs for h in j.hosts or ()]
    assert len(used) == len(set(used)) == 30
    check_jobs(FABRIC, jobs)
    assert len(flows_for_jobs(FABRIC, jobs)) == 5 * 6 * 2 * 2
    assert generate_jobs(FABRIC, params) == jobs
    for fmt in TextFormat:
        assert parse_model(JobsFile, dump_model(jobs, fmt), fmt, "jobs") == jobs


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"pattern": "tree", "trees": 1}, "tree"),
        ({"pattern": "all-to-all", "rail_only": True}, "all-to-all"),
        ({"pattern": "ring", "ring": "flat", "collective": "all-gather"}, "ring"),
    ],
)
def test_generated_communicators_carry_only_their_patterns_options(
    options: dict[str, object], pattern: str
) -> None:
    jobs = generate_jobs(FABRIC, JobsGenParams.model_validate({"hosts_per_job": 3, **options}))
    (comm,) = jobs.jobs[0].communicators
    assert comm.pattern.value == pattern
    assert flows_for_jobs(FABRIC, jobs)


def test_generator_refuses_what_it_cannot_make() -> None:
    with pytest.raises(ValueError, match="explicit"):
        JobsGenParams(hosts_per_job=2, pattern="explicit")  # type: ignore[arg-type]
    with pytest.raises(PlacementError):
        generate_jobs(FABRIC, JobsGenParams(jobs=3, hosts_per_job=11))
