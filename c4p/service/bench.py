"""The service benchmark: SubmitIntents -> every binding received, for a 1,024-rank job, and
bindings pushed per second to concurrent watchers; over real gRPC on loopback.

Why measured this way: what a training job waits for at start-up is the time from declaring its
communicator to holding a port for every QP, which includes the debounce, planning, port
synthesis, the store commit (fsync) and the stream; so the clock runs in the *client* process,
from just before SubmitIntents until the update that covers the submitted revision has been
applied. Clients run in separate processes (``spawn``) so the controller's event loop does not
share a GIL with them, as in production. The push rate is measured with several processes each
opening a stream of the same job from epoch 0 (a full set each), from the first stream opened
to the last binding received.

``python -m c4p.service.bench [--ranks 1024] [--qps 2] [--channels 2]`` prints the figures;
:func:`run` returns them for ``c4p bench``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from c4p.client import AdminClient, FlowIntentClient, communicator
from c4p.service.embedded import EmbeddedService, embedded_config
from topology.generators import sized_for_gpus


@dataclass(frozen=True)
class ServiceBench:
    ranks: int
    flows: int
    repeats: int
    submit_to_bound_s: float
    """Median over repeats: SubmitIntents sent -> every binding applied, in the client."""
    submit_to_bound_min_s: float
    solve_s: float
    """Median controller time per plan (plan + bindings + diff + prediction), from the log."""
    watchers: int
    pushed: int
    push_seconds: float
    bindings_per_s: float
    debounce_s: float

    def lines(self) -> list[str]:
        return [
            f"{self.ranks}-rank job, {self.flows:,} QPs: SubmitIntents -> all bindings received "
            f"{1000 * self.submit_to_bound_s:.0f} ms (median of {self.repeats}, best "
            f"{1000 * self.submit_to_bound_min_s:.0f} ms; controller step {1000 * self.solve_s:.0f}"
            f" ms, debounce {1000 * self.debounce_s:.0f} ms)",
            f"{self.watchers} concurrent streams, full sets: {self.pushed:,} bindings in "
            f"{self.push_seconds:.2f} s = {self.bindings_per_s:,.0f} bindings/s",
        ]


def _one_job(target: str, job_id: str, hosts: list[str], qps: int, channels: int) -> dict[str, Any]:
    """In a client process: register, watch, then time SubmitIntents -> all bindings."""
    with FlowIntentClient(target) as client:
        job = client.register_job(job_id, hosts=hosts)
        watch = job.watch()
        try:
            watch.wait(lambda m: m.updates >= 1, 60)  # the stream is open and synced
            started = time.perf_counter()
            reply = job.submit([communicator("dp", qps_per_connection=qps, channels=channels)])
            done = watch.wait(
                lambda m: m.intent_revision >= reply.revision and len(m.bindings) >= reply.flows,
                300,
            )
            elapsed = time.perf_counter() - started
        finally:
            watch.stop()
        return {"ok": done, "seconds": elapsed, "flows": reply.flows, "token": job.token}


def _full_set(target: str, job_id: str, token: str, flows: int) -> dict[str, Any]:
    """In a client process: open a stream from epoch 0 and time the full set."""
    with FlowIntentClient(target) as client:
        started = time.time()
        watch = client.session(job_id, token).watch()
        try:
            ok = watch.wait(lambda m: len(m.bindings) >= flows, 300)
            return {
                "ok": ok,
                "start": started,
                "end": time.time(),
                "count": len(watch.mirror.bindings),
            }
        finally:
            watch.stop()


def run(
    ranks: int = 1024, qps: int = 2, channels: int = 2, repeats: int = 3, watchers: int = 4
) -> ServiceBench:
    """Run the benchmark on a rail-optimized fabric sized for ``ranks`` GPUs."""
    fabric = sized_for_gpus("rail-optimized", ranks)
    nics = len(fabric.hosts[0].nics)
    hosts = [h.name for h in fabric.hosts][: max(2, ranks // nics)]
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="c4p-bench-") as tmp:
        config = embedded_config(  # the controller's default debounce, a durable store
            fabric,
            Path(tmp),
            store={"path": str(Path(tmp) / "c4p.db"), "synchronous": "full"},
            controller={},
        )
        with EmbeddedService(config) as service, context.Pool(max(watchers, 1)) as pool:
            target = service.address
            timings = []
            for k in range(repeats):
                result = pool.apply(_one_job, (target, f"bench{k}", hosts, qps, channels))
                if not result["ok"]:
                    raise RuntimeError(f"job bench{k} was not fully bound")
                timings.append(result)
                if k < repeats - 1:
                    FlowIntentClient(target).session(f"bench{k}", result["token"]).release()
            last = timings[-1]
            pending = [
                pool.apply_async(
                    _full_set, (target, f"bench{repeats - 1}", last["token"], last["flows"])
                )
                for _ in range(watchers)
            ]
            streams = [p.get(timeout=600) for p in pending]
            admin = AdminClient(target, service.admin_token)
            try:
                solve = [d.solve_seconds for d in admin.decisions(50) if d.flows]
            finally:
                admin.close()
    seconds = [t["seconds"] for t in timings]
    pushed = sum(s["count"] for s in streams)
    span = max(s["end"] for s in streams) - min(s["start"] for s in streams)
    return ServiceBench(
        ranks=len(hosts) * nics,
        flows=last["flows"],
        repeats=repeats,
        submit_to_bound_s=statistics.median(seconds),
        submit_to_bound_min_s=min(seconds),
        solve_s=statistics.median(solve) if solve else 0.0,
        watchers=watchers,
        pushed=pushed,
        push_seconds=span,
        bindings_per_s=pushed / span if span > 0 else 0.0,
        debounce_s=config.controller.debounce_s,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Benchmark the controller service.")
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--qps", type=int, default=2)
    parser.add_argument("--channels", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--watchers", type=int, default=4)
    options = parser.parse_args(argv)
    result = run(options.ranks, options.qps, options.channels, options.repeats, options.watchers)
    for line in result.lines():
        print(line)
    print(asdict(result))


if __name__ == "__main__":
    main()
