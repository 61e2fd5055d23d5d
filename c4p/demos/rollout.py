"""A staged rollout, end to end: jobs start in ``shadow``, a link fails, one job goes ``active``
(the canary), then every job; the rollout report is printed from the decision log.

``python -m c4p.demos.rollout [--dir DIR] [--interval 2]``: over real gRPC on loopback with an
embedded SQLite store (kept in ``DIR`` with the plot when given, so ``c4p report --store
DIR/c4p.db`` reads the same log afterwards). Each phase starts on an interval boundary, so the
report shows one phase per interval:

1. ``observe``: three emulated jobs register and submit a rail ring; the rollout default is
   ``shadow``, so the controller plans, binds and predicts them, and their plugins apply nothing;
2. ``failure``: an operator drains a spine link under a shadow job; the controller re-plans
   around it, on paper;
3. ``canary``: one job is set ``active`` (AdminService.SetControlMode): its ports are pushed;
4. ``all``: the other jobs follow.

At the end, the ports the plugins actually applied are forwarded through every switch's ECMP
hash (``topology.forwarding``) and evaluated: the realized bus bandwidth, beside what shadow mode
predicted for the same job before it was in control.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from c4p.api.v1 import intents_pb2 as pb
from c4p.client import AdminClient, BindingWatch, FlowIntentClient, communicator
from c4p.client.emulated import EmulatedTransport
from c4p.client.mirror import BindingMirror
from c4p.demos.service import realized
from c4p.figures.rollout import from_pb, plot, rollout
from c4p.service.embedded import EmbeddedService, embedded_config
from solver.workload.jobs import CommunicatorSpec, JobsFile, JobSpec
from solver.workload.patterns import derive_workload
from solver.workload.placement import place_hosts
from topology.generators import RailOptimizedParams, rail_optimized
from topology.model import Fabric, LinkStatus

JOBS = (("llm-a", 6, 3, "research"), ("llm-b", 5, 5, "research"), ("vision", 5, 9, "prod"))
"""(job, hosts, placement seed, tenant)."""


def _placements(fabric: Fabric) -> dict[str, list[str]]:
    taken: frozenset[str] = frozenset()
    out: dict[str, list[str]] = {}
    for name, count, seed, _ in JOBS:
        out[name] = place_hosts(fabric, count, "random", seed=seed, exclude=taken)
        taken = taken | set(out[name])
    return out


def _next_interval(interval: float) -> None:
    """Sleep to just after the next interval boundary (at most one interval)."""
    now = time.time()
    time.sleep((int(now / interval) + 1) * interval - now + 0.05)


def _at_least(epoch: int) -> Callable[[BindingMirror], bool]:
    return lambda mirror: mirror.epoch >= epoch


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m c4p.demos.rollout", description=__doc__)
    parser.add_argument("--dir", type=Path, help="keep the store and the plot here")
    parser.add_argument("--interval", type=float, default=2.0, help="report interval (s)")
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="serve the API on 127.0.0.1:PORT (default 0: any free port, printed at start)",
    )
    args = parser.parse_args(argv)
    if not args.interval >= 0.5:
        parser.error(f"--interval: at least 0.5 s, got {args.interval}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port: a TCP port from 0 to 65535, got {args.port}")
    console = Console(width=120)
    fabric = rail_optimized(
        RailOptimizedParams(name="demo-64", units=4, hosts_per_unit=4, rails=4, spines=4)
    )
    with tempfile.TemporaryDirectory(prefix="c4p-rollout-") as tmp:
        where = args.dir or Path(tmp)
        config = embedded_config(
            fabric,
            where,
            admin_token=secrets.token_urlsafe(24),
            rollout={"default": "shadow"},
        )
        config = config.model_copy(
            update={
                "listen": config.listen.model_copy(update={"address": f"127.0.0.1:{args.port}"})
            }
        )
        with EmbeddedService(config) as service:
            console.print(
                f"[bold]c4p serve[/] on {service.address}, rollout default [bold]shadow[/]: "
                f"fabric {fabric.name}, {len(fabric.switches)} switches, {len(fabric.hosts)} "
                "hosts",
                highlight=False,
            )
            Rollout(console, fabric, service, args.interval, where).run()


class Rollout:
    """The jobs, the operator, and the report."""

    def __init__(
        self,
        console: Console,
        fabric: Fabric,
        service: EmbeddedService,
        interval: float,
        where: Path,
    ) -> None:
        self.console = console
        self.fabric = fabric
        self.service = service
        self.interval = interval
        self.where = where
        self.placements = _placements(fabric)
        self.transports = {name: EmulatedTransport() for name in self.placements}
        self.watches: dict[str, BindingWatch] = {}

    def _job(self, client: FlowIntentClient, name: str, tenant: str) -> None:
        job = client.register_job(name, hosts=self.placements[name], tenant=tenant)
        self.watches[name] = job.watch(on_change=self.transports[name])
        reply = job.submit([communicator("dp", qps_per_connection=2)])
        self.watches[name].wait_revision(reply.revision, 60)

    def applied(self) -> str:
        return ", ".join(f"{n} {len(t.ports)}" for n, t in self.transports.items())

    def run(self) -> None:
        clients = [FlowIntentClient(self.service.address) for _ in JOBS]
        admin = AdminClient(self.service.address, self.service.admin_token)
        say = self.console.print
        try:
            _next_interval(self.interval)
            threads = [
                threading.Thread(target=self._job, args=(client, name, tenant))
                for client, (name, _, _, tenant) in zip(clients, JOBS, strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            say(f"1 observe: 3 jobs in shadow; ports applied by their plugins: {self.applied()}")
            _next_interval(self.interval)
            link = self._spine_link_of("llm-a")
            drained = admin.drain(link, "demo: suspect optics", wait=True).decision
            say(
                f"2 failure: drained {link}; re-planned on paper around it for "
                f"{', '.join(drained.jobs_on_links) or 'no job'}, {drained.moved} flows moved; "
                f"ports applied: {self.applied()}",
                highlight=False,
            )
            shadow = {p.job_id: p for p in drained.predictions}
            _next_interval(self.interval)
            canary = admin.set_control_mode("llm-a", "active", wait=True).decision
            self.watches["llm-a"].wait(lambda m: m.epoch >= canary.epoch, 30)
            say(f"3 canary: llm-a active; ports applied: {self.applied()}", highlight=False)
            _next_interval(self.interval)
            for name in ("llm-b", "vision"):
                epoch = admin.set_control_mode(name, "active", wait=True).decision.epoch
                self.watches[name].wait(_at_least(epoch), 30)
            say(f"4 all: every job active; ports applied: {self.applied()}", highlight=False)
            self._realized(link, shadow)
            time.sleep(0.05)
            decisions = [from_pb(d) for d in admin.decision_log()]
        finally:
            for watch in self.watches.values():
                watch.stop()
            for client in clients:
                client.close()
            admin.close()
        report = rollout(decisions, self.interval)
        from c4p.cli.report import render

        self.console.print(render(report))
        png = self.where / "rollout.png"
        plot(report, png)
        store = self.where / "c4p.db"
        self.console.print(
            f"plot: {png}\nthe same table offline: c4p report --store {store} "
            f"--interval {self.interval:g}",
            highlight=False,
        )

    def _spine_link_of(self, job: str) -> str:
        """A leaf-spine link on the leaf of the job's first host's first NIC."""
        host = next(h for h in self.fabric.hosts if h.name == self.placements[job][0])
        nic_port = f"{host.name}:{host.nics[0].ports[0].name}"
        leaf = next(
            (link.b if link.a == nic_port else link.a).partition(":")[0]
            for link in self.fabric.links
            if nic_port in (link.a, link.b)
        )
        return next(
            link.id
            for link in self.fabric.links
            if link.a.partition(":")[0] == leaf and "spine" in link.b
        )

    def _realized(self, link: str, shadow: dict[str, pb.JobPrediction]) -> None:
        fabric = self.fabric
        drained = fabric.with_link_status({fabric.index.link_number(link): LinkStatus.DRAINED})
        ring = CommunicatorSpec(id="dp", qps_per_connection=2)
        jobs = JobsFile(
            jobs=tuple(
                JobSpec(id=n, hosts=tuple(h), communicators=(ring,))
                for n, h in self.placements.items()
            )
        )
        workload = derive_workload(drained, jobs)
        ports = {name: dict(t.ports) for name, t in self.transports.items()}
        result = realized(drained, workload, ports)
        for j in result.jobs:
            predicted = shadow.get(j.job, pb.JobPrediction())
            self.console.print(
                f"  {j.job}: shadow predicted {predicted.busbw_gbps:.1f} Gb/s (ECMP "
                f"{predicted.ecmp_busbw_gbps:.1f}); realized from the ports its plugin applied, "
                f"forwarded hop by hop: {j.busbw_gbps or 0.0:.1f} Gb/s",
                highlight=False,
            )


if __name__ == "__main__":
    main()
