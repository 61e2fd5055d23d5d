"""``c4p lab detect``: the detector proved on real kernels, from what real ranks report.

The lab runs the product's way (:mod:`c4p.lab.served`: ``c4p serve`` on the lab's gNMI faces, a
``c4p agent`` in every host namespace, here also serving its ranks bindings and taking their
reports), one job in ``active`` control mode over every host, and the collective workload of
:mod:`c4p.lab.collective`: a ``c4p_ring`` rank per host, linked with libc4p, sending on its bound
ports and reporting through ``c4p_report_*``. Then, one at a time with recovery between, the
faults of :mod:`c4p.lab.faults` and the ranks' own (compute-slow, hung), and benign phases (the
message size changes, an operator drain moves flows, the job restarts). Per scenario: what was
injected, what the detector said first (class, element, confidence) and how long after, what it
did, the median step time before / during / after, and for benign phases the false positives.

Why 3 leaves and a mixed ring: with two leaves every path over a spine crosses both of that
spine's leaf links, so no observation of the paths can tell which of the two is slow (the
detector would rightly name both); a third leaf and a ring that enters each leaf from both other
leaves give the slow paths a link of their own. Why the ring runs both ways (explicit
connections to both neighbours, :func:`c4p.lab.collective.ring_connections`): one way, a host's
downlink carries exactly the QPs its predecessor's uplink carries, and no timing tells the two
apart.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from c4p.client import communicator, connection
from c4p.client.mirror import BindingMirror
from c4p.client.sync import AdminClient, BindingWatch
from c4p.client.wire import ApiError
from c4p.detector.respond import Event, EventKind
from c4p.errors import C4pError
from c4p.lab.build import Lab, Routing
from c4p.lab.collective import Ring, RingSettings, ring_connections
from c4p.lab.faults import Fault, line_rate
from c4p.lab.served import LabServeError, ServedLab
from topology.generators import LeafSpineParams, leaf_spine
from topology.model import Fabric

JOB = "ring"
QPS = 4
SCENARIOS = (
    "spine-rate", "message-size", "compute-slow", "link-loss", "host-link-slow", "rank-hang",
    "restart", "link-cut", "replan",
)  # fmt: skip
"""In this order by default; the re-plan last, as what it set off reached further than itself
(docs/lab.md, "Measured: c4p lab detect")."""
TEST_SCENARIOS = ("spine-rate", "message-size", "compute-slow", "host-link-slow")


def detect_fabric() -> Fabric:
    """3 leaves x 2 spines x 3 hosts (see the module docstring for why three leaves)."""
    return leaf_spine(LeafSpineParams(leaves=3, spines=2, hosts_per_leaf=3))


def mixed_ring(lab: Lab) -> list[str]:
    """Hosts in a ring order whose connections enter every leaf from both other leaves."""
    index = lab.fabric.index
    by_leaf: dict[int, list[str]] = {}
    for h in lab.fabric.hosts:
        leaf = index.leaf_of(index.port(f"{h.name}:{h.nics[0].ports[0].name}").node)
        by_leaf.setdefault(leaf, []).append(h.name)
    groups = [list(v) for _, v in sorted(by_leaf.items())]
    patterns = [(0, 1, 2), (0, 2, 1)]
    order: list[str] = []
    for i in range(max(len(g) for g in groups)):
        for leaf in patterns[i % 2] if len(groups) == 3 else range(len(groups)):
            if i < len(groups[leaf]):
                order.append(groups[leaf][i])
    return order


@dataclass
class Outcome:
    """One scenario's row (``--json`` writes these)."""

    scenario: str
    injected: dict[str, str] = field(default_factory=dict)
    detected: dict[str, Any] = field(default_factory=dict)
    latency_s: float | None = None
    action: str = "none"
    step_time_before_s: float | None = None
    step_time_during_s: float | None = None
    step_time_after_s: float | None = None
    false_positives: int | None = None
    right_class: bool | None = None
    right_element: bool | None = None
    notes: dict[str, Any] = field(default_factory=dict)


