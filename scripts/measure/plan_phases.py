"""``c4p plan`` end to end, per phase, as a user runs it: a fresh process per run.

Cases: 2-tier (rail-optimized) and 3-tier (fat-tree) fabrics at 4,096 and 16,384 GPUs, each
with two jobs files: a rail ring over every host placed at random (``c4p jobs generate
--placement random``), and a shuffled ring (each host's ranks send to a random other host:
``c4p.bench.permutation_jobs``, the issue's case, an explicit communicator of one connection
per GPU). Every run is ``c4p plan --fabric F --jobs J -o plan.json --timings --json T``: the
wall time and peak memory come from outside (``os.wait4``), the phases from the command itself
(``imports``: from the first ``c4p.cli`` import to the command body; ``startup+exit``: wall
minus every phase, the interpreter starting and ending).

The machine is shared: figures are the median of ``--repeat`` runs; compare versions by
running both side by side (``--c4p`` takes another checkout's ``c4p`` executable).

Run: .venv/bin/python scripts/measure/plan_phases.py [--gpus 4096 16384] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("imports", "load", "validate", "baselines", "solve", "write", "evaluate", "report")
FABRICS = {"2-tier": "rail-optimized", "3-tier": "fat-tree"}


def run(command: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak resident KiB and exit status of one command."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): {err.strip()}")
    return wall, usage.ru_maxrss, proc.returncode


def make_inputs(c4p: str, work: Path, tiers: str, gpus: int) -> dict[str, tuple[Path, Path]]:
    """The fabric file and the two jobs files of one case."""
    from c4p.bench import permutation_jobs
    from c4p.files import load_fabric, save_model

    fabric = work / f"{tiers}-{gpus}.json"
    subprocess.run(
        [c4p, "fabric", "generate", FABRICS[tiers], "--gpus", str(gpus), "-o", str(fabric)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    hosts = len(json.loads(fabric.read_text())["hosts"])
    ring = work / f"{tiers}-{gpus}-ring.json"
    subprocess.run(
        [c4p, "jobs", "generate", "--fabric", str(fabric), "-o", str(ring), "--count", "1",
         "--hosts", str(hosts), "--placement", "random"],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    shuffled = work / f"{tiers}-{gpus}-shuffled.json"
    save_model(permutation_jobs(qps=1, seed=0)(load_fabric(fabric)), shuffled)
    return {"ring": (fabric, ring), "shuffled": (fabric, shuffled)}


def measure(c4p: str, fabric: Path, jobs: Path, work: Path, repeat: int) -> dict[str, float]:
    walls: list[float] = []
    rss: list[int] = []
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    rest: list[float] = []
    for _ in range(repeat):
        figures = work / "timings.json"
        wall, peak, _ = run(
            [c4p, "plan", "--fabric", str(fabric), "--jobs", str(jobs),
             "-o", str(work / "plan.json"), "--timings", "--json", str(figures)]
        )  # fmt: skip
        seconds = json.loads(figures.read_text())["timings"]
        walls.append(wall)
        rss.append(peak)
        for p in PHASES:
            phases[p].append(seconds.get(p, 0.0))
        rest.append(wall - sum(seconds.values()))
    out = {"wall": statistics.median(walls), "wall_min": min(walls)}
    out |= {p: statistics.median(v) for p, v in phases.items()}
    out["startup+exit"] = statistics.median(rest)
    out["rss_mb"] = statistics.median(rss) / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--tiers", nargs="+", default=list(FABRICS), choices=list(FABRICS))
    parser.add_argument("--jobs", nargs="+", default=["ring", "shuffled"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--c4p", default=str(Path(sys.executable).with_name("c4p")))
    args = parser.parse_args()
    head = ["case", "wall", "min", *PHASES, "startup+exit", "MB"]
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    with tempfile.TemporaryDirectory(prefix="c4p-plan-phases-") as tmp:
        work = Path(tmp)
        for tiers in args.tiers:
            for gpus in args.gpus:
                inputs = make_inputs(args.c4p, work, tiers, gpus)
                for kind in args.jobs:
                    fabric, jobs = inputs[kind]
                    m = measure(args.c4p, fabric, jobs, work, args.repeat)
                    cells = [f"{tiers} {gpus:,} {kind}", f"{m['wall']:.2f}", f"{m['wall_min']:.2f}"]
                    cells += [f"{m[p]:.3f}" for p in (*PHASES, "startup+exit")]
                    cells.append(f"{m['rss_mb']:.0f}")
                    print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
