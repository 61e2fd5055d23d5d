"""The lab run the product's way: ``c4p serve`` on the lab's gNMI faces + a ``c4p agent`` per host.

Why: the lab's first demo probed with its own helpers and planned with :func:`solver.plan`
directly, which shows that probing works but not that *c4p* works. Here every piece is the one a
user runs: the controller discovers the fabric from the lab switches' gNMI targets (kernel state
and lldpd, :mod:`c4p.lab.gnmi_faces`) and keeps it current from their streams, so an
``ip link set ... down`` reaches it as a gNMI link event, never injected; a real ``c4p agent``
process runs inside every host namespace (it checks its addresses against that kernel and
probes with real sockets); jobs register and submit intents through the Python client; the
bindings they receive are sent as UDP and measured by the kernel's interface counters.

:class:`ServedLab` owns the gNMI faces, the service (restartable in another port mode: the agents
reconnect by themselves) and the agent processes, and tears all of them down on the way out,
also on failure. The lab itself (:class:`~c4p.lab.build.Lab`) is the caller's.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from c4p.api.v1 import intents_pb2 as pb
from c4p.client import AdminClient, FlowIntentClient, communicator
from c4p.client.mirror import BindingMirror
from c4p.client.sync import BindingWatch
from c4p.errors import C4pError
from c4p.files import save_fabric, save_model
from c4p.lab.build import Lab
from c4p.lab.gnmi_faces import LabGnmi
from c4p.lab.hosts import Helpers
from c4p.lab.traffic import Measurement, measure
from c4p.service.embedded import EmbeddedService, embedded_config
from c4p.service.runtime import ServiceRuntime
from c4p.service.serve import ServeConfig, check
from southbound.bindings import Binding, BindingSet, SynthesisMode
from southbound.routes import QpRoute
from topology.compare import compare_fabrics

AGENT_TOKEN = "lab-agent-token-0123456789"
"""Agents and controller both run here and the socket is in the lab's private folder."""
UNBOUND = pb.BindingIssue.Kind.KIND_UNBOUND
"""A QP the controller could not bind (yet): not settled while any is left."""


class LabServeError(C4pError):
    """The served lab could not be brought to a usable state (says which step and why)."""


