"""The controller without gRPC: debounce and hysteresis with a fake clock, the intake's all or
nothing, and the reconcile step (plan, bind, diff per job, commit, fail-static, restart)."""

from __future__ import annotations

import asyncio
import time

import pytest
from service_cases import hosts, spread_fabric

from c4p.controller import (
    ControllerLoop,
    ControllerState,
    Debouncer,
    FlapSettings,
    Intake,
    IntakeLimits,
    IntentState,
    InvalidRequest,
    Key,
    KeyKind,
    LinkTracker,
    LoopSettings,
    PlannerSettings,
    PreconditionFailed,
    Reconciler,
)
from c4p.controller.triggers import describe
from c4p.store import SqliteStore
from southbound.ports import PredictedPorts
from topology.model import Fabric, LinkStatus

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class World:
    """State, store, intake and reconciler on one in-memory store, with a fake clock."""

    def __init__(
        self, store: SqliteStore | None = None, ports: object = None, predicted: bool = True
    ) -> None:
        self.clock = Clock()
        self.store = store or SqliteStore(":memory:")
        # predicted: as if the operator chose ``ports.mode: predicted`` (the model's ports)
        self.state = ControllerState(
            FABRIC, self.store.load(), FlapSettings(), self.clock(), predicted_ports=predicted
        )
        self.intake = Intake(self.state, self.store, IntakeLimits(), self.clock)
        self.reconciler = Reconciler(
            self.state,
            self.store,
            PlannerSettings(budget_s=1.0),
            ports,  # type: ignore[arg-type]
        )

    def step(self, *keys: Key) -> object:
        return self.reconciler.step(self.clock(), keys or (Key(KeyKind.JOB, "test"),))

    def job(self, name: str, host_ids: list[int], qps: int = 2) -> int:
        done = self.intake.register({"job_id": name, "hosts": [HOSTS[i] for i in host_ids]})
        self.intake.submit(
            name,
            done.record.incarnation,
            [{"id": "dp", "version": 1, "qps_per_connection": qps}],
            [],
        )
        return done.record.incarnation

    def ports(self, name: str) -> dict[tuple[str, str, int, int], int]:
        with self.state.lock:
            return {k: h.binding.sport for k, h in self.state.held.get(name, {}).items()}


def test_a_burst_is_one_batch_and_a_trickle_is_bounded() -> None:
    d = Debouncer(quiet_s=0.1, max_delay_s=0.5)
    assert d.due_at() is None and d.take(0.0) is None
    for k in range(50):
        d.add(Key(KeyKind.JOB, f"j{k % 5}"), 10.0 + k * 0.001)
    assert d.take(10.1) is None  # still within the quiet time of the last key
    batch = d.take(10.2)
    assert batch is not None and len(batch) == 5 and not d.pending
    for k in range(100):  # a key every 50 ms: never quiet, so max_delay decides
        d.add(Key(KeyKind.JOB, "x"), 20.0 + k * 0.05)
        if d.take(20.0 + k * 0.05) is not None:
            break
    assert 20.0 + k * 0.05 >= 20.5 and k <= 10
    assert describe([Key(KeyKind.JOB, "b"), Key(KeyKind.JOB, "a"), Key(KeyKind.STARTUP)]) == (
        "job a, b; startup"
    )


def test_flapping_links_are_held_out_until_stable() -> None:
    t = LinkTracker(FlapSettings(hold_up_s=2, penalty=1000, suppress=2000, reuse=750))
    assert t.observe(7, LinkStatus.DOWN, 0.0)
    assert t.effective(0.0) == {7: LinkStatus.DOWN}
    t.observe(7, LinkStatus.UP, 1.0)
    assert t.effective(2.5) == {7: LinkStatus.DOWN}  # held: up for only 1.5 s
    assert t.next_change(2.5) == pytest.approx(3.0)
    assert t.effective(3.1) == {}
    for at in (4.0, 6.0):  # it keeps flapping: suppressed at the third fall
        t.observe(7, LinkStatus.DOWN, at)
        t.observe(7, LinkStatus.UP, at + 1)
    assert t.effective(10.0) == {7: LinkStatus.DOWN}
    usable = t.next_change(10.0)
    assert usable is not None and usable > 30.0  # until the penalty decays below reuse
    assert t.effective(usable + 0.1) == {}
    assert not t.observe(7, LinkStatus.UP, usable + 1)  # no change, no event


