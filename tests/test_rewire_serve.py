"""Wiring changed under a running ``c4p serve`` (discovered from emulated gNMI switches, real
gRPC on loopback): a cable moved -> re-discovery -> a new snapshot swapped in -> only the job on
it gets new bindings while the other job's stream stays silent; a collector outage is held as
suspect and swaps nothing; a restart after the swap re-serves the same bindings."""

from __future__ import annotations

from pathlib import Path

from fixtures_fabric_emulator import FAST, serve_gnmi
from rewire_cases import FULL, START, link_between, moved
from service_cases import clients, links_of, wait_until
from test_serve_discovery import config_with

from c4p.client import communicator
from c4p.files import save_fabric, save_model
from c4p.service.embedded import EmbeddedService
from topology.compare import compare_fabrics

GONE = frozenset({"leaf-00", "spine-00"})


def _bindings(watch: object) -> dict[object, tuple[int, tuple[str, ...]]]:
    return {k: (b.udp_sport, b.path) for k, b in watch.mirror.snapshot().items()}  # type: ignore[attr-defined]


def test_a_cable_moved_while_serving_rebinds_only_the_job_on_it(tmp_path: Path) -> None:
    hints = tmp_path / "declared.json"
    save_fabric(FULL, hints)  # the NIC addresses switches cannot tell
    with serve_gnmi(START) as (emu, servers):
        targets = tmp_path / "targets.yaml"
        save_model(servers.targets_file(sample_interval_s=0.2, timeouts=FAST), targets)
        fabric = {
            "source": "gnmi",
            "targets": str(targets),
            "declared": str(hints),
            "rediscover_s": 0.2,
        }
        config = config_with(tmp_path, fabric)
        service = EmbeddedService(config)
        service.start()
        try:
            runtime = service.runtime
            assert runtime is not None and runtime.fleet is not None and runtime.watch
            assert compare_fabrics(START, runtime.state.fabric, statuses=False).clean
            assert runtime.fleet.wait_streaming(30)
            with clients(service.address) as (flow, admin):
                a = flow.register_job("a", hosts=["h0000", "h0001"])
                b = flow.register_job("b", hosts=["h0002", "h0003"])
                ra = a.submit([communicator("dp", qps_per_connection=2)])
                rb = b.submit([communicator("dp", qps_per_connection=2)])
                wa, wb = a.watch(), b.watch()
                try:
                    assert wa.wait_revision(ra.revision, 30) and wb.wait_revision(rb.revision, 30)
                    assert any(GONE in links_of(p) for _, p in _bindings(wa).values())
                    before_b, updates_b = _bindings(wb), wb.mirror.updates
                    epoch_a = wa.mirror.epoch
                    emu.rewire(moved())  # leaf-00's cable to spine-00 now ends on spine-02
                    assert wa.wait(
                        lambda m: (
                            m.epoch > epoch_a
                            and all(GONE not in links_of(x.path) for x in m.snapshot().values())
                        ),
                        30,
                    ), _bindings(wa)
                    assert compare_fabrics(moved(), runtime.state.fabric, statuses=False).clean
                    decision = next(d for d in admin.decisions(10) if "rewired" in d.reason)
                    assert "1 link(s) added" in decision.reason
                    assert list(decision.jobs_on_links) == ["a"]
                    # b's stream stayed silent through the swap and the steps after it.
                    assert wb.mirror.updates == updates_b and _bindings(wb) == before_b
                    after = {"a": _bindings(wa), "b": _bindings(wb)}
                    # A collector outage: every switch answers with nothing. Held as suspect.
                    emu.set_raws(emu.switches, {"/interfaces": b"{}", "/lldp": b"{}"})
                    runtime.fleet.discover()  # one round of Gets answered with nothing
                    suspect = runtime.watch.suspect
                    assert wait_until(lambda: suspect._value.get() == 1, 30)  # noqa: SLF001
                    assert compare_fabrics(moved(), runtime.state.fabric, statuses=False).clean
                    assert {"a": _bindings(wa), "b": _bindings(wb)} == after
                    emu.clear_faults()
                finally:
                    wa.stop()
                    wb.stop()
            epoch = runtime.state.epoch
        finally:
            service.stop()
        # A restart on the re-cabled fabric: the same bindings, no new epoch.
        service = EmbeddedService(config)
        service.start()
        try:
            runtime = service.runtime
            assert runtime is not None
            assert compare_fabrics(moved(), runtime.state.fabric, statuses=False).clean
            for job in ("a", "b"):
                with runtime.state.lock:
                    held = sorted(
                        (h.binding.sport, h.binding.path) for h in runtime.state.held[job].values()
                    )
                assert held == sorted(after[job].values())
            assert runtime.state.epoch == epoch  # the start-up step found nothing to do
        finally:
            service.stop()


def test_a_spine_link_added_while_serving_is_used_by_the_next_plan(tmp_path: Path) -> None:
    hints = tmp_path / "declared.json"
    save_fabric(FULL, hints)
    with serve_gnmi(START) as (emu, servers):
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
            with clients(service.address) as (flow, admin):
                a = flow.register_job("a", hosts=["h0000", "h0001"])
                ra = a.submit([communicator("dp", qps_per_connection=2)])
                wa = a.watch()
                try:
                    assert wa.wait_revision(ra.revision, 30)
                    emu.rewire(FULL)  # a new cable: leaf-00 -- spine-02
                    assert wait_until(
                        lambda: compare_fabrics(FULL, runtime.state.fabric, statuses=False).clean,
                        30,
                    )
                    assert wait_until(
                        lambda: any("1 link(s) added" in d.reason for d in admin.decisions(10)), 30
                    )
                    for spine in ("spine-00", "spine-01"):  # only the new cable leaves leaf-00
                        admin.drain(link_between(FULL, "leaf-00", spine).id, "test")
                    new_hop = frozenset({"leaf-00", "spine-02"})
                    assert wa.wait(
                        lambda m: all(
                            new_hop in links_of(x.path)
                            for x in m.snapshot().values()
                            if len(x.path) > 3
                        ),
                        30,
                    ), _bindings(wa)
                finally:
                    wa.stop()
        finally:
            service.stop()