class Bench:
    """The running lab, job, ranks and the detector's events (what a scenario needs)."""

    def __init__(self, served: ServedLab, ring: Ring, watch: BindingWatch) -> None:
        self.served, self.ring, self.watch = served, ring, watch
        self.lab = served.lab

    @property
    def mirror(self) -> BindingMirror:
        return self.watch.mirror

    def events_after(self, sequence: int) -> list[Event]:
        detection = self.served.runtime.detection
        return [] if detection is None else detection.after(sequence, JOB)

    def last_sequence(self) -> int:
        detection = self.served.runtime.detection
        return 0 if detection is None else detection.events.last

    def findings(self, sequence: int) -> list[Event]:
        return [e for e in self.events_after(sequence) if e.kind is EventKind.FINDING]

    def admin(self) -> AdminClient:
        assert self.served.service is not None
        return AdminClient(self.served.endpoint, self.served.service.admin_token)

    def step_time(self, start: float, end: float) -> float | None:
        """Median iteration time between two wall-clock times (events carry wall time, the
        ranks' lines CLOCK_MONOTONIC)."""
        offset = time.monotonic() - time.time()
        return self.ring.step_time(int((start + offset) * 1e9), int((end + offset) * 1e9))

    def busiest_spine_link(self, exclude: set[str] = frozenset()) -> tuple[str, str, str]:  # type: ignore[assignment]
        """(link id, spine, leaf) of the spine->leaf hop the most bound QPs cross."""
        index = self.lab.fabric.index
        counts: dict[tuple[str, str], int] = {}
        for b in self.mirror.bindings.values():
            for u, v in zip(b.path[1:-2], b.path[2:-1], strict=False):
                if u.startswith("spine"):
                    counts[(u, v)] = counts.get((u, v), 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        for (spine, leaf), _ in ranked:
            link = self.lab.fabric.links[index.link_number(f"{spine}--{leaf}")].id
            if link not in exclude:
                return link, spine, leaf
        raise LabServeError("no spine link carries the job")

    def settle(self, steps: int = 15, seconds: float = 60.0) -> None:
        if not self.ring.wait_steps(steps, seconds):
            last = [r.steps[-1][0] if r.steps else -1 for r in self.ring.ranks]
            alive = [r.proc.poll() is None for r in self.ring.ranks]
            raise LabServeError(
                f"the ranks did not make {steps} steps within {seconds:.0f} s "
                f"(last step per rank {last}, alive {alive})"
            )


def _first(events: list[Event]) -> Event | None:
    return events[0] if events else None


def _detected(row: Outcome, event: Event | None, t0: float, want_cls: str, want: set[str]) -> None:
    if event is None or event.finding is None:
        row.right_class = row.right_element = False
        return
    f = event.finding
    row.detected = {
        "class": f.cls.value, "element": f.element, "kind": f.kind.value,
        "confidence": round(f.confidence, 3), "host": f.host,
        "candidates": [c for c, _ in f.candidates], "evidence": list(f.evidence[-3:]),
    }  # fmt: skip
    row.latency_s = round(event.at - t0, 2)
    row.action = event.action.value if event.acted or event.action.value != "none" else "none"
    row.notes["acted"] = event.acted
    row.right_class = f.cls.value == want_cls
    row.right_element = f.element in want
    # named, or among the candidates that explain the evidence as well (ambiguous)
    row.notes["in_candidates"] = bool(want & {f.element, *(c for c, _ in f.candidates)})


def _wait_event(bench: Bench, sequence: int, seconds: float) -> Event | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = bench.findings(sequence)
        if found:
            return found[0]
        time.sleep(0.2)
    return _first(bench.findings(sequence))


def _wait_epoch(bench: Bench, epoch: int, seconds: float) -> bool:
    return bench.watch.wait(lambda m: m.epoch > epoch, seconds)


def link_fault(
    bench: Bench, name: str, kind: str, window_s: float, *, host_link: bool = False,
    rate: str = "20mbit", loss: str = "10%",
) -> Outcome:  # fmt: skip
    """A spine->leaf link (or a leaf->host link) slowed, lossy or cut; detection, drain, undo."""
    lab = bench.lab
    if host_link:
        rank = len(bench.ring.hosts) // 2
        host = bench.ring.hosts[rank]
        nic = next(h for h in lab.fabric.hosts if h.name == host).nics[0].ports[0]
        number = lab.fabric.index.link_number(f"{host}:{nic.name}")
        link_obj = lab.fabric.links[number]
        link = link_obj.id
        leaf = next(e.device for e in (lab.plan.cables[number].a, lab.plan.cables[number].b)
                    if not e.is_host)  # fmt: skip
        at, want = leaf, {link, f"rank {rank}"}
    else:
        link, at, _leaf = bench.busiest_spine_link()
        want = {link}
    cls = "link-down" if kind == "down" else "comm-slowdown"
    row = Outcome(name, injected={"class": cls, "element": link, "tool": kind})
    seq, epoch = bench.last_sequence(), bench.mirror.epoch
    t0 = time.time()
    row.step_time_before_s = bench.step_time(t0 - 5, t0)
    with Fault(lab, link, at, kind, rate=rate, loss=loss) as fault:
        if fault.how:
            row.injected["tool"] = fault.how
        if kind == "down":
            _cut(bench, row, link, epoch, t0, window_s)
        event = _wait_event(bench, seq, 0.0 if kind == "down" else window_s)
        t1 = time.time()
        row.step_time_during_s = bench.step_time(t0, event.at if event else t1)
        if kind != "down":
            _detected(row, event, t0, cls, want)
        elif event is not None and event.finding is not None:  # beside the controller's own
            f = event.finding
            row.notes["detector_finding"] = f"{f.cls.value} {f.element} ({event.action.value})"
        drained = event is not None and event.acted and row.action == "drain"
        if drained or kind == "down":
            if drained:
                row.notes["replanned"] = _wait_epoch(bench, epoch, 30)
            # Every rank on its new ports and the drained link's queue (up to 4 MB at the
            # fault's rate) emptied before the after-window; then a window long enough (~2 s)
            # that one busy moment of the shared machine does not decide the median.
            bench.settle(30)
            t2 = time.time()
            bench.settle(60)
            row.step_time_after_s = bench.step_time(t2, time.time())
            still = "the link still cut" if kind == "down" else "the fault still in place"
            row.notes["after"] = f"with {still}, re-planned around it"
    if not drained and kind != "down":
        bench.settle(10)
        t2 = time.time()
        bench.settle(15)
        row.step_time_after_s = bench.step_time(t2, time.time())
        row.notes["after"] = "after the fault was undone"
    row.notes["events"] = len(bench.findings(seq))
    row.notes["recovery_findings"] = recover(bench, seq)
    return row


def _cut(bench: Bench, row: Outcome, link: str, epoch: int, t0: float, window_s: float) -> None:
    """A cut link is the fabric's to report (gNMI oper-status) and the controller's to plan
    around; the routes converge around it, so no slowdown need outlast the re-plan for the
    detector to find. The row: when the controller saw it down and re-planned."""
    replanned = _wait_epoch(bench, epoch, window_s)
    row.notes["replanned"] = replanned
    admin = bench.admin()
    try:
        links = {x.id: x for x in admin.fabric(only_changed=True).links}
    finally:
        admin.close()
    seen = links.get(link)
    row.right_class = row.right_element = bool(
        replanned and seen is not None and seen.effective == "down"
    )
    if row.right_class:
        row.detected = {"class": "link-down", "element": link, "kind": "link",
                        "confidence": 1.0, "by": "gNMI oper-status, re-planned"}  # fmt: skip
        row.latency_s, row.action = round(time.time() - t0, 2), "replan"


def recover(bench: Bench, sequence: int) -> list[str]:
    """Give back every link the detector drained since ``sequence``; wait for steady steps.
    Returns the findings raised meanwhile (after the scenario's own window: the restore's
    re-plan moved flows back; they are false positives of the recovery)."""
    start = bench.last_sequence()
    given: set[str] = set()
    for _ in range(3):  # a restore's re-plan may set off another drain: give that back too
        drained = {e.finding.element for e in bench.findings(sequence)
                   if e.finding is not None and e.acted and e.action.value == "drain"}  # fmt: skip
        if not drained - given:
            break
        admin = bench.admin()
        try:
            for link in sorted(drained - given):
                with contextlib.suppress(ApiError):  # given back already
                    admin.restore(link, force=True)
        finally:
            admin.close()
        given |= drained
        bench.settle(20, 90)
    bench.settle(20, 90)
    # Quiet before the next scenario: 3 s without a new finding (at most 30 s), so a late
    # finding of this one is not taken for the next one's detection.
    deadline = time.monotonic() + 30
    last, since = bench.last_sequence(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < 3:
        time.sleep(0.2)
        if bench.last_sequence() != last:
            last, since = bench.last_sequence(), time.monotonic()
    return [f"{e.finding.cls.value} {e.finding.element}" for e in bench.findings(start)
            if e.finding is not None]  # fmt: skip


def rank_fault(bench: Bench, name: str, window_s: float) -> Outcome:
    """A rank made compute-slow (its flag) or hung (SIGSTOP); detection; undone."""
    rank = 4 if name == "compute-slow" else 6
    cls = "compute-slowdown" if name == "compute-slow" else "noncomm-hang"
    tool = "sleep flag" if name == "compute-slow" else "SIGSTOP"
    row = Outcome(name, injected={"class": cls, "element": f"rank {rank}", "tool": tool})
    seq = bench.last_sequence()
    t0 = time.time()
    row.step_time_before_s = bench.step_time(t0 - 5, t0)
    if name == "compute-slow":
        bench.ring.compute_slow(rank, True)
    else:
        bench.ring.hang(rank, True)
    try:
        event = _wait_event(bench, seq, window_s)
        row.step_time_during_s = bench.step_time(t0, event.at if event else time.time())
        _detected(row, event, t0, cls, {f"rank {rank}"})
    finally:
        if name == "compute-slow":
            bench.ring.compute_slow(rank, False)
        else:
            bench.ring.hang(rank, False)
    bench.settle(10)
    t2 = time.time()
    bench.settle(15)
    row.step_time_after_s = bench.step_time(t2, time.time())
    row.notes["events"] = len(bench.findings(seq))
    row.notes["recovery_findings"] = recover(bench, seq)
    return row


def benign(bench: Bench, name: str, window_s: float) -> Outcome:
    """A phase that is not a fault; every finding in it is a false positive."""
    row = Outcome(name, injected={"class": "benign", "element": ""})
    seq = bench.last_sequence()
    t0 = time.time()
    row.step_time_before_s = bench.step_time(t0 - 5, t0)
    link = ""
    if name == "message-size":
        bench.ring.signal_all(signal.SIGHUP)  # x4 message size
        row.injected["element"] = "message size x4"
    elif name == "replan":
        link = bench.busiest_spine_link()[0]
        admin = bench.admin()
        try:
            admin.drain(link, "c4p lab detect: benign re-plan")
        finally:
            admin.close()
        row.injected["element"] = f"operator drain of {link}"
    elif name == "restart":
        bench.ring.restart()
        row.injected["element"] = "ranks killed and started again"
    deadline = time.monotonic() + window_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
    row.step_time_during_s = bench.step_time(t0, time.time())
    if name == "message-size":
        bench.ring.signal_all(signal.SIGHUP)  # back
    elif link:
        admin = bench.admin()
        try:
            admin.restore(link, force=True)
        finally:
            admin.close()
    bench.settle(10)
    t2 = time.time()
    bench.settle(10)
    row.step_time_after_s = bench.step_time(t2, time.time())
    found = bench.findings(seq)
    row.false_positives = len(found)
    row.notes["findings"] = [f"{e.finding.cls.value} {e.finding.element}" for e in found
                             if e.finding is not None][:5]  # fmt: skip
    row.notes["recovery_findings"] = recover(bench, seq)
    return row


RUNNERS: dict[str, Callable[[Bench, float], Outcome]] = {
    "spine-rate": lambda b, w: link_fault(b, "spine-rate", "rate", w),
    "link-loss": lambda b, w: link_fault(b, "link-loss", "loss", w),
    "host-link-slow": lambda b, w: link_fault(
        b, "host-link-slow", "rate", w, host_link=True, rate="40mbit"
    ),
    "link-cut": lambda b, w: link_fault(b, "link-cut", "down", w),
    "compute-slow": lambda b, w: rank_fault(b, "compute-slow", w),
    "rank-hang": lambda b, w: rank_fault(b, "rank-hang", w),
    "message-size": lambda b, w: benign(b, "message-size", w),
    "replan": lambda b, w: benign(b, "replan", w),
    "restart": lambda b, w: benign(b, "restart", w),
}


@contextmanager
def bench_up(
    fabric: Fabric | None, routing: Routing, hash_policy: int, settle_s: float,
    settings: RingSettings | None = None,
) -> Iterator[Bench]:  # fmt: skip
    """Lab, served controller + agents (serving ranks), the job in active mode, its ranks."""
    with (
        Lab(fabric or detect_fabric(), routing=routing, hash_policy=hash_policy) as lab,
        ServedLab(lab, mode="learned", settle_s=settle_s, bindings=True) as served,
        served.client() as flow,
    ):
        line_rate(lab)
        order = mixed_ring(lab)
        handle = flow.register_job(JOB, hosts=order, control_mode="active")
        watch = handle.watch()
        try:
            ways = (settings or RingSettings()).both_ways
            pairs = ring_connections(len(order), ways)
            handle.submit([communicator(
                "dp", pattern="explicit", collective="all-reduce", qps_per_connection=QPS,
                connections=[connection(a, b) for a, b in pairs],
            )])  # fmt: skip
            if not watch.wait(served.settled, settle_s):
                raise LabServeError(f"job {JOB}: bindings not settled within {settle_s:.0f} s")
            sockets = {h: served.rank_socket(h) for h in order}
            with Ring(lab, JOB, handle.token, order, sockets, settings) as ring:
                bench = Bench(served, ring, watch)
                bench.settle(40, 120)  # the detector's baselines
                yield bench
        finally:
            watch.stop()


def run_detect(
    fabric: Fabric | None = None,
    *,
    routing: Routing = "static",
    hash_policy: int = 1,
    scenarios: tuple[str, ...] = SCENARIOS,
    window_s: float = 20.0,
    settle_s: float = 120.0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run ``scenarios`` in order (see the module docstring); the JSON-able result."""
    for name in scenarios:
        if name not in RUNNERS:
            raise ValueError(f"scenario: {name!r} is not one of {', '.join(SCENARIOS)}")
    started = time.monotonic()
    rows: list[Outcome] = []
    with bench_up(fabric, routing, hash_policy, settle_s) as bench:
        up_s = time.monotonic() - started
        t = time.time()
        bench.settle(15)
        healthy = bench.step_time(t, time.time())
        # Findings before any fault (the ranks' first steps included): false positives too.
        warmup = [f"{e.finding.cls.value} {e.finding.element}" for e in bench.findings(0)
                  if e.finding is not None]  # fmt: skip
        recover(bench, 0)
        for name in scenarios:
            if progress is not None:
                progress(name)
            try:
                rows.append(RUNNERS[name](bench, window_s))
            except (C4pError, OSError) as exc:  # one scenario's failure is its row, not the run's
                rows.append(Outcome(name, notes={"error": str(exc)[:300]}))
                try:
                    recover(bench, 0)
                except (C4pError, OSError) as again:
                    rows[-1].notes["unrecovered"] = str(again)[:300]
                    break  # the ranks are gone: the scenarios left cannot run
        epoch = bench.mirror.epoch
    return {
        "routing": routing,
        "hash_policy": hash_policy,
        "fabric": (fabric or detect_fabric()).name,
        "ranks": len(bench.ring.hosts),
        "qps_per_connection": QPS,
        "healthy_step_time_s": healthy,
        "warmup_false_positives": len(warmup),
        "warmup_findings": warmup[:5],
        "final_epoch": epoch,
        "up_seconds": round(up_s, 1),
        "scenarios": [asdict(r) for r in rows],
    }


__all__ = ["SCENARIOS", "TEST_SCENARIOS", "recover", "run_detect"]
