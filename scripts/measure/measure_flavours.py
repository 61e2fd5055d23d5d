"""Measure, per switch-OS flavour and for a mixed fabric: time to discover a 2,048-GPU
rail-optimized fabric over gNMI, and link-down -> LinkEvent latency. The emulated targets run
in a child process (their own GIL), the driver here.

    .venv/bin/python scripts/measure/measure_flavours.py [--gpus 2048] [--failures 15]
        [--flavours sonic,eos,nxos,junos,cumulus,mixed,openconfig]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fabric(gpus: int):  # type: ignore[no-untyped-def]
    from c4p.testing.oc_payloads import with_switch_addresses
    from topology.generators import sized_for_gpus

    return with_switch_addresses(sized_for_gpus("rail-optimized", gpus))


def serve(gpus: int, flavour: str, targets_path: Path) -> None:
    from c4p.testing.dataplane import FabricEmulator
    from c4p.testing.flavours import mixed
    from c4p.testing.gnmi_target import GnmiFabric
    from southbound.targets import Timeouts

    fabric = _fabric(gpus)
    names = [s.name for s in fabric.switches]
    flavours = mixed(names) if flavour == "mixed" else dict.fromkeys(names, flavour)
    emu = FabricEmulator(fabric, flavours=flavours)
    with GnmiFabric(emu) as servers:
        timeouts = Timeouts(connect_s=5, rpc_s=20, retry_initial_s=0.2, retry_max_s=2)
        targets = servers.targets_file(sample_interval_s=5.0, timeouts=timeouts)
        targets_path.write_text(targets.model_dump_json())
        print("ready", flush=True)
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "quit":
                break
            before = time.time()
            (emu.fail_link if cmd == "fail" else emu.restore_link)(arg)
            print(f"ok {before!r}", flush=True)


def measure(gpus: int, flavour: str, failures: int) -> str:
    import random

    from southbound.events import EventQueue, LinkEvent, TargetHealth
    from southbound.fleet import Fleet
    from southbound.targets import TargetsFile
    from topology.compare import compare_fabrics

    declared = _fabric(gpus)
    work = Path(tempfile.mkdtemp(prefix="c4p-measure-flavours-"))
    targets_path = work / "targets.json"
    cmd = [sys.executable, __file__, "--gpus", str(gpus), "--serve", flavour, str(targets_path)]
    child = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        targets = TargetsFile.model_validate_json(targets_path.read_text())
        start = time.perf_counter()
        hinted = Fleet(targets, declared=declared).discover()
        hinted_s = time.perf_counter() - start
        start = time.perf_counter()
        blind = Fleet(targets).discover()
        blind_s = time.perf_counter() - start
        equal = hinted.fabric == declared
        clean = compare_fabrics(declared, blind.fabric).clean
        events = EventQueue()
        fleet = Fleet(targets, sink=events, declared=declared, emit_loads=False)
        fleet.start()
        latencies: list[float] = []
        try:
            assert fleet.wait_until(
                lambda st: all(x.health is TargetHealth.LIVE for x in st.values()), 180
            )
            assert fleet.wait_streaming(180)
            rng = random.Random(7)
            links = list(declared.links)
            for _ in range(failures):
                link = rng.choice(links)
                for action, want in (("fail", "down"), ("restore", "up")):
                    child.stdin.write(f"{action} {link.id}\n")
                    child.stdin.flush()
                    before = float(child.stdout.readline().split()[1])
                    event = events.wait_for(
                        lambda e, lid=link.id, w=want: (
                            isinstance(e, LinkEvent) and e.link_id == lid and e.status.value == w
                        ),
                        20.0,
                    )
                    assert isinstance(event, LinkEvent), f"no {want} event for {link.id}"
                    if want == "down":
                        latencies.append((event.received - before) * 1000)
        finally:
            fleet.stop()
        child.stdin.write("quit\n")
        child.stdin.flush()
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    xs = sorted(latencies)
    p95 = xs[int(0.95 * (len(xs) - 1))]
    return (
        f"| {flavour} | {len(declared.switches)} | {hinted_s:.2f} | {blind_s:.2f} | "
        f"{equal} / {clean} | {len(hinted.findings)} | {statistics.median(xs):.1f} | "
        f"{p95:.1f} | {xs[-1]:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=2048)
    parser.add_argument("--failures", type=int, default=15)
    parser.add_argument("--flavours", default="sonic,eos,nxos,junos,cumulus,mixed,openconfig")
    parser.add_argument("--serve", nargs=2, default=None)
    args = parser.parse_args()
    if args.serve:
        serve(args.gpus, args.serve[0], Path(args.serve[1]))
        return
    print(
        "| flavour | switches | discover, hinted (s) | discover, blind (s) | "
        "equal / compare clean | findings | link-down -> LinkEvent median (ms) | p95 (ms) | "
        "max (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for flavour in args.flavours.split(","):
        print(measure(args.gpus, flavour, args.failures), flush=True)


if __name__ == "__main__":
    main()
