"""Building a fabric from observations, the targets file, and ``c4p fabric discover``.

``build_fabric`` is pure, so most rules are checked on observations taken straight from the
emulator (what a perfect driver would see); the CLI runs against real emulated gNMI targets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fixtures_fabric_emulator import serve_gnmi, small_fabric
from pydantic import ValidationError
from typer.testing import CliRunner

from c4p.cli.discover import discover_app
from c4p.files import load_fabric, save_fabric
from c4p.testing.dataplane import FabricEmulator
from southbound.discovery import build_fabric
from southbound.observed import LldpNeighbor, NeighborKind, SwitchObservation
from southbound.targets import TargetsFile, TlsMode, diff_targets
from topology.compare import compare_fabrics
from topology.model import Fabric, LinkStatus

runner = CliRunner()


def observe(emu: FabricEmulator) -> dict[str, SwitchObservation]:
    return {s: emu.observation(s) for s in emu.switches}


# -- build_fabric ---------------------------------------------------------------------------


def test_fail_static_keeps_links_without_lldp() -> None:
    fabric = small_fabric("leaf-spine")
    emu = FabricEmulator(fabric)
    first = build_fabric(observe(emu), declared=None).fabric
    uplink = next(link for link in fabric.links if link.b.startswith("spine"))
    emu.fail_link(uplink.id)  # down: no LLDP neighbor on either end any more
    now = observe(emu)
    forgetful = build_fabric(now)
    assert uplink.id not in {link.id for link in forgetful.fabric.links}
    kept = build_fabric(now, previous=first)
    assert kept.kept_links == 1
    assert kept.fabric.link_by_id(uplink.id).status is LinkStatus.DOWN
    from_declared = build_fabric(now, declared=fabric)
    assert from_declared.fabric.link_by_id(uplink.id).status is LinkStatus.DOWN
    assert compare_fabrics(fabric, from_declared.fabric, statuses=False).clean


def test_drained_comes_from_the_declared_fabric() -> None:
    data = small_fabric("leaf-spine").model_dump()
    data["links"][-1]["status"] = "drained"
    declared = Fabric.model_validate(data)
    result = build_fabric(observe(FabricEmulator(declared)), declared=declared)
    assert result.fabric == declared


def test_parallel_cables_are_bundled_and_odd_neighbors_reported() -> None:
    fabric = small_fabric("leaf-spine")
    obs = observe(FabricEmulator(fabric))
    leaf = obs["leaf-00"]
    switch, host = NeighborKind.SWITCH, NeighborKind.UNKNOWN
    extra = [
        LldpNeighbor(
            local_interface="Ethernet9", system_name="spine-00", port_id="Ethernet9", kind=switch
        ),
        LldpNeighbor(
            local_interface="Ethernet10", system_name="mystery-sw", port_id="e1", kind=switch
        ),
        LldpNeighbor(
            local_interface="Ethernet11", system_name="bad:name", port_id="eth0", kind=host
        ),
    ]
    interfaces = leaf.interfaces + tuple(
        i.model_copy(update={"name": n.local_interface})
        for i, n in zip(leaf.interfaces, extra, strict=False)
    )
    obs["leaf-00"] = leaf.model_copy(
        update={
            "neighbors": leaf.neighbors + tuple(extra),
            "interfaces": interfaces,
            "hostname": "leaf-zero",
        }
    )
    result = build_fabric(obs, declared=fabric)
    bundle = result.fabric.link_by_id("leaf-00--spine-00")
    assert bundle.speed_gbps == 800.0
    reasons = " | ".join(str(p) for p in result.problems)
    assert "bundled" in reasons
    assert "mystery-sw" in reasons and "not a target" in reasons
    assert "bad:name" in reasons
    assert "leaf-zero" in reasons


def test_duplicate_lldp_address_falls_back() -> None:
    fabric = small_fabric("leaf-spine")
    obs = observe(FabricEmulator(fabric))
    leaf = obs["leaf-00"]
    twin = leaf.neighbors[0].mgmt_address
    neighbors = (leaf.neighbors[0], leaf.neighbors[1].model_copy(update={"mgmt_address": twin}))
    obs["leaf-00"] = leaf.model_copy(update={"neighbors": neighbors + leaf.neighbors[2:]})
    result = build_fabric(obs, declared=fabric)
    assert result.fabric == fabric
    assert result.address_sources["declared"] == 1
    assert any("is used by another port" in p.reason for p in result.problems)


def test_roles_planes_and_order_inferred_for_every_kind() -> None:
    for kind in ("leaf-spine", "rail-optimized", "fat-tree", "dual-plane"):
        fabric = small_fabric(kind)
        result = build_fabric(observe(FabricEmulator(fabric)))
        assert [(s.name, s.role, s.plane) for s in result.fabric.switches] == [
            (s.name, s.role, s.plane) for s in fabric.switches
        ], kind
        assert result.fabric.hosts == fabric.hosts, kind


# -- the targets file -----------------------------------------------------------------------

TARGETS = """
defaults:
  gnmi:
    port: 6030
    tls: {mode: mtls, ca_file: pki/ca.pem, cert_file: pki/c.pem, key_file: pki/c.key}
    credentials: {username: c4p, password_env: C4P_TEST_PASSWORD}
  timeouts: {rpc_s: 3}
