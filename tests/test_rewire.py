"""A new fabric snapshot swapped into a running controller (no gRPC, a fake clock, the real
planner and store): a moved cable, a new spine link, a re-speeded port and a pulled NIC cable
re-plan only the jobs they touch; every other binding stays; a restart after a swap is zero
churn, and a restart on other wiring plans again."""

from __future__ import annotations

from rewire_cases import (
    FULL,
    SPARE,
    START,
    link_between,
    moved,
    nic_moved,
    respeeded,
    without_nic_cable,
)

from c4p.controller import (
    ControllerState,
    FlapSettings,
    Intake,
    IntakeLimits,
    IntentState,
    Key,
    KeyKind,
    PlannerSettings,
    Reconciler,
)
from c4p.controller.reconcile import StepOutcome
from c4p.controller.rewire import touched_jobs, wiring_digest
from c4p.store import SqliteStore
from c4p.store.base import HeldBinding
from southbound.bindings import IssueKind
from southbound.pathtable import PathTable
from southbound.probeplan import ProbePlanner
from southbound.probing import ModeledProber
from southbound.routes import QpKey
from topology.model import Fabric, LinkStatus

WIRING = Key(KeyKind.WIRING, "rediscovery", "test", force=True)


class World:
    """State, store, intake and reconciler on one store, on ``fabric``, at a fixed time."""

    def __init__(self, fabric: Fabric = START, store: SqliteStore | None = None) -> None:
        self.now = 1000.0
        self.store = store or SqliteStore(":memory:")
        self.state = ControllerState(
            fabric, self.store.load(), FlapSettings(), self.now, predicted_ports=True
        )
        self.intake = Intake(self.state, self.store, IntakeLimits(), lambda: self.now)
        self.reconciler = Reconciler(self.state, self.store, PlannerSettings(budget_s=1.0))

    def step(self, *keys: Key) -> StepOutcome | None:
        return self.reconciler.step(self.now, keys or (Key(KeyKind.JOB, "test"),))

    def job(self, name: str, hosts: list[str], qps: int = 2) -> int:
        done = self.intake.register({"job_id": name, "hosts": hosts})
        self.intake.submit(
            name,
            done.record.incarnation,
            [{"id": "dp", "version": 1, "qps_per_connection": qps}],
            [],
        )
        return done.record.incarnation

    def held(self, name: str) -> dict[QpKey, HeldBinding]:
        with self.state.lock:
            return dict(self.state.held.get(name, {}))

    def two_jobs(self) -> tuple[int, int]:
        a = self.job("a", ["h0000", "h0001"])  # leaf-00 <-> leaf-01
        b = self.job("b", ["h0002", "h0003"])  # leaf-02 <-> leaf-03
        assert self.step() is not None
        return a, b


def _hops(held: dict[QpKey, HeldBinding]) -> set[frozenset[str]]:
    return {
        frozenset(hop)
        for h in held.values()
        for hop in zip(h.binding.path, h.binding.path[1:], strict=False)
    }


def test_a_moved_cable_replans_only_the_job_it_touches() -> None:
    w = World()
    _, b = w.two_jobs()
    epoch, before_a, before_b = w.state.epoch, w.held("a"), w.held("b")
    assert frozenset({"leaf-00", "spine-00"}) in _hops(before_a)  # a crosses the moved cable
    new = moved()
    w.state.offer_fabric(new)
    outcome = w.step(WIRING)
    assert outcome is not None and not outcome.failed
    assert outcome.changed_jobs == {"a"}
    assert w.held("b") == before_b  # zero churn: every binding, its epoch included
    quiet = w.state.update_since("b", b, epoch)
    assert quiet is not None and quiet.empty
    after_a = w.held("a")
    assert set(after_a) == set(before_a)
    assert frozenset({"leaf-00", "spine-00"}) not in _hops(after_a)
    for h in after_a.values():
        new.index.path_resources(h.binding.path)  # every path exists in the new fabric
    d = outcome.decision
    assert d.jobs_on_links == ("a",)
    assert (
        "rewired" in d.reason and "1 link(s) added" in d.reason and "1 link(s) removed" in d.reason
    )
    assert any(t.startswith("rewired") for t in d.triggers)
    assert w.state.fabric is new
    assert w.step() is None  # the new wiring is in the fingerprint: nothing more to do


