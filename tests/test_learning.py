"""The port learner without gRPC: what the reconcile step asks for, and what a round probes.

The prober is the modelled data plane of a network whose hash the model does not know; these
tests look at *which* probes are sent (only what plans need; after a link event, only what the
event changed) and at where the bound ports really go.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_cases import ScatteringProber

from c4p.controller.learning import LearningPorts, PortLearner, PortMode, PortsSettings
from c4p.testing.network import hidden_hash_network, realized_path
from southbound.bindings import IssueKind, bindings_for_paths
from southbound.probing import ModeledProber, Probe, Trace
from southbound.routes import QpRoute, round_robin_paths
from topology.generators import generate
from topology.model import LinkStatus

FABRIC = generate("leaf-spine", leaves=4, spines=4, hosts_per_leaf=1, nics_per_host=1)
PORTS = [f"{h.name}:{h.nics[0].ports[0].name}" for h in FABRIC.hosts]


class Recording:
    """A prober that remembers every probe it was given."""

    def __init__(self, inner: ModeledProber) -> None:
        self.inner = inner
        self.sent: list[Probe] = []

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        self.sent.extend(probes)
        return self.inner.trace_many(probes)


def _routes(pairs: list[tuple[str, str]]) -> list[QpRoute]:
    paths = round_robin_paths(FABRIC, pairs)
    return [
        QpRoute("job", "dp", i, 0, src, dst, path)
        for i, ((src, dst), path) in enumerate(zip(pairs, paths, strict=True))
    ]


def _learner() -> PortLearner:
    hosts = frozenset(h.name for h in FABRIC.hosts)
    return PortLearner(FABRIC, PortsSettings(), PortMode.LEARNED, lambda: hosts)


def test_a_step_asks_for_probes_then_binds_from_the_table_without_asking_again() -> None:
    network = hidden_hash_network(FABRIC)
    prober = Recording(ModeledProber(network))
    learner = _learner()
    routes = _routes([(PORTS[0], PORTS[1]), (PORTS[2], PORTS[3])])
    source = learner.source(FABRIC)
    assert isinstance(source, LearningPorts)
    first = bindings_for_paths(FABRIC, routes, 1, source=source)
    assert not first.bindings and len(first.unbound) == 2  # held back: nothing known yet
    wants = learner.take_wants()
    assert set(wants.cover) == {
        (FABRIC.index.node(PORTS[0]), FABRIC.index.node(PORTS[1])),
        (FABRIC.index.node(PORTS[2]), FABRIC.index.node(PORTS[3])),
    }  # the planned paths of these two NIC pairs, nothing else
    learner.probe(wants, prober)
    learner.answered()
    sent = len(prober.sent)
    second = bindings_for_paths(FABRIC, routes, 2, source=learner.source(FABRIC))
    assert len(second.bindings) == 2 and not second.issues
    for b in second.bindings:
        assert realized_path(network, b.src, b.dst, b.sport) == b.path
    # A re-plan on the same snapshot: the table knows, so the step asks for nothing.
    bindings_for_paths(FABRIC, routes, 3, source=learner.source(FABRIC), previous=second)
    assert learner.take_wants().empty and len(prober.sent) == sent


def test_a_link_event_reprobes_only_what_it_changed() -> None:
    network = hidden_hash_network(FABRIC)
    prober = Recording(ModeledProber(network))
    learner = _learner()
    routes = _routes([(PORTS[0], PORTS[1]), (PORTS[2], PORTS[3])])
    bindings_for_paths(FABRIC, routes, 1, source=learner.source(FABRIC))
    learner.probe(learner.take_wants(), prober)
    learner.answered()
    before = bindings_for_paths(FABRIC, routes, 2, source=learner.source(FABRIC))
    # leaf-00 loses an uplink: groups towards and from leaf-00 change, leaf-02 -> leaf-03 not.
    link = next(
        i for i, k in enumerate(FABRIC.links) if k.a.startswith("leaf-00") and "spine" in k.b
    )
    failed = FABRIC.with_link_status({link: LinkStatus.DOWN})
    prober.inner.set_fabric(hidden_hash_network(failed))
    prober.sent.clear()
    source = learner.source(failed)
    wants = learner.take_wants()
    stale = {key for i in wants.invalidations for key, _ in i.stale}
    leaf0 = FABRIC.index.node(PORTS[0])
    assert stale and all(leaf0 in key for key in stale)
    learner.probe(wants, prober)
    learner.answered()
    h2 = {p.port.address for p in FABRIC.index.ports if p.host.name == FABRIC.hosts[2].name}
    assert prober.sent and not any(p.src in h2 for p in prober.sent)
    after = bindings_for_paths(failed, routes[1:], 3, source=source, previous=before)
    unchanged = before.by_key()[("job", "dp", 1, 0)]
    assert after.bindings[0].sport == unchanged.sport  # untouched pair kept its port


def test_probes_that_disagree_make_ports_unstable_and_an_issue_not_a_binding() -> None:
    network = hidden_hash_network(FABRIC)
    learner = _learner()
    routes = _routes([(PORTS[0], PORTS[1]), (PORTS[2], PORTS[3])])
    prober = ScatteringProber(ModeledProber(network))
    for epoch in range(1, 4):  # the step asks, a round probes, the next step binds
        bound = bindings_for_paths(FABRIC, routes, epoch, source=learner.source(FABRIC))
        learner.probe(learner.take_wants(), prober)
        learner.answered()
    bound = bindings_for_paths(FABRIC, routes, 4, source=learner.source(FABRIC))
    annotated, notes = learner.annotate(FABRIC, bound, routes)
    table = learner.table
    unstable = {(key, sport) for key in table.known_keys() for sport in table.unstable(key)}
    assert unstable  # the second probe of a port mostly lands elsewhere
    for key, sport in unstable:
        assert table.middle_of_port(key, sport) is None
    for b in annotated.bindings:  # no binding from a port that disagreed
        key = table.key_of(FABRIC.index.node(b.src), FABRIC.index.node(b.dst))
        assert (key, b.sport) not in unstable
    kinds = {i.kind for i in annotated.issues}
    assert IssueKind.UNSTABLE in kinds
    text = next(i.reason for i in annotated.issues if i.kind is IssueKind.UNSTABLE)
    assert text.startswith("unstable: probes of") and "not used for a binding" in text
    # The same network probed from unconnected sockets (the 5-tuple decides): nothing unstable.
    honest = _learner()
    for epoch in range(1, 4):
        bindings_for_paths(FABRIC, routes, epoch, source=honest.source(FABRIC))
        honest.probe(honest.take_wants(), ModeledProber(network))
        honest.answered()
    good = bindings_for_paths(FABRIC, routes, 4, source=honest.source(FABRIC))
    good, _ = honest.annotate(FABRIC, good, routes)
    assert len(good.bindings) == 2 and all(b.verified for b in good.bindings)
    assert not good.issues
    entries, probes = honest.table.confirmation()
    assert entries >= 2 and probes >= 2 * entries
