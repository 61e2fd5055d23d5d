"""Discovery against every switch-OS dialect of the emulated gNMI targets, and a mix of them.

Each flavour (``c4p.testing.flavours``) reproduces one OS's documented answer shapes, names,
LLDP port-id subtypes and request rules; discovery must give back the declared fabric from
each of them (hinted and blind), fill every switch's loopback and interface addresses, and
say nothing is wrong. A flavour's request rules are real: a SONiC target refuses a request
without its prefix target, an NX-OS target one without origin ``openconfig``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures_fabric_emulator import FAST, serve_gnmi, small_fabric
from typer.testing import CliRunner

from c4p.cli.discover import discover_app
from c4p.files import save_fabric
from c4p.testing.flavours import SWITCH_OS_FLAVOURS, mixed
from c4p.testing.oc_payloads import with_switch_addresses
from southbound.driver_errors import CapabilityError
from southbound.events import TargetHealth
from southbound.fleet import Fleet
from southbound.gnmi import GnmiSession
from southbound.targets import TargetConfig, TargetsFile
from topology.compare import compare_fabrics
from topology.model import Fabric


def _declared(kind: str = "rail-optimized") -> Fabric:
    return with_switch_addresses(small_fabric(kind))


def _owned(fabric: Fabric) -> dict[str, set[tuple[str, str | None]]]:
    """Each switch's addresses, a loopback's interface (named per OS) as ``None``."""
    return {
        s.name: {
            (str(a.address), None if str(a.interface).lower().startswith("lo") else a.interface)
            for a in s.addresses
        }
        for s in fabric.switches
    }


def _flavours(name: str, fabric: Fabric) -> dict[str, str]:
    names = [s.name for s in fabric.switches]
    return mixed(names) if name == "mixed" else dict.fromkeys(names, name)


def _without(targets: TargetsFile, **cleared: None) -> TargetsFile:
    return targets.model_copy(
        update={
            "targets": tuple(
                t.model_copy(update={"gnmi": t.gnmi.model_copy(update=cleared)})
                for t in targets.targets
            )
        }
    )


@pytest.mark.parametrize("flavour", [*SWITCH_OS_FLAVOURS, "mixed"])
def test_discovery_of_each_flavour_equals_declared(flavour: str) -> None:
    declared = _declared()
    with serve_gnmi(declared, flavours=_flavours(flavour, declared)) as (_, servers):
        targets = servers.targets_file(timeouts=FAST)
        hinted = Fleet(targets, declared=declared).discover()
        blind = Fleet(targets).discover()
    assert hinted.findings == ()
    assert hinted.problems == ()
    assert hinted.fabric == declared
    assert blind.findings == ()
    assert compare_fabrics(declared, blind.fabric).clean
    assert blind.fabric.hosts == declared.hosts
    # Every loopback and link address, for the prober's address book.
    assert _owned(blind.fabric) == _owned(declared)


def test_sonic_refuses_requests_without_its_prefix_target() -> None:
    declared = _declared("leaf-spine")
    with serve_gnmi(declared, flavours="sonic") as (_, servers):
        targets = _without(servers.targets_file(timeouts=FAST), prefix_target=None)
        fleet = Fleet(targets)
        result = fleet.discover(attempts=1)
    for status in fleet.status().values():
        assert status.health is TargetHealth.FAILED
        assert "No target specified in prefix" in status.last_error
    assert result.fabric.links == ()


def test_nxos_needs_origin_and_is_read_in_json() -> None:
    declared = _declared("leaf-spine")
    with serve_gnmi(declared, flavours="nxos") as (_, servers):
        targets = servers.targets_file(timeouts=FAST)
        bare = Fleet(_without(targets, origin=None))
        bare.discover(attempts=1)
        forced = Fleet(
            targets.model_copy(
                update={
                    "targets": tuple(
                        t.model_copy(
                            update={"gnmi": t.gnmi.model_copy(update={"encoding": "json_ietf"})}
                        )
                        for t in targets.targets
                    )
                }
            )
        )
        forced.discover(attempts=1)
    for status in bare.status().values():
        assert status.health is TargetHealth.FAILED  # retrying the same request cannot help
        assert "origin" in status.last_error
    for status in forced.status().values():
        assert status.health is TargetHealth.FAILED
        assert "json_ietf is not offered (offers JSON, PROTO)" in status.last_error


def test_cli_emulate_then_discover(tmp_path: Path) -> None:
    """The README's two commands: serve a fabric as mixed-OS switches, discover it back."""
    fabric_file, targets = tmp_path / "fabric.yaml", tmp_path / "targets.yaml"
    declared = small_fabric("leaf-spine")
    save_fabric(declared, fabric_file)
    log = tmp_path / "emulate.log"
    with log.open("wb") as out:
        serving = subprocess.Popen(
            [sys.executable, "-m", "c4p", "fabric", "emulate", str(fabric_file),
             "--targets", str(targets), "--flavour", "mixed", "--duration", "60"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and serving.poll() is None:
            if "serving" in log.read_text(errors="replace"):  # printed after the file is written
                break
            time.sleep(0.1)
        assert targets.exists(), log.read_text(errors="replace")
        result = CliRunner().invoke(
            discover_app, ["--targets", str(targets), "--compare", str(fabric_file)]
        )
        assert result.exit_code == 0, result.output
        assert "matches the declared fabric" in result.output
    finally:
        serving.terminate()
        serving.wait(10)


def test_no_json_encoding_is_said_clearly() -> None:
    config = _declared_targets_entry()
    session = GnmiSession(config)
    with pytest.raises(CapabilityError, match=r"offers no JSON encoding .*PROTO, ASCII"):
        session._choose_encoding(("PROTO", "ASCII"))
    assert session._choose_encoding(("JSON", "PROTO")) == "JSON"
    assert session._choose_encoding(("JSON_IETF", "JSON")) == "JSON_IETF"
    assert session._choose_encoding(()) == "JSON_IETF"  # lists none: ask in the standard one


def _declared_targets_entry() -> TargetConfig:
    return TargetConfig.model_validate(
        {"name": "sw", "address": "127.0.0.1", "gnmi": {"tls": {"mode": "insecure"}}}
    )
