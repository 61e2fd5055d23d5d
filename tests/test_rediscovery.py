"""Wiring that changes under a running controller, and a discovery not to be served.

Against real emulated gNMI targets: a re-cabled pair (both ends' LLDP agree on the new wiring)
is a wiring change, reported to the controller as the old links going down plus a ``wiring``
key for the decision log; a round in which most switches answer with nothing is held as
suspect and changes nothing; ``c4p serve`` refuses to start from a discovery that found no
links, and logs target transitions and link events.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from fixtures_fabric_emulator import FAST, serve_gnmi, small_fabric
from prometheus_client import CollectorRegistry
from service_cases import clients, wait_until
from test_serve_discovery import FABRIC, config_with

from c4p.controller.triggers import Key, KeyKind
from c4p.files import save_fabric, save_model
from c4p.service.embedded import EmbeddedService
from c4p.service.fabric_watch import FabricWatch
from southbound.events import LinkEvent, TargetEvent, TargetHealth
from southbound.fleet import Fleet
from southbound.observed import Problem
from southbound.rediscovery import judge, wiring_change
from topology.errors import FabricFileError
from topology.model import LinkStatus


def _recable(emu: object, fabric_links: list[tuple[str, str]]) -> None:
    """Swap the far ends of two leaf uplinks, as LLDP on all four ends then reports."""
    (leaf_a, spine_a), (leaf_b, spine_b) = fabric_links
    for leaf, spine in ((leaf_a, spine_b), (leaf_b, spine_a)):
        lsw, lif = leaf.split(":")
        ssw, sif = spine.split(":")
        base = f"/lldp/interfaces/interface[name={lif}]/neighbors/neighbor[id=1]/state"
        emu.set_leaf(lsw, f"{base}/system-name", ssw)  # type: ignore[attr-defined]
        emu.set_leaf(lsw, f"{base}/port-id", sif)  # type: ignore[attr-defined]
        back = f"/lldp/interfaces/interface[name={sif}]/neighbors/neighbor[id=1]/state"
        emu.set_leaf(ssw, f"{back}/system-name", lsw)  # type: ignore[attr-defined]
        emu.set_leaf(ssw, f"{back}/port-id", lif)  # type: ignore[attr-defined]


def test_a_recabling_is_a_wiring_change_and_an_outage_is_suspect() -> None:
    declared = small_fabric("leaf-spine")
    uplinks = [
        link for link in declared.links if link.a.startswith("leaf-00") and "spine" in link.b
    ][:2]
    assert len(uplinks) == 2 and uplinks[0].b.split(":")[0] != uplinks[1].b.split(":")[0]
    links: list[LinkEvent] = []
    keys: list[Key] = []
    with serve_gnmi(declared) as (emu, servers):
        fleet = Fleet(servers.targets_file(timeouts=FAST), declared=declared)
        first = fleet.discover()
        assert first.fabric == declared
        watch = FabricWatch(
            fleet,
            first.fabric,
            CollectorRegistry(),
            observe_link=links.append,
            enqueue=keys.append,
            clock=time.time,
        )
        assert watch.rediscover() == "unchanged"
        _recable(emu, [(uplinks[0].a, uplinks[0].b), (uplinks[1].a, uplinks[1].b)])
        fleet.discover()
        assert watch.rediscover() == "changed"
        assert {e.link_id for e in links} == {u.id for u in uplinks}
        assert all(e.status is LinkStatus.DOWN for e in links)
        assert [k.kind for k in keys] == [KeyKind.WIRING]
        assert "2 link(s) gone" in keys[0].detail and "2 link(s) new" in keys[0].detail
        # Most switches answer, but with nothing (an agent restarting, a broken collector):
        # the snapshot is held as suspect and nothing is reported to the controller.
        emu.set_raws(emu.switches, {"/interfaces": b"{}", "/lldp": b"{}"})
        fleet.discover()
        assert watch.rediscover() == "suspect"
        assert len(links) == 2 and len(keys) == 1
        assert watch.suspect._value.get() == 1  # noqa: SLF001 (the gauge's value)


def test_judge_and_diff_are_pure() -> None:
    fabric = small_fabric("leaf-spine")
    assert wiring_change(fabric, fabric).empty
    half = fabric.model_copy(update={"links": fabric.links[: len(fabric.links) // 3]})
    assert not judge(fabric, half).accepted
    assert "held as suspect" in judge(fabric, half).reason
    assert judge(fabric, fabric).accepted


def test_a_switch_answering_with_none_of_its_links_is_suspect() -> None:
    """A partial outage: most of the fabric stays, but one switch's answer is empty. Taking
    it would pull every cable of that switch (host links too), so it is held as suspect."""
    fabric = small_fabric("leaf-spine")
    leaf = fabric.switches[0].name
    stripped = tuple(
        link for link in fabric.links if leaf not in (e.split(":")[0] for e in link.ends)
    )
    assert len(stripped) >= len(fabric.links) / 2  # the fraction rule alone would accept it
    verdict = judge(fabric, fabric.model_copy(update={"links": stripped}))
    assert not verdict.accepted
    assert f"({leaf})" in verdict.reason and "held as suspect" in verdict.reason
    # A switch that listed LLDP neighbours and lists none now holds the round, even where
    # its links survive through the other ends' answers (here: the very same fabric).
    silent = judge(fabric, fabric, fell_silent=[leaf])
    assert not silent.accepted and leaf in silent.reason and "no LLDP neighbours" in silent.reason
    # A real recabling keeps every switch cabled: one uplink gone is a change, not suspect.
    one_less = tuple(link for link in fabric.links if link.id != stripped[-1].id)
    assert judge(fabric, fabric.model_copy(update={"links": one_less})).accepted


def test_serve_refuses_an_empty_discovery_and_logs_transitions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    declared = small_fabric("leaf-spine")
    with serve_gnmi(declared) as (emu, servers):
        targets = tmp_path / "targets.yaml"
        save_model(servers.targets_file(sample_interval_s=0.2, timeouts=FAST), targets)
        for switch in emu.switches:
            emu.set_raw(switch, "/lldp", b"{}")
        fabric = {"source": "gnmi", "targets": str(targets), "rediscover_s": 0.2}
        with pytest.raises(FabricFileError, match="found no links"):
            EmbeddedService(config_with(tmp_path, fabric)).start()
        emu.clear_faults()
        service = EmbeddedService(config_with(tmp_path, fabric))
        caplog.set_level(logging.INFO, logger="c4p.discovery")
        service.start()
        try:
            runtime = service.runtime
            assert runtime is not None and runtime.fleet is not None and runtime.watch
            assert runtime.fleet.wait_streaming(30)
            servers.kill("spine-01")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                "target spine-01 is stale" in r.getMessage() for r in caplog.records
            ):
                time.sleep(0.05)
            assert any("target spine-01 is stale" in r.getMessage() for r in caplog.records)
            runtime.watch.refresh_metrics()
            state = runtime.watch.target_state.labels(target="spine-01", state="stale")
            assert state._value.get() == 1  # noqa: SLF001
            assert runtime.watch.update_age.labels(target="leaf-00")._value.get() >= 0  # noqa: SLF001
        finally:
            service.stop()
    assert TargetEvent and TargetHealth  # the log lines above come from these events


@pytest.mark.parametrize("offered", [True, False], ids=["lldp-on-change", "refused"])
def test_lldp_on_change_rereads_a_recabled_switch(offered: bool) -> None:
    """Where a target offers LLDP ON_CHANGE, a recabling is re-read at once (the periodic
    refresh is an hour away here); where it refuses, that costs only a named problem and the
    status streams carry on."""
    declared = small_fabric("leaf-spine")
    uplinks = [
        link for link in declared.links if link.a.startswith("leaf-00") and "spine" in link.b
    ][:2]
    seen: list[object] = []
    with serve_gnmi(declared, lldp_stream=offered) as (emu, servers):
        fleet = Fleet(
            servers.targets_file(timeouts=FAST), declared=declared, sink=seen.append, refresh_s=3600
        )
        with fleet:
            assert fleet.wait_streaming(30), fleet.status()
            _recable(emu, [(uplinks[0].a, uplinks[0].b), (uplinks[1].a, uplinks[1].b)])
            deadline = time.monotonic() + 30
            if offered:
                while time.monotonic() < deadline:
                    change = wiring_change(declared, fleet.snapshot().fabric)
                    if set(change.removed) == {u.id for u in uplinks}:
                        break
                    time.sleep(0.1)
                assert set(change.removed) == {u.id for u in uplinks}
                assert len(change.added) == 2
            else:
                while time.monotonic() < deadline and not any(
                    isinstance(e, Problem) and "(ON_CHANGE)" in e.path for e in seen
                ):
                    time.sleep(0.1)
                assert any(isinstance(e, Problem) and "(ON_CHANGE)" in e.path for e in seen)
                assert all(s.streaming for s in fleet.status().values())
                emu.fail_link(uplinks[0].id)  # status streams still deliver
                while time.monotonic() < deadline and not any(
                    isinstance(e, LinkEvent) and e.link_id == uplinks[0].id for e in seen
                ):
                    time.sleep(0.1)
                assert any(isinstance(e, LinkEvent) and e.link_id == uplinks[0].id for e in seen)


def test_a_recabling_reaches_the_decision_log_of_a_running_service(tmp_path: Path) -> None:
    """End to end: ``c4p serve`` on emulated targets, a cable pair swapped; the wiring change
    is re-planned and recorded in the decision log, read over the admin API."""
    declared = FABRIC
    uplinks = [link for link in declared.links if link.a.startswith("leaf-00")][:2]
    hints = tmp_path / "declared.json"
    save_fabric(declared, hints)
    with serve_gnmi(declared) as (emu, servers):
        targets = tmp_path / "targets.yaml"
        save_model(servers.targets_file(sample_interval_s=0.2, timeouts=FAST), targets)
        fabric = {
            "source": "gnmi",
            "targets": str(targets),
            "declared": str(hints),
            "rediscover_s": 0.2,
        }
        service = EmbeddedService(config_with(tmp_path, fabric))
        service.start()
        try:
            runtime = service.runtime
            assert runtime is not None and runtime.fleet is not None
            assert runtime.fleet.wait_streaming(30)
            _recable(emu, [(uplinks[0].a, uplinks[0].b), (uplinks[1].a, uplinks[1].b)])
            with clients(service.address) as (_, admin):
                assert wait_until(
                    lambda: any("wiring" in d.reason for d in admin.decisions(10)), 30
                ), [d.reason for d in admin.decisions(10)]
                reason = next(d.reason for d in admin.decisions(10) if "wiring" in d.reason)
            assert "2 link(s) gone" in reason
        finally:
            service.stop()


def test_a_recabling_before_the_lldp_stream_syncs_is_reread() -> None:
    """The wiring is read before the LLDP ON_CHANGE stream is subscribed; a port recabled in
    between shows only in that stream's initial state. A target slow to answer that
    subscription (held here until after the recabling) must still have the change re-read,
    not left to the periodic refresh (an hour away here)."""
    declared = small_fabric("leaf-spine")
    uplinks = [
        link for link in declared.links if link.a.startswith("leaf-00") and "spine" in link.b
    ][:2]
    gate = threading.Event()
    with serve_gnmi(declared, lldp_gate=gate) as (emu, servers):
        fleet = Fleet(servers.targets_file(timeouts=FAST), declared=declared, refresh_s=3600)
        with fleet:
            assert fleet.wait_streaming(30), fleet.status()  # status streams synced
            _recable(emu, [(uplinks[0].a, uplinks[0].b), (uplinks[1].a, uplinks[1].b)])
            gate.set()  # now the LLDP streams send their initial state, with the new cabling
            deadline = time.monotonic() + 30
            change = wiring_change(declared, fleet.snapshot().fabric)
            while time.monotonic() < deadline and set(change.removed) != {u.id for u in uplinks}:
                time.sleep(0.1)
                change = wiring_change(declared, fleet.snapshot().fabric)
            assert set(change.removed) == {u.id for u in uplinks}
