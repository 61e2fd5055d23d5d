"""``c4p bench --scale``: the scale ladder — how c4p grows from 4,096 to 131,072 GPUs.

Why a ladder of its own: the scenario and failure ladders ask how *good* the plans are on
fabrics of a few thousand GPUs; this one asks what each step of the C4P loop *costs* as the
fabric grows (issue 31): making the files, reading them, a full plan, a re-plan after one link
fails, the max-min fair evaluation, and the memory all that takes, beside how close the plans
stay to their bounds.

**Rungs.** Each rung is one fabric of ``gpus`` GPUs, 8 NICs per host, a shuffled ring over
every GPU with two QPs per connection (:func:`c4p.figures.ladder.permutation_jobs`, seed 0):

* *3-tier*: the radix-64 fat-tree of ``gpus / 1,024`` pods (32 leaves, 32 aggs each, 1,024
  cores): what ``c4p fabric generate fat-tree --gpus N`` builds up to 65,536 GPUs, and at
  131,072 the issue's ``--set pods=128 --set leaves_per_pod=32 ...`` (the generator's own
  choice there is radix 128, a different family);
* *2-tier*: ``c4p fabric generate rail-optimized --gpus N``.

**One process per rung**, run one after the other (:func:`run`): the peak resident memory is
the process's own (``ru_maxrss``), and a 131k rung's 2 GB are freed before the next starts.
A rung runs, timing each step (wall and CPU seconds):

1. *generate*: build the fabric and the jobs and write both as JSON files (kept in the work
   folder; their size is reported);
2. *load*: read them back and derive the flows, as ``c4p plan`` does, and build the fabric's
   routing index;
3. *plan*: :func:`solver.planner.plan` from scratch on the healthy fabric;
4. *evaluate*: :func:`solver.yardstick.evaluate.evaluate` of that plan's paths;
5. *one link down*: a top-tier link (agg to core on 3 tiers, leaf to spine on 2), drawn with a
   fixed seed, goes down; the snapshot's index is built (as the controller has it before it
   re-plans), then a plan from scratch and a *re-plan* from the healthy plan in force, and the
   re-plan is evaluated.

Each rung gives two rows, healthy and one link down. *c4p / bound* is the plan's max
utilization over its best lower bound (1.00 = proven optimal); for the failure row the
re-plan's. *moved / bound* is the flows the re-plan moved over the planner's lower bound on the
moves any plan reaching that utilization must make (:attr:`solver.planning.result.Plan.min_moves`).
"""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

RUNGS = (4096, 8192, 16384, 32768, 65536, 131072)
"""GPUs per rung, both fabrics."""

FABRICS = ("3-tier", "2-tier")

BUDGET = 5.0
"""Seconds of search per plan: ``c4p plan``'s default."""

LINK_SEED = 31
"""Seed of the failed link's draw (the same link on every run of a rung)."""


@dataclass(frozen=True)
class ScaleRow:
    """One row of the ladder: a fabric at one size, healthy or with one link down."""

    fabric: str
    gpus: int
    case: str
    link: str
    flows: int
    fabric_mb: float
    generate_s: float
    generate_cpu_s: float
    load_s: float
    load_cpu_s: float
    plan_s: float
    plan_cpu_s: float
    replan_s: float | None
    replan_cpu_s: float | None
    evaluate_s: float
    evaluate_cpu_s: float
    peak_mb: float
    util_c4p: float
    bound: float
    moved: int | None
    min_moves: int | None
    method: str


