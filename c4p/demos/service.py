"""``make demo``: the controller as a service, its clients as emulated jobs, a link drained.

What it shows, over real gRPC on loopback with an embedded SQLite store:

1. the controller service starts (in this process, on an ephemeral port) on a rail-optimized
   fabric;
2. three emulated jobs (what an NCCL net plugin does: register, declare a ring communicator,
   apply each QP's source port as it arrives) run concurrently through the flow-intent client;
3. an operator drains the busiest spine link through the admin API, as a fault detector would.
   A drain is a planning decision: the switches keep the link in their ECMP groups, so without
   a re-plan every QP that crossed it still does;
4. only the jobs that crossed it receive new bindings; the other jobs' streams stay silent;
5. *realized*, per job: the ports the emulated plugins actually applied are forwarded hop by hop
   through every switch's ECMP hash with the groups the switches still have
   (``topology.forwarding``): the QPs left on the drained link by the old ports and by c4p's new
   ones, and max-min fair rates as nccl-tests' bus bandwidth before the drain and after the
   re-plan; ECMP with random QP numbers (no controller at all) is shown for scale.
"""

from __future__ import annotations

import secrets
import tempfile
import threading
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from c4p.api.v1 import intents_pb2 as pb
from c4p.client import AdminClient, BindingWatch, FlowIntentClient, communicator
from c4p.client.emulated import EmulatedTransport
from c4p.client.mirror import QpId
from c4p.service.embedded import EmbeddedService, embedded_config
from solver.workload.flows import Workload
from solver.workload.jobs import CommunicatorSpec, JobsFile, JobSpec
from solver.workload.patterns import derive_workload
from solver.workload.placement import place_hosts
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import Evaluation, evaluate
from topology.forwarding import forward_many
from topology.generators import RailOptimizedParams, rail_optimized
from topology.model import Fabric

JOBS = (("llm-a", 6, 3), ("llm-b", 5, 5), ("vision", 5, 9))
"""(job, hosts, placement seed): hosts scattered the way a busy cluster leaves them free."""

Ports = dict[str, dict[QpId, int]]


def forwarded(fabric: Fabric, workload: Workload, ports: Ports) -> list[tuple[int, ...]]:
    """Every QP forwarded with the port its plugin applied: the resources the data plane uses."""
    index = fabric.index
    flows = workload.flows
    sports = [ports[f.job][(f.communicator, f.connection, f.qp)] for f in flows]
    return forward_many(
        fabric,
        [index.node(f.src) for f in flows],
        [index.node(f.dst) for f in flows],
        np.asarray(sports, dtype=np.int64),
    )


def realized(fabric: Fabric, workload: Workload, ports: Ports) -> Evaluation:
    """Forward every QP with the port its plugin applied; evaluate what the data plane does."""
    return evaluate(fabric, workload, forwarded(fabric, workload, ports))


def crossing(fabric: Fabric, workload: Workload, ports: Ports, link: int) -> dict[str, int]:
    """Per job, the QPs whose packets cross link number ``link`` (either way)."""
    both = {2 * link, 2 * link + 1}
    out: dict[str, int] = {}
    for flow, path in zip(workload.flows, forwarded(fabric, workload, ports), strict=True):
        if both.intersection(path):
            out[flow.job] = out.get(flow.job, 0) + 1
    return out


def _jobs(fabric: Fabric) -> tuple[JobsFile, dict[str, list[str]]]:
    taken: frozenset[str] = frozenset()
    placements: dict[str, list[str]] = {}
    for name, count, seed in JOBS:
        placements[name] = place_hosts(fabric, count, "random", seed=seed, exclude=taken)
        taken = taken | set(placements[name])
    ring = CommunicatorSpec(id="dp", qps_per_connection=2)
    specs = tuple(
        JobSpec(id=n, hosts=tuple(h), communicators=(ring,)) for n, h in placements.items()
    )
    return JobsFile(jobs=specs), placements


def main() -> None:
    console = Console(width=110)
    fabric = rail_optimized(
        RailOptimizedParams(name="demo-64", units=4, hosts_per_unit=4, rails=4, spines=4)
    )
    jobs, placements = _jobs(fabric)
    workload = derive_workload(fabric, jobs)
    with tempfile.TemporaryDirectory(prefix="c4p-demo-") as tmp:
        config = embedded_config(fabric, Path(tmp), admin_token=secrets.token_urlsafe(24))
        with EmbeddedService(config) as service:
            console.print(
                f"[bold]c4p serve[/] on {service.address} (plaintext on loopback, SQLite WAL "
                f"store): fabric {fabric.name}, {len(fabric.switches)} switches, "
                f"{len(fabric.hosts)} hosts, {sum(len(h.nics) for h in fabric.hosts)} NICs",
                highlight=False,
            )
            Demo(console, fabric, workload, placements, service).run()


