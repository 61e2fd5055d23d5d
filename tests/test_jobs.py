"""Job intents: flow derivation per pattern, and every validation error naming its field."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import (
    JobError,
    JobsFile,
    Pattern,
    check_jobs,
    derive_workload,
    flows_for_jobs,
)
from solver.workload import patterns as patterns_module
from topology.errors import FabricFileError
from topology.formats import TextFormat, dump_model, parse_model
from topology.generators import (
    DualPlaneParams,
    LeafSpineParams,
    RailOptimizedParams,
    dual_plane,
    leaf_spine,
    rail_optimized,
)
from topology.model import Fabric


def rail_fabric(units: int = 2, hosts: int = 4, rails: int = 8) -> Fabric:
    return rail_optimized(
        RailOptimizedParams(units=units, hosts_per_unit=hosts, rails=rails, spines=hosts)
    )


RAIL_FABRICS = {r: rail_fabric(units=2, hosts=4, rails=r) for r in (1, 2, 3)}


def flat_fabric(hosts: int = 4, nics: int = 1) -> Fabric:
    return leaf_spine(
        LeafSpineParams(leaves=2, hosts_per_leaf=hosts // 2, spines=2, nics_per_host=nics)
    )


def jobs_of(*jobs: dict[str, Any]) -> JobsFile:
    return JobsFile.model_validate({"jobs": list(jobs)})


def job(hosts: list[str], **comm: Any) -> dict[str, Any]:
    return {"id": "j", "hosts": hosts, "communicators": [{"id": "c", **comm}]}


def hosts(fabric: Fabric, count: int) -> list[str]:
    return [h.name for h in fabric.hosts[:count]]


def pairs(fabric: Fabric, jobs: JobsFile) -> Counter[tuple[int, int]]:
    return Counter((c.src_rank, c.dst_rank) for c in derive_workload(fabric, jobs).connections)


# -- derivation -------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [2, 3, 5])
@pytest.mark.parametrize(("channels", "qps"), [(1, 1), (2, 1), (1, 3), (2, 4)])
def test_rail_ring_makes_hosts_times_rails_times_channels_times_qps_flows(
    count: int, channels: int, qps: int
) -> None:
    fabric = rail_fabric(units=2, hosts=4)
    jobs = jobs_of(job(hosts(fabric, count), channels=channels, qps_per_connection=qps))
    flows = flows_for_jobs(fabric, jobs)
    assert len(flows) == count * 8 * channels * qps
    assert len({f.id for f in flows}) == len(flows)


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=8),
    rails=st.integers(min_value=1, max_value=3),
    channels=st.integers(min_value=1, max_value=3),
    qps=st.integers(min_value=1, max_value=3),
    pattern=st.sampled_from(["ring", "all-to-all", "tree"]),
)
def test_flow_counts_follow_the_pattern(
    count: int, rails: int, channels: int, qps: int, pattern: str
) -> None:
    fabric = RAIL_FABRICS[rails]
    comm = {"pattern": pattern, "channels": channels, "qps_per_connection": qps}
    flows = flows_for_jobs(fabric, jobs_of(job(hosts(fabric, count), **comm)))
    per_rail = {
        "ring": count if count > 1 else 0,
        "all-to-all": count * (count - 1) * rails,  # every rank to every other host's ranks
        "tree": 2 * 2 * (count - 1),
    }[pattern]
    assert len(flows) == per_rail * rails * channels * qps
    assert len({f.id for f in flows}) == len(flows)
    assert all(f.src.split(":")[0] != f.dst.split(":")[0] for f in flows)


def test_rail_ring_is_rail_aligned_and_goes_to_the_next_host() -> None:
    fabric = rail_fabric(units=2, hosts=4)
    names = hosts(fabric, 5)
    workload = derive_workload(fabric, jobs_of(job(names)))
    for c in workload.connections:
        assert c.src_nic == c.dst_nic
        assert names.index(c.dst_host) == (names.index(c.src_host) + 1) % 5
    for f in workload.flows:
        assert f.src.split(":")[1] == f.dst.split(":")[1]
    assert workload.flows[0].id == "j/c/0/0"


def test_rail_ring_over_one_host_makes_no_flow() -> None:
    fabric = rail_fabric()
    assert flows_for_jobs(fabric, jobs_of(job(hosts(fabric, 1)))) == []


def test_flat_ring_skips_hops_inside_a_host() -> None:
    fabric = flat_fabric(hosts=4, nics=4)
    jobs = jobs_of(job(hosts(fabric, 2), ring="flat"))
    # ranks 0-3 on the first host, 4-7 on the second: only 3->4 and 7->0 leave a host
    assert pairs(fabric, jobs) == Counter({(3, 4): 1, (7, 0): 1})


def test_flat_ring_of_single_nic_hosts_has_one_connection_per_rank() -> None:
    fabric = flat_fabric(hosts=4, nics=1)
    assert pairs(fabric, jobs_of(job(hosts(fabric, 4), ring="flat"))) == Counter(
        {(0, 1): 1, (1, 2): 1, (2, 3): 1, (3, 0): 1}
    )


def test_ring_broadcast_is_a_chain() -> None:
    fabric = flat_fabric(hosts=4, nics=1)
    jobs = jobs_of(job(hosts(fabric, 4), ring="flat", collective="broadcast"))
    assert set(pairs(fabric, jobs)) == {(0, 1), (1, 2), (2, 3)}


def test_all_to_all_opens_every_cross_host_pair() -> None:
    fabric = flat_fabric(hosts=4, nics=2)
    jobs = jobs_of(job(hosts(fabric, 3), pattern="all-to-all", channels=2))
    found = pairs(fabric, jobs)
    # 6 ranks, 30 ordered pairs, 6 of them inside a host
    assert len(found) == 24 and set(found.values()) == {2}
    assert all(a // 2 != b // 2 for a, b in found)


def test_rail_only_all_to_all_keeps_to_rails_and_counts_forwarded_pairs() -> None:
    fabric = rail_fabric(units=1, hosts=4, rails=4)
    workload = derive_workload(
        fabric, jobs_of(job(hosts(fabric, 3), pattern="all-to-all", rail_only=True))
    )
    assert len(workload.connections) == 4 * 3 * 2  # rails x ordered host pairs
    assert all(c.src_nic == c.dst_nic and c.pairs == 4 for c in workload.connections)


@pytest.mark.parametrize("count", [2, 5, 8])
@pytest.mark.parametrize("trees", [1, 2])
def test_tree_edge_counts(count: int, trees: int) -> None:
    fabric = rail_fabric(units=2, hosts=4, rails=2)
    reduce = jobs_of(job(hosts(fabric, count), pattern="tree", trees=trees, channels=3))
    workload = derive_workload(fabric, reduce)
    assert len(workload.connections) == 2 * trees * 2 * (count - 1) * 3
    bcast = jobs_of(job(hosts(fabric, count), pattern="tree", trees=trees, collective="broadcast"))
    assert len(flows_for_jobs(fabric, bcast)) == 2 * trees * (count - 1)


def test_double_binary_tree_second_tree_reverses_the_first() -> None:
    fabric = rail_fabric(units=2, hosts=4, rails=1)
    jobs = jobs_of(job(hosts(fabric, 7), pattern="tree", collective="broadcast"))
    workload = derive_workload(fabric, jobs)
    parents = {t: {c.src_rank for c in workload.connections if c.tree == t} for t in (0, 1)}
    assert parents == {0: {0, 1, 2}, 1: {6, 5, 4}}  # heap order, then reversed
    children = {t: {c.dst_rank for c in workload.connections if c.tree == t} for t in (0, 1)}
    assert children == {0: set(range(1, 7)), 1: set(range(6))}


def test_dual_port_nics_spread_qps_and_channels_over_both_planes() -> None:
    fabric = dual_plane(DualPlaneParams(units=2, hosts_per_unit=2, rails=2, spines=2))
    for comm in ({"qps_per_connection": 2}, {"channels": 2}):
        flows = flows_for_jobs(fabric, jobs_of(job(hosts(fabric, 3), **comm)))
        assert len(flows) == 3 * 2 * 2
        for flow in flows:
            src_port, dst_port = flow.src.split(":")[1], flow.dst.split(":")[1]
            assert src_port[-1] == dst_port[-1]  # nic<r>p<plane>: same plane at both ends
        assert Counter(f.src[-1] for f in flows) == Counter({"0": 6, "1": 6})


def test_explicit_connections_take_their_own_qps_and_rate() -> None:
    fabric = flat_fabric(hosts=4)
    jobs = jobs_of(
        job(
            hosts(fabric, 4),
            pattern="explicit",
            qps_per_connection=2,
            connections=[
                {"src_rank": 0, "dst_rank": 3},
                {"src_rank": 3, "dst_rank": 1, "qps": 4, "rate": 2.5},
            ],
        )
    )
    flows = flows_for_jobs(fabric, jobs)
    assert [(f.connection, f.rate) for f in flows] == [(0, 1.0)] * 2 + [(1, 2.5)] * 4


def test_explicit_ranks_place_where_they_say() -> None:
    fabric = rail_fabric(rails=2)
    spec = {
        "id": "j",
        "ranks": [
            {"rank": 1, "host": "h0001", "nic": "nic0"},
            {"rank": 0, "host": "h0005", "nic": "nic0"},
        ],
        "communicators": [{"id": "c", "ring": "flat"}],
    }
    flows = flows_for_jobs(fabric, jobs_of(spec))
    assert {(f.src, f.dst) for f in flows} == {
        ("h0005:nic0p0", "h0001:nic0p0"),
        ("h0001:nic0p0", "h0005:nic0p0"),
    }


def test_communicator_rank_subset() -> None:
    fabric = flat_fabric(hosts=4)
    jobs = jobs_of(job(hosts(fabric, 4), ring="flat", ranks=[3, 1]))
    assert pairs(fabric, jobs) == Counter({(3, 1): 1, (1, 3): 1})


def test_priorities_and_line_rates_reach_the_communicator() -> None:
    fabric = dual_plane(DualPlaneParams(units=1, hosts_per_unit=2, rails=1, spines=1))
    spec = job(hosts(fabric, 2)) | {"priority": 5}
    (comm,) = derive_workload(fabric, jobs_of(spec)).communicators
    assert comm.priority == 5 and comm.line_rate_gbps == 800.0 and comm.pattern is Pattern.RING


def test_jobs_file_round_trips_through_text() -> None:
    fabric = rail_fabric()
    jobs = jobs_of(job(hosts(fabric, 3), pattern="tree", trees=1, channels=2))
    for fmt in TextFormat:
        assert parse_model(JobsFile, dump_model(jobs, fmt), fmt, "jobs") == jobs


# -- validation -------------------------------------------------------------------------------


def refused(fabric: Fabric, data: dict[str, Any]) -> str:
    """The message the jobs are refused with: by the file parser, else by :func:`check_jobs`."""
    try:
        jobs = parse_model(JobsFile, json.dumps(data), TextFormat.JSON, "jobs.json")
    except FabricFileError as error:
        return str(error)
    with pytest.raises(JobError) as job_error:
        check_jobs(fabric, jobs, "jobs.json")
    return str(job_error.value)


FABRIC = rail_fabric(units=2, hosts=4, rails=2)
OK = {"id": "a", "hosts": ["h0000", "h0001"], "communicators": [{"id": "c"}]}


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        (
            [OK, {**OK, "id": "b", "hosts": ["h0002", "h0003", "h0004", "h9999"]}],
            "jobs.json: jobs[1].hosts[3]: host 'h9999' is not in fabric 'rail-optimized-16gpu'",
        ),
        ([{**OK, "hosts": ["h0000", "h0000"]}], "jobs[0].hosts[1]: host 'h0000' is already"),
        (
            [OK, {**OK, "id": "b", "hosts": ["h0002", "h0001"]}],
            "jobs[1].hosts[1]: NIC h0001:nic0 is already used by job 'a' (jobs[0])",
        ),
        (
            [{**OK, "hosts": None, "ranks": [{"rank": 0, "host": "h0000", "nic": "nic7"}]}],
            "jobs[0].ranks[0].nic: host 'h0000' has no NIC 'nic7'",
        ),
        (
            [{**OK, "hosts": None, "ranks": [{"rank": 0, "host": "hx", "nic": "nic0"}]}],
            "jobs[0].ranks[0].host: host 'hx' is not in fabric",
        ),
        (
            [{**OK, "communicators": [{"id": "c", "ranks": [0, 4]}]}],
            "jobs[0].communicators[0].ranks[1]: rank 4 is out of range 0..3",
        ),
        (
            [
                {
                    **OK,
                    "communicators": [
                        {
                            "id": "c",
                            "pattern": "explicit",
                            "connections": [{"src_rank": 0, "dst_rank": 9}],
                        }
                    ],
                }
            ],
            "jobs[0].communicators[0].connections[0].dst_rank: rank 9 is out of range 0..3",
        ),
        (
            [
                {
                    **OK,
                    "communicators": [
                        {
                            "id": "c",
                            "pattern": "explicit",
                            "ranks": [0, 2],
                            "connections": [{"src_rank": 0, "dst_rank": 3}],
                        }
                    ],
                }
            ],
            "jobs[0].communicators[0].connections[0].dst_rank: rank 3 is not in 'ranks'",
        ),
        (
            [
                {
                    **OK,
                    "communicators": [
                        {
                            "id": "c",
                            "pattern": "explicit",
                            "connections": [{"src_rank": 0, "dst_rank": 1}],
                        }
                    ],
                }
            ],
            "jobs[0].communicators[0].connections[0]: ranks 0 and 1 are both on host 'h0000'",
        ),
        # refused by the models, before the fabric is looked at
        ([OK, OK], "jobs: [1].id: job id 'a' is already used by [0]"),
        (
            [{**OK, "ranks": [{"rank": 0, "host": "h0000", "nic": "nic0"}]}],
            "jobs[0]: give exactly one of",
        ),
        ([{"id": "a", "communicators": [{"id": "c"}]}], "jobs[0]: give exactly one of"),
        (
            [{**OK, "hosts": None, "ranks": [{"rank": 1, "host": "h0000", "nic": "nic0"}]}],
            "jobs[0].ranks: ranks must be numbered 0..0; missing [0]",
        ),
        (
            [
                {
                    **OK,
                    "hosts": None,
                    "ranks": [
                        {"rank": 0, "host": "h0000", "nic": "nic0"},
                        {"rank": 0, "host": "h0001", "nic": "nic0"},
                    ],
                }
            ],
            "jobs[0].ranks: rank 0 is given twice",
        ),
        (
            [{**OK, "communicators": [{"id": "c"}, {"id": "c"}]}],
            "jobs[0]: communicators[1].id: 'c' is already communicators[0]",
        ),
        (
            [{**OK, "communicators": [{"id": "c", "collective": "all-to-all"}]}],
            "jobs[0].communicators[0]: collective 'all-to-all' cannot run on pattern 'ring'",
        ),
        (
            [{**OK, "communicators": [{"id": "c", "trees": 1}]}],
            "jobs[0].communicators[0]: 'trees' applies to pattern tree, not 'ring'",
        ),
        (
            [{**OK, "communicators": [{"id": "c", "pattern": "explicit"}]}],
            "jobs[0].communicators[0]: pattern 'explicit' needs at least one entry",
        ),
        (
            [{**OK, "communicators": [{"id": "c", "qps_per_connection": 17}]}],
            "jobs[0].communicators[0].qps_per_connection: ",
        ),
        ([{**OK, "communicators": [{"id": "c", "ranks": [1, 1]}]}], "rank 1 is listed twice"),
        ([{**OK, "colour": "red"}], "jobs[0].colour: unknown key"),
        ([{**OK, "id": "a/b"}], "jobs[0].id: "),
    ],
)
def test_every_bad_job_names_its_field(jobs: list[dict[str, Any]], expected: str) -> None:
    assert expected in refused(FABRIC, {"jobs": jobs})


def test_all_problems_are_reported_at_once() -> None:
    bad = [{**OK, "hosts": ["hx", "hy"]}, {**OK, "id": "b", "hosts": ["h0000"]}]
    with pytest.raises(JobError) as error:
        check_jobs(FABRIC, JobsFile.model_validate({"jobs": bad}))
    assert [p[0] for p in error.value.problems] == ["jobs[0].hosts[0]", "jobs[0].hosts[1]"]


def test_uncabled_nic_port_is_refused() -> None:
    fabric = rail_fabric(units=1, hosts=2, rails=1)
    cut = Fabric(
        name=fabric.name,
        switches=fabric.switches,
        hosts=fabric.hosts,
        links=tuple(link for link in fabric.links if link.a != "h0001:nic0p0"),
    )
    jobs = JobsFile.model_validate({"jobs": [OK]})
    with pytest.raises(JobError, match=r"jobs\[0\].hosts\[1\]: NIC port 'h0001:nic0p0' is not"):
        check_jobs(cut, jobs)


def test_too_many_flows_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(patterns_module, "MAX_FLOWS", 10)
    fabric = flat_fabric(hosts=4)
    with pytest.raises(JobError, match="would make about"):
        derive_workload(fabric, jobs_of(job(hosts(fabric, 4), pattern="all-to-all")))


def test_a_full_dump_reads_back() -> None:
    """Defaults written out (``trees: 2`` on a ring) are not options chosen for another pattern."""
    from solver.workload.jobs import CommunicatorSpec

    for spec in (
        CommunicatorSpec(id="r", pattern="ring", channels=2),
        CommunicatorSpec(id="t", pattern="tree", trees=1),
        CommunicatorSpec(id="a", pattern="all-to-all", rail_only=True),
    ):
        assert CommunicatorSpec.model_validate(spec.model_dump()) == spec
    with pytest.raises(ValueError, match="'trees' applies to pattern tree"):
        CommunicatorSpec(id="r", pattern="ring", trees=1)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=30),
    st.booleans(),
    st.integers(1, 8),
)
def test_explicit_connections_checked_in_bulk_find_what_the_pair_checks_find(
    connections: list[tuple[int, int]], subset: bool, host_count: int
) -> None:
    """The bulk check of explicit connections (``solver.workload.jobs._connections_fit``) only lets
    through what the per-pair checks find nothing in: the same problems, in the same order,
    with it and without it (ranks out of range, outside the subset, pairs on one host)."""
    import solver.workload.jobs as jobs_module
    from solver.workload.jobs import find_job_problems

    fabric = RAIL_FABRICS[2]
    conns = [{"src_rank": a, "dst_rank": b} for a, b in connections if a != b]
    if not conns:
        return
    comm: dict[str, Any] = {"pattern": "explicit", "connections": conns}
    if subset and host_count > 1:
        comm["ranks"] = list(range(0, 2 * host_count, 2))
    jobs = jobs_of(job(hosts(fabric, host_count), **comm))
    found = list(find_job_problems(fabric, jobs))
    original = jobs_module._connections_fit
    try:
        jobs_module._connections_fit = lambda comm, ranks: False
        expected = list(find_job_problems(fabric, jobs))
    finally:
        jobs_module._connections_fit = original
    assert found == expected
    if "ranks" not in comm:  # over all ranks, the bulk check is exact: taken when nothing is wrong
        spec, ranks = jobs.jobs[0].communicators[0], checked_or_none(fabric, jobs)
        assert (ranks is not None and original(spec, ranks)) == (not found)


def checked_or_none(fabric: Fabric, jobs: JobsFile) -> list[Any] | None:
    from solver.workload.jobs import _placement

    problems: list[tuple[str, str]] = []
    ranks = _placement(fabric, jobs.jobs[0], "jobs[0]", problems)
    return None if problems else ranks
