"""``c4p serve`` with a discovered fabric (``fabric.source: gnmi``), end to end on loopback: the
emulated switches answer gNMI, the service discovers the fabric from them, a job gets its
bindings over real gRPC, and a link that fails in the emulator moves the job's flows off it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from fixtures_fabric_emulator import serve_gnmi
from pydantic import ValidationError
from service_cases import ADMIN_TOKEN, clients, hosts, links_of, wait_until

from c4p.client import communicator
from c4p.files import save_fabric, save_model
from c4p.service.embedded import EmbeddedService, embedded_config
from c4p.service.serve import ServeConfig, check, load_targets
from topology.compare import compare_fabrics
from topology.errors import FabricFileError
from topology.generators import generate

FABRIC = generate("leaf-spine", leaves=2, spines=4, hosts_per_leaf=1, nics_per_host=2)
"""Two leaves of one 2-NIC host each and four spines: a failed uplink leaves three others."""


def config_with(directory: Path, fabric: dict[str, Any]) -> ServeConfig:
    """The embedded service's config, its ``fabric`` section replaced, checked again."""
    base = embedded_config(FABRIC, directory, admin_token=ADMIN_TOKEN).model_dump()
    return check(ServeConfig.model_validate({**base, "fabric": fabric}))


def test_a_link_failing_in_the_discovered_fabric_moves_the_jobs_flows(tmp_path: Path) -> None:
    declared = tmp_path / "declared.json"
    save_fabric(FABRIC, declared)  # hints: the NIC addresses switches cannot tell
    with serve_gnmi(FABRIC) as (emu, servers):
        targets = tmp_path / "targets.yaml"
        save_model(servers.targets_file(sample_interval_s=0.2), targets)
        fabric = {"source": "gnmi", "targets": str(targets), "declared": str(declared)}
        service = EmbeddedService(config_with(tmp_path, fabric))
        service.start()
        try:
            runtime = service.runtime
            assert runtime is not None and runtime.fleet is not None
            assert compare_fabrics(FABRIC, runtime.fabric, statuses=False).clean
            assert runtime.fleet.wait_streaming(30), runtime.fleet.status()
            with clients(service.address) as (flow, admin):
                job = flow.register_job("disc", hosts=hosts(FABRIC))
                reply = job.submit([communicator("dp", qps_per_connection=2)])
                watch = job.watch()
                try:
                    assert watch.wait_revision(reply.revision, 20)
                    crossing = next(b for b in watch.mirror.snapshot().values() if len(b.path) > 3)
                    hop = frozenset(crossing.path[1:3])
                    link = FABRIC.links[
                        FABRIC.index.link_number(f"{crossing.path[1]}--{crossing.path[2]}")
                    ]
                    epoch, before = watch.mirror.epoch, watch.mirror.snapshot()
                    emu.fail_link(link.id)  # both ends go oper-down; the targets stream it
                    assert watch.wait(
                        lambda m: (
                            m.epoch > epoch
                            and all(hop not in links_of(b.path) for b in m.snapshot().values())
                        ),
                        30,
                    )
                    after = watch.mirror.snapshot()
                    assert set(after) == set(before)
                    assert after and all(hop not in links_of(b.path) for b in after.values())
                    assert wait_until(lambda: "link" in admin.decisions(1)[0].reason, 10)
                finally:
                    watch.stop()
        finally:
            service.stop()
        names = {f"c4p-target-{s.name}" for s in FABRIC.switches} | {"c4p-link-events"}
        assert wait_until(lambda: not names & {t.name for t in threading.enumerate()}, 10)


def test_a_discovery_source_is_checked_before_anything_starts(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(FabricFileError) as caught:
        config_with(tmp_path, {"source": "gnmi", "targets": missing})
    assert "fabric.targets: no such file" in str(caught.value)
    with pytest.raises(ValidationError, match="source snmp needs targets"):
        config_with(tmp_path, {"source": "snmp"})
    with pytest.raises(ValidationError, match="declared"):
        config_with(tmp_path, {"source": "gnmi", "targets": missing, "path": missing})
    targets = tmp_path / "targets.yaml"  # no driver named: the source's (snmp needs credentials)
    targets.write_text("targets: [{name: leaf-00, address: 127.0.0.1}]\n")
    with pytest.raises(FabricFileError, match=r"fabric.targets: .*snmp.credentials"):
        config_with(tmp_path, {"source": "snmp", "targets": str(targets)})
    targets.write_text(
        "targets:\n"
        "- {name: a, address: 127.0.0.1, driver: gnmi, gnmi: {tls: {mode: insecure}}}\n"
        "- {name: b, address: 127.0.0.2, snmp: {credentials: {version: '2c', community: b}}}\n"
    )  # a target's own driver wins
    config = config_with(tmp_path, {"source": "snmp", "targets": str(targets)})
    assert [t.driver for t in load_targets(config.fabric).targets] == ["gnmi", "snmp"]
