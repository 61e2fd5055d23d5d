"""``c4p plan``'s fast paths give the same figures as the straightforward code they replaced.

Why: to bring ``c4p plan`` at 16k GPUs under two seconds, evaluation groups flows once per
workload with numpy, the jobs check hands its placement to the workload, NIC line rates come
from arrays, the fabric index is built from lists, and the plan file is written from pieces.
Each reference below is the plain per-item computation (as the code was before), kept here so
the fast code is held to it on every pattern, on degraded fabrics and on workloads read back
from plan files.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from c4p.figures.ladder import permutation_jobs
from solver.planner import plan
from solver.planning.plans import PlanFile, plan_from_paths, plan_json_text
from solver.workload.flows import Workload, nic_line_rate
from solver.workload.jobs import checked_placements, job_ranks
from solver.workload.patterns import derive_workload
from solver.workload.placement import JobsGenParams, generate_jobs
from solver.yardstick.ecmp import ecmp_paths
from solver.yardstick.evaluate import PairResult, evaluate, reference_line_rate
from topology.formats import TextFormat, dump_model
from topology.generators import generate
from topology.index import FabricIndex, natural_key
from topology.model import Fabric, LinkStatus

FABRICS = {
    "leaf-spine": generate("leaf-spine", leaves=4, spines=2, hosts_per_leaf=2, nics_per_host=2),
    "rail": generate("rail-optimized", units=2, hosts_per_unit=4, rails=4, spines=2),
    "dual-plane": generate("dual-plane", units=2, hosts_per_unit=2, rails=2, spines=2),
    "fat-tree": generate(
        "fat-tree", pods=2, leaves_per_pod=2, aggs_per_pod=2, cores=2, hosts_per_leaf=2
    ),
}
PATTERNS = [("ring", "rail"), ("ring", "flat"), ("all-to-all", "rail"), ("tree", "flat")]


def workloads(fabric: Fabric) -> list[tuple[str, Workload]]:
    out = []
    for pattern, ring in PATTERNS:
        params = JobsGenParams(
            jobs=2, hosts_per_job=2, pattern=pattern, ring=ring, qps_per_connection=2,
            channels=2, placement="random", seed=1, rate=0.5 if pattern == "tree" else 1.0,
        )  # fmt: skip
        jobs = generate_jobs(fabric, params)
        workload = derive_workload(fabric, jobs)
        out.append((f"{pattern}/{ring}", workload))
        out.append((f"{pattern}/{ring} from flows", Workload.from_flows(fabric, workload.flows)))
    out.append(("shuffled", derive_workload(fabric, permutation_jobs(qps=2, seed=3)(fabric))))
    return out


# -- references: the per-item code the fast paths replaced -----------------------------------


def reference_pairs(workload: Workload, rates: Any, weights: Any) -> list[PairResult]:
    key_of: dict[tuple[str, str, int, int, int], int] = {}
    conn_pair = np.empty(len(workload.connections), dtype=np.int64)
    divisor: list[int] = []
    for i, c in enumerate(workload.connections):
        key = (c.job, c.communicator, c.src_rank, c.dst_rank, c.tree)
        if key not in key_of:
            key_of[key] = len(key_of)
            divisor.append(c.pairs)
        conn_pair[i] = key_of[key]
    pair_of_flow = conn_pair[workload.flow_connection]
    count = len(key_of)
    total_weight = np.bincount(pair_of_flow, weights=weights, minlength=count)
    total_rate = np.bincount(pair_of_flow, weights=rates, minlength=count)
    flows = np.bincount(pair_of_flow, minlength=count)
    least = np.full(count, np.inf)
    np.minimum.at(least, pair_of_flow, rates / weights)
    effective = total_weight * least / np.asarray(divisor, dtype=np.float64)
    return [
        PairResult(job, comm, s, d, t, int(flows[k]), float(effective[k]), float(total_rate[k]))
        for (job, comm, s, d, t), k in key_of.items()
    ]


def reference_communicators(
    workload: Workload, pairs: list[PairResult], reachable: Any
) -> list[dict[str, Any]]:
    by_comm: dict[tuple[str, str], list[PairResult]] = {}
    for p in pairs:
        by_comm.setdefault((p.job, p.communicator), []).append(p)
    conns = Counter((c.job, c.communicator) for c in workload.connections)
    flows = Counter((f.job, f.communicator) for f in workload.flows)
    lost = Counter(
        (f.job, f.communicator) for f, ok in zip(workload.flows, reachable, strict=True) if not ok
    )
    out = []
    for comm in workload.communicators:
        key = (comm.job, comm.id)
        members = by_comm.get(key, [])
        slowest = min(members, key=lambda p: p.rate_gbps) if members else None
        out.append(
            {
                "connections": conns[key],
                "flows": flows[key],
                "unreachable": lost[key],
                "slowest_pair": (slowest.src_rank, slowest.dst_rank) if slowest else None,
                "slowest_rate_gbps": slowest.rate_gbps if slowest else None,
            }
        )
    return out


def reference_line_rate_of(fabric: Fabric) -> float:
    index = fabric.index
    speeds = Counter(index.line_rate(p.node) for p in index.ports if index.out_resources[p.node])
    if speeds:
        return float(speeds.most_common(1)[0][0])
    return float(np.max(index.res_capacity, initial=1.0))


def same(a: Any, b: Any, where: str = "") -> None:
    """Equal values of equal types, NaN equal to NaN."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b and type(a) is type(b), (where, a, b)


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FABRICS))
def test_evaluation_equals_the_per_item_reference(name: str) -> None:
    healthy = FABRICS[name]
    degraded = healthy.with_link_status({0: LinkStatus.DOWN, 5: LinkStatus.DRAINED})
    for fabric in (healthy, degraded):
        assert reference_line_rate(fabric) == reference_line_rate_of(fabric)
        for label, workload in workloads(fabric):
            for paths in (ecmp_paths(fabric, workload.flows, seed=3).paths,
                          plan(fabric, workload, seed=0, budget=1.0).paths):  # fmt: skip
                result = evaluate(fabric, workload, paths)
                weights = np.array([f.rate for f in workload.flows])
                pairs = reference_pairs(workload, result.flow_rates_gbps, weights)
                assert list(result.pairs) == pairs, label
                reachable = np.array([bool(p) for p in paths], dtype=bool)
                expected = reference_communicators(workload, pairs, reachable)
                got = [
                    {k: getattr(c, k) for k in expected[0]} for c in result.communicators
                ]  # fmt: skip
                same(got, expected, label)