def _wait(predicate: Any, seconds: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


class ServedLab:
    """gNMI faces, ``c4p serve`` (gNMI source, Unix socket) and one agent per host (a context)."""

    def __init__(
        self,
        lab: Lab,
        *,
        mode: str = "learned",
        settle_s: float = 120.0,
        deviation: dict[str, Any] | None = None,
        bindings: bool = False,
    ) -> None:
        self.lab = lab
        self.bindings = bindings
        """Agents also serve their host's ranks bindings and take their reports (libc4p's
        socket, :meth:`rank_socket`): the collective workload of ``c4p lab detect``."""
        self.deviation = deviation
        """The controller's ``deviation:`` section (the counter check), default if ``None``."""
        self.mode = mode
        self.settle_s = settle_s
        self.endpoint = f"unix:{lab.workdir}/controller.sock"
        self.gnmi = LabGnmi(lab)
        self.service: EmbeddedService | None = None
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self._targets = lab.workdir / "gnmi-targets.yaml"
        self._declared = lab.workdir / "declared.json"
        self._services = 0

    # -- up and down ----------------------------------------------------------------------------

    def __enter__(self) -> ServedLab:
        try:
            self.up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def up(self) -> None:
        servers = self.gnmi.__enter__()
        save_model(servers.targets_file(sample_interval_s=0.2), self._targets)
        save_fabric(self.lab.fabric, self._declared)  # hints: NIC addresses switches cannot tell
        self._wait_lldp()
        self.serve(self.mode)
        self._start_agents()

    def _wait_lldp(self) -> None:
        """Discovery at start-up needs every cable in lldpd's tables, which fill in ~1-2 s."""
        source = self.gnmi.source
        assert source is not None
        want = Counter(
            end.device
            for cable in self.lab.plan.cables
            for end in (cable.a, cable.b)
            if not end.is_host
        )
        if not _wait(lambda: all(len(source.neighbors(s)) >= n for s, n in want.items()), 60, 0.2):
            seen = {s: len(source.neighbors(s)) for s in want}
            raise LabServeError(f"lldpd: not every cable seen within 60 s (seen {seen})")

    def serve(self, mode: str) -> None:
        """(Re)start the controller in port mode ``mode``; the agents reconnect on their own."""
        self.stop_service()
        self.mode = mode
        self._services += 1
        hosts = [h.name for h in self.lab.fabric.hosts]
        source = {
            "source": "gnmi",
            "targets": str(self._targets),
            "declared": str(self._declared),
            "rediscover_s": 0,
        }
        overrides: dict[str, Any] = {
            "listen": {"address": self.endpoint, "grace_s": 0.2},
            # The controller has no signal that routing has converged after a link event; it
            # re-probes after this quiet time. With the default 0.05 s a re-probe raced FRR's
            # withdrawal from the far leaf's ECMP group (once in five runs under load): the
            # paths learned then were not the paths after convergence.
            "controller": {"debounce_s": 0.5, "max_delay_s": 2.0},
            "ports": {"mode": mode},
            "agents": {"credentials": [{"hosts": hosts, "token": {"value": AGENT_TOKEN}}]},
        }
        if self.deviation is not None:
            overrides["deviation"] = self.deviation
        directory = self.lab.workdir / f"controller-{self._services}"
        base = embedded_config(self.lab.fabric, directory, **overrides).model_dump()
        service = EmbeddedService(check(ServeConfig.model_validate({**base, "fabric": source})))
        service.start()
        self.service = service
        runtime = service.runtime
        assert runtime is not None
        diff = compare_fabrics(self.lab.fabric, runtime.fabric, statuses=False)
        if not diff.clean:
            raise LabServeError(f"discovery: the lab's gNMI faces gave another fabric: {diff}")
        if runtime.fleet is not None and not runtime.fleet.wait_streaming(30):
            raise LabServeError(f"gNMI: not every switch streaming ({runtime.fleet.status()})")
        if self.agents:
            self.wait_agents()

    def _start_agents(self) -> None:
        fabric = self.lab.fabric
        for host in (h.name for h in fabric.hosts):
            ports = [
                {"port": name, "interface": end.interface, "address": str(end.address)}
                for cable in self.lab.plan.cables
                for end, name in (
                    (cable.a, fabric.links[cable.number].a),
                    (cable.b, fabric.links[cable.number].b),
                )
                if end.is_host and end.device == host
            ]
            config = self.lab.workdir / f"agent-{host}.yaml"
            section: dict[str, Any] = {
                "host": host,
                "controllers": [self.endpoint],
                "token": {"value": AGENT_TOKEN},
                "ports": ports,
                "reconnect": {"initial_s": 0.1, "max_s": 0.5},
            }
            if self.bindings:
                section["bindings"] = {
                    "socket": {"path": str(self.rank_socket(host))},
                    "state_dir": str(self.lab.workdir / f"agent-{host}-state"),
                }
            config.write_text(yaml.safe_dump(section))
            log = open(self.lab.workdir / f"agent-{host}.log", "ab")  # noqa: SIM115 (the child's)
            self.agents[host] = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.lab.ns(host),
                    sys.executable,
                    "-c",
                    "from c4p.cli import main; main()",
                    "agent",
                    "-c",
                    str(config),
                    "--prober",
                    "socket",
                ],  # fmt: skip
                stdout=log,
                stderr=log,
            )
            log.close()
        self.wait_agents()

    def rank_socket(self, host: str) -> Path:
        """The Unix socket ``host``'s agent serves its ranks on (with ``bindings``)."""
        return self.lab.workdir / f"ranks-{host}.sock"

    def wait_agents(self, seconds: float = 120.0) -> None:
        runtime = self.runtime
        assert runtime.agents is not None
        want = set(self.agents)
        if not _wait(
            lambda: runtime.agents is not None and runtime.agents.hosts() >= want, seconds
        ):
            dead = {h: p.returncode for h, p in self.agents.items() if p.poll() is not None}
            missing = sorted(want - runtime.agents.hosts())
            logs = {h: self._log_tail(h) for h in missing[:2]}
            raise LabServeError(
                f"agents: {missing} not connected within {seconds:.0f} s (exited: {dead}; "
                f"last log lines: {logs})"
            )

    def _log_tail(self, host: str, lines: int = 3) -> list[str]:
        path = self.lab.workdir / f"agent-{host}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return text.splitlines()[-lines:]

    def stop_service(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None

    def close(self) -> None:
        """Agents (SIGTERM, then SIGKILL), the service, the gNMI faces: each even if one fails."""
        for proc in self.agents.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.agents.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        try:
            self.stop_service()
        finally:
            self.gnmi.close()

    # -- using it -------------------------------------------------------------------------------

    @property
    def runtime(self) -> ServiceRuntime:
        assert self.service is not None and self.service.runtime is not None
        return self.service.runtime

    def probe_counts(self) -> tuple[int, int]:
        """(traces sent, traces with a hop that did not answer) by this service so far."""
        worker = self.runtime.probe_worker
        return (worker.traces, worker.incomplete) if worker is not None else (0, 0)

    def confirmation(self) -> tuple[int, int]:
        """(learned table entries, probes recorded for them) of this service's table."""
        worker = self.runtime.probe_worker
        if worker is None:
            return (0, 0)
        with worker.learner.lock:
            return worker.learner.table.confirmation()

    def settled(self, mirror: BindingMirror) -> bool:
        """Bound, nothing unbound, and (unless predicted) every binding seen by probes."""
        if not mirror.bindings or any(i.kind == UNBOUND for i in mirror.issues):
            return False
        return self.mode == "predicted" or all(b.verified for b in mirror.bindings.values())

    def submit(
        self, flow: FlowIntentClient, job: str, hosts: list[str], qps: int, *, strict: bool = True
    ) -> BindingWatch:
        """Register ``job`` over ``hosts`` (a ring), submit one communicator, wait until settled
        (``strict``: raise if it does not within ``settle_s``; else return the watch as it is,
        for a fabric where some QPs cannot be bound as planned, such as hash policy 0)."""
        handle = flow.register_job(job, hosts=hosts)
        watch = handle.watch()
        reply = handle.submit([communicator("dp", qps_per_connection=qps)])
        if not watch.wait_revision(reply.revision, self.settle_s) or not watch.wait(
            self.settled, self.settle_s
        ):
            if not strict and watch.mirror.epoch:
                return watch
            watch.stop()
            raise LabServeError(f"job {job}: bindings not settled within {self.settle_s:.0f} s")
        return watch

    def client(self) -> FlowIntentClient:
        return FlowIntentClient(self.endpoint)

    def findings(self) -> list[str]:
        """The probe findings of the decision log (mismatches re-bound, black holes)."""
        return [f for d in self._decisions() for f in d.probe_findings]

    def reasons(self) -> list[str]:
        """Why the controller re-planned, newest first (a link event names its link)."""
        return [d.reason for d in self._decisions()]

    def _decisions(self) -> list[Any]:
        assert self.service is not None
        admin = AdminClient(self.endpoint, self.service.admin_token)
        try:
            return list(admin.decisions(200))
        finally:
            admin.close()


def ring(lab: Lab, hosts: list[str]) -> list[str]:
    """``hosts`` in ring order alternating leaves: every ring connection crosses the spines."""
    index = lab.fabric.index
    by_leaf: dict[int, list[str]] = {}
    for host in hosts:
        nic = next(h for h in lab.fabric.hosts if h.name == host).nics[0].ports[0].name
        by_leaf.setdefault(index.leaf_of(index.port(f"{host}:{nic}").node), []).append(host)
    return [h for group in zip(*by_leaf.values(), strict=False) for h in group]


def binding_set(lab: Lab, mirrors: dict[str, BindingMirror]) -> tuple[BindingSet, list[QpRoute]]:
    """What the jobs received, as the traffic sender's bindings and planned routes."""
    index = lab.fabric.index
    bindings, routes = [], []
    epoch = 0
    for job, mirror in mirrors.items():
        epoch = max(epoch, mirror.epoch)
        for b in mirror.bindings.values():
            path = index.path_resources(b.path)
            routes.append(QpRoute(job, b.communicator, b.connection, b.qp, b.src_port,
                                  b.dst_port, path))  # fmt: skip
            bindings.append(
                Binding(
                    job=job,
                    communicator=b.communicator,
                    connection=b.connection,
                    qp=b.qp,
                    src=b.src_port,
                    dst=b.dst_port,
                    sport=b.udp_sport,
                    flow_label=b.flow_label,
                    path=b.path,
                    epoch=b.epoch,
                )  # fmt: skip
            )
    bset = BindingSet(
        fabric=lab.fabric.name, epoch=epoch, mode=SynthesisMode.LEARNED, bindings=tuple(bindings)
    )
    return bset, routes


def measured(lab: Lab, helpers: Helpers, mirrors: dict[str, BindingMirror]) -> Measurement:
    """Send every bound QP's traffic and read which links it crossed (kernel counters)."""
    bset, routes = binding_set(lab, mirrors)
    return measure(lab, helpers, bset, routes)


def uses_link(mirror: BindingMirror, a: str, b: str) -> bool:
    return any(
        {x, y} == {a, b}
        for binding in mirror.bindings.values()
        for x, y in zip(binding.path, binding.path[1:], strict=False)
    )


__all__ = ["LabServeError", "ServedLab", "binding_set", "measured", "ring", "uses_link"]