class Demo:
    """The emulated jobs, the operator, and the report."""

    def __init__(
        self,
        console: Console,
        fabric: Fabric,
        workload: Workload,
        placements: dict[str, list[str]],
        service: EmbeddedService,
    ) -> None:
        self.console = console
        self.fabric = fabric
        self.workload = workload
        self.placements = placements
        self.service = service
        self.transports = {name: EmulatedTransport() for name in placements}
        self.watches: dict[str, BindingWatch] = {}
        self.crossing: dict[str, dict[str, int]] = {}
        """Per phase ("stale": the old ports, "after": c4p's), QPs per job on the drained link."""

    def _job(self, client: FlowIntentClient, name: str) -> None:
        """One emulated job (on its own thread and channel): register, watch, submit, wait."""
        job = client.register_job(name, hosts=self.placements[name], tenant="demo")
        self.watches[name] = job.watch(on_change=self.transports[name])
        reply = job.submit([communicator("dp", qps_per_connection=2)])
        self.watches[name].wait_revision(reply.revision, 60)

    def leaf_jobs(self) -> dict[str, set[str]]:
        """Per leaf switch: the jobs with QPs that leave through it (from the bindings)."""
        found: dict[str, set[str]] = {s.name: set() for s in self.fabric.switches}
        for name, watch in self.watches.items():
            for b in watch.mirror.snapshot().values():
                if len(b.path) > 3:
                    found[b.path[1]].add(name)
        return found

    def ports(self) -> Ports:
        return {name: dict(t.ports) for name, t in self.transports.items()}

    def run(self) -> None:
        clients = [FlowIntentClient(self.service.address) for _ in self.placements]
        admin = AdminClient(self.service.address, self.service.admin_token)
        try:
            threads = [
                threading.Thread(target=self._job, args=(client, name))
                for client, name in zip(clients, self.placements, strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            self.drain(admin)
        finally:
            for watch in self.watches.values():
                watch.stop()
            for client in clients:
                client.close()
            admin.close()

    def drain(self, admin: AdminClient) -> None:
        console, fabric, workload = self.console, self.fabric, self.workload
        bound = sum(len(t.ports) for t in self.transports.values())
        console.print(
            f"{len(self.placements)} emulated jobs registered and submitted a rail ring (2 QPs "
            f"per connection) at once over gRPC; all {bound} QPs bound, each port applied by "
            "its job's plugin callback.",
            highlight=False,
        )
        ecmp = evaluate(fabric, workload, ecmp_paths(fabric, workload.flows, seed=1).paths)
        before_ports = self.ports()
        before = realized(fabric, workload, before_ports)
        updates = {n: w.mirror.updates for n, w in self.watches.items()}
        applied = {n: t.applied for n, t in self.transports.items()}
        leaf_jobs = self.leaf_jobs()
        busiest = max(
            (link for link in admin.fabric().links if "spine" in link.id and link.jobs),
            key=lambda link: (-len(leaf_jobs[link.a.partition(":")[0]]), link.flows),
        )
        leaf = busiest.a.partition(":")[0]
        console.print(
            f"\nOperator drains [bold]{busiest.id}[/] through AdminService.DrainLink: "
            f"{busiest.flows} QPs cross it; QPs of {', '.join(sorted(leaf_jobs[leaf]))} leave "
            f"its leaf {leaf}. The switches keep the link in their ECMP groups (a drain is a "
            "planning decision), so only new ports move QPs off it ...",
            highlight=False,
        )
        decision = admin.drain(busiest.id, "demo: suspect optics", wait=True).decision
        for name in decision.jobs_changed:
            self.watches[name].wait(lambda m: m.epoch >= decision.epoch, 30)
        link = fabric.index.link_number(busiest.id)
        after_ports = self.ports()
        after = realized(fabric, workload, after_ports)
        self.crossing = {
            "stale": crossing(fabric, workload, before_ports, link),
            "after": crossing(fabric, workload, after_ports, link),
        }
        self.report(decision, updates, applied, {"ecmp": ecmp, "before": before, "after": after})

    def report(
        self,
        decision: pb.Decision,
        updates: dict[str, int],
        applied: dict[str, int],
        results: dict[str, Evaluation],
    ) -> None:
        console = self.console
        console.print(
            f"Epoch {decision.epoch} ({decision.status}): {decision.moved} flows moved, max link "
            f"utilization {decision.max_utilization:.2f} against a lower bound of "
            f"{decision.bound:.2f} (gap {100 * decision.gap:.0f}%), planned, bound and pushed in "
            f"{1000 * decision.solve_seconds:.0f} ms; jobs on the link: "
            f"{', '.join(decision.jobs_on_links) or 'none'}. (Utilization counts QPs per NIC "
            "line rate: each connection has 2 QPs, so 2.00 is a full link, not a collision.)",
            highlight=False,
        )
        fractions = {
            key: {j.job: j.busbw_fraction or 0.0 for j in value.jobs}
            for key, value in results.items()
        }
        table = Table(title="Predicted bus bandwidth per job (fraction of NIC line rate)")
        for column in (
            "job",
            "stream updates",
            "ports re-applied",
            "ECMP (no c4p)",
            "c4p before drain",
            "c4p after re-plan",
            "QPs on drained link: old ports",
            "new ports",
        ):
            table.add_column(column, justify="left" if column == "job" else "right")  # fmt: skip
        for name in self.placements:
            table.add_row(
                name,
                str(self.watches[name].mirror.updates - updates[name]),
                str(self.transports[name].applied - applied[name]),
                *(f"{100 * fractions[k][name]:.0f}%" for k in ("ecmp", "before", "after")),
                str(self.crossing["stale"].get(name, 0)),
                str(self.crossing["after"].get(name, 0)),
            )
        console.print(table)
        changed = sorted(decision.jobs_changed)
        silent = [n for n in self.placements if n not in changed]
        quiet = f"; {', '.join(silent)} saw nothing on its stream" if silent else ""
        console.print(
            f"New bindings went to {', '.join(changed) or 'no job'} only{quiet}. Without a "
            "re-plan the old ports keep their QPs on the drained link (the switches still hash "
            "over it); c4p's new ports move them off and keep every other QP's port. The "
            "realized figures come from the ports the emulated plugins applied, forwarded "
            "through each switch's ECMP hash: no trust in the planner is needed to read them.",
            highlight=False,
        )


if __name__ == "__main__":
    main()
