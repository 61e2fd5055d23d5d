"""Measure: time to discover a 2,048-GPU rail-optimized fabric over gNMI (96 switches), and
the link-down-to-event latency, with the emulated targets in a separate process.

    .venv/bin/python scripts/measure/measure_gnmi.py [--gpus 2048] [--failures 40] [--tls]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from topology.generators import sized_for_gpus  # noqa: E402


def serve(gpus: int, targets_path: Path, tls_dir: str | None) -> None:
    from c4p.testing.certs import make_pki
    from c4p.testing.dataplane import FabricEmulator
    from c4p.testing.gnmi_target import GnmiFabric
    from southbound.targets import Timeouts

    fabric = sized_for_gpus("rail-optimized", gpus)
    emu = FabricEmulator(fabric)
    pki = make_pki(Path(tls_dir)) if tls_dir else None
    with GnmiFabric(emu, pki=pki, mutual_tls=bool(pki)) as servers:
        timeouts = Timeouts(connect_s=5, rpc_s=10, retry_initial_s=0.2, retry_max_s=2)
        tf = servers.targets_file(
            sample_interval_s=float(os.environ.get("SAMPLE_S", "1.0")), timeouts=timeouts
        )
        targets_path.write_text(tf.model_dump_json())
        print("ready", flush=True)
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "quit":
                break
            before = time.time()
            (emu.fail_link if cmd == "fail" else emu.restore_link)(arg)
            print(f"ok {before!r}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=2048)
    parser.add_argument("--failures", type=int, default=40)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--serve", default=None)
    parser.add_argument("--tls-dir", default=None)
    args = parser.parse_args()
    if args.serve:
        serve(args.gpus, Path(args.serve), args.tls_dir)
        return

    from southbound.events import EventQueue, LinkEvent
    from southbound.fleet import Fleet
    from southbound.targets import TargetsFile
    from topology.compare import compare_fabrics

    declared = sized_for_gpus("rail-optimized", args.gpus)
    work = Path(tempfile.mkdtemp(prefix="c4p-measure-"))
    targets_path = work / "targets.json"
    cmd = [sys.executable, __file__, "--gpus", str(args.gpus), "--serve", str(targets_path)]
    if args.tls:
        cmd += ["--tls-dir", str(work / "pki")]
    child = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        targets = TargetsFile.model_validate_json(targets_path.read_text())
        print(
            f"fabric: {len(declared.switches)} switches, {len(declared.hosts)} hosts, "
            f"{sum(1 for _ in declared.nic_ports())} NIC ports, {len(declared.links)} links; "
            f"{'mTLS' if args.tls else 'insecure'}"
        )
        times = []
        for _ in range(3):
            start = time.perf_counter()
            result = Fleet(targets, declared=declared).discover()
            times.append(time.perf_counter() - start)
        blind_start = time.perf_counter()
        blind = Fleet(targets).discover()
        blind_time = time.perf_counter() - blind_start
        comparison = compare_fabrics(declared, result.fabric)
        print(
            f"discovery with declared hints: {', '.join(f'{t:.2f}' for t in times)} s "
            f"(equal to declared: {result.fabric == declared}, problems: {len(result.problems)})"
        )
        print(
            f"discovery without hints: {blind_time:.2f} s "
            f"(compare clean: {compare_fabrics(declared, blind.fabric).clean})"
        )
        assert comparison.clean

        events = EventQueue()
        log = []

        def sink(e):
            if isinstance(e, LinkEvent):
                log.append(e)
            events(e)

        fleet = Fleet(
            targets,
            sink=sink,
            declared=declared,
            emit_loads=bool(os.environ.get("LAG")),
            refresh_after_up_s=float(os.environ.get("REFRESH_UP_S", "1.0")),
        )
        start = time.perf_counter()
        fleet.start()
        try:
            from southbound.events import TargetHealth

            assert fleet.wait_until(
                lambda st: all(x.health is TargetHealth.LIVE for x in st.values()), 120
            )
            print(f"all live after {time.perf_counter() - start:.2f} s")
            assert fleet.wait_streaming(120)
            print(
                f"all {len(targets.targets)} targets observed and streaming after "
                f"{time.perf_counter() - start:.2f} s"
            )
            if os.environ.get("LAG"):
                from southbound.events import LinkLoad

                for _ in range(5):
                    time.sleep(2)
                    lags = [time.time() - e.at for e in events.drain() if isinstance(e, LinkLoad)]
                    print(
                        f"sample lag: n={len(lags)} median {statistics.median(lags):.2f} s max {max(lags):.2f} s"
                    )
            rng = random.Random(7)
            links = list(declared.links)
            latencies, up_latencies = [], []
            split = []
            for _ in range(args.failures):
                link = rng.choice(links)
                for action, bucket, want in (
                    ("fail", latencies, "down"),
                    ("restore", up_latencies, "up"),
                ):
                    child.stdin.write(f"{action} {link.id}\n")
                    child.stdin.flush()
                    before = float(child.stdout.readline().split()[1])
                    event = events.wait_for(
                        lambda e, link=link, want=want: (
                            isinstance(e, LinkEvent)
                            and e.link_id == link.id
                            and e.status.value == want
                        ),
                        float(os.environ.get("WAIT_S", "10")),
                    )
                    assert isinstance(event, LinkEvent), f"no {want} event for {link.id}"
                    bucket.append(event.received - before)
                    split.append((event.at - before, event.received - event.at))
            for name, xs in (
                ("link-down -> LinkEvent", latencies),
                ("link-up -> LinkEvent", up_latencies),
            ):
                xs = sorted(x * 1000 for x in xs)
                p95 = xs[int(0.95 * (len(xs) - 1))]
                print(
                    f"{name}: n={len(xs)} median {statistics.median(xs):.1f} ms, "
                    f"p95 {p95:.1f} ms, max {xs[-1]:.1f} ms, min {xs[0]:.1f} ms"
                )
            em = sorted(x[0] * 1000 for x in split)
            tr = sorted(x[1] * 1000 for x in split)
            print(
                f"  of which in the emulator (fail -> notification timestamp): median {statistics.median(em):.1f} ms, max {em[-1]:.1f} ms; "
                f"transport + driver (timestamp -> event): median {statistics.median(tr):.1f} ms, max {tr[-1]:.1f} ms"
            )
            snap_start = time.perf_counter()
            fleet.snapshot()
            print(f"snapshot rebuild: {time.perf_counter() - snap_start:.3f} s")
        finally:
            fleet.stop()
        child.stdin.write("quit\n")
        child.stdin.flush()
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


if __name__ == "__main__":
    main()