targets:
  - {name: leaf-00, address: 10.0.0.1}
  - name: leaf-01
    address: 10.0.0.2
    gnmi: {port: 9339, tls: {mode: insecure}}
  - name: old-switch
    address: 10.0.0.3
    driver: snmp
    snmp: {credentials: {version: "2c", community_env: C4P_TEST_COMMUNITY}}
"""


def test_targets_file_defaults_and_anchoring(tmp_path: Path) -> None:
    parsed = TargetsFile.model_validate(yaml.safe_load(TARGETS)).anchored(tmp_path)
    leaf0, leaf1, old = parsed.targets
    assert leaf0.gnmi.port == 6030 and leaf0.timeouts.rpc_s == 3
    assert leaf0.gnmi.tls is not None and leaf0.gnmi.tls.ca_file == tmp_path / "pki/ca.pem"
    assert leaf1.gnmi.port == 9339 and leaf1.gnmi.tls is not None
    assert leaf1.gnmi.tls.mode is TlsMode.INSECURE  # tls replaced whole, not merged
    assert old.driver == "snmp" and leaf0.gnmi.credentials is not None
    assert leaf0.gnmi.credentials.password_env == "C4P_TEST_PASSWORD"


@pytest.mark.parametrize(
    ("patch", "where"),
    [
        ({"targets": [{"name": "x", "address": "a"}]}, "needs gnmi.tls"),
        ({"targets": [{"name": "x", "address": "a", "gnmi": {"tls": {"mode": "tls"}}}]}, "ca_file"),
        ({"targets": [{"name": "x", "address": "a", "driver": "snmp"}]}, "snmp.credentials"),
        (
            {"targets": [{"name": "x:y", "address": "a", "gnmi": {"tls": {"mode": "insecure"}}}]},
            "name",
        ),
        (
            {
                "targets": [
                    {
                        "name": "x",
                        "address": "a",
                        "gnmi": {"tls": {"mode": "insecure"}, "colour": 1},
                    }
                ]
            },
            "colour",
        ),
        (
            {"targets": [{"name": "x", "address": "a", "gnmi": {"tls": {"mode": "insecure"}}}] * 2},
            "duplicate",
        ),
    ],
)
def test_targets_file_errors_name_the_field(patch: dict[str, object], where: str) -> None:
    with pytest.raises(ValidationError) as info:
        TargetsFile.model_validate(patch)
    assert where in str(info.value)


def test_diff_targets() -> None:
    old = TargetsFile.model_validate(yaml.safe_load(TARGETS)).targets
    new = (old[0].model_copy(update={"address": "10.0.0.9"}), old[2])
    diff = diff_targets(old, new)
    assert (diff.added, diff.removed, diff.changed, diff.unchanged) == (
        (),
        ("leaf-01",),
        ("leaf-00",),
        ("old-switch",),
    )
    assert diff_targets(old, old).empty


# -- c4p fabric discover --------------------------------------------------------------------


def test_cli_discovers_writes_and_finds_a_swapped_pair(tmp_path: Path) -> None:
    declared = small_fabric("rail-optimized")
    with serve_gnmi(declared) as (_, servers):
        targets = tmp_path / "targets.yaml"
        targets.write_text(
            yaml.safe_dump(servers.targets_file().model_dump(mode="json", exclude_defaults=True))
        )
        good = tmp_path / "declared.yaml"
        save_fabric(declared, good)
        out = tmp_path / "found.yaml"
        result = runner.invoke(
            discover_app, ["--targets", str(targets), "-o", str(out), "--compare", str(good)]
        )
        assert result.exit_code == 0, result.output
        assert "matches the declared fabric" in result.output
        assert load_fabric(out) == declared

        data = declared.model_dump(mode="json")
        data["links"][0]["b"], data["links"][1]["b"] = data["links"][1]["b"], data["links"][0]["b"]
        swapped = tmp_path / "swapped.yaml"
        save_fabric(Fabric.model_validate(data), swapped)
        result = runner.invoke(
            discover_app, ["--targets", str(targets), "--compare", str(swapped), "--json", "-"]
        )
        assert result.exit_code == 1, result.output
        report = json.loads(result.output)
        assert report["comparison"]["clean"] is False
        assert len(report["comparison"]["miswired"]) == 4
        assert len(report["comparison"]["hosts_on_wrong_leaf"]) == 2
        assert all(t["health"] == "live" for t in report["targets"].values())

        servers.kill("spine-01")
        result = runner.invoke(discover_app, ["--targets", str(targets), "--attempts", "1"])
        assert result.exit_code == 1
        assert "stale spine-01" in result.output


def test_cli_refuses_a_bad_targets_file(tmp_path: Path) -> None:
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n  - {name: leaf-00, address: 10.0.0.1, gnmi: {tls: {mode: tls}}}\n"
    )
    result = runner.invoke(discover_app, ["--targets", str(targets)])
    assert result.exit_code == 2
    assert "targets[0].gnmi.tls" in result.output and "ca_file" in result.output
    result = runner.invoke(discover_app, ["--targets", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "no such file" in result.output


def test_example_targets_file_is_valid() -> None:
    example = Path(__file__).parent.parent / "configs" / "targets.example.yaml"
    parsed = TargetsFile.model_validate(yaml.safe_load(example.read_text()))
    assert {t.driver for t in parsed.targets} == {"gnmi", "snmp"}