def test_the_intake_refuses_whole_requests() -> None:
    w = World()
    incarnation = w.job("a", [0, 1])
    before = dict(w.state.jobs["a"].communicators)
    bad = [
        {"id": "ok", "version": 1},
        {"id": "broken", "version": 1, "qps_per_connection": 99},
    ]
    with pytest.raises(InvalidRequest) as caught:
        w.intake.submit("a", incarnation, bad, [])
    assert caught.value.problems[0][0] == "communicators[1].qps_per_connection"
    with pytest.raises(PreconditionFailed):
        w.intake.submit("a", incarnation, [{"id": "ok", "version": 1}, {"id": "dp", "version": 1,
                        "channels": 2}], [])  # fmt: skip
    assert w.state.jobs["a"].communicators == before
    assert w.state.jobs["a"].record.revision == 1
    done = w.intake.submit("a", incarnation, [], ["dp", "never"])
    assert [c.outcome.value for c in done.communicators] == ["withdrawn", "absent"]


def test_a_step_binds_and_a_second_step_with_nothing_new_does_nothing() -> None:
    w = World()
    w.job("a", [0, 1])
    w.job("b", [2, 3])
    outcome = w.step()
    assert outcome is not None
    assert outcome.changed_jobs == {"a", "b"}  # type: ignore[attr-defined]
    assert len(w.ports("a")) == 8 and len(w.ports("b")) == 8
    assert w.state.jobs["a"].state is IntentState.INSTALLED
    update = w.state.update_since("a", 1, 0)
    assert update is not None and update.full and len(update.bindings) == 8
    epoch = w.state.epoch
    assert w.step() is None and w.state.epoch == epoch
    quiet = w.state.update_since("a", 1, epoch)
    assert quiet is not None and quiet.empty and not quiet.full


def test_bound_on_the_models_word_is_not_installed_unless_the_operator_chose_it() -> None:
    """Honest states (issue 30): ports no probe saw are ``BOUND_UNVERIFIED`` with a count,
    unless the operator chose predicted ports; then ``INSTALLED`` and marked predicted."""
    w = World(predicted=False)
    w.job("a", [0, 1])
    w.step()
    entry = w.state.jobs["a"]
    assert entry.state is IntentState.BOUND_UNVERIFIED
    assert (entry.verified, entry.unverified, entry.predicted) == (0, 8, False)
    update = w.state.update_since("a", 1, 0)
    assert update is not None and update.state is IntentState.BOUND_UNVERIFIED
    chosen = World(predicted=True)
    chosen.job("a", [0, 1])
    chosen.step()
    entry = chosen.state.jobs["a"]
    assert entry.state is IntentState.INSTALLED
    assert (entry.verified, entry.unverified, entry.predicted) == (0, 8, True)
    # Counted again after a restart, from the bindings the store kept.
    restarted = ControllerState(FABRIC, w.store.load(), FlapSettings(), w.clock())
    again = restarted.jobs["a"]
    assert again.state is IntentState.BOUND_UNVERIFIED and again.unverified == 8


def test_a_drain_moves_only_the_job_that_crosses_it_and_the_diff_says_so() -> None:
    w = World()
    w.job("a", [0, 1])
    w.job("b", [2, 3])
    w.step()
    epoch = w.state.epoch
    before_a, before_b = w.ports("a"), w.ports("b")
    with w.state.lock:
        crossing = next(h for h in w.state.held["a"].values() if len(h.binding.path) > 3)
    link = f"{crossing.binding.path[1]}--{crossing.binding.path[2]}"
    w.intake.drain(link, "test")
    outcome = w.step(Key(KeyKind.DRAIN, w.intake.link_id(link)))
    assert outcome is not None
    assert outcome.changed_jobs == {"a"}  # type: ignore[attr-defined]
    assert outcome.decision.jobs_on_links == ("a",)  # type: ignore[attr-defined]
    assert w.ports("b") == before_b
    delta = w.state.update_since("a", 1, epoch)
    assert delta is not None and not delta.full and delta.bindings
    assert all(h.binding.epoch == epoch + 1 for h in delta.bindings)
    assert {h.key for h in delta.bindings} <= set(before_a)
    assert w.state.update_since("b", 2, epoch).empty  # type: ignore[union-attr]


