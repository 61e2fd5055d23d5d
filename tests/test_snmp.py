"""The SNMP driver against a real agent (snmpsim on 127.0.0.1, one process for all switches).

SNMPv2c and SNMPv3 authPriv discovery must give back the declared fabric; polling must turn
advancing IF-MIB counters into link loads and a changed ifOperStatus into a ``LinkEvent``;
an agent that does not know us is reported (stale or failed), never hangs the driver.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_fabric_emulator import FAST, serve_snmp, small_fabric, watching

from c4p.testing.dataplane import FabricEmulator
from c4p.testing.snmp_agent import SnmpAgent, snmprec
from southbound.events import LinkEvent, TargetHealth
from southbound.fleet import Fleet
from southbound.observed import OperChange
from southbound.snmp import SnmpDriver
from southbound.targets import SnmpV2c, SnmpV3
from topology.compare import compare_fabrics
from topology.model import Fabric, LinkStatus


@pytest.fixture(scope="module")
def rail(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Fabric, FabricEmulator, SnmpAgent]]:
    fabric = small_fabric("rail-optimized")
    with serve_snmp(fabric, tmp_path_factory.mktemp("snmp-rail")) as (emu, agent):
        yield fabric, emu, agent


@pytest.mark.parametrize("version", ["2c", "3"])
def test_discovery_equals_declared(
    version: str, rail: tuple[Fabric, FabricEmulator, SnmpAgent]
) -> None:
    fabric, _, agent = rail
    targets = agent.targets_file(version=version, timeouts=FAST)
    creds = targets.targets[0].snmp.credentials
    assert isinstance(creds, SnmpV2c if version == "2c" else SnmpV3)
    hinted = Fleet(targets, declared=fabric).discover()
    blind = Fleet(targets).discover()
    assert hinted.fabric == fabric
    assert hinted.problems == ()
    assert compare_fabrics(fabric, blind.fabric).clean
    assert blind.fabric.hosts == fabric.hosts
    assert blind.address_sources == {"lldp": sum(1 for _ in fabric.nic_ports())}


@pytest.mark.parametrize("kind", ["fat-tree", "dual-plane"])
def test_other_kinds(kind: str, tmp_path: Path) -> None:
    fabric = small_fabric(kind)
    with serve_snmp(fabric, tmp_path) as (_, agent):
        result = Fleet(agent.targets_file(timeouts=FAST)).discover()
    assert compare_fabrics(fabric, result.fabric).clean
    assert [(s.name, s.role, s.plane) for s in result.fabric.switches] == [
        (s.name, s.role, s.plane) for s in fabric.switches
    ]


def test_lldp_ports_are_mapped_through_lldp_loc_port_id(
    rail: tuple[Fabric, FabricEmulator, SnmpAgent],
) -> None:
    fabric, emu, agent = rail
    text = snmprec(emu, "leaf-su00-r0")
    # The agent numbers LLDP ports ifIndex + 1000, so a driver that used ifIndex would fail.
    assert "1.0.8802.1.1.2.1.3.7.1.3.1001|4|Ethernet1" in text
    config = agent.targets_file(timeouts=FAST).by_name()["leaf-su00-r0"]
    driver = SnmpDriver()
    try:
        session = driver.session(config)
        assert session.open() == "leaf-su00-r0"
        obs = session.observe()
    finally:
        driver.close()
    by_interface = {n.local_interface: n for n in obs.neighbors}
    assert by_interface["Ethernet1"].system_name == "h0000"
    assert by_interface["Ethernet1"].port_id == "nic0p0"
    assert str(by_interface["Ethernet1"].mgmt_address) == str(
        fabric.hosts[0].nics[0].ports[0].address
    )
    assert {i.speed_gbps for i in obs.interfaces} == {400.0}
    assert all(c.in_octets is not None and c.in_octets > 2**32 for c in obs.counters.values())


class _TornAgent(SnmpAgent):
    """Serves one LLDP remote row without its port-id subtype, and one interface without its
    ifOperStatus: what a walk sees of a row that arrived between the walks of two columns."""

    DROPPED = ("1.0.8802.1.1.2.1.4.1.1.6.0.1001.1|", "1.3.6.1.2.1.2.2.1.8.2|")

    def write(self) -> None:
        super().write()
        path = self.data_dir / "leaf-su00-r0.snmprec"
        lines = path.read_text().splitlines(keepends=True)
        torn = [x for x in lines if x.startswith(self.DROPPED)]
        assert len(torn) == len(self.DROPPED)
        path.write_text("".join(x for x in lines if x not in torn))


def test_a_torn_lldp_row_or_interface_is_named_and_never_taken_for_news(tmp_path: Path) -> None:
    fabric = small_fabric("rail-optimized")
    emu = FabricEmulator(fabric)
    with _TornAgent(emu, tmp_path, switches=("leaf-su00-r0",)) as agent:
        config = agent.targets_file(timeouts=FAST).by_name()["leaf-su00-r0"]
        driver = SnmpDriver()
        try:
            session = driver.session(config)
            session.open()
            obs = session.observe()
            polled = session.poll()
        finally:
            driver.close()
    whole = {n.local_interface for n in emu.neighbors("leaf-su00-r0")}
    assert {"Ethernet1", "Ethernet2"} <= whole
    assert {n.local_interface for n in obs.neighbors} == whole - {"Ethernet1"}
    assert all(n.port_id_type == "INTERFACE_NAME" for n in obs.neighbors)
    oper, lldp = obs.problems  # interfaces are read before neighbours
    assert lldp.path == "lldpRemTable.0.1001.1"
    assert "no lldpRemPortIdSubtype" in lldp.reason
    assert oper.path == "ifOperStatus.2" and "Ethernet2" in oper.reason
    states = {i.name: i.oper_status for i in obs.interfaces}
    assert states["Ethernet2"] == "UNKNOWN"
    assert {states[n] for n in whole - {"Ethernet2"}} == {"UP"}
    # A poll says nothing of the interface it read torn, and the truth of the others.
    changes = {u.interface: u.oper_status for u in polled if isinstance(u, OperChange)}
    assert "Ethernet2" not in changes
    assert {changes[n] for n in whole - {"Ethernet2"}} == {"UP"}


def test_unknown_community_and_wrong_key(rail: tuple[Fabric, FabricEmulator, SnmpAgent]) -> None:
    _, _, agent = rail
    fast = FAST.model_copy(update={"rpc_s": 0.5})
    v2 = agent.targets_file(timeouts=fast, switches=("spine-00",))
    data = v2.model_dump()
    data["targets"][0]["snmp"]["credentials"] = {"version": "2c", "community": "no-such-switch"}
    nobody = Fleet(type(v2).model_validate(data))
    started = time.monotonic()
    nobody.discover(attempts=1)
    # Liveness, not speed: an agent that never answers must not hold discovery forever (the
    # deadlines are 0.5 s per request); the bound is generous so a loaded machine passes.
    assert time.monotonic() - started < 60
    assert nobody.status()["spine-00"].health is TargetHealth.STALE

    v3 = agent.targets_file(version="3", timeouts=fast, switches=("spine-00",)).model_dump()
    v3["targets"][0]["snmp"]["credentials"]["auth_key"] = "not-the-key"
    wrong = Fleet(type(v2).model_validate(v3))
    wrong.discover(attempts=2)
    status = wrong.status()["spine-00"]
    assert status.health is TargetHealth.FAILED, status
    assert status.failures == 1


def test_polling_gives_loads_and_link_events(tmp_path: Path) -> None:
    fabric = small_fabric("leaf-spine")
    uplink = next(link for link in fabric.links if link.b.startswith("spine"))
    emu = FabricEmulator(fabric)
    emu.set_link_load(uplink.id, 200.0, 100.0)
    agent = SnmpAgent(emu, tmp_path)
    try:
        agent.start()
        targets = agent.targets_file(poll_interval_s=0.5, timeouts=FAST)
        with watching(targets, declared=fabric) as (fleet, events):
            # Until a rate within tolerance (bounded): one rate is two samples 0.5 s apart,
            # stamped on arrival, so a late answer on a loaded machine skews one reading.
            deadline = time.monotonic() + 15
            load = None
            while time.monotonic() < deadline:
                time.sleep(0.2)
                load = fleet.link_loads().get(uplink.id)
                if load is not None and (load.utilization_ab, load.utilization_ba) == (
                    pytest.approx(0.5, rel=0.15),
                    pytest.approx(0.25, rel=0.15),
                ):
                    break
            assert load is not None
            assert load.utilization_ab == pytest.approx(0.5, rel=0.15)
            assert load.utilization_ba == pytest.approx(0.25, rel=0.15)

            events.drain()
            emu.fail_link(uplink.id)
            agent.refresh()  # the agent restarts with the link down (same port)
            down = events.wait_for(
                lambda e: isinstance(e, LinkEvent) and e.link_id == uplink.id, 20
            )
            assert isinstance(down, LinkEvent) and down.status is LinkStatus.DOWN
            assert fleet.snapshot().fabric.link_by_id(uplink.id).status is LinkStatus.DOWN
    finally:
        agent.stop()