@pytest.mark.parametrize("name", list(FABRICS))
def test_workload_placement_and_line_rates_equal_the_reference(name: str) -> None:
    fabric = FABRICS[name].with_link_status({1: LinkStatus.DOWN})
    for pattern, ring in PATTERNS:
        params = JobsGenParams(jobs=2, hosts_per_job=2, pattern=pattern, ring=ring)
        jobs = generate_jobs(fabric, params)
        placed = checked_placements(fabric, jobs)
        for job, ranks in zip(jobs.jobs, placed, strict=True):
            expected = job_ranks(fabric, job)
            strip = [(r.rank, r.host, r.nic, r.rail, r.ports) for r in ranks]
            assert strip == [(r.rank, r.host, r.nic, r.rail, r.ports) for r in expected]
            for r in ranks:
                want = nic_line_rate(fabric, r.ports)
                assert r.line_rate == want and type(r.line_rate) is type(want)
        workload = derive_workload(fabric, jobs)
        for comm, job in zip(workload.communicators, jobs.jobs, strict=True):
            ranks = job_ranks(fabric, job)
            assert comm.line_rate_gbps == min(nic_line_rate(fabric, r.ports) for r in ranks)


def reference_index(fabric: Fabric) -> dict[str, Any]:
    names = [s.name for s in fabric.switches]
    names += [f"{h.name}:{p.name}" for h in fabric.hosts for n in h.nics for p in n.ports]
    node = {n: i for i, n in enumerate(names)}
    switch = {s.name for s in fabric.switches}
    src, dst, interface = [], [], []
    for link in fabric.links:
        ends = []
        for end in (link.a, link.b):
            device, _, name = end.partition(":")
            ends.append((node[device] if device in switch else node[end], name))
        (a, a_if), (b, b_if) = ends
        src += [a, b]
        dst += [b, a]
        interface += [a_if, b_if]
    out: list[list[int]] = [[] for _ in names]
    for res, u in enumerate(src):
        out[u].append(res)
    return {
        "node_names": tuple(names),
        "res_src": src,
        "res_dst": dst,
        "res_interface": interface,
        "out_resources": tuple(
            tuple(sorted(rs, key=lambda r: natural_key(interface[r]))) for rs in out
        ),
        "res_capacity": [link.speed_gbps for link in fabric.links for _ in (0, 1)],
        "res_usable": [link.status is LinkStatus.UP for link in fabric.links for _ in (0, 1)],
    }


