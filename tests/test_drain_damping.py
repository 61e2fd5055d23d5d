"""Operator drains and restores go through the same damping as observed link events.

Fault detectors are meant to drive ``DrainLink``/``RestoreLink``; a detector that flaps must not
make the controller re-plan (and rewrite ports) at its rate. A drain takes effect at once (the
link may be losing traffic); a restore is held for ``hold_up_s``, and a link drained again and
again is suppressed like a flapping link (RFC 2439 penalties), exactly as for gNMI events.
"""

from __future__ import annotations

from test_controller import HOSTS, World

from c4p.controller import IntentState, Key, KeyKind
from topology.model import LinkStatus


def crossing_link(w: World, job: str) -> str:
    held = next(iter(w.state.held[job].values()))
    path = held.binding.path
    return f"{path[1]}--{path[2]}"  # a leaf-spine hop


def flap(w: World, link: str, hz: float, seconds: float) -> tuple[int, int]:
    """Drain/restore ``link`` at ``hz`` for ``seconds`` of the fake clock, stepping after each
    call like the loop would; returns (re-plans, port rewrites)."""
    plans = rewrites = 0
    calls = int(hz * seconds)
    for k in range(calls):
        w.clock.now += 1.0 / hz
        if k % 2 == 0:
            w.intake.drain(link, "detector says so")
        else:
            w.intake.restore(link)
        outcome = w.step(Key(KeyKind.DRAIN, link))
        if outcome is not None:
            plans += 1
            d = outcome.decision  # type: ignore[attr-defined]
            rewrites += d.bindings_changed + d.bindings_added
    return plans, rewrites


def test_a_flapping_operator_drain_is_damped_like_a_flapping_link() -> None:
    w = World()
    for k, name in enumerate(("a", "b", "c")):
        w.job(name, [2 * k, 2 * k + 1])
    w.step()
    link = crossing_link(w, "a")
    before = {n: w.ports(n) for n in ("b", "c")}
    plans, rewrites = flap(w, link, hz=10, seconds=10)
    print(f"10 Hz admin flap over 10 s: {plans} re-plans, {rewrites} port rewrites")
    assert plans <= 3, (plans, rewrites)
    assert {n: w.ports(n) for n in ("b", "c")} == before  # jobs off the link: untouched
    number = w.state.fabric.index.link_number(link)
    assert w.state.effective_links(w.clock())[number] is LinkStatus.DRAINED  # suppressed


def test_a_single_drain_acts_at_once_and_a_restore_after_the_hold() -> None:
    w = World()
    w.job("a", [0, 1])
    w.step()
    link = crossing_link(w, "a")
    number = w.state.fabric.index.link_number(link)
    w.intake.drain(link, "maintenance")
    assert w.state.effective_links(w.clock())[number] is LinkStatus.DRAINED
    assert w.step(Key(KeyKind.DRAIN, link)) is not None
    w.clock.now += 60
    w.intake.restore(link)
    assert number in w.state.effective_links(w.clock())  # held for hold_up_s
    assert w.state.next_link_change(w.clock()) is not None
    w.clock.now += 2.5  # past the hold-down (default 2 s)
    assert number not in w.state.effective_links(w.clock())
    assert w.state.jobs["a"].state is IntentState.INSTALLED
    assert HOSTS  # the world's hosts are the controller tests' own
