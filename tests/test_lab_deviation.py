"""Plans checked by counters on a real kernel (issue 30, item 2), per port mode.

The lab (2 leaves x 4 spines x 2 hosts, static multipath routes in network namespaces) runs
``c4p serve`` on its switches' gNMI faces with an agent per host. A ring job of 4 QPs per
connection is bound in each port mode; then every QP's datagrams are sent on its bound 5-tuple
and the kernels' interface counters are read (``c4p.lab.traffic``). Those counts (the same
kernel counters the gNMI faces serve), as per-link loads, go through the controller's
comparison (:func:`c4p.controller.deviation.find_deviations`). Predicted ports (the model's, not
the kernel's hash) must show deviations wherever the counts differ from the plan. Learned and
verified ports, which the agents saw take their paths, must show none. Needs root and lldpd.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from c4p.api.v1 import intents_pb2 as pb
from c4p.client import communicator
from c4p.controller.deviation import DeviationSettings, find_deviations, qp_rates
from c4p.lab.build import Lab
from c4p.lab.demo import small_fabric
from c4p.lab.hosts import Helpers
from c4p.lab.lldp import lldpd_missing
from c4p.lab.netns import namespaces_possible
from c4p.lab.served import ServedLab, binding_set, measured, ring
from c4p.service.counters import CounterCheck
from southbound.bindings import BindingSet
from southbound.events import LinkLoad
from topology.model import Fabric

_reason = namespaces_possible() or lldpd_missing()
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(_reason is not None, reason=f"lab: {_reason}"),
    pytest.mark.timeout(600),
]
QPS = 4
BURST = 20
"""Datagrams per QP per turn of the live test's senders."""
SEND_S = 24.0
"""How long the live test's traffic runs (bounded)."""
OBSERVATIONS = 70
OBSERVE_S = 0.13
"""The live test reads the loads this often (not a multiple of the faces' 0.2 s sampling
or 0.25 s polling: a reading then lands on every phase of their steps)."""
UNIT = 0.2
"""Utilization one QP's traffic stands for: a difference of one QP on a link (0.2) is above the
tolerance (0.1), so every miscount shows."""


def loads_of(fabric: Fabric, crossed: Counter[int]) -> dict[str, LinkLoad]:
    """QPs counted per directed link, as the utilizations a switch's counters would give."""
    return {
        link.id: LinkLoad(
            link_id=link.id,
            at=0.0,
            utilization_ab=UNIT * crossed.get(2 * number, 0),
            utilization_ba=UNIT * crossed.get(2 * number + 1, 0),
        )
        for number, link in enumerate(fabric.links)
    }


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ServedLab, Helpers]]:
    with (
        Lab(small_fabric(2, 4, 2)) as lab,
        # The counter check runs under the test's control here (see the live test).
        ServedLab(lab, mode="predicted", settle_s=90.0, deviation={"every_s": 0}) as served,
        Helpers(lab) as helpers,
    ):
        yield served, helpers


@pytest.mark.parametrize("mode", ["predicted", "learned", "verified"])
def test_counters_find_predicted_ports_off_plan_and_nothing_for_probed_ones(
    served: tuple[ServedLab, Helpers], mode: str
) -> None:
    lab_served, helpers = served
    lab = lab_served.lab
    if lab_served.mode != mode:
        lab_served.serve(mode)
    hosts = ring(lab, [h.name for h in lab.fabric.hosts])
    with lab_served.client() as flow:
        handle = flow.register_job(f"job-{mode}", hosts=hosts)
        watch = handle.watch()
        try:
            handle.submit([communicator("dp", qps_per_connection=QPS)])
            assert watch.wait(lab_served.settled, 90.0)
            m = measured(lab, helpers, {f"job-{mode}": watch.mirror})
            bset, _ = binding_set(lab, {f"job-{mode}": watch.mirror})
        finally:
            watch.stop()
            handle.release()
    found = find_deviations(
        lab.fabric, bset.bindings, loads_of(lab.fabric, m.measured_per_link), DeviationSettings()
    )
    switch_links = m.switch_links(lab)
    differ = sum(planned != seen for planned, seen in switch_links.values())
    print(f"{mode}: {m.on_plan}/{len(m.qps)} QPs on plan by counters, {differ} switch link "
          f"directions off their planned count, {len(found)} deviations found, "
          f"{len({k for d in found for k in d.qps})} QPs named")  # fmt: skip
    # Exactly the link directions whose counted load differs from the plan are deviations.
    index = lab.fabric.index
    assert {index.resource_name(d.resource) for d in found} == {
        name for name, (planned, seen) in switch_links.items() if planned != seen
    }
    if mode == "predicted":
        assert m.on_plan < len(m.qps) and found  # the kernel does not hash like the model
    else:
        assert m.on_plan == len(m.qps) and not found


