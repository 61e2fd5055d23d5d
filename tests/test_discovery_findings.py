"""Loud, never silently wrong: answer shapes, findings, exit codes and gnmic's target file.

The parser must read the same facts from every answer shape real targets send (wrapped or
not, one update or many); discovery must raise a *finding* (and ``c4p fabric discover`` exit 1)
whenever the fabric is in doubt; one malformed counter costs that counter only; gnmic's target
file must be accepted as it is, with c4p's refusals named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_fabric_emulator import FAST, serve_gnmi, small_fabric
from typer.testing import CliRunner

from c4p.cli.discover import discover_app
from c4p.files import save_fabric
from c4p.testing.dataplane import FabricEmulator
from c4p.testing.oc_payloads import interface_entries
from southbound.discovery import build_fabric
from southbound.gnmi import GnmiSession
from southbound.observed import SwitchObservation
from southbound.openconfig import OcTree, interfaces_of, neighbors_of
from southbound.targets import TargetsFile

runner = CliRunner()


def observe(emu: FabricEmulator) -> dict[str, SwitchObservation]:
    return {s: emu.observation(s) for s in emu.switches}


# -- answer shapes --------------------------------------------------------------------------


def _shapes(entries: list[dict[str, Any]]) -> dict[str, list[tuple[list[Any], Any]]]:
    top = [("openconfig-interfaces:interfaces", {})]
    return {
        "unwrapped": [(top, {"openconfig-interfaces:interface": entries})],
        "wrapped (SONiC)": [(top, {"openconfig-interfaces:interfaces": {"interface": entries}})],
        "root": [([], {"openconfig-interfaces:interfaces": {"interface": entries}})],
        "one update per entry": [
            ([("interfaces", {}), ("interface", {"name": e["name"]})], e) for e in entries
        ],
        "entry wrapped in its list": [
            (
                [("interfaces", {}), ("interface", {"name": e["name"]})],
                {"openconfig-interfaces:interface": [e]},
            )
            for e in entries
        ],
        "one update per leaf": [
            (
                [("interfaces", {}), ("interface", {"name": e["name"]}), ("state", {}), (k, {})],
                v,
            )
            for e in entries
            for k, v in e["state"].items()
        ]
        + [
            ([("interfaces", {}), ("interface", {"name": e["name"]})], {k: v})
            for e in entries
            for k, v in e.items()
            if k not in ("state", "name")
        ],
    }


def test_every_answer_shape_gives_the_same_interfaces() -> None:
    emu = FabricEmulator(small_fabric("leaf-spine"), flavours="eos")
    entries = interface_entries(emu, "leaf-00")
    results = {}
    for shape, pairs in _shapes(entries).items():
        tree = OcTree()
        for elems, value in pairs:
            tree.add(elems, value)
        states, counters, problems = interfaces_of(tree, "leaf-00")
        assert problems == [], shape
        results[shape] = (states, counters)
    first = next(iter(results.values()))
    assert all(r == first for r in results.values())
    by_name = {s.name: s for s in first[0]}
    # EOS-style auto-negotiation: SPEED_UNKNOWN port-speed, the negotiated speed is used.
    port = emu.ports("leaf-00")[0]
    assert by_name[port.interface].speed_gbps == port.speed_gbps
    assert by_name["Loopback0"].speed_gbps is None


# -- findings (pure) ------------------------------------------------------------------------


def test_findings_name_every_doubt() -> None:
    fabric = small_fabric("leaf-spine")
    obs = observe(FabricEmulator(fabric))
    assert build_fabric(obs).findings == ()
    # leaf-00 answers, but its LLDP table is empty: its uplinks are seen from one end only.
    quiet = dict(obs)
    quiet["leaf-00"] = obs["leaf-00"].model_copy(update={"neighbors": ()})
    reasons = [str(p) for p in build_fabric(quiet).findings]
    assert "leaf-00: /lldp: answered with no LLDP neighbors" in reasons
    assert any("seen from one end only" in r and "leaf-00" in r for r in reasons)
    # Two target entries that are one switch (the same chassis-id).
    twin = dict(obs)
    twin["leaf-99"] = obs["leaf-01"].model_copy(
        update={"target": "leaf-99", "chassis_id": "02:00:00:00:00:01"}
    )
    twin["leaf-01"] = obs["leaf-01"].model_copy(update={"chassis_id": "02-00-00-00-00-01"})
    assert any("same switch as target leaf-01" in str(p) for p in build_fabric(twin).findings)
    # One switch under two names: LLDP names spine-00 "core-a"; matched by its chassis-id.
    renamed = dict(obs)
    renamed["spine-00"] = obs["spine-00"].model_copy(update={"chassis_id": "02:aa:00:00:00:01"})
    leaf = obs["leaf-00"]
    renamed["leaf-00"] = leaf.model_copy(
        update={
            "neighbors": tuple(
                n.model_copy(update={"system_name": "core-a", "chassis_id": "02:aa:00:00:00:01"})
                if n.system_name == "spine-00"
                else n
                for n in leaf.neighbors
            )
        }
    )
    result = build_fabric(renamed)
    assert any("calls it 'core-a'" in str(p) for p in result.findings)
    assert result.fabric.link_by_id("leaf-00--spine-00") is not None
    # An empty answer is a finding, never an empty fabric with nothing said.
    empty = {"leaf-00": obs["leaf-00"].model_copy(update={"interfaces": (), "neighbors": ()})}
    assert [str(p) for p in build_fabric(empty).findings] == [
        "leaf-00: /interfaces: answered with no interfaces"
    ]


# -- over gNMI ------------------------------------------------------------------------------


def test_one_malformed_counter_costs_that_counter() -> None:
    fabric = small_fabric("leaf-spine")
    with serve_gnmi(fabric) as (emu, servers):
        emu.set_leaf(
            "leaf-01", "/interfaces/interface[name=Ethernet2]/state/counters/in-octets", "12x"
        )
        config = servers.targets_file(timeouts=FAST).by_name()["leaf-01"]
        session = GnmiSession(config)
        try:
            obs = session.observe()
        finally:
            session.close()
    assert [p.path for p in obs.problems] == [
        "/interfaces/interface[name=Ethernet2]/state/counters/in-octets"
    ]
    assert obs.interface("Ethernet2") is not None
    assert obs.counters["Ethernet2"].in_octets is None
    assert obs.counters["Ethernet2"].out_octets is not None


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_cli_exits_1_on_findings(tmp_path: Path) -> None:
    declared = small_fabric("leaf-spine")
    with serve_gnmi(declared) as (emu, servers):
        data = servers.targets_file(timeouts=FAST).model_dump(mode="json", exclude_defaults=True)
        targets = _write(tmp_path / "targets.yaml", data)
        assert runner.invoke(discover_app, ["--targets", str(targets)]).exit_code == 0
        # A second entry for spine-00 under another name.
        twin = dict(data["targets"][-1], name="spine-twin")
        dup = _write(tmp_path / "dup.yaml", {**data, "targets": [*data["targets"], twin]})
        result = runner.invoke(discover_app, ["--targets", str(dup), "--json", "-"])
        assert result.exit_code == 1, result.output
        report = json.loads(result.output)
        assert any("same switch" in f["reason"] for f in report["findings"])
        # A switch without an LLDP tree: a named problem and exit 1, not an empty success.
        emu.set_raw("spine-01", "/lldp", b"{}")
        result = runner.invoke(discover_app, ["--targets", str(targets)])
        assert result.exit_code == 1, result.output
        assert "spine-01: /lldp: no LLDP tree" in result.output
        assert "answered with no LLDP neighbors" in result.output


def test_gnmic_target_file_is_accepted(tmp_path: Path) -> None:
    declared = small_fabric("leaf-spine")
    with serve_gnmi(declared) as (_, servers):
        gnmic = {
            "username": "admin",
            "password": "admin",
            "insecure": True,
            "timeout": "5s",
            "subscriptions": {"port_stats": {"paths": ["/interfaces"], "mode": "stream"}},
            "targets": {
                name: {"address": f"127.0.0.1:{port}"} for name, port in servers.ports.items()
            },
        }
        targets = _write(tmp_path / "gnmic.yaml", gnmic)
        compare = tmp_path / "declared.yaml"
        save_fabric(declared, compare)
        result = runner.invoke(discover_app, ["--targets", str(targets), "--compare", str(compare)])
        assert result.exit_code == 0, result.output
        assert "matches the declared fabric" in result.output
    parsed = TargetsFile.model_validate(gnmic)
    first = parsed.targets[0]
    assert first.gnmi.credentials is not None and first.gnmi.credentials.username == "admin"
    assert first.timeouts.rpc_s == 5.0


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"address": "10.0.0.1:57400", "skip-verify": True}, "skip-verify"),
        ({"address": "10.0.0.1:57400"}, "tls-ca"),
        ({"address": "10.0.0.1:99999", "insecure": True}, "not a TCP port"),
        ({"address": "10.0.0.1", "insecure": True, "colour": "red"}, "colour"),
        ({"address": "10.0.0.1", "insecure": True, "encoding": "proto"}, "encoding"),
    ],
)
def test_gnmic_file_errors_name_the_field(
    tmp_path: Path, entry: dict[str, Any], words: str
) -> None:
    targets = _write(tmp_path / "gnmic.yaml", {"targets": {"spine1": entry}})
    result = runner.invoke(discover_app, ["--targets", str(targets)])
    assert result.exit_code == 2, result.output
    assert "targets.spine1" in result.output and words in result.output


def test_one_malformed_neighbor_costs_that_neighbor() -> None:
    tree = OcTree()
    good = {"id": "1", "state": {"system-name": "spine-00", "port-id": "Ethernet1"}}
    bad = {"id": "2", "state": {"port-id": "Ethernet2"}}  # no system-name
    tree.add(
        [("openconfig-lldp:lldp", {})],
        {
            "interfaces": {
                "interface": [{"name": "Ethernet3", "neighbors": {"neighbor": [good, bad]}}]
            }
        },
    )
    found, problems = neighbors_of(tree, "leaf-00")
    assert [n.system_name for n in found] == ["spine-00"]
    assert [p.path for p in problems] == [
        "/lldp/interfaces/interface[name=Ethernet3]/neighbors/neighbor[id=2]/state/system-name"
    ]
