"""Fabric files: round trips, and every kind of bad file refused with file, field path, reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from c4p.files import load_fabric, save_fabric
from topology.errors import FabricFileError
from topology.formats import TextFormat, dump_fabric, parse_fabric
from topology.generators import generate
from topology.model import Fabric, LinkStatus

GOOD = """
name: tiny
switches:
  - {name: leaf0, role: leaf, mgmt_address: 192.168.0.1}
  - {name: leaf1, role: leaf}
  - {name: spine0, role: spine, hash: {algorithm: crc32-lo, seed: 7}}
hosts:
  - name: h0
    nics: [{name: nic0, ports: [{name: p0, address: 10.0.0.1, gid: "::ffff:10.0.0.1"}]}]
  - name: h1
    nics: [{name: nic0, ports: [{name: p0, address: 10.0.0.2}]}]
links:
  - {a: "h0:p0", b: "leaf0:Ethernet1", speed_gbps: 400}
  - {a: "h1:p0", b: "leaf1:Ethernet1", speed_gbps: 400}
  - {a: "leaf0:Ethernet2", b: "spine0:Ethernet1", speed_gbps: 400}
  - {a: "leaf1:Ethernet2", b: "spine0:Ethernet2", speed_gbps: 400, status: drained}
"""


def good_data() -> dict:  # type: ignore[type-arg]
    data = yaml.safe_load(GOOD)
    assert isinstance(data, dict)
    return data


def refused(data: object, tmp_path: Path) -> FabricFileError:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(FabricFileError) as caught:
        load_fabric(path)
    assert str(path) in str(caught.value)
    return caught.value


def test_good_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(GOOD)
    fabric = load_fabric(path)
    assert [s.name for s in fabric.switches] == ["leaf0", "leaf1", "spine0"]
    assert fabric.links[3].status is LinkStatus.DRAINED
    assert fabric.switches[2].hash.seed == 7


@pytest.mark.parametrize(
    ("mutate", "where", "reason"),
    [
        (lambda d: d["switches"][0].update(colour="red"), "switches[0].colour", "unknown key"),
        (lambda d: d.update(owner="x"), "owner", "unknown key"),
        (lambda d: d["switches"][1].update(name="leaf0"), "switches[1].name", "duplicate name"),
        (lambda d: d["hosts"][1].update(name="leaf0"), "hosts[1].name", "duplicate name"),
        (
            lambda d: d["links"][0].update(a="h0:p9"),
            "links[0].a",
            "host port 'h0:p9' does not exist",
        ),
        (
            lambda d: d["links"][2].update(b="spine9:Ethernet1"),
            "links[2].b",
            "device 'spine9' does not exist",
        ),
        (
            lambda d: d["links"].append({"a": "h0:p0", "b": "leaf1:Ethernet7", "speed_gbps": 1}),
            "links[4].a",
            "already used by links[0]",
        ),
        (lambda d: d["links"][2].update(speed_gbps=0), "links[2].speed_gbps", "greater than 0"),
        (lambda d: d["links"][2].update(speed_gbps=-100), "links[2].speed_gbps", "greater than 0"),
        (
            lambda d: d["hosts"][0]["nics"][0]["ports"][0].update(address="10.0.0.300"),
            "hosts[0].nics[0].ports[0].address",
            "not a valid IPv4",
        ),
        (
            lambda d: d["hosts"][0]["nics"][0]["ports"][0].update(address="fe80::1"),
            "hosts[0].nics[0].ports[0].address",
            "not a valid IPv4",
        ),
        (
            lambda d: d["switches"][0].update(mgmt_address="leaf0.example"),
            "switches[0].mgmt_address",
            "not a valid IPv4",
        ),
        (
            lambda d: d["hosts"][1]["nics"][0]["ports"][0].update(address="10.0.0.1"),
            "hosts[1].nics[0].ports[0].address",
            "already used",
        ),
        (lambda d: d["links"][0].update(status="flapping"), "links[0].status", "'up'"),
        (lambda d: d["links"][0].update(a="h0"), "links[0].a", "'<device>:<interface>'"),
        (
            lambda d: d["links"][1].update(b="leaf0:Ethernet1 2"),
            "links[1].b",
            "interface 'Ethernet1 2' has characters not allowed",
        ),
        (
            lambda d: d["links"][1].update(b="leaf0:Ethernet1\n"),
            "links[1].b",
            "has characters not allowed",
        ),
        (
            lambda d: d["links"].append(
                {"a": "leaf0:Ethernet9", "b": "spine0:Ethernet9", "speed_gbps": 1}
            ),
            "links[4]",
            "parallel link",
        ),
        (
            lambda d: d["links"].append(
                {"a": "leaf0:Ethernet8", "b": "leaf0:Ethernet9", "speed_gbps": 1}
            ),
            "links[4]",
            "loops back",
        ),
        (lambda d: d["switches"][0].update(role="tor"), "switches[0].role", "'leaf'"),
        (lambda d: d["links"][0].pop("speed_gbps"), "links[0].speed_gbps", "required"),
        (lambda d: d["switches"][2]["hash"].update(seed=-1), "switches[2].hash.seed", "greater"),
    ],
)
def test_bad_file_is_refused_with_path_and_reason(
    mutate: object, where: str, reason: str, tmp_path: Path
) -> None:
    data = good_data()
    mutate(data)  # type: ignore[operator]
    error = refused(data, tmp_path)
    assert any(path == where and reason in why for path, why in error.problems), error.problems


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    data = good_data()
    data["switches"][0]["colour"] = "red"
    data["links"][2]["speed_gbps"] = 0
    error = refused(data, tmp_path)
    assert {p for p, _ in error.problems} >= {"switches[0].colour", "links[2].speed_gbps"}


def test_syntax_errors_and_wrong_shapes(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "broken.yaml"
    bad_yaml.write_text("switches: [unclosed\n")
    with pytest.raises(FabricFileError, match=r"broken\.yaml: not valid YAML"):
        load_fabric(bad_yaml)
    bad_json = tmp_path / "broken.json"
    bad_json.write_text("{")
    with pytest.raises(FabricFileError, match=r"broken\.json: not valid JSON"):
        load_fabric(bad_json)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(FabricFileError, match="expected a mapping"):
        load_fabric(listy)
    with pytest.raises(FabricFileError, match="no such file"):
        load_fabric(tmp_path / "missing.yaml")


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_round_trip_through_disk(suffix: str, tmp_path: Path) -> None:
    fabric = parse_fabric(GOOD, TextFormat.YAML)
    path = tmp_path / f"f.{suffix}"
    save_fabric(fabric, path)
    assert load_fabric(path) == fabric
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@settings(max_examples=40, deadline=None)
@given(
    speeds=st.lists(
        st.floats(min_value=0.5, max_value=1600, allow_nan=False), min_size=4, max_size=4
    ),
    statuses=st.lists(st.sampled_from(list(LinkStatus)), min_size=4, max_size=4),
    seed=st.integers(min_value=0, max_value=0xFFFFFFFF),
    fmt=st.sampled_from(list(TextFormat)),
)
def test_round_trip_property(
    speeds: list[float], statuses: list[LinkStatus], seed: int, fmt: TextFormat
) -> None:
    data = good_data()
    for link, speed, status in zip(data["links"], speeds, statuses, strict=True):
        link.update(speed_gbps=speed, status=status.value)
    data["switches"][2]["hash"]["seed"] = seed
    fabric = Fabric.model_validate(data)
    assert parse_fabric(dump_fabric(fabric, fmt), fmt) == fabric


def test_one_bad_item_is_one_problem(tmp_path: Path) -> None:
    data = good_data()
    data["hosts"][0]["nics"][0]["ports"][0]["address"] = "10.0.0.300"
    error = refused(data, tmp_path)
    assert [p for p, _ in error.problems] == ["hosts[0].nics[0].ports[0].address"]
    data = good_data()
    data["hosts"][0]["nics"] = []
    assert [p for p, _ in refused(data, tmp_path).problems] == ["hosts[0].nics"]


def test_a_copy_with_other_switches_is_a_fresh_snapshot() -> None:
    fabric = generate("leaf-spine", leaves=2, spines=2, hosts_per_leaf=1)
    assert fabric.index is not None  # the cached view exists before the copy
    reseeded = tuple(
        s.model_copy(update={"hash": s.hash.model_copy(update={"seed": 7})})
        for s in fabric.switches
    )
    copy = fabric.model_copy(update={"switches": reseeded})
    assert copy.index is not fabric.index
    assert all(s.hash.seed == 7 for s in copy.index.fabric.switches)
    with pytest.raises(ValueError, match="duplicate name"):
        fabric.model_copy(update={"switches": (*fabric.switches, fabric.switches[0])})
