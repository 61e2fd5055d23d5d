"""gnmic's own target file, read as gnmic reads it (its documentation: docs/user_guide/
targets/targets.md, docs/global_flags.md and docs/user_guide/subscriptions.md of
github.com/openconfig/gnmic), by ``c4p fabric discover`` and ``c4p serve`` alike."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from c4p.service.serve import load_targets
from southbound.targets import FabricSource, TargetsFile

GNMIC_DOC_EXAMPLE: dict[str, Any] = {
    # top-level keys are gnmic's global flags: defaults of every target
    "username": "admin",
    "password": "admin",
    "insecure": True,
    "port": 6030,
    "retry": "10s",
    "token": "abc",
    "tls-min-version": "1.2",
    "metadata": {"x-site": "lab"},
    "subscriptions": {
        "sonic_oc": {"target": "OC-YANG", "paths": ["/interfaces"], "mode": "stream"},
        "named": {"set-target": True, "paths": ["/lldp"]},
        "plain": {"paths": ["/system"]},
    },
    "outputs": {"out": {"type": "file", "file-type": "stdout"}},
    "targets": {
        "leaf1": {"address": "192.0.2.1", "subscriptions": ["sonic_oc"]},
        "leaf2:57401": {
            "timeout": "2s",
            "retry-timer": "5s",
            "buffer-size": 100,
            "subscriptions": ["plain"],
        },
        "spine1": {"address": "192.0.2.3:9339", "subscriptions": ["named"]},
        "spine2": {"address": "192.0.2.4,192.0.2.5", "subscriptions": ["plain"]},
    },
}


def _by_name(data: dict[str, Any]) -> dict[str, Any]:
    return {t.name: t for t in TargetsFile.model_validate(data).targets}


def test_gnmic_keys_and_defaults_as_gnmic_reads_them(caplog: pytest.LogCaptureFixture) -> None:
    """An address without a port gets the top-level ``port`` (else gnmic's 57400); gnmic's
    options c4p does not use are accepted with one warning line naming them; a subscription's
    ``target`` (or ``set-target``) is the request prefix's target."""
    with caplog.at_level(logging.WARNING, logger="c4p.southbound.gnmic"):
        got = _by_name(GNMIC_DOC_EXAMPLE)
    assert got["leaf1"].address == "192.0.2.1" and got["leaf1"].gnmi.port == 6030
    assert got["leaf1"].gnmi.prefix_target == "OC-YANG"
    assert got["leaf2"].gnmi.port == 57401 and got["leaf2"].timeouts.rpc_s == 2.0
    assert got["leaf2"].gnmi.prefix_target is None
    assert got["spine1"].gnmi.port == 9339 and got["spine1"].gnmi.prefix_target == "spine1"
    assert (got["spine2"].address, got["spine2"].gnmi.port) == ("192.0.2.4", 6030)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    for key in ("retry", "token", "tls-min-version", "metadata", "retry-timer", "buffer-size",
                "192.0.2.5"):  # fmt: skip
        assert key in lines[0], lines[0]
    bare = {"targets": {"sw1": {"address": "192.0.2.9", "insecure": True}}}
    assert _by_name(bare)["sw1"].gnmi.port == 57400  # gnmic's default, not IANA's 9339
    keyed = {"insecure": True, "targets": {"192.0.2.8": None, "[2001:2::1]:57777": {"name": "v6"}}}
    assert {(t.name, t.address, t.gnmi.port) for t in _by_name(keyed).values()} == {
        ("192.0.2.8", "192.0.2.8", 57400),
        ("v6", "2001:2::1", 57777),
    }


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"subscriptions": ["nope"]}, "targets.sw1.subscriptions: no subscription 'nope'"),
        ({"address": "unix:///run/gnmi.sock", "subscriptions": ["a"]}, "unix"),
        ({"colour": "red", "subscriptions": ["a"]}, "colour"),
        ({}, "prefix targets 'OC-YANG' .*, 'sw1' .*; c4p sends one"),  # every subscription
        ({"address": "192.0.2.1:99999", "subscriptions": ["a"]}, "sw1.address: port '99999'"),
        ({"PORT": "x", "subscriptions": ["a"]}, "port: 'x' is not a TCP port"),
    ],
)
def test_what_gnmic_would_refuse_is_refused_naming_the_field(
    entry: dict[str, Any], words: str
) -> None:
    top = {"port": entry.pop("PORT")} if "PORT" in entry else {}
    subscriptions = {"a": {"target": "OC-YANG"}, "b": {"set-target": True}}
    data = {"insecure": True, **top, "subscriptions": subscriptions, "targets": {"sw1": entry}}
    with pytest.raises(ValueError, match=words):
        TargetsFile.model_validate(data)


def test_serve_reads_a_gnmic_file_as_discover_does(tmp_path: Path) -> None:
    """``c4p serve``'s ``fabric.targets`` once refused what ``c4p fabric discover`` accepted
    ("unknown gnmic key(s) defaults"): one reader now."""
    path = tmp_path / "gnmic.yaml"
    path.write_text(yaml.safe_dump(GNMIC_DOC_EXAMPLE))
    served = load_targets(FabricSource(source="gnmi", targets=path))
    assert served == TargetsFile.model_validate(GNMIC_DOC_EXAMPLE).anchored(tmp_path)
    c4p_shape = {"targets": [{"name": "s", "address": "192.0.2.1", "gnmi": {"tls": None}}]}
    c4p_shape["targets"][0]["snmp"] = {"credentials": {"version": "2c", "community": "x"}}
    del c4p_shape["targets"][0]["gnmi"]
    path.write_text(yaml.safe_dump(c4p_shape))
    by_source = load_targets(FabricSource(source="snmp", targets=path))  # the source's driver
    assert by_source.targets[0].driver.value == "snmp"


def test_a_target_wanting_a_prefix_target_is_told_which_value() -> None:
    """sonic-gnmi refuses a request without a prefix target ("No target specified in
    prefix"); the error says the value SONiC serves OpenConfig under, in both files' words."""
    from fixtures_fabric_emulator import FAST, serve_gnmi, small_fabric

    from southbound.fleet import Fleet

    declared = small_fabric("leaf-spine")
    with serve_gnmi(declared, flavours="sonic") as (_, servers):
        targets = servers.targets_file(timeouts=FAST)
        bare = targets.model_copy(
            update={
                "targets": tuple(
                    t.model_copy(update={"gnmi": t.gnmi.model_copy(update={"prefix_target": None})})
                    for t in targets.targets
                )
            }
        )
        fleet = Fleet(bare)
        fleet.discover(attempts=1)
    for status in fleet.status().values():
        assert "No target specified in prefix" in status.last_error
        assert "gnmi.prefix_target: OC-YANG" in status.last_error, status.last_error
        assert "subscriptions.<name>.target: OC-YANG" in status.last_error
