"""An operator drain keeps the ports right (issue 30, item 4), over real gRPC.

A drain (``DrainLink``) removes a link from the planner's choices; the switch's ECMP group is
unchanged, so every QP's port must be judged by forwarding through the *full* group. Here a job
is bound, a link one of its QPs crosses is drained through the admin API, and then every QP is
traced through the fabric's data-plane model (``topology.forwarding``, all links up: what the
switches still hash over): every QP on its planned path, none on the drained link, and no port
rewritten for a QP whose path stayed. A link that is really down (observed) does shrink the
group; that case is the controller tests' (``test_controller``).
"""

from __future__ import annotations

from pathlib import Path

from service_cases import busy_fabric, clients, hosts, links_of, serving, wait_until

from c4p.client import communicator
from c4p.testing.network import realized_path

FABRIC = busy_fabric()
HOSTS = hosts(FABRIC)


def drain_check(
    before: dict[str, object], after: dict[str, object], drained: frozenset[str]
) -> dict[str, int]:
    """Counts of the drain check: QPs traced, on plan, on the drained link, ports rewritten
    (of QPs whose path did not change), moved off the drained link."""
    counts = {"traced": 0, "on_plan": 0, "on_drained": 0, "rewritten": 0, "moved": 0}
    for key, b in after.items():
        real = realized_path(FABRIC, b.src_port, b.dst_port, b.udp_sport)  # type: ignore[attr-defined]
        counts["traced"] += 1
        counts["on_plan"] += real == tuple(b.path)  # type: ignore[attr-defined]
        counts["on_drained"] += drained in links_of(real)
        old = before[key]
        if tuple(old.path) == tuple(b.path):  # type: ignore[attr-defined]
            counts["rewritten"] += old.udp_sport != b.udp_sport  # type: ignore[attr-defined]
        else:
            counts["moved"] += 1
    return counts


def test_an_api_drain_rewrites_no_port_whose_path_stays_and_puts_none_on_the_link(
    tmp_path: Path,
) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        # One host per leaf (two hosts share a leaf in this fabric): every QP crosses a spine.
        job = flow.register_job("a2a", hosts=HOSTS[0:16:2])
        reply = job.submit([communicator("x", pattern="all-to-all", qps_per_connection=2)])
        watch = job.watch()
        try:
            assert watch.wait_revision(reply.revision, 30)
            before = watch.mirror.snapshot()
            assert len(before) == reply.flows and reply.flows >= 100
            # The spine uplink the most QPs cross.
            crossings: dict[frozenset[str], int] = {}
            for b in before.values():
                for link in links_of(tuple(b.path)):
                    if any(n.startswith("spine") for n in link):
                        crossings[link] = crossings.get(link, 0) + 1
            drained = max(crossings, key=lambda k: crossings[k])
            a, b_end = sorted(drained)
            done = admin.drain(f"{a}--{b_end}", "optics", wait=True)
            assert done.changed and done.decision.epoch > 0
            assert watch.wait(lambda m: m.epoch >= done.decision.epoch, 30)
            after = watch.mirror.snapshot()
            assert set(after) == set(before)
            counts = drain_check(before, after, drained)
            print(f"drain check ({a}--{b_end}, {crossings[drained]} QPs crossed it): {counts}")
            assert counts["traced"] == len(before)
            assert counts["on_plan"] == counts["traced"]
            assert counts["on_drained"] == 0
            assert counts["rewritten"] == 0
            assert counts["moved"] >= crossings[drained]  # every QP on it moved
            # The planner's view is unchanged by this: the link is drained, and empty.
            assert wait_until(
                lambda: any(x.drained and x.flows == 0 for x in admin.fabric(True).links)
            )
        finally:
            watch.stop()


def test_a_link_really_down_shrinks_the_group_and_ports_follow_it() -> None:
    """The other half: a link the switch reports down is out of its group, so ports are found
    on the shrunk group (traced with the link down, every QP is on plan and off the link)."""
    from test_controller import FABRIC as SMALL
    from test_controller import World

    from c4p.controller import Key, KeyKind
    from southbound.verify import realized_paths
    from topology.model import LinkStatus

    w = World()
    w.job("a", [0, 1, 2, 3])
    w.step()
    with w.state.lock:
        held = [h.binding for h in w.state.held["a"].values()]
    index = SMALL.index
    crossing = next(b for b in held if len(b.path) > 3)
    number = index.link_number(f"{crossing.path[1]}--{crossing.path[2]}")
    link = SMALL.links[number]
    assert link.usable
    w.state.observe_link(number, LinkStatus.DOWN, w.clock())
    w.step(Key(KeyKind.LINK, link.id))
    with w.state.lock:
        after = [h.binding for h in w.state.held["a"].values()]
    down = SMALL.with_link_status({number: LinkStatus.DOWN})
    real = [tuple(index.path_nodes(p)) for p in realized_paths(down, after)]
    assert [tuple(b.path) for b in after] == real
    gone = frozenset(crossing.path[1:3])
    assert all(gone not in links_of(p) for p in real)
    assert any(gone in links_of(tuple(b.path)) for b in held)  # it did carry QPs
