"""The kernel's multipath hash policies on the lab, measured by interface counters: what a
5-tuple, a socket and a source port decide under ``fib_multipath_hash_policy`` 0, 1 and 3, and
that learned ports put cross-leaf QPs on their planned spine wherever a source port can steer.

Needs root (network namespaces); skipped with the reason otherwise.
"""

from __future__ import annotations

from collections import Counter

import pytest

from c4p.lab.build import Lab
from c4p.lab.demo import planned_routes, small_fabric, two_jobs
from c4p.lab.hosts import Helpers, NamespaceProber
from c4p.lab.netns import namespaces_possible
from c4p.lab.traffic import measure, read_counters, resource_interfaces
from southbound.bindings import IssueKind, bindings_for_paths
from southbound.pathtable import Outcome, PathTable
from southbound.probeplan import ProbePlanner
from southbound.routes import middle_of

_reason = namespaces_possible()
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(_reason is not None, reason=f"lab: {_reason}"),
]
SENDS = 8
"""Sockets per 5-tuple: four spines, so eight connected sockets all on one spine has a chance
of 4 * (1/4)**8, about 6e-5."""


def _spines_of(lab: Lab, helpers: Helpers, *, connected: bool) -> list[str]:
    """The spine that carried each of ``SENDS`` fresh sockets' traffic on one cross-leaf
    5-tuple, read from the spines' transmit counters."""
    view = lab.fabric
    src = str(view.hosts[0].nics[0].ports[0].address)  # on leaf-00
    dst = str(view.hosts[-1].nics[0].ports[0].address)  # on leaf-01
    spine_of = {lab.ns(s): s for s in lab.plan.switches if s.startswith("spine")}
    taken = []
    for _ in range(SENDS):
        before = read_counters(lab)
        sent = helpers.send(src, 0xC4C4, dst, 100, connected=connected)
        after = read_counters(lab)
        crossed = {
            spine_of[ns]
            for (ns, ifname), n in after.items()
            if ns in spine_of and n - before.get((ns, ifname), 0) >= sent
        }
        assert len(crossed) == 1, crossed  # one path per socket, never split
        taken.append(crossed.pop())
    return taken


@pytest.mark.parametrize("policy", [0, 1, 3])
def test_connected_sockets_scatter_one_five_tuple_only_under_policy_1(policy: int) -> None:
    """The kernel behaviour the prober is built around (``southbound.netprobe``): a connected
    socket's random hash steers its packets under policy 1; ``sendto`` never does."""
    with Lab(small_fabric(), hash_policy=policy) as lab, Helpers(lab) as helpers:
        unconnected = _spines_of(lab, helpers, connected=False)
        connected = _spines_of(lab, helpers, connected=True)
    assert len(set(unconnected)) == 1, unconnected  # the 5-tuple decides, every time
    if policy == 1:
        assert len(set(connected)) > 1, connected  # each socket's own hash decides
    else:
        assert connected == unconnected  # policies 0 and 3 ignore the socket's hash


@pytest.mark.parametrize("policy", [1, 3])
def test_learned_ports_put_cross_leaf_qps_on_their_planned_spine(policy: int) -> None:
    with Lab(small_fabric(), hash_policy=policy) as lab, Helpers(lab) as helpers:
        view = lab.fabric
        routes = planned_routes(view, two_jobs(view))
        table = PathTable(view)
        report = ProbePlanner(table, NamespaceProber(helpers)).cover_routes(routes)
        assert report.complete and not report.inconsistent
        assert report.outcomes[Outcome.UNSTABLE] == 0
        entries, probes = table.confirmation()
        assert entries > 0 and probes >= 2 * entries  # every learned port confirmed
        bindings = bindings_for_paths(view, routes, 1, mode="learned", table=table)
        assert not bindings.unbound and not bindings.fallbacks
        measured = measure(lab, helpers, bindings, routes)
    cross = [q for q in measured.qps if len(q.planned) > 2]
    assert cross and all(q.on_plan for q in measured.qps), [
        q for q in measured.qps if not q.on_plan
    ]
    assert measured.measured_per_link == measured.planned_per_link


def test_under_policy_0_no_port_steers_and_learning_says_so() -> None:
    """Policy 0 hashes only the addresses: every QP of one address pair takes one path
    whatever its port. What must hold: probes agree on that one path for every port (nothing
    unstable), QPs planned elsewhere get issues rather than ports that claim their planned
    path, and every binding's claimed path is the one the counters show."""
    with Lab(small_fabric(), hash_policy=0) as lab, Helpers(lab) as helpers:
        view = lab.fabric
        index = view.index
        routes = planned_routes(view, two_jobs(view, qps=2))
        table = PathTable(view)
        planner = ProbePlanner(table, NamespaceProber(helpers))
        report = planner.cover_routes(routes, budget=300)
        assert report.outcomes[Outcome.UNSTABLE] == 0
        middles_by_key = {}
        for key in table.known_keys():
            seen = {e.middle for e in table.entries(key).values()}
            assert len(seen) == 1, (key, seen)  # one path per address pair, every port
            middles_by_key[key] = seen.pop()
        planned_apart = Counter(
            table.key_of(index.node(r.src), index.node(r.dst)) for r in routes if len(r.path) > 2
        )
        assert any(n > 1 for n in planned_apart.values())
        bindings = bindings_for_paths(view, routes, 1, mode="learned", table=table)
        by_key = bindings.by_key()
        off_plan = 0
        for r in routes:
            key = table.key_of(index.node(r.src), index.node(r.dst))
            b = by_key.get(r.key)
            if key in middles_by_key and middle_of(r.path) != middles_by_key[key]:
                off_plan += 1
                assert b is None or b.path != tuple(index.path_nodes(r.path))
                assert any(
                    i.kind in (IssueKind.FALLBACK, IssueKind.UNBOUND) and i.qp == r.qp
                    for i in bindings.issues
                    if (i.job, i.communicator, i.connection) == r.key[:3]
                )
        assert off_plan > 0  # the plan spreads QPs of one pair; policy 0 cannot
        interfaces = resource_interfaces(lab)
        for b in bindings.bindings:
            claimed = index.path_resources(b.path)
            before = read_counters(lab)
            sent = helpers.send(str(index.port(b.src).port.address), b.sport,
                                str(index.port(b.dst).port.address), 100)  # fmt: skip
            after = read_counters(lab)
            crossed = {r for r, w in interfaces.items() if after[w] - before.get(w, 0) >= sent}
            assert crossed == set(claimed), b
