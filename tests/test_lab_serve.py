"""Port modes on a real kernel, the product's way: ``c4p serve`` discovers the lab from its
switches' gNMI faces (kernel state + lldpd), a real ``c4p agent`` process probes from every host
namespace, and the kernels' interface counters say where each bound QP's traffic really went.

The fast versions of these checks, against a modelled network, are in ``test_port_modes.py`` and
``test_agent.py``; these are the ones c4p's own model cannot make pass. One static lab is shared
by the module (the service is restarted in another port mode where a test needs it; the agents
reconnect by themselves: the restarts come before the tests that make probes go unanswered, as an
agent busy with a long batch does not see its controller go) and one BGP lab serves the BGP
test. Needs root, lldpd; BGP needs frr.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from c4p.api.v1 import intents_pb2 as pb
from c4p.api.v1.agent_pb2 import ProbeRefusal
from c4p.client import communicator
from c4p.client.mirror import BindingMirror
from c4p.client.sync import BindingWatch
from c4p.lab import netns
from c4p.lab.bgp import frr_missing
from c4p.lab.build import Lab
from c4p.lab.demo import busiest_used_link, rebound_off, small_fabric
from c4p.lab.hosts import Helpers
from c4p.lab.lldp import lldpd_missing
from c4p.lab.netns import namespaces_possible, run
from c4p.lab.served import ServedLab, measured, ring, uses_link
from c4p.lab.traffic import Measurement
from c4p.service.agents import address_book
from southbound.probing import Probe

_reason = namespaces_possible() or lldpd_missing()
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(_reason is not None, reason=f"lab: {_reason}"),
    pytest.mark.timeout(400),  # the module's lab, service and agents start in the first test
]
Kind = pb.BindingIssue.Kind
Reason = ProbeRefusal.Reason
QPS = 4
SETTLE_S = 90.0


@pytest.fixture(scope="module")
def served() -> Iterator[ServedLab]:
    """2 leaves x 4 spines x 2 hosts, static routing, serve (learned) + 4 agents; torn down."""
    with Lab(small_fabric(2, 4, 2)) as lab, ServedLab(lab, settle_s=SETTLE_S) as served:
        yield served


@pytest.fixture(scope="module")
def helpers(served: ServedLab) -> Iterator[Helpers]:
    with Helpers(served.lab) as helpers:
        yield helpers


def _hosts(served: ServedLab) -> list[str]:
    return ring(served.lab, [h.name for h in served.lab.fabric.hosts])


def _realized(m: Measurement) -> None:
    """Every QP's traffic crossed exactly its planned links; every link carried what was planned."""
    assert m.qps and m.on_plan == len(m.qps), [q for q in m.qps if not q.on_plan]
    assert m.measured_per_link == m.planned_per_link


@contextmanager
def _job(
    served: ServedLab, helpers: Helpers, job: str, seen: list[Any] | None = None
) -> Iterator[tuple[BindingWatch, Measurement]]:
    """Register ``job`` over a ring of every host, submit, wait until settled, measure."""

    def done(m: BindingMirror) -> bool:
        if seen is not None:
            seen.extend(m.issues)
        return served.settled(m)

    with served.client() as flow:
        handle = flow.register_job(job, hosts=_hosts(served))
        watch = handle.watch()
        try:
            handle.submit([communicator("dp", qps_per_connection=QPS)])
            assert watch.wait(done, SETTLE_S)
            yield watch, measured(served.lab, helpers, {job: watch.mirror})
        finally:
            watch.stop()
            handle.release()  # its NICs are free for the next test's job


def test_learned_bindings_are_realized_exactly_through_serve_and_agents(
    served: ServedLab, helpers: Helpers
) -> None:
    with _job(served, helpers, "learned") as (watch, m):
        mirror = watch.mirror
    assert len(mirror.bindings) == len(_hosts(served)) * QPS
    assert all(b.verified for b in mirror.bindings.values())  # seen by the agents' probes
    assert served.probe_counts()[0] > 0
    _realized(m)