class Clock:
    """Wall and CPU seconds of each timed step, by name."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall[name] = time.perf_counter() - wall
        self.cpu[name] = time.process_time() - cpu


def fat_tree_params(gpus: int) -> dict[str, int]:
    """The radix-64 fat-tree of ``gpus`` GPUs (see the module docstring)."""
    if gpus < 2048 or gpus % 1024:
        raise ValueError(f"gpus must be a multiple of 1,024 and at least 2,048, got {gpus}")
    return {"pods": gpus // 1024, "leaves_per_pod": 32, "aggs_per_pod": 32, "cores": 1024,
            "hosts_per_leaf": 32, "nics_per_host": 8}  # fmt: skip


def top_link(fabric: Any, seed: int = LINK_SEED) -> int:
    """A link between a top-tier switch and the tier below it, drawn with ``seed``."""
    index = fabric.index
    src, dst = index.res_src[0::2], index.res_dst[0::2]
    switches = index.num_switches
    both = (src < switches) & (dst < switches)
    tier = np.asarray(index.tier)
    top = int(tier[:switches].max())
    ends_top = np.zeros(len(src), dtype=bool)
    ends_top[both] = (tier[src[both]] == top) | (tier[dst[both]] == top)
    links = np.flatnonzero(both & ends_top)
    return int(links[np.random.default_rng(seed).integers(len(links))])


def measure_rung(fabric_kind: str, gpus: int, folder: Path) -> list[ScaleRow]:
    """One rung, in this process (see the module docstring); files are left in ``folder``."""
    from c4p.figures.ladder import permutation_jobs
    from c4p.files import load_fabric, load_model, save_fabric, write_text
    from solver.planner import plan
    from solver.workload.jobs import JobsFile
    from solver.workload.patterns import derive_workload
    from solver.yardstick.evaluate import evaluate
    from topology.generators import generate, sized_for_gpus
    from topology.model import LinkStatus

    if fabric_kind not in FABRICS:
        raise ValueError(f"fabric must be one of {', '.join(FABRICS)}, got {fabric_kind!r}")
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{'ft' if fabric_kind == '3-tier' else 'ro'}{gpus}"
    fabric_path, jobs_path = folder / f"{stem}.json", folder / f"{stem}-jobs.json"
    clock = Clock()
    with clock.step("generate"):
        if fabric_kind == "3-tier":
            built = generate("fat-tree", **fat_tree_params(gpus))
        else:
            built = sized_for_gpus("rail-optimized", gpus)
        save_fabric(built, fabric_path)
        jobs = permutation_jobs(qps=2, seed=0)(built)
        write_text(jobs_path, jobs.model_dump_json(exclude_defaults=True))
    del built, jobs
    with clock.step("load"):
        fabric = load_fabric(fabric_path)
        workload = derive_workload(fabric, load_model(JobsFile, jobs_path), str(jobs_path))
        _ = fabric.index.routing
    with clock.step("plan"):
        healthy = plan(fabric, workload, budget=BUDGET)
    with clock.step("evaluate"):
        evaluate(fabric, workload, healthy.paths)
    link = top_link(fabric)
    index = fabric.index
    names = index.node_names
    with clock.step("snapshot"):
        snapshot = fabric.with_link_status({link: LinkStatus.DOWN})
        _ = snapshot.index.routing
    with clock.step("plan down"):
        fresh = plan(snapshot, workload, budget=BUDGET)
    with clock.step("re-plan"):
        again = plan(snapshot, workload, healthy, budget=BUDGET)
    with clock.step("evaluate down"):
        evaluate(snapshot, workload, again.paths)
    del fresh
    first = ScaleRow(
        fabric=fabric_kind,
        gpus=gpus,
        case="healthy",
        link="",
        flows=len(workload.flows),
        fabric_mb=fabric_path.stat().st_size / 1e6,
        generate_s=clock.wall["generate"],
        generate_cpu_s=clock.cpu["generate"],
        load_s=clock.wall["load"],
        load_cpu_s=clock.cpu["load"],
        plan_s=clock.wall["plan"],
        plan_cpu_s=clock.cpu["plan"],
        replan_s=None,
        replan_cpu_s=None,
        evaluate_s=clock.wall["evaluate"],
        evaluate_cpu_s=clock.cpu["evaluate"],
        peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
        util_c4p=healthy.objective.max_utilization,
        bound=healthy.bounds.best,
        moved=None,
        min_moves=None,
        method=_methods(healthy),
    )
    return [
        first,
        replace(
            first,
            case="one link down",
            link=f"{names[index.res_src[2 * link]]}--{names[index.res_dst[2 * link]]}",
            plan_s=clock.wall["plan down"],
            plan_cpu_s=clock.cpu["plan down"],
            replan_s=clock.wall["re-plan"],
            replan_cpu_s=clock.cpu["re-plan"],
            evaluate_s=clock.wall["evaluate down"],
            evaluate_cpu_s=clock.cpu["evaluate down"],
            util_c4p=again.objective.max_utilization,
            bound=again.bounds.best,
            moved=len(again.moved),
            min_moves=again.min_moves,
            method=_methods(again),
        ),
    ]


def _methods(result: Any) -> str:
    """The methods of a plan's parts other than ``kept``, most flows first."""
    flows: dict[str, int] = {}
    for part in result.parts:
        flows[part.method] = flows.get(part.method, 0) + part.flows
    return ", ".join(sorted(flows, key=lambda m: (m == "kept", -flows[m])))


def rungs(max_gpus: int | None = None) -> list[tuple[str, int]]:
    """The ladder's (fabric, GPUs), smallest first, up to ``max_gpus``."""
    top = RUNGS[-1] if max_gpus is None else max_gpus
    return [(kind, g) for g in RUNGS if g <= top for kind in FABRICS]


