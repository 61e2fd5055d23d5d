"""``c4p jobs submit`` against a real controller over loopback gRPC (issue 30, item 6).

Two controllers: one with no agents (ports from the hash model: every QP bound, none seen by a
probe, so the jobs end ``bound_unverified``), and one in the learned port mode with real agent
daemons whose prober answers from a network hashing with seeds the controller does not know,
where the bindings follow ``SubmitIntents`` only after probes: ``--wait`` must not return before
every QP is bound *and* verified. Then bad input (exit 2), an unreachable controller and a
timeout (exit 1).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from agent_cases import real_network
from service_cases import ADMIN_TOKEN, busy_fabric, hosts, serving
from test_port_modes import FABRIC as AGENT_FABRIC
from test_port_modes import HOSTS as AGENT_HOSTS
from test_port_modes import controller_with_agents
from typer.testing import CliRunner

from c4p.api.v1 import intents_pb2 as pb
from c4p.cli import app
from c4p.client import AdminClient
from c4p.files import save_model
from solver.workload.jobs import CommunicatorSpec, JobsFile, JobSpec
from southbound.probing import ModeledProber

FABRIC = busy_fabric()
HOSTS = hosts(FABRIC)
runner = CliRunner()


def jobs_file(path: Path, host_lists: list[list[str]], qps: int = 2) -> Path:
    jobs = JobsFile(
        jobs=tuple(
            JobSpec(
                id=f"job-{k}",
                hosts=tuple(h),
                communicators=(CommunicatorSpec(id="dp", qps_per_connection=qps),),
            )
            for k, h in enumerate(host_lists)
        )
    )
    save_model(jobs, path)
    return path


def submit(*args: str, code: int, stdout: bool = False) -> str:
    result = runner.invoke(app, ["jobs", "submit", *args], env={"C4P_REGISTER_TOKEN": ""})
    assert result.exit_code == code, result.output
    return result.stdout if stdout else result.output


def test_submit_registers_every_job_and_waits_until_each_qp_is_bound(tmp_path: Path) -> None:
    path = jobs_file(tmp_path / "jobs.yaml", [HOSTS[0:2], HOSTS[2:4], HOSTS[4:6]])
    with serving(FABRIC, tmp_path / "ctl") as service:
        a = service.address
        tokens = tmp_path / "tokens.json"
        args = [str(path), "--controller", a, "--wait", "--timeout", "30"]
        out = submit(*args, "--tokens", str(tokens), "--json", "-", code=0, stdout=True)
        figures = {j["job_id"]: j for j in json.loads(out)["jobs"]}
        assert sorted(figures) == ["job-0", "job-1", "job-2"]
        for f in figures.values():
            assert f["done"] and f["flows"] == 8 and f["bound"] == 8
            assert f["verified"] == 0 and f["state"] == "bound_unverified"  # no agents
        assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
        assert sorted(json.loads(tokens.read_text())) == sorted(figures)
        admin = AdminClient(a, ADMIN_TOKEN)
        try:
            listed = {j.job_id: j for j in admin.jobs().jobs}
            assert sorted(listed) == sorted(figures)
            assert all(j.bound == 8 for j in listed.values())
        finally:
            admin.close()
        # The same file again: registration refuses the taken NICs, one line, exit 2.
        again = submit(str(path), "--controller", a, code=2)
        assert again.count("\n") <= 2 and "error" in again


def test_wait_in_learned_mode_returns_only_once_probes_verified_every_qp(tmp_path: Path) -> None:
    network = real_network(AGENT_FABRIC)
    path = jobs_file(tmp_path / "jobs.yaml", [AGENT_HOSTS[:2]])
    with controller_with_agents(
        tmp_path / "ctl", None, AGENT_HOSTS[:2], lambda: ModeledProber(network)
    ) as (service, _):
        out = submit(str(path), "--controller", service.address, "--wait", "--timeout", "60",
                     code=0)  # fmt: skip
        assert "job-0: done, installed: 8 QPs bound, 8 verified" in out
        assert "QPs bound" in out.splitlines()[1]  # progress lines came before the verdict
        admin = AdminClient(service.address, ADMIN_TOKEN)
        try:
            info = admin.jobs("job-0").jobs[0]
            assert info.state == pb.INTENT_STATE_INSTALLED and info.verified == 8
        finally:
            admin.close()


def test_bad_input_is_exit_2_and_an_unreachable_controller_or_a_timeout_exit_1(
    tmp_path: Path,
) -> None:
    missing = submit(str(tmp_path / "none.yaml"), code=2)
    assert "none.yaml" in missing and "Traceback" not in missing
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "jobs:\n  - id: x\n    hosts: [h0]\n    communicators: [{id: dp, qps_per_connection: 0}]\n"
    )
    said = submit(str(bad), code=2)
    assert "qps_per_connection" in said and said.count("\n") <= 2
    path = jobs_file(tmp_path / "jobs.yaml", [HOSTS[0:2]])
    assert "error" in submit(str(path), "--timeout", "nan", code=2)
    assert "--cert-file" in submit(str(path), "--cert-file", str(bad), code=2)
    assert "127.0.0.1:1" in submit(str(path), "--controller", "127.0.0.1:1", code=1)
    with serving(FABRIC, tmp_path / "ctl") as service:
        # Waiting no time at all: submitted, but not bound yet: exit 1, said per job.
        out = submit(str(path), "--controller", service.address, "--wait", "--timeout", "0",
                     code=1)  # fmt: skip
        assert "job-0: not done after 0 s" in out