def test_a_real_agent_refuses_probes_outside_its_addresses(served: ServedLab) -> None:
    fabric = served.lab.fabric
    mine, theirs = (h.nics[0].ports[0].address for h in fabric.hosts[:2])
    host = fabric.hosts[0].name
    probes = [
        Probe(mine, theirs, 0xC001, first_ttl=1, max_ttl=1),  # its own source: traced
        Probe(theirs, mine, 0xC002, first_ttl=1, max_ttl=1),  # another host's source
        Probe(mine, ipaddress.IPv4Address("198.19.254.1"), 0xC003, first_ttl=1, max_ttl=1),
    ]
    hub = served.runtime.agents
    assert hub is not None and served.service is not None
    results = served.service.call(hub._request(host, probes), 60)
    assert results is not None
    assert {r.index: r.reason for r in results.refused} == {
        1: Reason.REASON_SOURCE,
        2: Reason.REASON_DESTINATION,
    }
    assert [t.index for t in results.traces] == [0]
    # The traced one really left through that namespace's kernel: a fabric router answered
    # "time exceeded" (TTL 1 expires at the host's leaf).
    hops = list(results.traces[0].hops)
    assert len(hops) == 1 and hops[0].icmp_type == 11, hops
    assert hops[0].address in address_book(fabric), hops


def test_predicted_mismatches_are_seen_and_verified_mode_rebinds_them(
    served: ServedLab, helpers: Helpers
) -> None:
    served.serve("predicted")
    with _job(served, helpers, "predicted") as (watch, m):
        mirror = watch.mirror
    assert not any(b.verified for b in mirror.bindings.values())  # the model alone: unseen
    assert m.on_plan < len(m.qps)  # the kernel's hash is not the model's: counters show it

    served.serve("verified")
    seen: list[Any] = []
    with _job(served, helpers, "verified", seen) as (watch, m):
        mirror = watch.mirror
    assert all(b.verified for b in mirror.bindings.values())
    _realized(m)
    assert any(i.kind == Kind.KIND_MISMATCH for i in seen)  # told in the job's stream
    assert any("re-bound from the probes" in f for f in served.findings())


def test_a_black_hole_is_reported_as_a_binding_issue(served: ServedLab, helpers: Helpers) -> None:
    lab = served.lab
    dead = "spine-01"
    dst = lab.fabric.hosts[-1].nics[0].ports[0].address
    (route,) = netns.ip_json(["route", "show", f"{dst}/32"], lab.ns(dead))
    run(["ip", "-n", lab.ns(dead), "route", "del", f"{dst}/32"])  # still in every ECMP group
    try:
        served.serve("verified")  # a fresh table: every binding is probed before it is pushed
        seen: list[Any] = []
        with _job(served, helpers, "holed", seen) as (watch, m):
            mirror = watch.mirror
    finally:
        gateway = ["via", route["gateway"]] if "gateway" in route else []
        run(["ip", "-n", lab.ns(dead), "route", "replace", f"{dst}/32", *gateway, "dev",
             route["dev"]])  # fmt: skip
    towards = [
        b for b in mirror.bindings.values() if lab.fabric.index.port(b.dst_port).port.address == dst
    ]
    assert towards and not any(dead in b.path for b in towards)
    assert any(i.kind == Kind.KIND_BLACK_HOLE for i in seen)
    assert any("black hole" in f and dead in f for f in served.findings())
    _realized(m)


def test_a_link_down_in_the_kernel_reaches_serve_by_gnmi_and_is_realized_again(
    served: ServedLab, helpers: Helpers
) -> None:
    _link_failure(served, helpers, "failure")


def _link_failure(served: ServedLab, helpers: Helpers, job: str) -> None:
    """Realized; the busiest used spine link down in the kernel; re-bound off it; realized."""
    with _job(served, helpers, job) as (watch, m):
        _realized(m)
        a, b = busiest_used_link({job: watch.mirror})
        number = served.lab.fabric.index.link_number(f"{a}--{b}")
        epoch = watch.mirror.epoch
        served.lab.set_link(number, up=False)
        try:
            # Nothing tells the service but its gNMI streams from the switches' kernels.
            assert watch.wait(rebound_off(served, epoch, a, b), SETTLE_S)
            served.lab.wait_routes()  # BGP: the far leaf's groups lost the link too
            assert not uses_link(watch.mirror, a, b)
            link = served.lab.fabric.links[number].id  # heard by gNMI, named in the decision log
            assert any(link in r for r in served.reasons()), served.reasons()[:3]
            _realized(measured(served.lab, helpers, {job: watch.mirror}))
        finally:
            served.lab.set_link(number, up=True)


@pytest.mark.skipif(frr_missing() is not None, reason=f"{frr_missing()}")
def test_learned_bindings_and_a_link_failure_on_bgp_routing() -> None:
    with (
        Lab(small_fabric(2, 4, 2), routing="bgp") as lab,
        ServedLab(lab, settle_s=SETTLE_S) as served,
        Helpers(lab) as helpers,
    ):
        _link_failure(served, helpers, "bgp")