def run(
    folder: Path,
    max_gpus: int | None = None,
    progress: Callable[[ScaleRow], None] | None = None,
) -> list[ScaleRow]:
    """Every rung up to ``max_gpus``, each in its own Python process, one after the other.

    Raises :class:`c4p.errors.C4pError` with the rung's standard error when one fails."""
    from c4p.errors import C4pError

    rows: list[ScaleRow] = []
    for kind, gpus in rungs(max_gpus):
        done = subprocess.run(
            [sys.executable, "-m", "c4p.figures.scale", kind, str(gpus), str(folder)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise C4pError(
                f"the {kind} {gpus:,}-GPU rung failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-2000:]}"
            )
        for data in json.loads(done.stdout.strip().splitlines()[-1]):
            row = ScaleRow(**data)
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


def _s(wall: float | None, cpu: float | None) -> str:
    return "" if wall is None or cpu is None else f"{wall:.2f} ({cpu:.2f})"


def _ratio(value: float | int | None, bound: float | int | None) -> str:
    if value is None or bound is None:
        return ""
    if bound == 0:
        return f"{value} / 0"
    return f"{value / bound:.2f} ({value:g} / {bound:g})"


def markdown(rows: Sequence[ScaleRow], command: str, seconds: float) -> str:
    """The ladder as a markdown table, with how it was made."""
    head = (
        "| fabric | GPUs | case | flows | file MB | generate s | load s | plan s | re-plan s "
        "| evaluate s | peak MB | c4p / bound | moved / bound | method |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    lines = [
        f"| {r.fabric} | {r.gpus:,} | {r.case}{f' (`{r.link}`)' if r.link else ''} | {r.flows:,}"
        f" | {r.fabric_mb:.0f} | {_s(r.generate_s, r.generate_cpu_s)}"
        f" | {_s(r.load_s, r.load_cpu_s)} | {_s(r.plan_s, r.plan_cpu_s)}"
        f" | {_s(r.replan_s, r.replan_cpu_s)} | {_s(r.evaluate_s, r.evaluate_cpu_s)}"
        f" | {r.peak_mb:,.0f} | {_ratio(r.util_c4p, r.bound)} | {_ratio(r.moved, r.min_moves)}"
        f" | {r.method} |"
        for r in rows
    ]
    machine = f"{platform.machine()}, Python {platform.python_version()}"
    return (
        f"Produced by `{command}` in {seconds:.0f} s on {machine}, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}; the method is in "
        "`c4p/figures/scale.py`'s docstring. Seconds are wall-clock with the process's CPU "
        "seconds in brackets (a shared 2-core machine: read the CPU figures). *plan s* is a "
        "plan from scratch (healthy, or on the snapshot with the link down), *re-plan s* the "
        "re-plan from the healthy plan in force, both `plan()` calls; *evaluate s* the max-min "
        "fair rates of the (re-)plan's paths; *peak MB* the rung process's maximum resident "
        "set (both rows: one process). *c4p / bound*: the (re-)plan's max utilization over its "
        "best lower bound; *moved / bound*: flows the re-plan moved over the planner's lower "
        "bound on moves.\n\n" + head + "\n".join(lines) + "\n"
    )


def plot(rows: Sequence[ScaleRow], path: Path) -> None:
    """CPU seconds per step against GPUs (log-log), one line per fabric and step; peak memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    # CPU seconds: on the shared machine the ladder runs on, wall seconds move 2-5x with the load
    steps = (("generate_cpu_s", "generate"), ("load_cpu_s", "load"), ("plan_cpu_s", "plan"),
             ("evaluate_cpu_s", "evaluate"))  # fmt: skip
    for fabric, style in zip(FABRICS, ("-", "--"), strict=True):
        healthy = [r for r in rows if r.fabric == fabric and r.case == "healthy"]
        down = [r for r in rows if r.fabric == fabric and r.case != "healthy"]
        if not healthy:
            continue
        xs = [r.gpus for r in healthy]
        for field, label in steps:
            left.plot(xs, [getattr(r, field) for r in healthy], style, marker="o",
                      label=f"{fabric} {label}")  # fmt: skip
        left.plot([r.gpus for r in down], [r.replan_cpu_s or 0.0 for r in down], style, marker="s",
                  label=f"{fabric} re-plan (one link down)")  # fmt: skip
        right.plot(xs, [r.peak_mb for r in healthy], style, marker="o", label=fabric)
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("GPUs")
        axis.legend(fontsize=7)
    left.set_yscale("log")
    left.set_ylabel("CPU seconds")
    left.set_title("c4p at scale: CPU seconds per step")
    right.set_ylabel("peak resident MB per rung process")
    right.set_title("memory")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rows_json(rows: Sequence[ScaleRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def main(argv: Sequence[str]) -> None:
    """``python -m c4p.figures.scale FABRIC GPUS FOLDER``: one rung, its rows as JSON."""
    kind, gpus, folder = argv[0], int(argv[1]), Path(argv[2])
    rows = measure_rung(kind, gpus, folder)
    print(json.dumps(rows_json(rows)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
