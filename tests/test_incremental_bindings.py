"""Incremental binding synthesis gives exactly what a full synthesis gives, step after step.

``southbound.incremental`` reuses a NIC pair's bindings when its routes, its bindings in force
and the fabric inputs it reads are unchanged. Every step here is checked against
``bindings_for_paths`` on the same arguments (the full recompute): drains (including ones
that make planned paths invalid), restores, new and withdrawn jobs, a link really down (a new
port source), and a learned port source (never reused). The counters show that reuse did
happen where it should, so the comparison is not vacuous.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from test_controller import HOSTS, World

from c4p.controller import Key, KeyKind
from c4p.controller.learning import PortLearner, PortMode, PortsSettings
from c4p.testing.network import hidden_hash_network
from southbound.bindings import BindingSet, bindings_for_paths
from southbound.incremental import IncrementalBindings
from southbound.ports import PortSource, PredictedPorts
from southbound.probing import ModeledProber
from southbound.routes import QpRoute, round_robin_paths
from topology.generators import generate
from topology.model import Fabric, LinkStatus


class Checked(IncrementalBindings):
    """Every call also synthesised in full; the two must be equal (epochs included)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, int]] = []  # (QPs reused, QPs synthesised)

    def synthesize(
        self,
        fabric: Fabric,
        routes: Sequence[QpRoute],
        epoch: int,
        *,
        previous: BindingSet | None,
        source: PortSource,
    ) -> BindingSet:
        got = super().synthesize(fabric, routes, epoch, previous=previous, source=source)
        full = bindings_for_paths(fabric, routes, epoch, previous=previous, source=source)
        assert got.bindings == full.bindings
        assert got.issues == full.issues
        assert (got.fabric, got.epoch, got.mode) == (full.fabric, full.epoch, full.mode)
        self.calls.append((self.stats.qps_reused, self.stats.qps_synthesised))
        return got


def _crossing(w: World, job: str) -> str:
    with w.state.lock:
        h = next(h for h in w.state.held[job].values() if len(h.binding.path) > 3)
    return f"{h.binding.path[1]}--{h.binding.path[2]}"


def test_reconcile_steps_with_the_cache_equal_a_full_synthesis() -> None:
    w = World()
    checked = Checked()
    w.reconciler._bindings = checked
    w.job("a", [0, 1])
    b = w.job("b", [2, 3])
    w.step()
    assert checked.calls[-1][0] == 0  # nothing to reuse yet
    held_b = w.ports("b")

    link = _crossing(w, "a")  # a drain: the planner's fabric changes, the switches' not
    w.intake.drain(link, "test")
    w.step(Key(KeyKind.DRAIN, w.intake.link_id(link)))
    reused, made = checked.calls[-1]
    assert reused > 0 and made > 0  # b's pairs reused, a's moved ones synthesised
    assert w.ports("b") == held_b

    w.intake.restore(link)
    w.step(Key(KeyKind.DRAIN, w.intake.link_id(link)))
    assert checked.calls[-1][0] > 0

    w.job("c", [4, 5])  # a new job: the others are reused
    w.step()
    reused, made = checked.calls[-1]
    assert reused > 0 and made > 0

    w.intake.release("b", b)  # a withdrawn job
    w.step()
    assert checked.calls[-1][1] == 0  # nothing new to bind

    number = w.state.fabric.index.link_number(_crossing(w, "c"))
    w.state.observe_link(number, LinkStatus.DOWN, w.clock())  # the switches' groups shrink
    w.step(Key(KeyKind.LINK, w.state.fabric.links[number].id))
    assert checked.calls[-1][0] == 0  # a new port source: everything is synthesised
    w.state.observe_link(number, LinkStatus.UP, w.clock())
    w.clock.now += 3600
    w.step(Key(KeyKind.LINK, w.state.fabric.links[number].id))

    nic = f"{HOSTS[0]}:nic1p0"  # a NIC link drained: its job's QPs there cannot be bound
    w.intake.drain(nic, "test")
    w.step(Key(KeyKind.DRAIN, w.intake.link_id(nic)))
    assert len(checked.calls) >= 7


def _routes(fabric: Fabric, seed: int) -> list[QpRoute]:
    ports = [f"{h.name}:{p.name}" for h in fabric.hosts for n in h.nics for p in n.ports]
    rng = random.Random(seed)
    pairs = [(s, d) for s in ports for d in rng.sample(ports, 3) if s != d]
    paths = round_robin_paths(fabric, [(s, d) for s, d in pairs for _ in range(2)])
    return [
        QpRoute(f"j{i % 3}", "dp", i, q, s, d, paths[2 * i + q])
        for i, (s, d) in enumerate(pairs)
        for q in range(2)
    ]


def test_drains_that_break_planned_paths_are_recomputed_exactly() -> None:
    """Random drains under one port source (the switches' view stays): paths planned on the
    full fabric go invalid, fall back or stay; every step equals the full synthesis."""
    fabric = generate("fat-tree", k=4)
    source = PredictedPorts(fabric)
    routes = _routes(fabric, 1)
    cache = Checked()
    rng = random.Random(7)
    inner = [i for i, k in enumerate(fabric.links) if not k.a.startswith("h")]
    previous: BindingSet | None = None
    first: BindingSet | None = None
    status: dict[int, LinkStatus] = {}
    for epoch in range(1, 12):
        snapshot = fabric.with_link_status(status) if status else fabric
        if epoch == 4:  # bindings in force that are neither the last ones nor the same
            previous = None
        elif epoch == 9:
            previous = first
        previous = cache.synthesize(snapshot, routes, epoch, previous=previous, source=source)
        first = first or previous
        if epoch == 6:  # a re-plan on the drained snapshot for a third of the routes
            fresh = round_robin_paths(snapshot, [(r.src, r.dst) for r in routes])
            routes = [
                QpRoute(r.job, r.communicator, r.connection, r.qp, r.src, r.dst, p)
                if k % 3 == 0
                else r
                for k, (r, p) in enumerate(zip(routes, fresh, strict=True))
            ]
        link = rng.choice(inner)
        if link in status and rng.random() < 0.5:
            del status[link]
        else:
            status[link] = LinkStatus.DRAINED
    assert any(reused for reused, _ in cache.calls[1:])
    assert any(made for _, made in cache.calls[1:])


def test_a_learned_source_is_never_reused() -> None:
    fabric = generate("leaf-spine", leaves=4, spines=4, hosts_per_leaf=1, nics_per_host=1)
    hosts = frozenset(h.name for h in fabric.hosts)
    learner = PortLearner(fabric, PortsSettings(), PortMode.LEARNED, lambda: hosts)
    prober = ModeledProber(hidden_hash_network(fabric))
    routes = _routes(fabric, 2)
    cache = Checked()
    previous = None
    for epoch in range(1, 4):  # nothing known, then probed (the table changes), then known
        previous = cache.synthesize(
            fabric, routes, epoch, previous=previous, source=learner.source(fabric)
        )
        learner.probe(learner.take_wants(), prober)
        learner.answered()
    assert [reused for reused, _ in cache.calls] == [0, 0, 0]
    assert previous is not None and previous.bindings
