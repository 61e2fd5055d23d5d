"""The controller's live state: jobs and intents, the bindings in force, link overrides and
counters, behind one lock, written through to the store.

Why one object behind one (reentrant) lock: every change a client or an operator makes is
"write the store, then change memory" and must not interleave with another change or with the
commit of a reconcile step; the reconcile step itself plans *outside* the lock on a copy of the
inputs (:meth:`ControllerState.plan_inputs`), which can take seconds, and commits under it. A
commit drops the changes of a job that was released or re-registered meanwhile, and commits the
plan of a job whose intents changed meanwhile for the revision it read (so a job that submits
without pause still makes progress); either way the key that change enqueued brings the next
step (level-triggered: nothing is lost, only deferred).

Each job goes through the ONOS-style :class:`IntentState` machine; each binding carries the
epoch that set it and each withdrawn binding leaves a tombstone, so :meth:`update_since`
answers "what changed for this job since epoch e" for any e after the compaction horizon. A
reverse index (link -> jobs with QPs across it) answers "whom does this link touch".

Control modes (:mod:`c4p.controller.modes`): each job's mode is resolved from its pin, the
rollout policy and an operator's rollback (:meth:`ControllerState.mode_of`) when a step reads its
inputs, so a mode change is planned like any other change. ``held`` holds only what is in force
on the data plane (active jobs); a shadow job's bindings live in ``shadow`` (in memory: they
never reach a data plane, and the next plan recomputes them). ``JobEntry.control`` is the mode
of the last committed plan, which is what a job's stream shows.
Operator drains and restores (``DrainLink``/``RestoreLink``, which fault detectors drive) pass
through a :class:`~c4p.controller.triggers.LinkTracker` of their own with the same
:class:`~c4p.controller.triggers.FlapSettings` as observed link events: a drain acts at once, a
restore is held for ``hold_up_s``, and a link drained again and again is suppressed. One
damping policy for every source, so a flapping detector cannot make the controller re-plan at
its rate.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from c4p.controller.intents import IntentState as IntentState  # re-exported: imported from here
from c4p.controller.intents import JobEntry, JobInput, PlanInputs, placed
from c4p.controller.intents import JobUpdate as JobUpdate
from c4p.controller.intents import StepDraft as StepDraft
from c4p.controller.intents import placement_problems as placement_problems
from c4p.controller.intents import placement_spec as placement_spec
from c4p.controller.linkstate import LinkState
from c4p.controller.modes import RolloutSettings, resolve
from c4p.controller.rewire import Rewiring, link_number_map, touched_jobs, wiring_digest
from c4p.controller.triggers import FlapSettings
from c4p.store.base import (
    CommunicatorRecord,
    ControlMode,
    DecisionRecord,
    EpochCommit,
    HeldBinding,
    JobRecord,
    LinkOverride,
    ModeSource,
    RollbackRecord,
    Store,
    StoredState,
)
from solver.workload.jobs import (
    RankNic,
)
from southbound.routes import QpKey
from topology.model import Fabric, LinkStatus


class ControllerState(LinkState):
    """See the module docstring. ``lock`` guards every attribute."""

    def __init__(
        self,
        fabric: Fabric,
        stored: StoredState,
        flap: FlapSettings,
        now: float,
        tombstone_horizon: int = 1000,
        rollout: RolloutSettings | None = None,
        predicted_ports: bool = False,
    ) -> None:
        self.lock = threading.RLock()
        self.predicted_ports = predicted_ports
        """The operator chose ``ports.mode: predicted`` (see :attr:`JobEntry.predicted`)."""
        self.rollout = rollout or RolloutSettings()
        self.rollback: RollbackRecord | None = stored.rollback
        self.shadow: dict[str, dict[QpKey, HeldBinding]] = {}
        self.fabric = fabric
        self.wiring = wiring_digest(fabric)
        self.offered: Fabric | None = None
        """A re-discovered snapshot waiting for the next step (:meth:`offer_fabric`)."""
        LinkState.__init__(self, fabric, stored.overrides, flap, now)
        self.tombstone_horizon = tombstone_horizon
        self.epoch = stored.epoch
        self.fingerprint = stored.fingerprint
        self.compacted_epoch = stored.compacted_epoch
        self.incarnation = stored.incarnation
        self.decision_sequence = stored.decision_sequence
        self.last_decision = stored.last_decision
        self.revision = 0
        self.covered_revision = 0
        self.overrides = dict(stored.overrides)
        self.held = {job: dict(b) for job, b in stored.bindings.items()}
        self.tombstones = {job: dict(t) for job, t in stored.tombstones.items()}
        self.jobs: dict[str, JobEntry] = {}
        planned = stored.last_planned.job_revisions if stored.last_planned else {}
        self.unplaced: dict[str, str] = {}
        """Per job whose NICs the fabric in force lacks, why (set by :meth:`swap_fabric`)."""
        for job_id, record in stored.jobs.items():
            ranks, why = placed(fabric, record)
            if why:  # a NIC gone while we were down: bindings kept, binding issues
                self.unplaced[job_id] = why
            entry = JobEntry(record, ranks)
            entry.communicators = dict(stored.intents.get(job_id, {}))
            entry.planned_revision = min(planned.get(job_id, 0), record.revision)
            self.jobs[job_id] = entry
            entry.control = self._restored_mode(stored, job_id)
            self._count_verified(job_id)
        for job_id, held in self.held.items():
            for h in held.values():
                self._index(job_id, h, +1)

    def _count_verified(self, job_id: str) -> None:
        """The job's verified / unverified QPs, from what it holds (shadow: what it would)."""
        entry = self.jobs[job_id]
        held = self.shadow.get(job_id) or self.held.get(job_id, {})
        entry.verified = sum(h.binding.verified for h in held.values())
        entry.unverified = len(held) - entry.verified
        entry.predicted = self.predicted_ports

    # -- control modes ---------------------------------------------------------------------------

    def _restored_mode(self, stored: StoredState, job_id: str) -> ControlMode:
        """A job's mode as the last committed plan had it (what its stream showed), so a
        stream that resumes before the start-up step sees modes and bindings that agree; if
        the policy changed meanwhile, the fingerprint differs and that step commits the new
        modes. A job the last plan did not record takes its mode now."""
        last = stored.last_planned
        if last is not None and job_id in last.jobs_off:
            return ControlMode.OFF
        for p in last.predictions if last is not None else ():
            if p.job_id == job_id:
                return p.control
        if stored.bindings.get(job_id):
            return ControlMode.ACTIVE  # only active jobs hold bindings in force
        return self.mode_of(job_id)[0]

    def mode_of(self, job_id: str) -> tuple[ControlMode, ModeSource]:
        """The job's control mode now and why (see :func:`c4p.controller.modes.resolve`)."""
        with self.lock:
            record = self.jobs[job_id].record
            return resolve(
                self.rollout,
                record.job_id,
                record.tenant,
                record.control,
                record.control_by,
                self.rollback is not None,
            )

    def mode_if_registered(self, job_id: str) -> tuple[ControlMode, ModeSource] | None:
        """:meth:`mode_of`, or ``None`` when the job is gone (released meanwhile)."""
        with self.lock:
            return self.mode_of(job_id) if job_id in self.jobs else None

    def set_control(self, store: Store, record: JobRecord) -> int:
        """A job's pin changed (``record`` carries it): store, then memory."""
        with self.lock:
            store.put_job(record)
            self.jobs[record.job_id].record = record
            return self.bump()

    def set_rollback(self, store: Store, rollback: RollbackRecord | None) -> int:
        with self.lock:
            store.set_rollback(rollback)
            self.rollback = rollback
            return self.bump()

    # -- mutations (the intake calls these; each writes the store first) -----------------------

    def bump(self) -> int:
        with self.lock:
            self.revision += 1
            return self.revision

    def register(self, store: Store, record: JobRecord, ranks: tuple[RankNic, ...]) -> int:
        with self.lock:
            store.register_job(record, record.incarnation)
            self.incarnation = max(self.incarnation, record.incarnation)
            entry = JobEntry(record, ranks, event_epoch=self.epoch)
            self.jobs[record.job_id] = entry
            entry.control = self.mode_of(record.job_id)[0]
            return self.bump()

    def put_intents(
        self,
        store: Store,
        record: JobRecord,
        upserts: list[CommunicatorRecord],
        withdrawn: list[str],
    ) -> int:
        with self.lock:
            store.put_intents(record, upserts, withdrawn)
            entry = self.jobs[record.job_id]
            entry.record = record
            for comm in upserts:
                entry.communicators[comm.spec.id] = comm
            for comm_id in withdrawn:
                entry.communicators.pop(comm_id, None)
            return self.bump()

    def release(self, store: Store, job_id: str) -> int:
        with self.lock:
            store.release_job(job_id)
            self.jobs.pop(job_id, None)
            self.unplaced.pop(job_id, None)
            for h in self.held.pop(job_id, {}).values():
                self._index(job_id, h, -1)
            self.tombstones.pop(job_id, None)
            self.shadow.pop(job_id, None)
            return self.bump()

    def set_override(
        self, store: Store, override: LinkOverride | None, link_id: str, now: float
    ) -> int:
        """Drain (``override``) or restore a link: durable at once, in effect as the damping
        policy says (a restore is held like any returning link)."""
        number = self.fabric.index.link_number(link_id)
        with self.lock:
            if override is None:
                store.clear_link_override(link_id)
                self.overrides.pop(link_id, None)
                self.operator.observe(number, LinkStatus.UP, now)
            else:
                store.set_link_override(override)
                self.overrides[link_id] = override
                self.operator.observe(number, LinkStatus.DRAINED, now)
            return self.bump()

    # -- planning -----------------------------------------------------------------------------

    def plan_inputs(self, now: float, rewiring: Rewiring | None = None) -> PlanInputs:
        with self.lock:
            links = self.effective_links(now)
            jobs = tuple(
                JobInput(j, e.record.incarnation, e.record.revision, e.spec(), self.mode_of(j)[0])
                for j, e in sorted(self.jobs.items())
            )
            key: dict[str, list[Any]] = {
                "links": sorted((i, s.value) for i, s in links.items()),
                "jobs": [(j.job_id, j.incarnation, j.revision) for j in jobs],
            }
            modes = [(j.job_id, j.mode.value) for j in jobs if j.mode is not ControlMode.ACTIVE]
            if modes:  # only then: a store from before control modes keeps its fingerprint
                key["modes"] = modes
            key["wiring"] = [self.wiring]  # a restart on other wiring plans again
            digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
            return PlanInputs(
                epoch=self.epoch,
                fingerprint=digest,
                last_fingerprint=self.fingerprint,
                revision=self.revision,
                link_status=links,
                jobs=jobs,
                held={job: dict(b) for job, b in self.held.items()},
                shadow={job: dict(b) for job, b in self.shadow.items()},
                rewiring=rewiring,
                unplaced={j: r for j, r in self.unplaced.items() if j in self.jobs},
                forwarding=self.forwarding_links(),
            )

    # -- wiring changes (a new fabric snapshot while serving) ------------------------------------

    def offer_fabric(self, fabric: Fabric) -> int:
        """Re-discovery found other wiring: keep the snapshot for the next step (the latest
        offer wins; level-triggered, so a burst of offers costs one swap)."""
        with self.lock:
            self.offered = fabric
            return self.bump()

    def swap_fabric(self, now: float) -> Rewiring | None:
        """Swap the offered snapshot in (the reconcile step calls this first): which jobs it
        touches (:func:`c4p.controller.rewire.touched_jobs`), link histories and the reverse
        index carried over by the links' ends, each job's ranks re-placed. ``None`` when
        nothing was offered or the offer has the wiring in force."""
        with self.lock:
            new, self.offered = self.offered, None
            if new is None:
                return None
            digest = wiring_digest(new)
            if digest == self.wiring:
                return None
            old = self.fabric
            paths = {
                job: [h.binding.path for h in held.values()]
                for job, held in (*self.held.items(), *self.shadow.items())
            }
            hosts = {job: {p for r in e.ranks for p in r.ports} for job, e in self.jobs.items()}
            rewiring = touched_jobs(old, new, paths, hosts)
            moved = link_number_map(old, new)
            self._carry_links(new, moved, now)
            self.fabric = new
            self.wiring = digest
            self.link_jobs = {}
            for job_id, held in self.held.items():
                for h in held.values():
                    self._index(job_id, h, +1)
            self.unplaced = {}
            for job_id, entry in self.jobs.items():
                ranks, why = placed(new, entry.record)
                if why:  # a NIC is gone: the step reports the job's QPs as binding issues
                    self.unplaced[job_id] = why
                else:
                    entry.ranks = ranks
            self.bump()
            return rewiring

    def _current(self, job: JobInput) -> JobEntry | None:
        entry = self.jobs.get(job.job_id)
        if entry is None or entry.record.incarnation != job.incarnation:
            return None
        return entry

    def commit(self, store: Store, draft: StepDraft) -> tuple[DecisionRecord, frozenset[str]]:
        """Write a planned step (store first), then apply it; returns the decision as logged
        and the jobs whose streams have something new."""
        with self.lock:
            inputs, epoch = draft.inputs, draft.decision.epoch
            live = {j.job_id: j for j in inputs.jobs if self._current(j) is not None}
            upserts = [h for job in live for h in draft.upserts.get(job, ())]
            removals = [k for job in live for k in draft.removals.get(job, ())]
            changed = {
                job
                for job, j in live.items()
                if draft.upserts.get(job)
                or draft.removals.get(job)
                or self.jobs[job].planned_revision != j.revision
                or self.jobs[job].issues != draft.issues.get(job, ())
                or self.jobs[job].failed
                or self.jobs[job].control is not j.mode
            }
            compacted = max(self.compacted_epoch, epoch - self.tombstone_horizon)
            decision = draft.decision.model_copy(
                update={
                    "sequence": self.decision_sequence + 1,
                    "jobs_changed": tuple(sorted(changed)),
                    "bindings_added": sum(
                        1 for h in upserts if h.key not in inputs.held.get(h.key[0], {})
                    ),
                    "bindings_removed": len(removals),
                }
            )
            decision = decision.model_copy(
                update={"bindings_changed": len(upserts) - decision.bindings_added}
            )
            store.commit_epoch(EpochCommit(decision, tuple(upserts), tuple(removals), compacted))
            for h in upserts:
                held = self.held.setdefault(h.key[0], {})
                if h.key in held:
                    self._index(h.key[0], held[h.key], -1)
                held[h.key] = h
                self._index(h.key[0], h, +1)
                self.tombstones.get(h.key[0], {}).pop(h.key, None)
            for key in removals:
                gone = self.held.get(key[0], {}).pop(key, None)
                if gone is not None:
                    self._index(key[0], gone, -1)
                self.tombstones.setdefault(key[0], {})[key] = epoch
            for stones in self.tombstones.values():
                for key in [k for k, e in stones.items() if e <= compacted]:
                    del stones[key]
            for job, j in live.items():
                entry = self.jobs[job]
                entry.planned_revision = j.revision
                entry.failed = False
                entry.issues = draft.issues.get(job, ())
                entry.prediction = draft.predictions.get(job)
                entry.control = j.mode
                if j.mode is ControlMode.SHADOW:
                    self.shadow[job] = dict(draft.shadow.get(job, {}))
                else:
                    self.shadow.pop(job, None)
                self._count_verified(job)
                if job in changed:
                    entry.event_epoch = epoch
                    entry.reason = decision.reason
            self.epoch = epoch
            self.fingerprint = inputs.fingerprint
            self.compacted_epoch = compacted
            self._logged(decision, inputs.revision)
            return decision, frozenset(changed)

    def fail(self, store: Store, decision: DecisionRecord, inputs: PlanInputs) -> DecisionRecord:
        """Log a failed step; every job keeps its bindings and is marked FAILED."""
        with self.lock:
            decision = decision.model_copy(update={"sequence": self.decision_sequence + 1})
            store.log_decision(decision)
            for job in inputs.jobs:
                entry = self._current(job)
                if entry is not None and entry.communicators:
                    entry.failed = True
            self._logged(decision, inputs.revision)
            return decision

    def fail_jobs(self, failures: dict[str, str], inputs: PlanInputs, epoch: int) -> frozenset[str]:
        """Mark the jobs whose intents cannot be planned ``FAILED`` with the reason; their
        bindings in force stay (fail-static). Returns the jobs whose streams have news."""
        changed = set()
        with self.lock:
            for job in inputs.jobs:
                entry = self._current(job)
                if job.job_id not in failures or entry is None:
                    continue
                if not entry.failed or entry.reason != failures[job.job_id]:
                    changed.add(job.job_id)
                    entry.event_epoch = epoch
                entry.failed = True
                entry.reason = failures[job.job_id]
        return frozenset(changed)

    def _logged(self, decision: DecisionRecord, revision: int) -> None:
        self.decision_sequence = decision.sequence
        self.last_decision = decision
        self.covered_revision = max(self.covered_revision, revision)

    def covered(self, revision: int) -> None:
        """A step found nothing to do for inputs up to ``revision``."""
        with self.lock:
            self.covered_revision = max(self.covered_revision, revision)

    # -- reads for streams ----------------------------------------------------------------------

    def update_since(self, job_id: str, incarnation: int, seen: int) -> JobUpdate | None:
        """The job's full set (``seen`` 0, too old or from the future) or its differences
        since epoch ``seen``; ``None`` once the job is gone."""
        with self.lock:
            entry = self.jobs.get(job_id)
            if entry is None or entry.record.incarnation != incarnation:
                return None
            held = self.held.get(job_id, {})
            full = (
                seen == 0
                or seen < entry.record.registered_epoch
                or seen < self.compacted_epoch
                or seen > self.epoch
            )
            if full:
                bindings = sorted(held.values(), key=lambda h: h.key)
                removed: list[QpKey] = []
            else:
                bindings = sorted(
                    (h for h in held.values() if h.binding.epoch > seen), key=lambda h: h.key
                )
                stones = self.tombstones.get(job_id, {})
                removed = sorted(k for k, e in stones.items() if e > seen and k not in held)
            return JobUpdate(
                job_id=job_id,
                epoch=self.epoch,
                full=full,
                bindings=tuple(bindings),
                removed=tuple(removed),
                intent_revision=entry.planned_revision,
                state=entry.state,
                issues=entry.issues,
                reason=entry.reason,
                control=entry.control,
            )