def test_withdrawn_bindings_leave_tombstones_until_compacted() -> None:
    w = World()
    incarnation = w.job("a", [0, 1])
    w.intake.submit("a", incarnation, [{"id": "tp", "version": 1}], [])
    w.step()
    epoch = w.state.epoch
    w.intake.submit("a", incarnation, [], ["tp"])
    w.step()
    delta = w.state.update_since("a", incarnation, epoch)
    assert delta is not None and not delta.full
    assert sorted(delta.removed) == [("a", "tp", c, 0) for c in range(4)]
    assert all(h.binding.communicator == "dp" for h in delta.bindings)  # may rebalance
    w.state.tombstone_horizon = 0
    w.intake.submit("a", incarnation, [{"id": "dp", "version": 2}], [])
    w.step()
    assert w.state.update_since("a", incarnation, epoch).full  # type: ignore[union-attr]


def test_a_failing_plan_keeps_every_binding_fail_static() -> None:
    def broken(fabric: Fabric) -> PredictedPorts:
        raise RuntimeError("port synthesis is down")

    w = World()
    w.job("a", [0, 1])
    w.step()
    ports, epoch = w.ports("a"), w.state.epoch
    failing = Reconciler(w.state, w.store, PlannerSettings(budget_s=1.0), broken)
    w.intake.drain(f"{HOSTS[0]}:nic1p0", "force a new snapshot")
    outcome = failing.step(w.clock(), [Key(KeyKind.DRAIN, "x")])
    assert outcome is not None and outcome.failed
    assert "port synthesis is down" in outcome.decision.error
    assert w.ports("a") == ports and w.state.epoch == epoch
    assert w.state.jobs["a"].state is IntentState.FAILED
    assert w.step() is not None  # a working reconciler recovers
    assert w.state.jobs["a"].state is IntentState.DEGRADED  # that NIC link is drained


def test_a_restart_resumes_with_zero_churn() -> None:
    store = SqliteStore(":memory:")
    w = World(store)
    w.job("a", [0, 1])
    w.job("b", [2, 3])
    w.step()
    ports = {j: w.ports(j) for j in ("a", "b")}
    incarnation = w.job("c", [4, 5])  # accepted, not planned when the controller "dies"
    again = World(store)
    assert {j: again.ports(j) for j in ("a", "b")} == ports
    assert again.state.jobs["c"].state is IntentState.INSTALL_REQ
    assert again.step() is not None  # plans job c ...
    assert {j: again.ports(j) for j in ("a", "b")} == ports  # ... and moves nobody else
    assert len(again.ports("c")) == 8 and incarnation == 3
    third = World(store)
    assert third.step() is None  # nothing changed since: no new epoch at all


def test_link_events_and_held_links_reach_the_plan() -> None:
    w = World()
    w.job("a", [0, 1])
    w.step()
    with w.state.lock:
        crossing = next(h for h in w.state.held["a"].values() if len(h.binding.path) > 3)
    number = FABRIC.index.link_number(f"{crossing.binding.path[1]}--{crossing.binding.path[2]}")
    assert w.state.observe_link(number, LinkStatus.DOWN, w.clock())
    w.step(Key(KeyKind.LINK, FABRIC.links[number].id))
    assert w.state.jobs_on_links([number]) == []
    w.clock.now += 1
    w.state.observe_link(number, LinkStatus.UP, w.clock())
    assert w.state.effective_links(w.clock()) == {number: LinkStatus.DOWN}  # held
    assert w.step() is None  # nothing usable changed yet
    w.clock.now += 5
    assert w.state.effective_links(w.clock()) == {}
    assert w.step() is not None  # the link is usable again: a new plan (nobody must move)


def test_the_loop_turns_a_burst_of_keys_into_few_steps() -> None:
    w = World()
    steps: list[object] = []

    async def main() -> int:
        loop = ControllerLoop(
            w.reconciler,
            LoopSettings(debounce_s=0.05, max_delay_s=1.0),
            clock=time.time,
            on_step=steps.append,
        )
        await loop.start()
        try:
            for k in range(30):  # all enqueued before the loop can run a step
                if k < len(HOSTS):
                    w.intake.register({"job_id": f"j{k}", "hosts": [HOSTS[k]]})
                loop.enqueue(Key(KeyKind.JOB, f"j{k}"))
            decision = await loop.wait_covered(w.state.revision, 30)
            assert decision is not None and decision.epoch >= 1
            return loop.steps
        finally:
            await loop.stop()

    count = asyncio.run(main())
    assert count <= 2 and len(steps) == 1
