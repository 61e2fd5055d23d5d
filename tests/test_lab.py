"""The lab: plans realized by a real Linux kernel, probed with real sockets, measured by the
kernel's own interface counters. Needs root (network namespaces); BGP needs Debian's frr."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator

import pytest

from c4p.lab.bgp import frr_missing
from c4p.lab.build import Lab
from c4p.lab.demo import busiest_spine_link, planned_routes, small_fabric, two_jobs
from c4p.lab.hosts import Helpers, NamespaceProber
from c4p.lab.netns import namespaces_possible, run
from c4p.lab.traffic import measure
from southbound.bindings import bindings_for_paths
from southbound.pathtable import Outcome, PathTable
from southbound.probeplan import ProbePlanner
from southbound.probing import AddressBook, Probe
from topology.model import LinkStatus

_reason = namespaces_possible()
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(_reason is not None, reason=f"lab: {_reason}"),
]
ROUTINGS = [
    "static",
    pytest.param(
        "bgp", marks=pytest.mark.skipif(frr_missing() is not None, reason=f"{frr_missing()}")
    ),
]


@pytest.fixture
def lab_of(request: pytest.FixtureRequest) -> Iterator[Lab]:
    """A lab built with the test's parameters, always torn down (the context's ``finally``)."""
    options = getattr(request, "param", {})
    with Lab(small_fabric(), **options) as lab:
        yield lab


def _learn_bind_measure(lab: Lab, helpers: Helpers, prober: NamespaceProber) -> None:
    view = lab.fabric
    routes = planned_routes(view, two_jobs(view))
    table = PathTable(view)
    report = ProbePlanner(table, prober).cover_routes(routes)
    assert report.complete and not report.inconsistent
    bindings = bindings_for_paths(view, routes, 1, mode="learned", table=table)
    assert not bindings.unbound
    measured = measure(lab, helpers, bindings, routes)
    assert len(measured.qps) == len(routes)
    assert measured.on_plan == len(routes), [q for q in measured.qps if not q.on_plan]
    assert measured.measured_per_link == measured.planned_per_link


@pytest.mark.parametrize("routing", ROUTINGS)
def test_learned_bindings_are_realized_exactly(routing: str) -> None:
    with Lab(small_fabric(), routing=routing) as lab, Helpers(lab) as helpers:  # type: ignore[arg-type]
        _learn_bind_measure(lab, helpers, NamespaceProber(helpers))


def test_the_unprivileged_error_queue_learns_the_same() -> None:
    with Lab(small_fabric()) as lab, Helpers(lab, privilege="recverr") as helpers:
        prober = NamespaceProber(helpers)
        _learn_bind_measure(lab, helpers, prober)
        assert prober.privilege == "recverr"


@pytest.mark.parametrize("routing", ROUTINGS)
def test_link_failure_reprobe_and_realized_again(routing: str) -> None:
    with Lab(small_fabric(), routing=routing) as lab, Helpers(lab) as helpers:  # type: ignore[arg-type]
        view = lab.fabric
        flows = two_jobs(view)
        routes = planned_routes(view, flows)
        table = PathTable(view)
        prober = NamespaceProber(helpers)
        planner = ProbePlanner(table, prober)
        assert planner.cover_routes(routes).complete
        before = bindings_for_paths(view, routes, 1, mode="learned", table=table)
        link = busiest_spine_link(view, routes)
        lab.set_link(link, up=False)
        lab.wait_routes()
        # The old bindings no longer realize the plan: a planned link is down.
        assert measure(lab, helpers, before, routes).on_plan < len(routes)
        after = view.with_link_status({link: LinkStatus.DOWN})
        invalidation = table.invalidate(after)
        assert invalidation.stale
        replanned = planned_routes(after, flows)
        planner.reprobe(invalidation)
        assert planner.cover_routes(replanned).complete
        rebound = bindings_for_paths(
            after, replanned, 2, mode="learned", table=table, previous=before
        )
        measured = measure(lab, helpers, rebound, replanned)
        assert measured.on_plan == len(replanned)
        failed = {2 * link, 2 * link + 1}
        assert not any(failed & set(q.measured) for q in measured.qps)


def test_a_black_hole_is_reported_as_an_answer() -> None:
    with Lab(small_fabric()) as lab, Helpers(lab) as helpers:
        view = lab.fabric
        src = view.hosts[0].nics[0].ports[0].address
        dst_port = view.hosts[-1].nics[0].ports[0]
        # spine-00 loses its (static /32) route to the destination: a black hole there.
        run(["ip", "-n", lab.ns("spine-00"), "route", "del", f"{dst_port.address}/32"])
        prober = NamespaceProber(helpers)
        probes = [Probe(src, dst_port.address, 49152 + k, 2, 2) for k in range(48)]
        traces = prober.trace_many(probes)
        spine = ipaddress.IPv4Address(lab.plan.loopbacks["spine-00"])
        holes = [t for t in traces if t.black_hole is not None]
        assert holes and all(t.black_hole.address == spine for t in holes)  # type: ignore[union-attr]
        assert all(t.black_hole.icmp_code in (0, 1) for t in holes)  # type: ignore[union-attr]
        # The others were answered by the other spines with time exceeded.
        # No other answer comes from spine-00; the other spines answer time exceeded. Some
        # "no route" answers may be lost: Linux sends them at most 5 at once, then 1/s per
        # source (net.ipv4.route.error_burst/error_cost), and a lost answer stays silent.
        others = [t.hops[0] for t in traces if t not in holes]
        assert all(h.address != spine for h in others)
        assert all(h.icmp_type == 11 for h in others if h.address is not None)
        table = PathTable(view)
        assert {table.record(t) for t in holes} == {Outcome.BLACK_HOLE}
        silent = [t for t in traces if t.hops[0].address is None]
        assert all(table.record(t) is Outcome.INCOMPLETE for t in silent)


def test_icmp_answers_from_interface_addresses() -> None:
    with Lab(small_fabric(), icmp_from="interface") as lab, Helpers(lab) as helpers:
        view = lab.fabric
        src = view.hosts[0].nics[0].ports[0].address
        dst = view.hosts[-1].nics[0].ports[0].address
        prober = NamespaceProber(helpers)
        traces = prober.trace_many([Probe(src, dst, 50000 + k, 1, 3) for k in range(16)])
        loopbacks = {ipaddress.IPv4Address(a) for a in lab.plan.loopbacks.values()}
        interfaces = {e.address for c in lab.plan.cables for e in (c.a, c.b)}
        answers = [h.address for t in traces for h in t.hops]
        assert None not in answers
        assert not set(answers) & loopbacks and set(answers) <= interfaces
        # The address book (filled from the lab's Switch.addresses) names the right switches.
        book = AddressBook(view)
        names = view.index.node_names
        for t in traces:
            assert names[book.node(t.hops[0].address)] == "leaf-00"  # type: ignore[index,arg-type]
            assert names[book.node(t.hops[1].address)].startswith("spine-")  # type: ignore[index,arg-type]
        _learn_bind_measure(lab, helpers, prober)


def test_pacing_keeps_under_the_kernels_icmp_limit_and_losses_decide_nothing() -> None:
    # Routers police ICMP like hardware: 100 answers/s, burst 10 (per namespace).
    with Lab(small_fabric(), icmp_limit=(100, 10)) as lab, Helpers(lab) as helpers:
        view = lab.fabric
        src = view.hosts[0].nics[0].ports[0].address
        dst = view.hosts[-1].nics[0].ports[0].address
        probes = [Probe(src, dst, 49152 + k, 2, 2) for k in range(160)]
        # Unpaced, one round: the burst overruns the limit and answers are lost.
        unpaced = NamespaceProber(helpers, rate=None, rounds=1)
        fast = unpaced.trace_many(probes)
        assert unpaced.stats.first_round_lost > 0
        # Too fast, but with retries in later rounds and back-off: lost answers come back.
        eager = NamespaceProber(helpers, rate=5000.0, burst=500.0, rounds=4)
        eager.trace_many(probes)
        assert eager.stats.first_round_lost > 0 and eager.stats.retried > 0
        assert eager.stats.lost < eager.stats.first_round_lost
        # Paced under the limit (each spine may answer 50/s): nothing is lost. The eager run
        # above emptied the routers' ICMP buckets; let them refill (burst 10 at 100/s takes
        # 0.1 s) so the paced run starts where a fresh prober would.
        time.sleep(1.0)
        paced = NamespaceProber(helpers, rate=50.0, burst=5.0, rounds=1)
        slow = paced.trace_many(probes)
        assert paced.stats.first_round_lost == 0 and paced.stats.lost == 0
        # No lost answer decided a path: every unanswered probe is INCOMPLETE, and every
        # entry the unpaced run learned agrees with the paced (complete) run.
        truth, hasty = PathTable(view), PathTable(view)
        assert set(truth.record_many(slow)) == {Outcome.NEW}
        outcomes = [hasty.record(t) for t in fast]
        for trace, outcome in zip(fast, outcomes, strict=True):
            if trace.hops[0].address is None:
                assert outcome is Outcome.INCOMPLETE
        key = truth.key_of(view.index.node_of_address[src], view.index.node_of_address[dst])
        learned = hasty.entries(key)
        assert learned and all(
            truth.entries(key)[sport].middle == entry.middle for sport, entry in learned.items()
        )
