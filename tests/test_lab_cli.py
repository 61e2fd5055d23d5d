"""``c4p lab``: bad input is one clear line and exit 2, never a traceback (no root needed for
these: they fail before anything is built); with root, ``up`` then ``down`` leaves nothing."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from typer.testing import CliRunner

from c4p.cli import app
from c4p.lab.netns import existing_namespaces, namespaces_possible, run

runner = CliRunner()
FABRIC = Path(__file__).resolve().parents[1] / "configs" / "leaf-spine.yaml"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["lab", "up", str(FABRIC), "--routing", "ospf"], "--routing: 'ospf'"),
        (["lab", "up", str(FABRIC), "--icmp-from", "mgmt"], "--icmp-from: 'mgmt'"),
        (["lab", "up", "no-such-fabric.yaml"], "no-such-fabric.yaml"),
        (["lab", "demo", "--routing", "rip"], "--routing: 'rip'"),
        (["lab", "demo", "--qps", "0"], "--qps: 0 is not between 1 and 16"),
        (["lab", "up", str(FABRIC), "--hash-policy", "2"], "--hash-policy: 2 is not one of"),
        (["lab", "demo", "--hash-policy", "4"], "--hash-policy: 4 is not one of 0, 1, 3"),
        (["lab", "up", str(FABRIC), "--family", "5"], "--family: 5 is not 4 or 6"),
        (["lab", "up", str(FABRIC), "--family", "6", "--routing", "bgp"], "--family: 6 is built"),
        (["lab", "down", "nosuch", "--state-dir", "."], "token: no lab 'nosuch'"),
        (["lab", "detect", "--routing", "rip"], "--routing: 'rip'"),
        (["lab", "detect", "--scenario", "meteor"], "--scenario: 'meteor' is not one of"),
        (["lab", "detect", "--window", "1"], "--window: 1.0 is not between 5 and 120"),
        (["lab", "detect", "--hash-policy", "2"], "--hash-policy: 2 is not one of"),
    ],
)
def test_bad_lab_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


@pytest.mark.lab
@pytest.mark.skipif(namespaces_possible() is not None, reason=f"lab: {namespaces_possible()}")
def test_lab_up_then_down_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "labs"
    args = ["lab", "up", str(FABRIC), "--state-dir", str(state), "--hash-policy", "3"]
    up = runner.invoke(app, args)
    try:
        assert up.exit_code == 0, up.output
        assert "hash policy 3" in up.output
        token = next(p.name for p in state.iterdir())
        mine = [ns for ns in existing_namespaces() if ns.startswith(f"c4p-{token}-")]
        assert len(mine) == 6 + 16  # 4 leaves + 2 spines, 16 hosts
        policy = run(
            ["sysctl", "-n", "net.ipv4.fib_multipath_hash_policy"], ns=f"c4p-{token}-spine-00"
        )
        assert policy.strip() == "3"
    finally:
        down = runner.invoke(app, ["lab", "down", "--state-dir", str(state)])
    assert down.exit_code == 0, down.output
    assert not [ns for ns in existing_namespaces() if ns.startswith(f"c4p-{token}-")]
    assert not list(state.iterdir())


def test_a_lab_refuses_what_it_does_not_build() -> None:
    from c4p.lab.addressing import LabError, as_ipv4, as_ipv6
    from c4p.lab.build import Lab
    from c4p.lab.demo import small_fabric

    with pytest.raises(LabError, match="family: 6 is built with static routing"):
        Lab(small_fabric(), family=6, routing="bgp")
    with pytest.raises(LabError, match="family: 5 is not 4 or 6"):
        Lab(small_fabric(), family=5)
    with pytest.raises(LabError, match="hash_policy: 2 is not one of 0, 1, 3"):
        Lab(small_fabric(), hash_policy=2)
    # IPv6 twins of lab addresses, in 2001:2::/48, and back.
    loop, link = ipaddress.IPv4Address("198.18.0.3"), ipaddress.IPv4Address("198.19.1.14")
    assert str(as_ipv6(loop)) == "2001:2:0:18::3" and str(as_ipv6(link)) == "2001:2:0:19::10e"
    assert as_ipv4(as_ipv6(loop)) == loop and as_ipv4(as_ipv6(link)) == link
    with pytest.raises(LabError, match="not a lab address"):
        as_ipv6(ipaddress.IPv4Address("10.0.0.1"))
    with pytest.raises(LabError, match="not a lab IPv6 address"):
        as_ipv4(ipaddress.IPv6Address("2001:db8::1"))
