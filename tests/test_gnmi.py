"""The gNMI driver against emulated gNMI targets (real gRPC on 127.0.0.1, no mocks).

Discovery of every fabric kind must give back the declared fabric (insecure, TLS, mTLS);
a link failed in the emulator must reach the driver as a ``LinkEvent``; counters must become
link loads; a killed or slow target is marked stale and its links are kept; malformed
answers are reported with target and path and never stop the driver.
"""

from __future__ import annotations

import time

import pytest
from fixtures_fabric_emulator import FAST, link_ids, pki, serve_gnmi, small_fabric, watching

from c4p.testing.certs import Pki
from southbound.events import LinkEvent, LinkLoad, TargetEvent, TargetHealth
from southbound.fleet import Fleet
from southbound.gnmi import GnmiSession
from southbound.observed import Problem
from southbound.targets import TargetsFile, TlsMode
from topology.compare import compare_fabrics
from topology.model import LinkStatus

__all__ = ["pki"]  # the fixture, imported for pytest


@pytest.mark.parametrize("kind", ["leaf-spine", "rail-optimized", "fat-tree", "dual-plane"])
def test_discovery_equals_declared(kind: str) -> None:
    declared = small_fabric(kind)
    with serve_gnmi(declared) as (_, servers):
        targets = servers.targets_file(timeouts=FAST)
        hinted = Fleet(targets, declared=declared).discover()
        blind = Fleet(targets).discover()
    assert hinted.fabric == declared
    assert hinted.problems == ()
    # Without the declared file: the same cabling, speeds, hosts, roles and planes.
    assert compare_fabrics(declared, blind.fabric).clean
    assert blind.fabric.hosts == declared.hosts
    assert [(s.name, s.role, s.plane) for s in blind.fabric.switches] == [
        (s.name, s.role, s.plane) for s in declared.switches
    ]
    ports = sum(1 for _ in declared.nic_ports())
    assert blind.address_sources == {"lldp": ports}
    assert blind.role_sources == {"inferred": len(declared.switches)}


@pytest.mark.parametrize("mode", [TlsMode.TLS, TlsMode.MTLS])
def test_discovery_over_tls(mode: TlsMode, pki: Pki) -> None:
    declared = small_fabric("rail-optimized")
    with serve_gnmi(declared, pki=pki, mutual_tls=mode is TlsMode.MTLS) as (_, servers):
        targets = servers.targets_file(tls=pki.client_tls(mode), timeouts=FAST)
        result = Fleet(targets, declared=declared).discover()
    assert result.fabric == declared


@pytest.mark.parametrize(
    ("server_mtls", "client_mode", "foreign_ca", "words"),
    [
        (False, TlsMode.TLS, True, "certificate was refused"),
        (True, TlsMode.TLS, False, "client certificate"),
        (False, TlsMode.INSECURE, False, "plaintext client meeting a TLS server"),
    ],
    ids=["untrusted-server", "no-client-cert", "plaintext-to-tls"],
)
def test_tls_mismatch_is_refused(
    server_mtls: bool, client_mode: TlsMode, foreign_ca: bool, words: str, pki: Pki
) -> None:
    """A refused certificate or a plaintext client meeting a TLS server is *failed* with the
    reason in so many words (retrying cannot help), never left stale."""
    fabric = small_fabric("leaf-spine")
    with serve_gnmi(fabric, pki=pki, mutual_tls=server_mtls) as (_, servers):
        tls = pki.client_tls(client_mode, foreign_ca=foreign_ca)
        fleet = Fleet(servers.targets_file(tls=tls, timeouts=FAST))
        result = fleet.discover(attempts=1)
    status = fleet.status()
    for s in status.values():
        assert s.last_error, s
        assert s.health is TargetHealth.FAILED, s
        assert words in s.last_error, s.last_error
    assert result.fabric.links == ()
    assert set(result.unreached_targets) == {s.name for s in fabric.switches}


def test_tls_client_meeting_a_plaintext_server_says_so(pki: Pki) -> None:
    with serve_gnmi(small_fabric("leaf-spine")) as (_, servers):
        fleet = Fleet(servers.targets_file(tls=pki.client_tls(TlsMode.TLS), timeouts=FAST))
        fleet.discover(attempts=1)
    for s in fleet.status().values():
        assert s.health is TargetHealth.FAILED, s
        assert "TLS client meeting a plaintext server" in s.last_error


