"""Plans checked by counters in ``c4p serve`` (issue 30, item 2), end to end on loopback.

The fabric comes from emulated switches over gNMI (``c4p.testing``), whose interface counters
integrate the traffic the test puts on each link. A job is bound with predicted ports. While the
traffic follows the bound paths, the counter check finds nothing. When it follows where another
hash (the switches' real one) sends those ports, the job's stream
shows ``deviation`` issues that name the links, and the job is ``DEGRADED``. The other hash
here is another algorithm (see :func:`other_hash_network`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixtures_fabric_emulator import serve_gnmi
from service_cases import ADMIN_TOKEN, clients, hosts, wait_until

from c4p.api.v1 import intents_pb2 as pb
from c4p.client import communicator
from c4p.files import save_fabric, save_model
from c4p.service.embedded import EmbeddedService, embedded_config
from c4p.service.serve import ServeConfig, check
from c4p.testing.network import realized_path
from topology.generators import generate
from topology.model import Fabric, HashAlgorithm, HashProfile

FABRIC = generate("leaf-spine", leaves=2, spines=4, hosts_per_leaf=2, nics_per_host=1)
GBPS = 360.0


def other_hash_network(fabric: Fabric) -> Fabric:
    """The same topology whose switches hash with another algorithm (CRC-32, high half): the
    controller's model does not know it. Another *seed* of the same CRC would not do here: it
    XORs every hash with one constant, which permutes a 4-way group identically for every QP
    through a switch, and the counters could not tell (``test_deviation``)."""
    data = fabric.model_dump(mode="json")
    for i, switch in enumerate(data["switches"]):
        profile = HashProfile(algorithm=HashAlgorithm.CRC32_HI, seed=0x5EED + i)
        switch["hash"] = profile.model_dump(mode="json")
    return Fabric.model_validate(data)


def serve_config(directory: Path, targets: Path, declared: Path) -> ServeConfig:
    base = embedded_config(FABRIC, directory, admin_token=ADMIN_TOKEN).model_dump()
    fabric: dict[str, Any] = {"source": "gnmi", "targets": str(targets), "declared": str(declared)}
    deviation = {"every_s": 0.3, "settle_s": 0.8, "tolerance": 0.05}
    ports = {"mode": "predicted"}
    return check(
        ServeConfig.model_validate(
            {**base, "fabric": fabric, "deviation": deviation, "ports": ports}
        )
    )


def test_counters_that_follow_the_plan_are_quiet_and_others_become_deviations(
    tmp_path: Path,
) -> None:
    declared = tmp_path / "declared.json"
    save_fabric(FABRIC, declared)
    network = other_hash_network(FABRIC)
    with serve_gnmi(FABRIC) as (emu, servers):
        targets = tmp_path / "targets.yaml"
        save_model(servers.targets_file(sample_interval_s=0.2), targets)
        service = EmbeddedService(serve_config(tmp_path, targets, declared))
        service.start()
        try:
            runtime = service.runtime
            assert runtime is not None and runtime.fleet is not None
            assert runtime.fleet.wait_streaming(30), runtime.fleet.status()
            check_ = runtime.counter_check
            assert check_ is not None
            with clients(service.address) as (flow, admin):
                job = flow.register_job("a2a", hosts=hosts(FABRIC))
                reply = job.submit([communicator("x", pattern="all-to-all", qps_per_connection=3)])
                watch = job.watch()
                try:
                    assert watch.wait(lambda m: len(m.bindings) == reply.flows, 30)
                    bound = list(watch.mirror.snapshot().values())
                    assert watch.mirror.state == pb.INTENT_STATE_INSTALLED  # predicted, chosen
                    for b in bound:  # the data plane does what the plan says
                        emu.add_flow(list(b.path), GBPS / 9)  # 9 QPs leave each NIC
                    rounds = check_.rounds
                    assert wait_until(lambda: check_.rounds >= rounds + 3, 30)
                    assert check_.last == []
                    assert not watch.mirror.issues
                    off = 0
                    for b in bound:  # now as the switches really hash those ports
                        emu.add_flow(list(b.path), -GBPS / 9)
                        real = realized_path(network, b.src_port, b.dst_port, b.udp_sport)
                        off += real != tuple(b.path)
                        emu.add_flow(list(real), GBPS / 9)
                    assert off > 0
                    kind = pb.BindingIssue.KIND_DEVIATION
                    assert watch.wait(lambda m: any(i.kind == kind for i in m.issues), 30)
                    issues = [i for i in watch.mirror.issues if i.kind == kind]
                    assert all("link " in i.reason and "b/s" in i.reason for i in issues)
                    assert watch.mirror.state == pb.INTENT_STATE_DEGRADED
                    info = admin.jobs("a2a").jobs[0]
                    assert info.issues >= len(issues) > 0
                    assert any("counters" in d.reason for d in admin.decisions(10))
                    print(f"deviations: {len(check_.last)} link directions, {len(issues)} QPs "
                          f"named, {off}/{len(bound)} QPs off plan")  # fmt: skip
                finally:
                    watch.stop()
        finally:
            service.stop()
