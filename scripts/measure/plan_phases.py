"""``c4p plan`` end to end, per phase, as a user runs it: a fresh process per run.

Cases: 2-tier (rail-optimized) and 3-tier (fat-tree) fabrics at 4,096 and 16,384 GPUs, each
with two jobs files: a rail ring over every host placed at random (``c4p jobs generate
--placement random``), and a shuffled ring (each host's ranks send to a random other host:
``c4p.figures.ladder.permutation_jobs``, the issue's case, an explicit communicator of one connection
per GPU). Every run is ``c4p plan --fabric F --jobs J -o plan.json --timings --json T``: the
wall time and peak memory come from outside (``os.wait4``), the phases from the command itself
(``imports``: from the first ``c4p.cli`` import to the command body; ``startup+exit``: wall
minus every phase, the interpreter starting and ending).

The machine is shared: figures are the median of ``--repeat`` runs; compare versions by
running both side by side (``--c4p`` takes another checkout's ``c4p`` executable).

Run: .venv/bin/python scripts/measure/plan_phases.py [--gpus 4096 16384] [--repeat 5]
[--versus "env PYTHONPATH=OTHER_CHECKOUT .venv/bin/python -c 'from c4p.cli import main; main()'"]
(``--versus``: the two versions' runs alternate, so both see the same load.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("imports", "load", "validate", "ecmp", "greedy", "solve", "write", "evaluate")
"""What ``--timings`` reports in ``--json`` (rendering the tables, ``report``, comes after the
JSON is written and falls in ``startup+exit``)."""
FABRICS = {"2-tier": "rail-optimized", "3-tier": "fat-tree"}


def run(command: list[str], cwd: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak resident KiB of one command.

    It runs in ``cwd`` (a scratch directory): ``python -c`` puts the working directory first
    on ``sys.path``, which would shadow the checkout being timed with this one."""
    # As installed c4p runs: with cached bytecode. PYTHONDONTWRITEBYTECODE (set in some CI
    # and container images) makes every run compile c4p's ~40 modules again: ~0.1 s.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, env=env
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def make_inputs(c4p: list[str], work: Path, tiers: str, gpus: int) -> dict[str, tuple[Path, Path]]:
    """The fabric file and the two jobs files of one case."""
    from c4p.figures.ladder import permutation_jobs
    from c4p.files import load_fabric, save_model

    fabric = work / f"{tiers}-{gpus}.json"
    subprocess.run(
        [*c4p, "fabric", "generate", FABRICS[tiers], "--gpus", str(gpus), "-o", str(fabric)],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=work,
    )
    hosts = len(json.loads(fabric.read_text())["hosts"])
    ring = work / f"{tiers}-{gpus}-ring.json"
    subprocess.run(
        [*c4p, "jobs", "generate", "--fabric", str(fabric), "-o", str(ring), "--count", "1",
         "--hosts", str(hosts), "--placement", "random"],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=work,
    )  # fmt: skip
    shuffled = work / f"{tiers}-{gpus}-shuffled.json"
    save_model(permutation_jobs(qps=1, seed=0)(load_fabric(fabric)), shuffled)
    return {"ring": (fabric, ring), "shuffled": (fabric, shuffled)}


class Samples:
    """One command's runs of one case."""

    def __init__(self) -> None:
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.rss: list[int] = []
        self.phases: dict[str, list[float]] = {p: [] for p in PHASES}
        self.rest: list[float] = []

    def summary(self) -> dict[str, float]:
        out = {"wall": statistics.median(self.walls), "wall_min": min(self.walls)}
        out["cpu"] = statistics.median(self.cpus)
        out |= {p: statistics.median(v) for p, v in self.phases.items()}
        out["startup+exit"] = statistics.median(self.rest)
        out["rss_mb"] = statistics.median(self.rss) / 1024
        return out


