"""An emulated job: what an NCCL net plugin does with the client, without GPUs or RDMA.

Why ship it: the demo, the multi-process tests and the benchmark need many "jobs" that behave
like the real consumer: register, declare a communicator, and keep a per-QP table of the source
port and flow label in force, the way a plugin keeps its QPs (setting the flow label at
INIT->RTR, or ``mlx5dv_modify_qp_udp_sport`` later). :func:`run_job` is a plain function of
picklable arguments, so it runs in a separate process (``multiprocessing`` with ``spawn``) as
well as in a thread; like the client, it imports nothing of the server, so a process starts
fast.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from c4p.client.mirror import Action, BindingChange, QpId
from c4p.client.sync import FlowIntentClient
from c4p.client.wire import communicator


@dataclass
class EmulatedTransport:
    """The plugin side: QP -> (UDP source port, flow label) in force, and what it was asked."""

    ports: dict[QpId, int] = field(default_factory=dict)
    labels: dict[QpId, int] = field(default_factory=dict)
    applied: int = 0
    withdrawn: int = 0
    defaulted: int = 0
    """QPs put back on their default port (flow label 0) by a change of control mode."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, change: BindingChange) -> None:
        b = change.binding
        with self._lock:
            if change.action in (Action.WITHDRAW, Action.DEFAULT):
                self.ports.pop(b.id, None)  # the kernel's own port: flow label 0
                self.labels.pop(b.id, None)
                if change.action is Action.DEFAULT:
                    self.defaulted += 1
                else:
                    self.withdrawn += 1
                return
            self.ports[b.id] = b.udp_sport
            self.labels[b.id] = b.flow_label
            self.applied += 1


def run_job(
    target: str,
    job_id: str,
    hosts: list[str],
    *,
    qps: int = 1,
    channels: int = 1,
    timeout: float = 60.0,
    release: bool = False,
) -> dict[str, Any]:
    """Register ``job_id`` on ``hosts``, submit one rail ring, wait for every binding.

    Returns a summary (picklable): the token, the intent revision, the epoch reached, the port
    and flow label of every QP as applied, the counts of apply/withdraw callbacks, and the
    seconds from SubmitIntents to the last binding.
    """
    transport = EmulatedTransport()
    with FlowIntentClient(target) as client:
        job = client.register_job(job_id, hosts=hosts, tenant="emulated")
        watch = job.watch(on_change=transport)
        try:
            started = time.perf_counter()
            reply = job.submit([communicator("dp", qps_per_connection=qps, channels=channels)])
            complete = watch.wait(
                lambda m: m.intent_revision >= reply.revision and len(m.bindings) >= reply.flows,
                timeout,
            )
            elapsed = time.perf_counter() - started
            mirror = watch.mirror
            summary = {
                "job": job_id,
                "token": job.token,
                "complete": complete,
                "flows": reply.flows,
                "revision": reply.revision,
                "epoch": mirror.epoch,
                "ports": {"/".join(map(str, k)): v for k, v in sorted(transport.ports.items())},
                "labels": {"/".join(map(str, k)): v for k, v in sorted(transport.labels.items())},
                "applied": transport.applied,
                "withdrawn": transport.withdrawn,
                "seconds": elapsed,
                "error": None if watch.error is None else str(watch.error),
            }
        finally:
            watch.stop()
        if release:
            job.release()
    return summary