def test_credentials_are_checked() -> None:
    fabric = small_fabric("leaf-spine")
    with serve_gnmi(fabric, credentials=("c4p", "s3cret")) as (_, servers):
        good = Fleet(servers.targets_file(credentials=("c4p", "s3cret"), timeouts=FAST))
        assert compare_fabrics(fabric, good.discover().fabric).clean
        bad = Fleet(servers.targets_file(credentials=("c4p", "wrong"), timeouts=FAST))
        bad.discover(attempts=3)
    for status in bad.status().values():
        assert status.health is TargetHealth.FAILED  # not retried as if it were transient
        assert status.failures == 1
        assert "refused" in status.last_error


def test_link_failure_reaches_the_driver_as_an_event(
    record_property: pytest.RecordProperty,
) -> None:
    fabric = small_fabric("rail-optimized")
    uplink = next(link for link in fabric.links if link.b.startswith("spine"))
    host_link = fabric.links[0]
    with (
        serve_gnmi(fabric) as (emu, servers),
        watching(servers.targets_file(timeouts=FAST), declared=fabric) as (fleet, events),
    ):
        latencies = []
        for link in (uplink, host_link):
            before = time.time()
            emu.fail_link(link.id)
            event = events.wait_for(
                lambda e, i=link.id: isinstance(e, LinkEvent) and e.link_id == i, 30
            )
            assert isinstance(event, LinkEvent), f"no event for {link.id}"
            assert event.status is LinkStatus.DOWN
            assert event.at > 0
            latencies.append(event.received - before)
            assert fleet.snapshot().fabric.link_by_id(link.id).status is LinkStatus.DOWN
            emu.restore_link(link.id)
            event = events.wait_for(
                lambda e, i=link.id: isinstance(e, LinkEvent) and e.link_id == i, 30
            )
            assert isinstance(event, LinkEvent), f"no up event for {link.id}"
            assert event.status is LinkStatus.UP
        assert fleet.snapshot().fabric == fabric
    record_property("link_down_to_event_ms", [round(x * 1000, 2) for x in latencies])
    print(f"link-down-to-event latency: {[f'{x * 1000:.1f} ms' for x in latencies]}")


def test_counters_become_link_loads() -> None:
    fabric = small_fabric("leaf-spine")
    link = next(link for link in fabric.links if link.b.startswith("spine"))
    with serve_gnmi(fabric, numbers_from=["leaf-00"]) as (emu, servers):  # numbers and strings
        emu.set_link_load(link.id, 100.0, 40.0, errors_per_s=5.0, ecn_marks_per_s=200.0)
        targets = servers.targets_file(sample_interval_s=0.2, timeouts=FAST)
        with watching(targets, declared=fabric) as (fleet, _):
            expected = {"ab": 100 / 400, "ba": 40 / 400, "errors": 10.0, "ecn": 400.0}

            def seen(load: LinkLoad | None) -> dict[str, float]:
                if load is None:
                    return {}
                return {
                    "ab": load.utilization_ab or 0.0,
                    "ba": load.utilization_ba or 0.0,
                    "errors": load.errors_per_s,  # 5/s received at each end
                    "ecn": load.ecn_marks_per_s,  # 200/s sent at each end
                }

            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                got = seen(fleet.link_loads().get(link.id))
                if got and all(got[k] == pytest.approx(v, rel=0.1) for k, v in expected.items()):
                    break
                time.sleep(0.1)
            assert got == pytest.approx(expected, rel=0.1)


def test_killed_target_is_stale_and_its_links_are_kept() -> None:
    fabric = small_fabric("rail-optimized")
    with (
        serve_gnmi(fabric) as (_, servers),
        watching(servers.targets_file(timeouts=FAST), declared=fabric) as (fleet, events),
    ):
        events.drain()
        servers.kill("spine-00")
        event = events.wait_for(lambda e: isinstance(e, TargetEvent), 30)
        assert isinstance(event, TargetEvent)
        assert (event.target, event.health) == ("spine-00", TargetHealth.STALE)
        assert "UNAVAILABLE" in event.reason
        snapshot = fleet.snapshot()
        assert snapshot.stale_targets == ("spine-00",)
        assert link_ids(snapshot.fabric) == link_ids(fabric)  # fail-static
        assert snapshot.fabric == fabric
        deadline = time.monotonic() + 10  # a few failed retries
        while fleet.status()["spine-00"].failures < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fleet.status()["spine-00"].failures >= 2
        servers.revive("spine-00")
        event = events.wait_for(lambda e: isinstance(e, TargetEvent), 30)
        assert isinstance(event, TargetEvent) and event.health is TargetHealth.LIVE