def test_a_new_spine_link_is_usable_by_the_next_plan() -> None:
    w = World()
    w.two_jobs()
    before_b = w.held("b")
    w.state.offer_fabric(FULL)
    outcome = w.step(WIRING)
    assert outcome is not None and "b" not in outcome.changed_jobs
    assert w.held("b") == before_b
    # With leaf-00's two old uplinks drained, only the new cable leaves leaf-00.
    for spine in ("spine-00", "spine-01"):
        w.intake.drain(link_between(FULL, "leaf-00", spine).id, "test")
    outcome = w.step(Key(KeyKind.DRAIN, "test"))
    assert outcome is not None and outcome.changed_jobs == {"a"}
    crossing = [h for h in w.held("a").values() if len(h.binding.path) > 3]
    assert crossing and all("spine-02" in h.binding.path for h in crossing)
    assert frozenset(node.split(":")[0] for node in SPARE.ends) in _hops(w.held("a"))


def test_an_operator_drain_follows_its_cable_across_a_swap() -> None:
    w = World()
    w.two_jobs()
    drained = link_between(START, "leaf-02", "spine-00")
    w.intake.drain(drained.id, "optics")
    assert w.step(Key(KeyKind.DRAIN, "test")) is not None
    w.state.offer_fabric(FULL)  # a new cable before it in the list: link numbers shift
    assert w.step(WIRING) is not None
    number = FULL.index.link_number(drained.id)
    assert number != START.index.link_number(drained.id)  # the case this test is about
    status = w.state.effective_links(w.now)
    assert status.get(number) is LinkStatus.DRAINED
    assert list(status) == [number]  # and no other link took its place
    for held in (w.held("a"), w.held("b")):
        assert frozenset({"leaf-02", "spine-00"}) not in _hops(held)


def test_a_respeeded_port_replans_the_job_on_it() -> None:
    w = World()
    w.two_jobs()
    before_b = w.held("b")
    w.state.offer_fabric(respeeded(100.0))
    outcome = w.step(WIRING)
    assert outcome is not None and not outcome.failed
    assert "1 link(s) speed changed" in outcome.decision.reason
    assert outcome.decision.jobs_on_links == ("a",)
    assert w.held("b") == before_b


def test_a_nic_moved_to_another_leaf_replans_its_job() -> None:
    w = World()
    w.two_jobs()
    before_a = w.held("a")
    new = nic_moved("h0002", "leaf-03", "Ethernet9")  # now beside h0003 on leaf-03
    w.state.offer_fabric(new)
    outcome = w.step(WIRING)
    assert outcome is not None and outcome.changed_jobs == {"b"}
    assert w.held("a") == before_a
    paths = [h.binding.path for h in w.held("b").values()]
    assert paths and all(p[1:-1] == ("leaf-03",) for p in paths)  # no longer crosses spines


def test_a_pulled_nic_cable_is_a_binding_issue_not_a_crash() -> None:
    w = World()
    a, b = w.two_jobs()
    before_a, before_b = w.held("a"), w.held("b")
    w.state.offer_fabric(without_nic_cable("h0002"))
    outcome = w.step(WIRING)
    assert outcome is not None and not outcome.failed
    assert w.held("a") == before_a  # untouched
    assert w.held("b") == before_b  # fail-static: kept in force, reported
    entry = w.state.jobs["b"]
    assert entry.state is IntentState.DEGRADED
    assert {i.kind for i in entry.issues} == {IssueKind.UNBOUND}
    assert len(entry.issues) == len(before_b)
    assert all("not cabled" in i.reason for i in entry.issues)
    # The cable is back: the job is planned again and its issues clear.
    w.state.offer_fabric(START)
    outcome = w.step(WIRING)
    assert outcome is not None and not outcome.failed
    assert w.state.jobs["b"].state is IntentState.INSTALLED
    assert a and b