def _send_for(helpers: Helpers, lab: Lab, bset: BindingSet, seconds: float) -> int:
    """Every bound QP's datagrams, for ``seconds``: per host one thread sends each of its QPs
    a burst in turn, so the QPs of a NIC port send at one rate (bounded in time and count)."""
    by_host: dict[str, list[tuple[str, int, str]]] = {}
    index = lab.fabric.index
    for b in bset.bindings:
        src = str(index.port(b.src).port.address)
        dst = str(index.port(b.dst).port.address)
        by_host.setdefault(helpers.host_of(src), []).append((src, b.sport, dst))
    deadline = time.monotonic() + seconds

    def run(qps: list[tuple[str, int, str]]) -> int:
        sent = 0
        for _ in range(100_000):
            if time.monotonic() >= deadline:
                break
            for src, sport, dst in qps:
                sent += helpers.send(src, sport, dst, BURST)
        return sent

    with ThreadPoolExecutor(max_workers=len(by_host)) as pool:
        return sum(pool.map(run, by_host.values()))


@pytest.mark.parametrize("mode", ["predicted", "learned"])
def test_the_live_counter_check_on_the_lab_gnmi_faces(
    served: tuple[ServedLab, Helpers], mode: str
) -> None:
    """The same, the product's way: the lab's gNMI faces serve the kernels' byte counters,
    ``c4p serve`` reads them as SAMPLE streams, and its counter check (averaging a window of
    readings) turns what it finds into ``deviation`` issues in the job's stream."""
    lab_served, helpers = served
    lab = lab_served.lab
    if lab_served.mode != mode:
        lab_served.serve(mode)
    runtime = lab_served.runtime
    assert runtime.counter_check is None and runtime.fleet is not None
    # The service's own check, wired as the runtime wires it, driven by the test's clock of
    # readings (the tolerance is known only once the traffic's rate is seen).
    check = CounterCheck(
        DeviationSettings(),
        runtime.state,
        runtime.reconciler,
        runtime.fleet,
        runtime.loop.enqueue_threadsafe,
        runtime.clock,
        runtime.learner,
    )
    hosts = ring(lab, [h.name for h in lab.fabric.hosts])
    kind = pb.BindingIssue.KIND_DEVIATION
    with lab_served.client() as flow:
        handle = flow.register_job(f"live-{mode}", hosts=hosts)
        watch = handle.watch()
        try:
            handle.submit([communicator("dp", qps_per_connection=QPS)])
            assert watch.wait(lab_served.settled, 90.0)
            bset, _ = binding_set(lab, {f"live-{mode}": watch.mirror})
            with ThreadPoolExecutor(max_workers=1) as background:
                sending = background.submit(_send_for, helpers, lab, bset, SEND_S)
                time.sleep(2.0)  # the counters' rates cover the traffic now
                # A QP's share of line rate is tiny on veth: the tolerance is three quarters
                # of it. A misplaced QP moves a whole QP's load (gaps of 0.8-2.6 QPs measured);
                # on a loaded machine the senders' pace wanders within a window and gaps of up
                # to 0.55 QP were seen on correct ports with half a QP and a 6 s window.
                check.averaged()  # drop what was read before the traffic
                for _ in range(OBSERVATIONS):
                    time.sleep(OBSERVE_S)
                    check.observe()
                window = check.averaged()
                rates = qp_rates(lab.fabric, bset.bindings, window)
                speed = lab.fabric.links[0].speed_gbps * 1e9
                per_qp = sorted(rates.values())[len(rates) // 2] / speed
                assert per_qp > 0, "no traffic seen by the gNMI faces"
                check.settings = DeviationSettings(tolerance=per_qp * 0.75, settle_s=0)
                for _ in range(OBSERVATIONS):
                    time.sleep(OBSERVE_S)
                    check.observe()
                found = check.check()
                assert found is not None
                if found:
                    assert watch.wait(lambda m: any(i.kind == kind for i in m.issues), 30)
                named = [i for i in watch.mirror.issues if i.kind == kind]
                sent = sending.result()
            print(f"live {mode}: {sent} datagrams, {len(found)} deviations by gNMI counters, "
                  f"{len(named)} QPs named in the stream; per QP {per_qp:.2e}")  # fmt: skip
            gaps = [abs(d.observed_bps - d.planned_bps) / (per_qp * speed) for d in found]
            print(f"  gaps in QPs: {sorted(round(g, 2) for g in gaps)}")
            if mode == "predicted":
                assert found and named
            else:
                assert not found and not named
        finally:
            watch.stop()
            handle.release()
            runtime.reconciler.set_deviations({})
