"""A job whose intents cannot be planned is that job's failure, never the controller's.

The intents here are poisoned *behind* validation (as a store written by an older c4p, or a
future bug, could hold them): the edge refuses such numbers now (see test_service_hardening),
but planning must survive whatever gets through.
"""

from __future__ import annotations

import math

from test_controller import World

from c4p.controller import IntentState, Key, KeyKind


def poison(w: World, job: str, rate: float) -> None:
    """Give ``job``'s communicator a rate validation would refuse, as a new intent revision."""
    with w.state.lock:
        entry = w.state.jobs[job]
        comm = entry.communicators["dp"]
        entry.communicators["dp"] = comm.model_copy(
            update={"spec": comm.spec.model_copy(update={"rate": rate}), "version": 2}
        )
        entry.record = entry.record.model_copy(update={"revision": entry.record.revision + 1})
        w.state.bump()


def test_an_unplannable_job_fails_alone_and_the_others_are_planned() -> None:
    w = World()
    w.job("a", [0, 1])
    w.job("b", [2, 3])
    w.step()
    held_b = w.ports("b")
    assert held_b and w.state.jobs["b"].state is IntentState.INSTALLED
    poison(w, "b", 5e-324)
    w.job("c", [4, 5])  # a newcomer must still be planned
    outcome = w.step()
    assert outcome is not None and not outcome.failed  # type: ignore[attr-defined]
    assert w.state.jobs["b"].state is IntentState.FAILED
    assert "cannot be planned" in w.state.jobs["b"].reason
    assert w.ports("b") == held_b  # fail-static: its bindings in force stay
    assert w.state.jobs["a"].state is IntentState.INSTALLED
    assert w.state.jobs["c"].state is IntentState.INSTALLED and w.ports("c")
    assert w.step(Key(KeyKind.REPLAN, "again", force=True)) is not None
    assert w.state.jobs["c"].state is IntentState.INSTALLED  # and stays so on later plans
    assert w.state.jobs["b"].state is IntentState.FAILED


def test_no_decision_with_a_non_finite_number_reaches_the_log() -> None:
    w = World()
    w.job("a", [0, 1])
    poison(w, "a", math.inf)
    w.job("b", [2, 3])
    w.step()
    for d in w.store.decisions(50):  # every record reads back, and every number is finite
        numbers = [d.max_utilization, d.bound, d.gap, d.solve_seconds]
        numbers += [p.busbw_fraction for p in d.predictions]
        assert all(math.isfinite(x) for x in numbers), d
    assert w.state.jobs["b"].state is IntentState.INSTALLED
