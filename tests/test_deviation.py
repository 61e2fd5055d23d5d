"""Plans checked by counters (``c4p.controller.deviation``), on numbers.

The "switches" here are the data-plane model of the same topology with other hash seeds
(``hidden_hash_network``, as real switches whose seeds nobody publishes): each QP's traffic is
forwarded there, link by link, and summed into per-direction utilizations like the gNMI
SAMPLE counters give. Ports predicted by the controller's own model then mostly miss, and the
comparison must find where; ports that do take their paths must give no deviation at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from test_controller import FABRIC, World

from c4p.controller.deviation import (
    DeviationKind,
    DeviationSettings,
    deviation_issues,
    find_deviations,
    qp_rates,
)
from c4p.testing.network import hidden_hash_network
from southbound.bindings import Binding, IssueKind
from southbound.events import LinkLoad
from topology.forwarding import forward_many
from topology.model import Fabric

SHARE = 0.8
"""Each NIC port sends at this share of its line rate, split over its QPs by rate."""


def bound(w: World, job: str = "a") -> list[Binding]:
    with w.state.lock:
        return [h.binding for h in w.state.held[job].values()]


def counters(network: Fabric, bindings: Sequence[Binding]) -> tuple[dict[str, LinkLoad], dict]:
    """Per-link loads as a switch would count them: each QP forwarded in ``network``."""
    index = network.index
    paths = forward_many(
        network,
        np.asarray([index.node(b.src) for b in bindings], dtype=np.int64),
        np.asarray([index.node(b.dst) for b in bindings], dtype=np.int64),
        np.asarray([b.sport for b in bindings], dtype=np.int64),
    )
    per_port: dict[str, float] = {}
    for b in bindings:
        per_port[b.src] = per_port.get(b.src, 0.0) + b.rate
    bps: dict[int, float] = {}
    real = {}
    for b, path in zip(bindings, paths, strict=True):
        speed = network.links[int(path[0]) // 2].speed_gbps * 1e9
        sent = SHARE * speed * b.rate / per_port[b.src]
        real[b.key] = tuple(path)
        for r in path:
            bps[int(r)] = bps.get(int(r), 0.0) + sent
    loads = {}
    for number, link in enumerate(network.links):
        cap = link.speed_gbps * 1e9
        loads[link.id] = LinkLoad(
            link_id=link.id,
            at=0.0,
            utilization_ab=bps.get(2 * number, 0.0) / cap,
            utilization_ba=bps.get(2 * number + 1, 0.0) / cap,
        )
    return loads, real


def test_ports_that_take_their_paths_show_no_deviation() -> None:
    w = World()
    w.job("a", [0, 1, 2, 3])
    w.step()
    held = bound(w)
    loads, _ = counters(FABRIC, held)  # the switches hash as the model says
    rates = qp_rates(FABRIC, held, loads)
    assert len(rates) == len(held) and all(r > 0 for r in rates.values())
    assert find_deviations(FABRIC, held, loads, DeviationSettings()) == []


def test_predicted_ports_in_a_network_hashing_otherwise_are_found_with_their_qps() -> None:
    w = World()
    w.job("a", [0, 1, 2, 3, 4, 5], qps=3)  # 3 QPs over 4 spines: no mere permutation
    w.step()
    held = bound(w)
    network = hidden_hash_network(FABRIC)
    loads, real = counters(network, held)
    index = FABRIC.index
    planned = {b.key: tuple(index.path_resources(list(b.path))) for b in held}
    off = {k for k in planned if real[k] != planned[k]}
    assert off, "the hidden hash must put some predicted ports elsewhere"
    tolerance = 0.05
    found = find_deviations(FABRIC, held, loads, DeviationSettings(tolerance=tolerance))
    # Ground truth: the link directions (not NIC uplinks) whose real load differs from the
    # planned one by more than the tolerance; every QP sends the same here.
    each = SHARE * 400e9 / 3
    truth = set()
    for r in range(2 * len(FABRIC.links)):
        if index.res_src[r] in {p.node for p in index.ports}:
            continue
        on_real = sum(r in path for path in real.values())
        on_plan = sum(r in path for path in planned.values())
        if abs(on_real - on_plan) * each > tolerance * 400e9:
            truth.add(r)
    assert truth and {d.resource for d in found} == truth
    assert {d.kind for d in found} == {DeviationKind.UNPLANNED, DeviationKind.MISSING}
    for d in found:
        assert d.link_id in d.text and abs(d.observed_bps - d.planned_bps) > tolerance * 400e9
        assert d.qps
        if d.kind is DeviationKind.MISSING:  # planned across it, and some really is not
            assert all(d.resource in planned[k] for k in d.qps)
            assert any(d.resource not in real[k] for k in d.qps)
        else:  # planned elsewhere, and some really is on it
            assert all(d.resource not in planned[k] for k in d.qps)
            assert any(d.resource in real[k] for k in d.qps)
    named = {k for d in found for k in d.qps}
    assert len(named & off) >= len(off) // 2  # most off-path QPs are named
    issues = deviation_issues(found)
    assert set(issues) == {"a"}
    assert all(i.kind is IssueKind.DEVIATION and "link " in i.reason for i in issues["a"])
    assert len({(i.communicator, i.connection, i.qp) for i in issues["a"]}) == len(issues["a"])


def test_a_permutation_of_equal_qps_is_invisible_to_counters() -> None:
    """The limit, stated: 2 QPs per connection over 4 spines under a CRC with another seed is
    a permutation of the group members: every link carries what the plan says."""
    w = World()
    w.job("a", [0, 1, 2, 3], qps=2)
    w.step()
    held = bound(w)
    loads, real = counters(hidden_hash_network(FABRIC), held)
    index = FABRIC.index
    assert any(real[b.key] != tuple(index.path_resources(list(b.path))) for b in held)
    assert find_deviations(FABRIC, held, loads, DeviationSettings(tolerance=0.05)) == []


def test_noise_below_the_tolerance_and_links_without_counters_are_quiet() -> None:
    w = World()
    w.job("a", [0, 1, 2, 3])
    w.step()
    held = bound(w)
    loads, _ = counters(FABRIC, held)
    noisy = {
        k: v.model_copy(update={"utilization_ab": (v.utilization_ab or 0) + 0.04})
        for k, v in loads.items()
    }
    assert find_deviations(FABRIC, held, noisy, DeviationSettings(tolerance=0.05)) == []
    assert find_deviations(FABRIC, held, noisy, DeviationSettings(tolerance=0.03)) != []
    # No counters at all (no gNMI): nothing is known, nothing is claimed.
    assert find_deviations(FABRIC, held, {}, DeviationSettings()) == []


def test_a_port_the_counters_contradict_is_distrusted_and_probed_again() -> None:
    """What the service does with learned/verified ports and a deviation: the likely QPs'
    table entries are distrusted, so the next step asks for probes of that NIC pair (and only
    it) before binding it again, from what the probes see."""
    from test_learning import FABRIC as SMALL
    from test_learning import PORTS, Recording, _learner, _routes

    from c4p.testing.network import realized_path
    from southbound.bindings import bindings_for_paths
    from southbound.probing import ModeledProber

    network = hidden_hash_network(SMALL)
    prober = Recording(ModeledProber(network))
    learner = _learner()
    routes = _routes([(PORTS[0], PORTS[1]), (PORTS[2], PORTS[3])])
    bindings_for_paths(SMALL, routes, 1, source=learner.source(SMALL))
    learner.probe(learner.take_wants(), prober)
    learner.answered()
    bound = bindings_for_paths(SMALL, routes, 2, source=learner.source(SMALL))
    assert len(bound.bindings) == 2
    b = bound.bindings[0]
    index = SMALL.index
    exact = (index.node(b.src), index.node(b.dst), b.sport)
    assert learner.suspect([exact]) == 1
    assert learner.suspect([exact]) == 0  # already distrusted
    again = bindings_for_paths(SMALL, routes, 3, source=learner.source(SMALL), previous=bound)
    other = bound.bindings[1]  # the other QP keeps its port
    assert (other.key, other.sport) in {(x.key, x.sport) for x in again.bindings}
    moved = [x for x in again.bindings if x.key == b.key]
    if moved:  # re-bound at once from another port the probes saw take the path
        assert moved[0].sport != b.sport
    else:  # held back until that NIC pair (and only it) is probed again
        wants = learner.take_wants()
        assert {k[:2] for k in wants.cover} == {exact[:2]} or wants.exact
        learner.probe(wants, prober)
        learner.answered()
    final = bindings_for_paths(SMALL, routes, 4, source=learner.source(SMALL), previous=again)
    assert len(final.bindings) == 2
    assert next(x for x in final.bindings if x.key == b.key).sport != b.sport
    for x in final.bindings:
        assert realized_path(network, x.src, x.dst, x.sport) == x.path