def measure(
    commands: list[list[str]], fabric: Path, jobs: Path, work: Path, repeat: int, phased: bool
) -> list[dict[str, float]]:
    """Each command's figures; with several commands, their runs alternate (one of each per
    round, the order turning every round) so that all see the same load on a shared machine."""
    samples = [Samples() for _ in commands]
    for round_ in range(repeat):
        turn = round_ % len(commands)
        for k in [*range(turn, len(commands)), *range(turn)]:
            figures = work / "timings.json"
            command = [*commands[k], "plan", "--fabric", str(fabric), "--jobs", str(jobs),
                       "-o", str(work / "plan.json")]  # fmt: skip
            if phased:
                command += ["--timings", "--json", str(figures)]
            wall, cpu, peak = run(command, work)
            seconds = json.loads(figures.read_text())["timings"] if phased else {}
            got = samples[k]
            got.walls.append(wall)
            got.cpus.append(cpu)
            got.rss.append(peak)
            for p in PHASES:
                got.phases[p].append(seconds.get(p, 0.0))
            got.rest.append(wall - sum(seconds.values()))
    return [s.summary() for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--tiers", nargs="+", default=list(FABRICS), choices=list(FABRICS))
    parser.add_argument("--jobs", nargs="+", default=["ring", "shuffled"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--c4p",
        default=str(Path(sys.executable).with_name("c4p")),
        help="The c4p command to time (a command line: e.g. another checkout's, run with "
        "PYTHONPATH=that/checkout python -c 'from c4p.cli import main; main()').",
    )
    parser.add_argument(
        "--versus",
        help="Another c4p command line (e.g. main's checkout) run alternately with --c4p, "
        "run for run: a row of its own per case and the ratio of the medians.",
    )
    parser.add_argument(
        "--no-phases", action="store_true", help="Wall and CPU only (a c4p without --timings)."
    )
    parser.add_argument("--markdown", type=Path, help="Also write the table to this file.")
    args = parser.parse_args()
    c4p = shlex.split(args.c4p)
    commands = [c4p, shlex.split(args.versus)] if args.versus else [c4p]
    labels = ["", " (versus)"] if args.versus else [""]
    phased = not args.no_phases
    ratios = ["| case | wall ratio (c4p / versus) | cpu ratio |", "|---|---:|---:|"]
    head = ["case", "wall s", "min", "cpu s", *PHASES, "startup+exit", "MB"]
    rows = [" | ".join(head), " | ".join("---" for _ in head)]
    print(rows[0], rows[1], sep="\n")
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="c4p-plan-phases-") as tmp:
        work = Path(tmp)
        for tiers in args.tiers:
            for gpus in args.gpus:
                inputs = make_inputs(c4p, work, tiers, gpus)
                for kind in args.jobs:
                    fabric, jobs = inputs[kind]
                    found = measure(commands, fabric, jobs, work, args.repeat, phased)
                    for label, m in zip(labels, found, strict=True):
                        case = f"{tiers} {gpus:,} {kind}{label}"
                        cells = [case, f"{m['wall']:.2f}", f"{m['wall_min']:.2f}"]
                        cells.append(f"{m['cpu']:.2f}")
                        cells += [f"{m[p]:.3f}" for p in (*PHASES, "startup+exit")]
                        cells.append(f"{m['rss_mb']:.0f}")
                        rows.append(" | ".join(cells))
                        print(rows[-1], flush=True)
                    if args.versus:
                        ratio = found[0]["wall"] / found[1]["wall"]
                        cpu = found[0]["cpu"] / found[1]["cpu"]
                        ratios.append(f"| {tiers} {gpus:,} {kind} | {ratio:.2f} | {cpu:.2f} |")
    if args.markdown:
        command = "scripts/measure/plan_phases.py " + " ".join(sys.argv[1:])
        note = (
            f"Measured by `{command}` on {platform.machine()}, Python "
            f"{platform.python_version()}, {os.cpu_count()} CPUs, "
            f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, in "
            f"{time.perf_counter() - started:.0f} s; load average "
            f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after (the machine is shared: "
            "wall times are noisy, CPU times less so). Median of "
            f"{args.repeat} runs per case.\n"
        )
        text = note + "\n" + "\n".join(f"| {r} |" for r in rows) + "\n"
        if args.versus:
            text += "\n" + "\n".join(ratios) + "\n"
        args.markdown.write_text(text)
    if args.versus:
        print("\n".join(ratios))


if __name__ == "__main__":
    main()