def test_a_restart_after_a_swap_keeps_the_bindings() -> None:
    store = SqliteStore(":memory:")
    w = World(START, store)
    w.two_jobs()
    w.state.offer_fabric(moved())
    assert w.step(WIRING) is not None
    bindings = {j: w.held(j) for j in ("a", "b")}
    again = World(moved(), store)  # discovery at start finds the same (new) wiring
    assert {j: again.held(j) for j in ("a", "b")} == bindings
    assert again.step() is None  # same fingerprint: no epoch, zero churn
    other = World(START, store)  # the cable went back while the controller was down
    outcome = other.step()
    assert outcome is not None and "a" in outcome.changed_jobs  # a's paths are gone again
    assert other.held("b") == bindings["b"]


def test_which_jobs_a_change_touches() -> None:
    paths = {
        "a": [("h0000:nic0p0", "leaf-00", "spine-00", "leaf-01", "h0001:nic0p0")],
        "b": [("h0002:nic0p0", "leaf-02", "spine-01", "leaf-03", "h0003:nic0p0")],
        "c": [("h0001:nic0p0", "leaf-01", "spine-02", "leaf-03", "h0003:nic0p0")],
    }
    ports = {"a": ["h0000:nic0p0"], "b": ["h0002:nic0p0"], "c": ["h0001:nic0p0"]}
    moved_ = touched_jobs(START, moved(), paths, ports)
    assert set(moved_.touched) == {"a"}  # b and c cannot reach leaf-00 on an equal-cost path
    added = touched_jobs(START, FULL, paths, ports)
    assert added.added == (SPARE.id,) and set(added.touched) == {"a"}
    assert "new link" in added.touched["a"]
    pulled = touched_jobs(START, without_nic_cable("h0002"), paths, ports)
    assert set(pulled.touched) == {"b"}
    # The same cable on another interface of the same two switches: no path changes.
    old = link_between(START, "leaf-03", "spine-02")
    spare_port = old.model_copy(update={"b": "spine-02:Ethernet9"})
    replugged = Fabric.model_validate(
        {
            **START.model_dump(),
            "links": [(spare_port if k == old else k).model_dump() for k in START.links],
        }
    )
    same = touched_jobs(START, replugged, paths, ports)
    assert same.removed and same.added and not same.touched
    assert wiring_digest(replugged) != wiring_digest(START)
    reordered = START.model_copy(update={"links": tuple(reversed(START.links))})
    assert wiring_digest(reordered) == wiring_digest(START)


def test_a_learned_table_is_carried_across_and_only_what_changed_is_probed_again() -> None:
    """A path table learned on START, re-cabled to moved(): the pair far from leaf-00 keeps
    every entry as it was; the pair on leaf-00 loses the entries on the gone cable and its
    others go stale; re-probing costs fewer traces than learning anew and ends where a table
    learned anew on the new fabric is (the modeled prober answers from the new cabling)."""
    new = moved()
    names = [("h0000:nic0p0", "h0001:nic0p0"), ("h0002:nic0p0", "h0003:nic0p0")]
    old_pairs = [(START.index.node(a), START.index.node(b)) for a, b in names]
    new_pairs = [(new.index.node(a), new.index.node(b)) for a, b in names]
    table = PathTable(START, "pair")
    ProbePlanner(table, ModeledProber(START)).cover(old_pairs)
    before = {k: dict(table.entries(k)) for k in old_pairs}
    moved_table, invalidation = table.rewire(new)
    near, far = new_pairs
    assert invalidation.keys == (near,)
    assert {s: e.middle for s, e in moved_table.entries(far).items()} == {
        s: new.index.path_resources(START.index.path_nodes(e.middle))
        for s, e in before[old_pairs[1]].items()
    }
    assert not any(e.stale for e in moved_table.entries(far).values())
    assert len(moved_table.entries(near)) < len(before[old_pairs[0]])
    report = ProbePlanner(moved_table, ModeledProber(new)).reprobe(invalidation)
    fresh = PathTable(new, "pair")
    anew = ProbePlanner(fresh, ModeledProber(new)).cover(new_pairs)
    assert 0 < report.traces < anew.traces
    for key in new_pairs:
        entries = moved_table.entries(key)
        assert entries and not any(e.stale for e in entries.values())
        assert {e.middle for e in entries.values()} == set(moved_table.middles(key))
        assert moved_table.middles(key) == fresh.middles(key)
        for sport, entry in entries.items():
            known = fresh.entries(key).get(sport)
            assert known is None or known.middle == entry.middle
