"""The port-mode benchmark: probes per job and time until a job's bindings are seen (verified),
with N host agents, in learned, verified and predicted modes side by side.

Why this shape: what a job waits for in the learned modes is the probe round trip added to
planning: the step asks for probes, the agents run them, the next step binds. So the clock runs
in the client, from just before SubmitIntents until every binding it holds is marked verified
(predicted mode: until every binding arrived, the baseline). Everything runs over real gRPC on
loopback: the controller (embedded, its own thread and loop), one real agent daemon per host
(own loop), the client. The agents' prober is the modelled data plane of a network that hashes
with seeds the model does not know (:mod:`c4p.testing.network`), so predicted ports mostly miss
and the off-path count shows it; swap in the socket prober in the lab for kernel figures.

``python -m c4p.agent.bench [--leaves 8 --spines 4 --hosts-per-leaf 2 --nics 2 --qps 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from c4p.agent.config import AgentConfig
from c4p.agent.daemon import AgentDaemon
from c4p.client import AdminClient, FlowIntentClient, communicator
from c4p.service.embedded import EmbeddedService, embedded_config
from c4p.testing.agents import host_agent_config
from c4p.testing.network import hidden_hash_network, realized_path
from southbound.probing import ModeledProber
from topology.generators import generate
from topology.model import Fabric

TOKEN = "bench-agent-token-0123456789"


def _agent(fabric: Fabric, host: str, endpoint: str, rate: float) -> AgentConfig:
    probing = {"max_probes_per_s": rate, "burst": max(1, int(rate / 4))}
    return host_agent_config(fabric, host, endpoint, TOKEN, probing=probing)


def run_mode(
    fabric: Fabric, mode: str, qps: int, directory: Path, rate: float = 800.0
) -> dict[str, Any]:
    network = hidden_hash_network(fabric)
    hosts = [h.name for h in fabric.hosts]
    overrides: dict[str, Any] = {"ports": {"mode": mode}}
    if mode != "predicted":
        overrides["agents"] = {
            "credentials": [{"hosts": hosts, "token": {"value": TOKEN}}],
            "max_probes_per_s": rate,
        }
    config = embedded_config(fabric, directory, **overrides)
    service = EmbeddedService(config)
    service.start()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    daemons: list[AgentDaemon] = []
    try:
        if mode != "predicted":
            for host in hosts:
                daemon = AgentDaemon(
                    _agent(fabric, host, service.address, rate), lambda: ModeledProber(network)
                )
                asyncio.run_coroutine_threadsafe(daemon.start(), loop).result(30)
                daemons.append(daemon)
            runtime = service.runtime
            assert runtime is not None and runtime.agents is not None
            deadline = time.monotonic() + 60
            while runtime.agents.hosts() != set(hosts) and time.monotonic() < deadline:
                time.sleep(0.02)
        with FlowIntentClient(service.address) as flow:
            job = flow.register_job("bench", hosts=hosts)
            watch = job.watch()
            qps_total = 0

            def done(m: Any) -> bool:
                if not m.bindings or len(m.bindings) < qps_total:
                    return False
                return mode == "predicted" or all(b.verified for b in m.bindings.values())

            started = time.monotonic()
            reply = job.submit([communicator("dp", qps_per_connection=qps)])
            qps_total = len(fabric.index.ports) * qps  # a rail ring: one connection per NIC
            watch.wait_revision(reply.revision, 120)
            ok = watch.wait(done, 300)
            seconds = time.monotonic() - started
            mirror = watch.mirror
            watch.stop()
        admin = AdminClient(service.address, service.admin_token)
        decisions = admin.decisions(1000)
        admin.close()
        worker = service.runtime.probe_worker if service.runtime else None
        bindings = list(mirror.bindings.values())
        off = sum(
            realized_path(network, b.src_port, b.dst_port, b.udp_sport) != b.path for b in bindings
        )
        learner = service.runtime.learner if service.runtime else None
        keys = len(list(learner.table.known_keys())) if learner is not None else 0
        traces = worker.traces if worker is not None else 0
        return {
            "mode": mode,
            "rate": rate,
            "agents": len(daemons),
            "qps": len(bindings),
            "settled": ok,
            "seconds": round(seconds, 3),
            "verified": sum(b.verified for b in bindings),
            "off_path": off,
            "probe_traces": traces,
            "probe_packets": sum(d.executor.packets_sent for d in daemons),
            "probe_rounds": worker.rounds if worker is not None else 0,
            "probe_seconds": round(worker.seconds, 3) if worker is not None else 0.0,
            "traces_per_qp": round(traces / max(1, len(bindings)), 2),
            "table_keys": keys,
            "plans": len(decisions),
        }
    finally:
        for daemon in daemons:
            asyncio.run_coroutine_threadsafe(daemon.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        service.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m c4p.agent.bench")
    parser.add_argument("--leaves", type=int, default=8)
    parser.add_argument("--spines", type=int, default=4)
    parser.add_argument("--hosts-per-leaf", type=int, default=2)
    parser.add_argument("--nics", type=int, default=2)
    parser.add_argument("--qps", type=int, default=2)
    parser.add_argument("--modes", default="predicted,learned,verified")
    parser.add_argument("--rate", type=float, default=800.0, help="Probes/s per agent.")
    args = parser.parse_args(argv)
    fabric = generate(
        "leaf-spine",
        leaves=args.leaves,
        spines=args.spines,
        hosts_per_leaf=args.hosts_per_leaf,
        nics_per_host=args.nics,
    )
    rows = []
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory(prefix="c4p-agent-bench-") as tmp:
            rows.append(run_mode(fabric, mode, args.qps, Path(tmp), args.rate))
        print(json.dumps(rows[-1]))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
