"""Wiring changes while serving: churn of untouched jobs, and time from re-discovery to bindings.

Part 1 (in process, the real planner and store, no gRPC): a leaf-spine of LEAVES leaves and 4
spines, one 2-NIC host per leaf, one two-host job per leaf pair; one cable of leaf-00 moved to
another spine port that was free. Reports the jobs re-planned, the bindings of untouched jobs
that changed (must be 0) and the swap step's wall time.

Part 2 (end to end): ``c4p serve`` discovering emulated gNMI switches (loopback), two jobs,
a cable moved with ``FabricEmulator.rewire``; per round: re-discovery's "wiring changed" log
line -> the touched job's stream delivers its new bindings, and the untouched job's stream
updates (must be 0). Re-discovery runs every 0.2 s, so about 0.1 s of the emulator-to-binding
time is waiting for the next round.

Run: ``.venv/bin/python scripts/measure/measure_rewire.py [leaves] [rounds]``
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from fixtures_fabric_emulator import FAST, serve_gnmi  # noqa: E402
from rewire_cases import FULL, START, moved, with_links  # noqa: E402
from service_cases import clients, links_of  # noqa: E402
from test_serve_discovery import config_with  # noqa: E402

from c4p.client import communicator  # noqa: E402
from c4p.controller import (  # noqa: E402
    ControllerState,
    FlapSettings,
    Intake,
    IntakeLimits,
    Key,
    KeyKind,
    PlannerSettings,
    Reconciler,
)
from c4p.files import save_fabric, save_model  # noqa: E402
from c4p.service.embedded import EmbeddedService  # noqa: E402
from c4p.store import SqliteStore  # noqa: E402
from topology.generators import generate  # noqa: E402
from topology.model import Link  # noqa: E402


def part1(leaves: int) -> None:
    full = generate("leaf-spine", leaves=leaves, spines=4, hosts_per_leaf=1, nics_per_host=2)
    spare = next(
        k for k in full.links if {e.split(":")[0] for e in k.ends} == {"leaf-00", "spine-03"}
    )
    start = with_links(full, [k for k in full.links if k != spare])
    old = next(
        k for k in start.links if {e.split(":")[0] for e in k.ends} == {"leaf-00", "spine-00"}
    )
    new_link = Link(
        a=next(e for e in old.ends if e.startswith("leaf-00:")),
        b=next(e for e in spare.ends if e.startswith("spine-03:")),
        speed_gbps=old.speed_gbps,
    )
    after = with_links(start, [new_link if k == old else k for k in start.links])
    store = SqliteStore(":memory:")
    state = ControllerState(start, store.load(), FlapSettings(), 1000.0)
    intake = Intake(state, store, IntakeLimits(), lambda: 1000.0)
    rec = Reconciler(state, store, PlannerSettings(budget_s=2.0))
    hosts = [h.name for h in start.hosts]
    for i in range(0, len(hosts) - 1, 2):
        done = intake.register({"job_id": f"j{i // 2:03d}", "hosts": hosts[i : i + 2]})
        intake.submit(
            done.record.job_id,
            done.record.incarnation,
            [{"id": "dp", "version": 1, "qps_per_connection": 4}],
            [],
        )
    rec.step(1000.0, [Key(KeyKind.JOB, "x")])
    before = {j: dict(b) for j, b in state.held.items()}
    state.offer_fabric(after)
    t = time.perf_counter()
    outcome = rec.step(1000.0, [Key(KeyKind.WIRING, "measure", force=True)])
    took = time.perf_counter() - t
    assert outcome is not None
    touched = set(outcome.decision.jobs_on_links)
    churn = sum(
        1
        for j in before
        if j not in touched
        for k, h in before[j].items()
        if state.held[j].get(k) != h
    )
    qps = sum(len(b) for b in before.values())
    print(
        f"part 1: {leaves} leaves, {len(before)} jobs, {qps} QPs; moved cable re-plans "
        f"{len(touched)} job(s) {sorted(touched)}; bindings changed for untouched jobs: {churn}; "
        f"jobs with stream news: {sorted(outcome.changed_jobs)}; swap step {took * 1000:.0f} ms"
    )


class _Mark(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.at: float | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if "wiring changed" in record.getMessage() and self.at is None:
            self.at = time.monotonic()


def part2(rounds: int) -> None:
    mark = _Mark()
    logging.getLogger("c4p.discovery").addHandler(mark)
    logging.getLogger("c4p.discovery").setLevel(logging.WARNING)
    gone = frozenset({"leaf-00", "spine-00"})
    detect, total, silent = [], [], []
    for _ in range(rounds):
        with (
            tempfile.TemporaryDirectory(prefix="c4p-rewire-") as d,
            serve_gnmi(START) as (emu, servers),
        ):
            tmp = Path(d)
            save_fabric(FULL, tmp / "declared.json")
            save_model(servers.targets_file(sample_interval_s=0.2, timeouts=FAST), tmp / "t.yaml")
            fabric = {"source": "gnmi", "targets": str(tmp / "t.yaml"),
                      "declared": str(tmp / "declared.json"), "rediscover_s": 0.2}  # fmt: skip
            service = EmbeddedService(config_with(tmp, fabric))
            service.start()
            try:
                assert service.runtime is not None and service.runtime.fleet is not None
                service.runtime.fleet.wait_streaming(30)
                with clients(service.address) as (flow, _):
                    a = flow.register_job("a", hosts=["h0000", "h0001"])
                    b = flow.register_job("b", hosts=["h0002", "h0003"])
                    ra = a.submit([communicator("dp", qps_per_connection=2)])
                    rb = b.submit([communicator("dp", qps_per_connection=2)])
                    wa, wb = a.watch(), b.watch()
                    try:
                        wa.wait_revision(ra.revision, 30)
                        wb.wait_revision(rb.revision, 30)
                        n_b = wb.mirror.updates
                        mark.at = None
                        t0 = time.monotonic()
                        emu.rewire(moved())
                        ok = wa.wait(
                            lambda m: all(
                                gone not in links_of(x.path) for x in m.snapshot().values()
                            ),
                            30,
                        )
                        t1 = time.monotonic()
                        assert ok and mark.at is not None
                        detect.append(mark.at - t0)
                        total.append(t1 - mark.at)
                        time.sleep(0.5)  # let any late step reach b's stream, if one would
                        silent.append(wb.mirror.updates - n_b)
                    finally:
                        wa.stop()
                        wb.stop()
            finally:
                service.stop()
    ms = sorted(x * 1000 for x in total)
    det = sorted(x * 1000 for x in detect)
    print(
        f"part 2: {rounds} rounds; emulator re-cabled -> re-discovery logs the change: median "
        f"{statistics.median(det):.0f} ms (max {det[-1]:.0f}); change logged -> touched job's "
        f"stream has new bindings: median {statistics.median(ms):.0f} ms (max {ms[-1]:.0f}); "
        f"untouched job's stream updates: {silent}"
    )


if __name__ == "__main__":
    part1(int(sys.argv[1]) if len(sys.argv) > 1 else 32)
    part2(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