def test_slow_target_is_stale_and_the_rest_is_discovered() -> None:
    fabric = small_fabric("leaf-spine")
    with serve_gnmi(fabric) as (emu, servers):
        emu.set_delay("spine-01", 30.0)
        # Only the slow spine has the short deadline: a healthy switch answering in over 0.3 s
        # on a loaded machine must not count as unreached.
        data = servers.targets_file(timeouts=FAST).model_dump()
        for target in data["targets"]:
            if target["name"] == "spine-01":
                target["timeouts"]["rpc_s"] = 0.3
        fleet = Fleet(TargetsFile.model_validate(data))
        started = time.monotonic()
        result = fleet.discover(attempts=2)
        elapsed = time.monotonic() - started
    status = fleet.status()
    assert status["spine-01"].health is TargetHealth.STALE
    assert "no answer" in status["spine-01"].last_error
    assert status["spine-01"].failures == 2
    assert result.unreached_targets == ("spine-01",)
    assert elapsed < 15.0  # bounded by the deadline (2 x 0.3 s and retries), not the target
    # Links to the slow spine are still seen from the leaves' side.
    assert link_ids(result.fabric) == link_ids(fabric)


def test_malformed_answers_are_reported_with_target_and_path() -> None:
    fabric = small_fabric("leaf-spine")
    with serve_gnmi(fabric) as (emu, servers):
        emu.set_leaf(
            "leaf-00", "/interfaces/interface[name=Ethernet1]/state/oper-status", "SIDEWAYS"
        )
        emu.set_leaf(
            "leaf-01", "/interfaces/interface[name=Ethernet2]/state/counters/in-octets", "12x"
        )
        emu.set_raw("spine-00", "/lldp", b"{not json")
        emu.set_leaf("spine-01", "/lldp/interfaces/interface[name=Ethernet1]/neighbors", [1, 2])
        result = Fleet(servers.targets_file(timeouts=FAST)).discover()
        found = {(p.target, p.path) for p in result.problems}
        assert ("leaf-00", "/interfaces/interface[name=Ethernet1]/state/oper-status") in found
        assert (
            "leaf-01",
            "/interfaces/interface[name=Ethernet2]/state/counters/in-octets",
        ) in found
        assert ("spine-00", "/lldp") in found
        assert any(
            t == "spine-01" and p.startswith("/lldp/interfaces/interface[name=Ethernet1]")
            for t, p in found
        )
        assert all(p.reason for p in result.problems)
        # Everything else was used: leaf-01 and the spines' other interfaces still give links.
        assert len(result.fabric.links) >= len(fabric.links) - 2

        # While watching: a garbage status streams in as a problem event; the session lives on.
        emu.clear_faults()
        with watching(servers.targets_file(timeouts=FAST), declared=fabric) as (fleet, events):
            emu.set_leaf("leaf-01", "/interfaces/interface[name=Ethernet1]/state/oper-status", 42)
            event = events.wait_for(lambda e: isinstance(e, Problem) and e.target == "leaf-01", 30)
            assert isinstance(event, Problem)
            assert event.path == "/interfaces/interface[name=Ethernet1]/state/oper-status"
            emu.clear_faults("leaf-01")
            emu.fail_link("leaf-01:Ethernet1")
            down = events.wait_for(lambda e: isinstance(e, LinkEvent), 30)
            assert isinstance(down, LinkEvent) and down.status is LinkStatus.DOWN
            assert fleet.status()["leaf-01"].health is TargetHealth.LIVE


def test_addresses_when_hosts_do_not_advertise_them() -> None:
    declared = small_fabric("dual-plane")
    ports = sum(1 for _ in declared.nic_ports())
    with serve_gnmi(declared, advertise_addresses=False) as (_, servers):
        targets = servers.targets_file(timeouts=FAST)
        from_declared = Fleet(targets, declared=declared).discover()
        from_plan = Fleet(targets).discover()
    assert from_declared.address_sources == {"declared": ports}
    assert from_declared.fabric == declared
    assert from_plan.address_sources == {"plan": ports}
    # The default address plan is the generators' own, so the addresses agree.
    assert compare_fabrics(declared, from_plan.fabric).clean


def test_session_reports_capabilities_and_stream_ends_on_cancel() -> None:
    fabric = small_fabric("leaf-spine")
    with serve_gnmi(fabric) as (_, servers):
        session = GnmiSession(servers.targets_file(timeouts=FAST).targets[0])
        try:
            caps = session.open()
            assert "JSON_IETF" in caps.encodings and caps.has_qos
            assert "openconfig-lldp" in caps.models
            session.cancel()
            session.watch(lambda update: None)  # returns at once: cancelled before it began
        finally:
            session.close()
