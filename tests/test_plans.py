"""Plan files: round trips through text, and every bad plan refused with its flow id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from solver import (
    Flow,
    JobsFile,
    PlanError,
    PlanFile,
    ecmp_paths,
    flows_for_jobs,
    paths_from_plan,
    plan_from_paths,
)
from topology.errors import FabricFileError
from topology.formats import TextFormat, dump_model, parse_model
from topology.generators import LeafSpineParams, leaf_spine
from topology.model import Fabric, LinkStatus

FABRIC = leaf_spine(LeafSpineParams(leaves=2, hosts_per_leaf=2, spines=2))
JOBS = JobsFile.model_validate(
    {
        "jobs": [
            {
                "id": "j",
                "hosts": ["h0000", "h0001", "h0002", "h0003"],
                "communicators": [{"id": "c", "ring": "flat", "qps_per_connection": 2}],
            }
        ]
    }
)
FLOWS = flows_for_jobs(FABRIC, JOBS)
# flows 0,1: h0000 -> h0001 (same leaf); 2,3: h0001 -> h0002 (across the spines)


def ecmp_plan(fabric: Fabric = FABRIC, flows: list[Flow] = FLOWS) -> PlanFile:
    result = ecmp_paths(fabric, flows, seed=2)
    return plan_from_paths(fabric, flows, result.paths, "ecmp", seed=2)


@pytest.mark.parametrize("fmt", list(TextFormat))
def test_round_trip_through_text(fmt: TextFormat) -> None:
    paths = ecmp_paths(FABRIC, FLOWS, seed=2).paths
    plan = plan_from_paths(FABRIC, FLOWS, paths, "ecmp", seed=2)
    text = dump_model(plan, fmt)
    back = parse_model(PlanFile, text, fmt, "plan")
    assert back == plan
    assert paths_from_plan(FABRIC, FLOWS, back) == list(paths)
    assert plan.flows[2].path == (
        "h0001:nic0p0",
        "leaf-00",
        plan.flows[2].path[2],
        "leaf-01",
        "h0002:nic0p0",
    )


def edit(plan: PlanFile, k: int, **changes: Any) -> PlanFile:
    flows = list(plan.flows)
    flows[k] = flows[k].model_copy(update=changes)
    return plan.model_copy(update={"flows": tuple(flows)})


def refusal(plan: PlanFile, fabric: Fabric = FABRIC) -> list[tuple[str, str]]:
    with pytest.raises(PlanError) as error:
        paths_from_plan(fabric, FLOWS, plan, source="plan.yaml")
    assert str(error.value).startswith("plan.yaml: ")
    return error.value.problems


PLAN = ecmp_plan()
CROSS = PLAN.flows[2].path  # h0001 -> leaf-00 -> spine -> leaf-01 -> h0002
OTHER_SPINE = "spine-01" if CROSS[2] == "spine-00" else "spine-00"


@pytest.mark.parametrize(
    ("plan", "flow", "reason"),
    [
        (edit(PLAN, 2, path=CROSS[:2] + CROSS[3:]), "j/c/1/0", "is not a path of fabric"),
        (edit(PLAN, 2, path=("h0000:nic0p0",) + CROSS[1:]), "j/c/1/0", "starts at 'h0000:nic0p0'"),
        (edit(PLAN, 2, path=CROSS[:-1] + ("h0003:nic0p0",)), "j/c/1/0", "ends at 'h0003:nic0p0'"),
        (
            edit(PLAN, 0, path=("h0000:nic0p0", "leaf-00", "spine-00", "leaf-00", "h0001:nic0p0")),
            "j/c/0/0",
            "is not an equal-cost",
        ),
        (
            edit(
                PLAN,
                2,
                path=(
                    "h0001:nic0p0",
                    "leaf-00",
                    "spine-00",
                    "leaf-01",
                    "spine-01",
                    "leaf-01",
                    "h0002:nic0p0",
                ),
            ),
            "j/c/1/0",
            "is not an equal-cost",
        ),
        (edit(PLAN, 2, path=()), "j/c/1/0", "has no path, but the fabric has 2 equal-cost paths"),
        (edit(PLAN, 2, path=("h0001:nic0p0",)), "j/c/1/0", "a path needs at least two nodes"),
        (edit(PLAN, 2, path=("h0001:nic0p0", "nowhere")), "j/c/1/0", "no switch or NIC port named"),
        (edit(PLAN, 1, src="h0003:nic0p0"), "j/c/0/1", "src is 'h0003:nic0p0' in the plan"),
        (edit(PLAN, 1, rate=2.0), "j/c/0/1", "rate is 2.0 in the plan but 1.0 in the jobs"),
        (edit(PLAN, 1, qp=7), "j/c/0/7", "flows[1] is not a flow of the jobs"),
        (edit(PLAN, 1, qp=7), "j/c/0/1", "is missing from the plan"),
        (edit(PLAN, 1, qp=0), "j/c/0/0", "flows[1] repeats a flow already planned"),
        (PLAN.model_copy(update={"fabric": "other"}), "fabric", "plan is for fabric 'other'"),
    ],
)
def test_bad_plans_are_refused_naming_the_flow(plan: PlanFile, flow: str, reason: str) -> None:
    problems = refusal(plan)
    assert any(where == flow and reason in why for where, why in problems), problems


def test_a_path_that_is_not_equal_cost_is_refused() -> None:
    # valley path: down to a leaf and up again through the other spine
    detour = (
        "h0001:nic0p0",
        "leaf-00",
        "spine-00",
        "leaf-01",
        "spine-01",
        "leaf-00",
        "spine-00",
        "leaf-01",
        "h0002:nic0p0",
    )
    problems = refusal(edit(PLAN, 2, path=detour))
    assert problems == [
        ("j/c/1/0", "path is not an equal-cost (shortest valley-free) path between its NIC ports")
    ]


def test_a_path_over_a_down_link_is_refused() -> None:
    index = FABRIC.index
    uplink = index.resource_between[(index.node(CROSS[1]), index.node(CROSS[2]))]
    broken = FABRIC.with_link_status({uplink // 2: LinkStatus.DOWN})
    problems = refusal(PLAN, broken)
    assert ("j/c/1/0", f"path uses links that are not up: {CROSS[1]}->{CROSS[2]}") in problems


def test_empty_path_is_accepted_only_for_an_unreachable_flow() -> None:
    cut = FABRIC.with_link_status({FABRIC.index.link_number("h0002:nic0p0"): LinkStatus.DOWN})
    plan = ecmp_plan(cut)
    assert [f.id for f in plan.flows if not f.path] == ["j/c/1/0", "j/c/1/1", "j/c/2/0", "j/c/2/1"]
    paths = paths_from_plan(cut, FLOWS, plan)
    assert [len(p) for p in paths] == [2, 2, 0, 0, 0, 0, 4, 4]


def test_every_problem_is_reported_at_once() -> None:
    plan = edit(edit(PLAN, 0, rate=3.0), 3, path=())
    assert [flow for flow, _ in refusal(plan)] == ["j/c/0/0", "j/c/1/1"]


def test_unknown_keys_and_bad_values_in_a_plan_file_are_refused() -> None:
    data = PLAN.model_dump(mode="json")
    data["flows"][0]["colour"] = "red"
    data["flows"][1]["qp"] = -1
    with pytest.raises(FabricFileError) as error:
        parse_model(PlanFile, json.dumps(data), TextFormat.JSON, "plan.json")
    text = str(error.value)
    assert "plan.json: flows[0].colour: unknown key" in text
    assert "plan.json: flows[1].qp: " in text


def test_paths_and_flows_must_align() -> None:
    with pytest.raises(ValueError, match="paths for"):
        plan_from_paths(FABRIC, FLOWS, [], "ecmp")
