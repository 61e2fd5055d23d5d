"""The lab's switches speak gNMI from their real kernels and lldpd: discovery through the
project's gNMI driver gives back the lab's fabric, and a cable taken down with ``ip link``
reaches the driver as a link event. Needs root; lldpd from Debian's lldpd."""

from __future__ import annotations

import time

import pytest
from fixtures_fabric_emulator import FAST, watching

from c4p.lab.build import Lab
from c4p.lab.demo import small_fabric
from c4p.lab.gnmi_faces import LabGnmi
from c4p.lab.lldp import lldpd_missing
from c4p.lab.netns import namespaces_possible
from southbound.events import LinkEvent, LinkLoad
from southbound.fleet import Fleet
from topology.compare import compare_fabrics
from topology.model import LinkStatus

_reason = namespaces_possible() or lldpd_missing()
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(_reason is not None, reason=f"lab: {_reason}"),
]


def test_discovery_from_kernel_state_and_lldpd_gives_the_lab_fabric() -> None:
    with Lab(small_fabric(2, 2, 2)) as lab, LabGnmi(lab) as servers:
        declared = lab.fabric
        targets = servers.targets_file(timeouts=FAST)
        # lldpd sends every second: wait (bounded in time, not in rounds: a round can take
        # 20 ms or 70 ms) until every cable is seen from both ends.
        result = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            result = Fleet(targets).discover()
            if compare_fabrics(declared, result.fabric).clean:
                break
            time.sleep(0.25)
        assert result is not None and compare_fabrics(declared, result.fabric).clean
        assert {h.name for h in result.fabric.hosts} == {h.name for h in declared.hosts}
        addresses = {p.address for _, _, p in result.fabric.nic_ports()}
        assert addresses == {p.address for _, _, p in declared.nic_ports()}


def test_a_cable_down_in_the_kernel_is_a_link_event_and_counters_are_loads() -> None:
    with Lab(small_fabric(2, 2, 2)) as lab, LabGnmi(lab) as servers:
        declared = lab.fabric
        number, link = next((i, link) for i, link in enumerate(declared.links) if "spine" in link.b)
        with watching(servers.targets_file(timeouts=FAST), declared=declared) as (_, events):
            lab.set_link(number, up=False)
            event = events.wait_for(lambda e: isinstance(e, LinkEvent) and e.link_id == link.id, 30)
            assert isinstance(event, LinkEvent) and event.status is LinkStatus.DOWN
            lab.set_link(number, up=True)
            event = events.wait_for(
                lambda e: (
                    isinstance(e, LinkEvent) and e.link_id == link.id and e.status is LinkStatus.UP
                ),
                30,
            )
            assert isinstance(event, LinkEvent)
            load = events.wait_for(lambda e: isinstance(e, LinkLoad), 30)
            assert isinstance(load, LinkLoad)