@pytest.mark.parametrize("name", list(FABRICS))
def test_fabric_index_equals_the_reference(name: str) -> None:
    fabric = FABRICS[name].with_link_status({2: LinkStatus.DRAINED})
    index = FabricIndex(fabric)
    for key, want in reference_index(fabric).items():
        got = getattr(index, key)
        got = got.tolist() if isinstance(got, np.ndarray) else got
        assert got == want, key
    assert index.resource_between == {
        (int(u), int(v)): r
        for r, (u, v) in enumerate(zip(index.res_src, index.res_dst, strict=True))
    }
    assert index.node_of_address == {p.port.address: p.node for p in index.ports}


@pytest.mark.parametrize("name", list(FABRICS))
def test_plan_file_text_is_the_model_dumped(name: str) -> None:
    fabric = FABRICS[name]
    workload = derive_workload(fabric, permutation_jobs(qps=2, seed=1)(fabric))
    result = plan(fabric, workload, seed=0, budget=1.0)
    paths: list[Any] = list(result.paths)
    paths[0] = ()  # unreachable flows are written without a path
    text = plan_json_text(fabric, workload.flows, paths, "auto", 7)
    model = plan_from_paths(fabric, workload.flows, paths, "auto", 7)
    assert text == dump_model(model, TextFormat.JSON)
    assert PlanFile.model_validate(json.loads(text)) == model


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(st.text())
def test_a_strings_json_is_what_json_dumps_writes(text: str) -> None:
    """The plan file's strings are encoded by ``encode_basestring_ascii``, which json.dumps
    of a str (default options) returns: quotes, escapes, non-ASCII and surrogates alike."""
    from json.encoder import encode_basestring_ascii

    assert encode_basestring_ascii(text) == json.dumps(text)


# -- the command line ------------------------------------------------------------------------

CLI = [sys.executable, "-c", "from c4p.cli import main; main()"]


