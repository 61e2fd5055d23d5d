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

from collections import Counter
from collections.abc import Iterator

import pytest

from c4p.client import communicator
from c4p.controller.deviation import DeviationSettings, find_deviations
from c4p.lab.build import Lab
from c4p.lab.demo import small_fabric
from c4p.lab.hosts import Helpers
from c4p.lab.lldp import lldpd_missing
from c4p.lab.netns import namespaces_possible
from c4p.lab.served import ServedLab, binding_set, measured, ring
from southbound.events import LinkLoad
from topology.model import Fabric

_reason = namespaces_possible() or lldpd_missing()
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(_reason is not None, reason=f"lab: {_reason}"),
    pytest.mark.timeout(600),
]
QPS = 4
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
        ServedLab(lab, mode="predicted", settle_s=90.0) as served,
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
