"""Dual-port balance in the product (issue 30, item 5): ``c4p plan`` and ``c4p serve`` spread a
job's QPs over its dual-plane NICs' ports, and each has a switch to turn it off.

The jobs: all-to-all with one QP per connection, so the flow derivation (QP *g* on port
*g* mod ports) puts every QP of every rank on port 0, plane 0, and plane 1 idles. Balanced,
the QPs leaving each plane differ by at most one per job; unbalanced (``--no-balance``,
``planner.balance_ports: false``) all of them leave on plane 0, as before.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from service_cases import clients, serving
from typer.testing import CliRunner

from c4p.cli import app
from c4p.client import communicator
from c4p.files import save_fabric, save_model
from solver.workload.jobs import CommunicatorSpec, JobsFile, JobSpec
from topology.generators import DualPlaneParams, dual_plane
from topology.model import Fabric

FABRIC = dual_plane(DualPlaneParams(units=2, hosts_per_unit=4, rails=2, spines=2))
HOSTS = [h.name for h in FABRIC.hosts]
runner = CliRunner()


def planes(fabric: Fabric, src_ports: list[str]) -> Counter[int]:
    index = fabric.index
    return Counter(int(index.plane[index.node(p)]) for p in src_ports)


def test_plan_spreads_a_port_zero_job_over_both_planes_unless_told_not_to(tmp_path: Path) -> None:
    fabric_path, jobs_path = tmp_path / "fabric.yaml", tmp_path / "jobs.yaml"
    save_fabric(FABRIC, fabric_path)
    spec = CommunicatorSpec(id="a2a", pattern="all-to-all", qps_per_connection=1)
    save_model(JobsFile(jobs=(JobSpec(id="j", hosts=tuple(HOSTS), communicators=(spec,)),)),
               jobs_path)  # fmt: skip
    seen = {}
    for flag in ("--balance", "--no-balance"):
        bindings = tmp_path / f"bindings{flag}.json"
        args = ["plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path), "--budget", "1",
                "-o", str(tmp_path / f"plan{flag}.json"), "--bindings", str(bindings),
                "--json", str(tmp_path / f"out{flag}.json"), flag]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        bound = json.loads(bindings.read_text())["bindings"]
        seen[flag] = planes(FABRIC, [b["src"] for b in bound])
        out = json.loads((tmp_path / f"out{flag}.json").read_text())
        assert out["bindings"]["ok"] and out["bindings"]["issues"] == 0
        if flag == "--balance":
            assert out["balance"]["moved"] > 0
            assert out["balance"]["spread_after"] < out["balance"]["spread_before"]
        else:
            assert "balance" not in out
    assert set(seen["--no-balance"]) == {0}  # what the flow derivation gives
    on = seen["--balance"]
    assert sum(on.values()) == sum(seen["--no-balance"].values())
    assert abs(on[0] - on[1]) <= 1


def test_serve_spreads_a_port_zero_job_over_both_planes_unless_configured_off(
    tmp_path: Path,
) -> None:
    seen = {}
    for on in (True, False):
        planner = {"budget_s": 1.0, "balance_ports": on}
        with (
            serving(FABRIC, tmp_path / str(on), planner=planner) as service,
            clients(service.address) as (flow, _),
        ):
            job = flow.register_job("j", hosts=HOSTS)
            reply = job.submit([communicator("a2a", pattern="all-to-all", qps_per_connection=1)])
            watch = job.watch()
            try:
                assert watch.wait(lambda m, n=reply.flows: len(m.bindings) == n, 30)
                bound = list(watch.mirror.snapshot().values())
            finally:
                watch.stop()
            # Every binding's path starts at the port it names and crosses that plane only.
            assert all(b.path[0] == b.src_port and b.path[-1] == b.dst_port for b in bound)
            seen[on] = planes(FABRIC, [b.src_port for b in bound])
    assert set(seen[False]) == {0}
    assert abs(seen[True][0] - seen[True][1]) <= 1