def test_plan_reports_its_phases(tmp_path: Path) -> None:
    from c4p.files import save_fabric, save_model

    fabric = FABRICS["rail"]
    save_fabric(fabric, tmp_path / "fabric.json")
    save_model(permutation_jobs(qps=1, seed=0)(fabric), tmp_path / "jobs.json")
    run = subprocess.run(
        [*CLI, "plan", "--fabric", str(tmp_path / "fabric.json"), "--jobs",
         str(tmp_path / "jobs.json"), "-o", str(tmp_path / "plan.json"), "--timings",
         "--json", str(tmp_path / "figures.json")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert re.search(r"timings \(s\): imports [0-9.]+, load", run.stderr)
    phases = json.loads((tmp_path / "figures.json").read_text())["timings"]
    expected = {"imports", "load", "validate", "ecmp", "greedy", "solve", "write", "evaluate"}
    assert expected <= set(phases)
    assert all(v >= 0 for v in phases.values())


def test_a_fresh_plan_never_loads_the_replanning_modules() -> None:
    """``solver.planner.LAZY`` is imported where used: a fresh plan of an intact fabric (both
    tiers, the ECMP baseline and greedy included) must not load any of it, else ``c4p plan``
    pays for it at start again; a re-plan does load what it uses."""
    script = (
        "import sys\n"
        "from c4p.figures.ladder import permutation_jobs\n"
        "from solver.yardstick.ecmp import ecmp_paths\n"
        "from solver.workload.patterns import derive_workload\n"
        "from solver.planner import LAZY, plan\n"
        "from topology.generators import generate\n"
        "for fabric in (generate('rail-optimized', units=2, hosts_per_unit=4, rails=4, spines=2),"
        " generate('fat-tree', pods=2, leaves_per_pod=2, aggs_per_pod=2, cores=2,"
        " hosts_per_leaf=2)):\n"
        "    w = derive_workload(fabric, permutation_jobs(qps=1, seed=0)(fabric))\n"
        "    ecmp_paths(fabric, w.flows)\n"
        "    plan(fabric, w, strategy='greedy')\n"
        "    first = plan(fabric, w)\n"
        "print(sorted(m for m in LAZY if m in sys.modules))\n"
        "plan(fabric, w, first)\n"
        "print('solver.repair.evict' in sys.modules)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert run.stdout.split("\n")[:2] == ["[]", "True"], run.stdout


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads read from /proc")
def test_a_plan_starts_no_blas_worker_unless_asked(tmp_path: Path) -> None:
    """One-shot commands start numpy's BLAS with one thread (``c4p.cli._one_blas_thread``):
    a plan through the entry point ends with the process's one thread, and its plan file is
    byte for byte the plan made with two BLAS threads asked for, which the command leaves as
    asked (no plan calls BLAS, so the threads can change nothing but the CPU spent)."""
    from c4p.files import save_fabric, save_model

    fabric = FABRICS["fat-tree"]
    save_fabric(fabric, tmp_path / "fabric.json")
    save_model(permutation_jobs(qps=2, seed=0)(fabric), tmp_path / "jobs.json")
    script = (
        "import os, sys\n"
        "import c4p.cli as cli\n"
        "def done(code):\n"
        "    print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'),"
        " code, flush=True)\n"
        "    os._exit(0)\n"
        "cli._exit_at_once = done\n"
        "sys.argv = ['c4p', *sys.argv[1:]]\n"
        "cli.main()\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    }
    outputs = []
    for asked in (None, "2"):
        out = tmp_path / f"plan-{asked}.json"
        run = subprocess.run(
            [sys.executable, "-c", script, "plan", "--fabric", str(tmp_path / "fabric.json"),
             "--jobs", str(tmp_path / "jobs.json"), "-o", str(out), "--json", "-"],
            capture_output=True, text=True, timeout=120, check=True,
            env=env | ({"OPENBLAS_NUM_THREADS": asked} if asked else {}),
        )  # fmt: skip
        threads, value, code = run.stdout.strip().splitlines()[-1].split()
        assert code == "0", run.stderr
        if asked is None:
            assert (threads, value) == ("1", "1")
        else:
            assert value == asked and (int(threads) == 2 or (os.cpu_count() or 1) < 2)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and outputs[0]


def test_bad_input_is_one_line_and_exit_2_through_the_entry_point(tmp_path: Path) -> None:
    """The console script builds only the command it runs; errors must read as before."""
    bad = tmp_path / "fabric.json"
    data = json.loads(dump_model(FABRICS["rail"], TextFormat.JSON))
    data["hosts"][1]["nics"][0]["ports"][0]["address"] = "10.0.0.999"
    data["links"][3]["a"] = "nosuchhost:nic0p0"
    bad.write_text(json.dumps(data))
    jobs = tmp_path / "jobs.json"
    jobs.write_text('{"jobs": []}')
    run = subprocess.run(
        [*CLI, "plan", "--fabric", str(bad), "--jobs", str(jobs), "-o", str(tmp_path / "p.json")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert "hosts[1].nics[0].ports[0].address" in lines[0]
    assert "10.0.0.999" in lines[0]
    assert not (tmp_path / "p.json").exists()


def test_entry_point_still_knows_every_command() -> None:
    run = subprocess.run([*CLI, "--help"], capture_output=True, text=True, timeout=60, check=True)
    for command in ("fabric", "jobs", "lab", "admin", "serve", "plan", "evaluate", "bench",
                    "agent", "report"):  # fmt: skip
        assert command in run.stdout
    sub = subprocess.run(
        [*CLI, "fabric", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    for command in ("generate", "show", "discover", "emulate"):
        assert command in sub.stdout


def reference_distances(fabric: Fabric, leaf: int) -> tuple[list[int], list[int]]:
    """Valley-free distances toward ``leaf`` by plain relaxation, from the definitions in
    ``topology.routing``: ``down`` over usable links to a lower tier only; ``up`` the shortest
    valley-free distance, ``min(down, 1 + min over usable links to a higher tier of up)``."""
    from topology.routing import UNREACHABLE

    index = fabric.index
    n = index.num_switches
    tier = index.tier.tolist()
    arcs = [
        (int(u), int(v))
        for u, v, ok in zip(index.res_src, index.res_dst, index.res_usable, strict=True)
        if ok and u < n and v < n
    ]
    down = [UNREACHABLE] * n
    down[leaf] = 0
    for _ in range(n):  # Bellman-Ford style, bounded by the number of switches
        changed = False
        for u, v in arcs:
            if tier[v] < tier[u] and down[v] + 1 < down[u]:
                down[u], changed = down[v] + 1, True
        if not changed:
            break
    up = list(down)
    for _ in range(n):
        changed = False
        for u, v in arcs:
            if tier[v] > tier[u] and up[v] + 1 < up[u]:
                up[u], changed = up[v] + 1, True
        if not changed:
            break
    return down, up


@pytest.mark.parametrize("name", list(FABRICS))
def test_routing_distances_equal_a_plain_relaxation(name: str) -> None:
    """``Routing.table`` (per-tier minima with ``reduceat``) against the definition."""
    rng = np.random.default_rng(7)
    base = FABRICS[name]
    fabrics = [base] + [
        base.with_link_status(
            {int(i): LinkStatus.DOWN for i in rng.choice(len(base.links), 5, replace=False)}
        )
        for _ in range(4)
    ]
    for fabric in fabrics:
        routing = fabric.index.routing
        for leaf in range(fabric.index.num_switches):
            table = routing.table(leaf)
            down, up = reference_distances(fabric, leaf)
            assert table.down_dist.tolist() == down
            assert table.up_dist.tolist() == up


@pytest.mark.parametrize("priorities", [None, {"job0": 3.0}, {"job1": 0.7, "nobody": 2.0}])
def test_flow_weights_equal_the_per_flow_products(priorities: dict[str, float] | None) -> None:
    """``flow_weights`` reads rates and jobs with ``map``: the same ``rate x priority`` floats
    as one product per flow, from a workload's priorities and from overrides."""
    from solver.planner import flow_weights

    fabric = FABRICS["rail"]
    params = JobsGenParams(jobs=2, hosts_per_job=2, pattern="tree", ring="flat",
                           qps_per_connection=2, channels=1, placement="random", seed=4,
                           rate=0.3)  # fmt: skip
    workload = derive_workload(fabric, generate_jobs(fabric, params))
    prio = {c.job: float(c.priority) for c in workload.communicators} | (priorities or {})
    for given in (workload, list(workload.flows)):
        flows, weights = flow_weights(given, priorities)
        base = prio if given is workload else (priorities or {})
        want = [f.rate * base.get(f.job, 1.0) for f in flows]
        assert weights.tolist() == want


# -- records built without their frozen dataclass's __init__ ----------------------------------


def _same_record(fast: object, ref: object) -> None:
    import copy
    import dataclasses
    import pickle

    assert type(fast) is type(ref) and not hasattr(type(ref), "__post_init__")
    assert list(vars(fast).items()) == list(vars(ref).items())  # the fields, in field order
    assert fast == ref and hash(fast) == hash(ref) and repr(fast) == repr(ref)
    assert pickle.loads(pickle.dumps(fast)) == ref and copy.copy(fast) == ref
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.rail = 0  # type: ignore[attr-defined]


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(
    st.integers(0, 10**5),
    st.text(max_size=6),
    st.text(max_size=6),
    st.integers(0, 64),
    st.lists(st.text(max_size=6), max_size=3).map(tuple),
    st.floats(allow_nan=False),
)
def test_rank_nics_and_edges_are_built_as_their_constructors_build_them(
    rank: int, host: str, nic: str, rail: int, ports: tuple[str, ...], rate: float
) -> None:
    """``solver.workload.jobs._rank_nic`` and ``solver.workload.patterns._edge`` skip the
    dataclasses' ``__init__`` (and ``topology.index._port_info``, below): the same objects in every
    way."""
    from solver.workload.jobs import RankNic, _rank_nic
    from solver.workload.patterns import Edge, _edge

    a = _rank_nic(rank, host, nic, rail, ports, "jobs[0]", rate)
    _same_record(a, RankNic(rank, host, nic, rail, ports, "jobs[0]", rate))
    b = RankNic(rank + 1, nic, host, rail, ports, "", rate)
    _same_record(_edge(a, b, rail % 2, rail, None, rate), Edge(a, b, rail % 2, rail, None, rate))
    _same_record(_edge(b, a, 0, 1, rail or None, None), Edge(b, a, qps=rail or None))


def test_port_infos_are_built_as_their_constructor_builds_them() -> None:
    from topology.index import PortInfo, _port_info

    for fabric in FABRICS.values():
        for p in fabric.index.ports:
            _same_record(
                p, PortInfo(p.host, p.nic, p.port, p.rail, p.port_number, p.node)
            )  # the index's own, made by _port_info
        assert _port_info(p.host, p.nic, p.port, 1, 2, 3) == PortInfo(
            p.host, p.nic, p.port, 1, 2, 3
        )


# -- the workload's records and their derivation -----------------------------------------------


def _same_slotted(fast: object, ref: object) -> None:
    """:func:`_same_record` for a slotted dataclass (no instance dictionary)."""
    import copy
    import dataclasses
    import pickle

    assert type(fast) is type(ref) and not hasattr(fast, "__dict__")
    names = [f.name for f in dataclasses.fields(ref)]  # type: ignore[arg-type]
    assert [getattr(fast, n) for n in names] == [getattr(ref, n) for n in names]
    assert [type(getattr(fast, n)) for n in names] == [type(getattr(ref, n)) for n in names]
    assert fast == ref and hash(fast) == hash(ref) and repr(fast) == repr(ref)
    assert pickle.loads(pickle.dumps(fast)) == ref and copy.copy(fast) == ref
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.job = "other"  # type: ignore[attr-defined]


_texts = st.text(max_size=6)


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(
    st.tuples(_texts, _texts, st.integers(0, 10**6), st.integers(0, 64), _texts, _texts),
    st.one_of(st.floats(allow_nan=False), st.integers(-3, 3), st.just(math.nan)),
    st.tuples(st.integers(0, 10**5), st.integers(0, 10**5), st.integers(0, 64)),
    st.tuples(_texts, _texts, _texts, _texts),
    st.tuples(st.integers(1, 16), st.integers(1, 8), st.integers(0, 1)),
)
def test_flows_and_connections_are_built_as_their_constructors_build_them(
    flow: tuple[str, str, int, int, str, str],
    rate: float,
    ranks: tuple[int, int, int],
    where: tuple[str, str, str, str],
    counts: tuple[int, int, int],
) -> None:
    """``make_flow`` and ``make_connection`` set each slot without the frozen dataclasses'
    ``__init__``: the same objects in every way, and a rate that is not ``> 0`` (zero,
    negative, NaN) refused with the constructor's own error."""
    from solver.workload.flows import Connection, Flow, make_connection, make_flow

    if rate > 0:
        _same_slotted(make_flow(*flow, rate), Flow(*flow, rate))
    else:
        with pytest.raises(ValueError) as want:
            Flow(*flow, rate)
        with pytest.raises(ValueError) as got:
            make_flow(*flow, rate)
        assert str(got.value) == str(want.value)
    job, comm, index, _, _, _ = flow
    qps, pairs, tree = counts
    fields = (job, comm, index, *ranks, *where)
    ref = Connection(*fields, qps=qps, pairs=pairs, tree=tree)
    _same_slotted(make_connection(*fields, qps, pairs, tree), ref)
    _same_slotted(make_connection(*fields, 1, 1, 0), Connection(*fields))  # the defaults


def reference_workload(fabric: Fabric, jobs: Any) -> Workload:
    """``derive_workload`` as it was: ``Edge`` records from ``pattern_edges``, each connection
    and flow made by its constructor."""
    from solver.workload.flows import Connection, Flow
    from solver.workload.jobs import Pattern
    from solver.workload.patterns import _communicator, pattern_edges

    flows: list[Flow] = []
    connections: list[Connection] = []
    communicators = []
    for job, ranks in zip(jobs.jobs, checked_placements(fabric, jobs), strict=True):
        for spec in job.communicators:
            communicators.append(_communicator(fabric, job, spec, ranks))
            edges = pattern_edges(ranks, spec)
            index = 0
            trees = spec.trees if spec.pattern is Pattern.TREE else 1
            for tree in range(trees):
                for c in range(spec.channels):
                    channel = tree * spec.channels + c
                    for e in [e for e in edges if e.tree == tree]:
                        qps, rate = e.qps or spec.qps_per_connection, e.rate or spec.rate
                        connections.append(
                            Connection(
                                job.id, spec.id, index, e.src.rank, e.dst.rank, channel,
                                e.src.host, e.src.nic, e.dst.host, e.dst.nic,
                                qps=qps, pairs=e.pairs, tree=tree,
                            )
                        )  # fmt: skip
                        for q in range(qps):
                            g = channel * qps + q
                            src = e.src.ports[g % len(e.src.ports)]
                            dst = e.dst.ports[g % len(e.dst.ports)]
                            flows.append(Flow(job.id, spec.id, index, q, src, dst, rate))
                        index += 1
    return Workload.build(flows, connections, communicators)


def _explicit_jobs(fabric: Fabric, data: st.DataObject) -> Any:
    """One job over two or three hosts, one explicit communicator of random rank pairs on
    different hosts, some with their own QPs and rate, over all ranks or a subset."""
    from solver.workload.jobs import JobsFile

    hosts = data.draw(
        st.lists(st.sampled_from([h.name for h in fabric.hosts]), min_size=2, max_size=3,
                 unique=True)
    )  # fmt: skip
    per_host = {h.name: len(h.nics) for h in fabric.hosts}
    host_of = [h for h in hosts for _ in range(per_host[h])]
    pairs = [(a, b) for a in range(len(host_of)) for b in range(len(host_of))
             if host_of[a] != host_of[b]]  # fmt: skip
    chosen = data.draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=8))
    connections = []
    for a, b in chosen:
        conn: dict[str, Any] = {"src_rank": a, "dst_rank": b}
        if data.draw(st.booleans()):
            conn["qps"] = data.draw(st.integers(1, 3))
        if data.draw(st.booleans()):
            conn["rate"] = data.draw(st.sampled_from([0.25, 2.0, 3.5]))
        connections.append(conn)
    comm: dict[str, Any] = {
        "id": "x", "pattern": "explicit", "connections": connections,
        "channels": data.draw(st.integers(1, 2)),
        "qps_per_connection": data.draw(st.integers(1, 3)),
        "rate": data.draw(st.sampled_from([1.0, 0.5])),
    }  # fmt: skip
    if data.draw(st.booleans()):
        comm["ranks"] = sorted({r for pair in chosen for r in pair} | {0, len(host_of) - 1})
    return JobsFile.model_validate({"jobs": [{"id": "j", "hosts": hosts, "communicators": [comm]}]})


@hypothesis.settings(
    max_examples=120, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
@hypothesis.given(st.data())
def test_derived_workload_equals_the_record_by_record_reference(data: st.DataObject) -> None:
    """Every pattern (rings and trees per rail or flat, broadcast, double trees, all-to-all
    and its rail-only form, explicit pairs with their own QPs and rates, subsets of ranks),
    channels, QPs per connection and rates, on every fabric kind (dual-port NICs included):
    the flows, connections, communicators and flow-to-connection links of the reference."""
    fabric = FABRICS[data.draw(st.sampled_from(sorted(FABRICS)))]
    if data.draw(st.integers(0, 4)) == 0:
        jobs = _explicit_jobs(fabric, data)
    else:
        pattern = data.draw(st.sampled_from(["ring", "tree", "all-to-all"]))
        params: dict[str, Any] = {
            "jobs": data.draw(st.integers(1, 2)), "hosts_per_job": data.draw(st.integers(1, 3)),
            "pattern": pattern, "placement": data.draw(st.sampled_from(["contiguous", "random"])),
            "channels": data.draw(st.integers(1, 2)),
            "qps_per_connection": data.draw(st.integers(1, 3)),
            "rate": data.draw(st.sampled_from([1.0, 0.5, 2.0])),
            "seed": data.draw(st.integers(0, 9)),
        }  # fmt: skip
        if pattern != "all-to-all":
            params["ring"] = data.draw(st.sampled_from(["rail", "flat"]))
            params["collective"] = data.draw(st.sampled_from(["all-reduce", "broadcast"]))
        if pattern == "tree":
            params["trees"] = data.draw(st.integers(1, 2))
        if pattern == "all-to-all":
            params["rail_only"] = data.draw(st.booleans())
        hosts = len(fabric.hosts)
        hypothesis.assume(params["jobs"] * params["hosts_per_job"] <= hosts)
        jobs = generate_jobs(fabric, JobsGenParams.model_validate(params))
    got, want = derive_workload(fabric, jobs), reference_workload(fabric, jobs)
    assert got.flows == want.flows and got.connections == want.connections
    assert got.communicators == want.communicators
    assert got.flow_connection.tolist() == want.flow_connection.tolist()
    assert [type(f) for f in got.flows] == [type(f) for f in want.flows]
    assert len(got.flows) >= len(got.connections)


def reference_nics_of_host(
    fabric: Fabric,
) -> dict[str, dict[str, tuple[int, tuple[str, ...], Any]]]:
    """Host -> NIC -> (rail, port nodes, line rate) port by port, as ``_nics_of_host`` read
    them before it went NIC by NIC."""
    index = fabric.index
    names = index.node_names
    found: dict[str, dict[str, tuple[int, tuple[str, ...], Any]]] = {}
    for port in index.ports:
        nics = found.setdefault(port.host.name, {})
        rail, ports, rate = nics.get(port.nic.name, (port.rail, (), 0))
        if index.out_resources[port.node]:
            rate += index.line_rate(port.node)
        nics[port.nic.name] = (rail, (*ports, names[port.node]), rate)
    for host in fabric.hosts:
        found.setdefault(host.name, {})
    return found


@pytest.mark.parametrize("name", list(FABRICS))
@pytest.mark.parametrize("cut", [0, 1, 3])
def test_nics_of_host_equal_the_port_by_port_reference(name: str, cut: int) -> None:
    """With every port cabled, and with every or every third host link left out (NICs with
    no cabled port, or one of two): the same rails, port nodes, line rates and their types
    (an uncabled NIC's rate is the integer 0), in the same orders."""
    from solver.workload.jobs import _nics_of_host

    # Host links of four speeds (a NIC's rate is its ports' sum), some of them left out.
    data = FABRICS[name].model_dump()
    hosts = {h["name"] for h in data["hosts"]}
    on_host = [i for i, link in enumerate(data["links"])
               if {link["a"].partition(":")[0], link["b"].partition(":")[0]} & hosts]  # fmt: skip
    for k, i in enumerate(on_host):
        data["links"][i]["speed_gbps"] = [100.0, 200.0, 400.0, 25.0][k % 4]
    dropped = set(on_host[::cut]) if cut else set()
    data["links"] = [link for i, link in enumerate(data["links"]) if i not in dropped]
    fabric = Fabric.model_validate(data)
    got, want = _nics_of_host(fabric), reference_nics_of_host(fabric)
    assert got == want and list(got) == list(want)
    for host, nics in want.items():
        assert list(got[host]) == list(nics)
        for nic, (_, _, rate) in nics.items():
            assert type(got[host][nic][2]) is type(rate)
    if cut:  # some NIC lost a port's speed, or all of it
        assert got != _nics_of_host(FABRICS[name])
