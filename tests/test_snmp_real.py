"""The SNMP driver against real agents: net-snmp's snmpd with lldpd as AgentX subagent.

In namespaces the test creates (198.18.0.0/15, no route out): IF-MIB (names, ifIndex, MAC,
oper-status), IP-MIB (the switch's interface and loopback addresses) and LLDP-MIB (a host
running lldpd with default settings: MAC port-id, interface name as description) must read
as the kernel and lldpd say, over v2c and v3 (SHA-256/AES); without lldpd, the missing
LLDP-MIB must be a named problem. Expected values come from the kernel (``ip link``), never
from c4p.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from pathlib import Path

import pytest
from snmp_netns import COMMUNITY, V3_AUTH, V3_PRIV, V3_USER, SnmpLab, missing, snmp_lab

from southbound.discovery import build_fabric
from southbound.observed import SwitchObservation
from southbound.snmp import SnmpDriver
from southbound.targets import TargetConfig

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))


def _config(lab: SnmpLab, version: str) -> TargetConfig:
    creds: dict[str, object]
    if version == "2c":
        creds = {"version": "2c", "community": COMMUNITY}
    else:
        creds = {
            "version": "3",
            "user": V3_USER,
            "auth_protocol": "sha256",
            "auth_key": V3_AUTH,
            "priv_protocol": "aes128",
            "priv_key": V3_PRIV,
        }
    return TargetConfig.model_validate(
        {
            "name": "leaf-lab",
            "address": str(lab.snmp_addr),
            "driver": "snmp",
            "snmp": {"port": lab.port, "credentials": creds, "retries": 2},
            "timeouts": {"connect_s": 2, "rpc_s": 3},
        }
    )


def _kernel_mac(ns: str, dev: str) -> str:
    out = subprocess.run(
        ["ip", "-j", "netns", "exec", ns, "ip", "-j", "link", "show", dev],
        check=True, capture_output=True, text=True, timeout=20,
    ).stdout  # fmt: skip
    return str(json.loads(out)[0]["address"]).lower()


def _observe_until(config: TargetConfig, done: object, timeout: float = 40) -> SwitchObservation:
    driver = SnmpDriver()
    try:
        session = driver.session(config)
        deadline = time.monotonic() + timeout
        while True:
            try:
                session.open()
                obs = session.observe()
                if done(obs) or time.monotonic() > deadline:  # type: ignore[operator]
                    return obs
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.5)
    finally:
        driver.close()


@pytest.mark.parametrize("version", ["2c", "3"])
def test_snmpd_and_lldpd_read_as_the_kernel_says(version: str, tmp_path: Path) -> None:
    with snmp_lab(tmp_path) as lab:
        obs = _observe_until(_config(lab, version), lambda o: bool(o.neighbors))
        sw_mac = _kernel_mac(lab.sw_ns, lab.sw_if)
        host_mac = _kernel_mac(lab.host_ns, lab.host_if)
    assert obs.hostname == "leaf-lab"
    port = obs.interface(lab.sw_if)
    assert port is not None, [i.name for i in obs.interfaces]
    assert port.oper_status == "UP"
    assert port.if_index is not None and port.mac == sw_mac
    assert ipaddress.IPv4Address(lab.sw_addr) in port.addresses
    lo = obs.interface("lo")
    assert lo is not None and ipaddress.IPv4Address(lab.loopback) in lo.addresses
    assert obs.chassis_id  # lldpLocChassisId, from lldpd
    [neighbor] = obs.neighbors
    assert neighbor.local_interface == lab.sw_if
    assert neighbor.system_name == "host-lab"
    assert neighbor.port_id_type == "MAC_ADDRESS"
    assert neighbor.port_id == host_mac  # lldpd's default port-id on a host
    assert neighbor.port_description == lab.host_if
    assert obs.problems == ()
    # Discovery places the host port by its description, not its MAC.
    result = build_fabric({"leaf-lab": obs})
    if port.speed_gbps:  # veth reports a speed on most kernels
        [link] = result.fabric.links
        assert set(link.ends) == {f"host-lab:{lab.host_if}", f"leaf-lab:{lab.sw_if}"}
    addresses = {str(a.address) for s in result.fabric.switches for a in s.addresses}
    assert {str(lab.sw_addr), str(lab.loopback)} <= addresses


def test_without_lldpd_the_missing_lldp_mib_is_named(tmp_path: Path) -> None:
    with snmp_lab(tmp_path, with_lldpd=False) as lab:
        obs = _observe_until(_config(lab, "2c"), lambda o: bool(o.interfaces), timeout=20)
    assert obs.interface(lab.sw_if) is not None
    assert obs.neighbors == ()
    assert [p.path for p in obs.problems] == ["LLDP-MIB"]
    assert "no LLDP-MIB" in obs.problems[0].reason
    findings = build_fabric({"leaf-lab": obs}).findings
    assert [f.reason for f in findings] == ["answered with no LLDP neighbors"]
