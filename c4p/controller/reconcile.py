"""One reconcile step: read the state, plan incrementally, derive bindings, diff per job, commit.

Why a step that *returns* its outcome (faucet's shape): the step decides; the shell around it
(:mod:`c4p.controller.loop`) wakes streams, updates metrics and logs. So the step is tested
without gRPC or timers, with ``now`` passed in, and the same code runs in the service.

The step, in order:

1. :meth:`ControllerState.plan_inputs`: jobs with their intent revisions, effective link states
   (operator drains, observed faults, held flapping links), the bindings in force. If nothing
   changed since the last epoch (same fingerprint) and no key forces a plan, stop: this is what
   makes a restart zero-churn, and a burst of identical intents cost nothing.
2. ``solver.plan`` on the snapshot, with the previous plan (moves as few flows as possible);
   on fabrics with multi-port NICs each job's QPs are first spread over its NICs' ports and
   planes (``southbound.balance.balance_jobs``; ``planner.balance_ports: false`` turns it off).
3. ``southbound.bindings_for_paths`` with the bindings in force as ``previous`` (a QP whose path
   did not change keeps its port). Ports are found on the fabric the *switches* forward on
   (:meth:`Reconciler.snapshot`): an operator drain takes a link from the planner, not from any
   ECMP group, so it rewrites no port whose path stays and puts no port onto the drained link.
   Only NIC pairs whose routes, bindings in force or fabric inputs changed are synthesised
   anew (``southbound.incremental``; exactly the full synthesis, the rest reused).
4. Per job: added or changed bindings (pushed) and removed ones (tombstoned). A change of path
   under the same port (an ECMP group shrank, so the port now hashes elsewhere) is pushed too,
   so clients' telemetry stays true, but the client calls its plugin back only when the port or
   label differs. A QP left unbound keeps its binding in force: **fail-static** — the data
   plane keeps forwarding it somewhere rather than nowhere.
5. Predicted bus bandwidth per job on the paths the bindings realize
(``solver.yardstick.evaluate``),
   beside what every planned job would get on ECMP (kernel-chosen ports, ``solver.yardstick.ecmp``),
   and the links over line rate either way: the evidence of a staged rollout.
6. :meth:`ControllerState.commit`: store first, then memory; a new epoch and a decision.

Control modes: ``off`` jobs are left out of the plan; ``shadow`` jobs are planned, bound and
predicted with the active ones (so that activating one later moves nothing else), but their
bindings go to the state's shadow set, not to the data plane; every binding a non-active job
holds is withdrawn, which its stream shows as "back to the default ports".

Any exception in 2-5 first looks for the jobs that cause it: the jobs are planned in halves
(bisection, a bounded number of quick probes with no search budget) until the job or jobs whose
intents cannot be planned are found. Those jobs are that step's failure, not the controller's:
they go ``FAILED`` with the reason and keep their bindings in force (fail-static), they stay out
of planning until their intents change, and every other job is planned as usual. Only when no
culprit can be singled out (the failure comes from the jobs together, or from the fabric) is
the whole step a *failed* decision: logged, nothing changes, the loop retries later.

Step 4 is :mod:`c4p.controller.bindingdiff`, step 5 :mod:`c4p.controller.prediction`, the
search for culprits :mod:`c4p.controller.quarantine`; this module runs them in order.

Every number of a decision is finite before it is written (``DecisionRecord`` refuses
``inf``/``NaN``): a non-finite figure in the log once made ``GetDecisionLog`` fail for good.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field

from c4p.controller.bindingdiff import (
    BindingDiff,
    diff_bindings,
    on_fabric,
    previous_plan,
    unchanged,
)
from c4p.controller.intents import PlanInputs, StepDraft
from c4p.controller.learning import LearningPorts
from c4p.controller.prediction import predict
from c4p.controller.quarantine import Quarantine, without
from c4p.controller.rewire import Rewiring
from c4p.controller.state import ControllerState
from c4p.controller.triggers import Key, KeyKind, describe
from c4p.store.base import (
    ControlMode,
    DecisionRecord,
    DecisionResult,
    HeldBinding,
    JobPredictionRecord,
    Store,
    StoreError,
)
from solver.planner import STRATEGIES, plan
from solver.planning.result import Plan
from solver.workload.flows import Workload
from solver.workload.jobs import JobsFile
from solver.workload.patterns import derive_workload
from solver.yardstick.ecmp import ecmp_paths
from southbound.balance import balance_jobs
from southbound.bindings import (
    Binding,
    BindingIssue,
    BindingSet,
    IssueKind,
    SynthesisMode,
)
from southbound.incremental import IncrementalBindings
from southbound.ports import PortSource, PredictedPorts
from southbound.routes import QpKey, routes_from_flows
from topology.base import Frozen
from topology.errors import TopologyError
from topology.model import Fabric, LinkStatus

log = logging.getLogger("c4p.controller")

PortSourceFactory = Callable[[Fabric], PortSource]
"""Where ports come from on a snapshot: the hash model now; learned probe tables plug in here."""


class PlannerSettings(Frozen):
    """How the controller calls the planner."""

    budget_s: float = Field(default=2.0, ge=0, le=600, description="Search time per plan.")
    seed: int = Field(default=0, ge=0, description="Seed of the solver (plans are repeatable).")
    strategy: str = Field(default="auto", description=f"One of {', '.join(STRATEGIES[:-1])}.")
    predict: bool = Field(default=True, description="Predict each job's bus bandwidth.")
    balance_ports: bool = Field(
        default=True,
        description="Dual-port / dual-plane NICs: spread each job's QPs over its NICs' ports "
        "(planes) before planning (southbound.balance); false: the ports the flow derivation "
        "gives (QP g on port g mod ports).",
    )

    def model_post_init(self, _: object) -> None:
        if self.strategy not in STRATEGIES or self.strategy == "ecmp":
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES[:-1])}")


@dataclass(frozen=True)
class StepOutcome:
    """What a step did: the decision as logged and the jobs whose streams have news."""

    decision: DecisionRecord
    changed_jobs: frozenset[str]
    failed: bool = False


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 1e9


class Reconciler:
    """Runs steps against one state and store (see the module docstring)."""

    def __init__(
        self,
        state: ControllerState,
        store: Store,
        settings: PlannerSettings,
        ports: PortSourceFactory | None = None,
    ) -> None:
        self.state = state
        self.store = store
        self.settings = settings
        self._ports_for = ports or PredictedPorts
        self._quarantine = Quarantine()
        self._snapshot_key: tuple[Any, ...] | None = None
        self._snapshot = state.fabric
        self._ports: PortSource | None = None
        self._bindings = IncrementalBindings()
        """Bindings of the last step per NIC pair: a step re-synthesises only the pairs whose
        routes, bindings in force or fabric inputs changed (``southbound.incremental``)."""
        self._path_resources: dict[tuple[str, ...], tuple[int, ...]] = {}
        """Resources of each binding path of the last prediction (depends on the wiring only)."""
        self._ecmp: dict[str, tuple[int, ...]] = {}
        """ECMP path per flow id on the cached snapshot (a flow's QP numbers, hence its
        kernel port, depend only on its id and the seed), so a re-plan forwards new flows only."""
        with state.lock:
            held = {job: dict(b) for job, b in state.held.items()}
        self._previous = previous_plan(state.fabric, on_fabric(state.fabric, held))
        self._deviations: dict[str, tuple[BindingIssue, ...]] = {}
        """Per job, ``deviation`` issues from the last counter check (:meth:`set_deviations`)."""
        self._deviations_lock = threading.Lock()

    def set_deviations(self, issues: dict[str, list[BindingIssue]]) -> bool:
        """The last counter check's issues (:mod:`c4p.controller.deviation`), shown from the
        next step on; ``True`` when they differ from the previous check's (then a step is due).
        """
        fresh = {job: tuple(found) for job, found in issues.items() if found}
        with self._deviations_lock:
            changed = fresh != self._deviations
            self._deviations = fresh
        return changed

    def _deviation_issues(
        self, inputs: PlanInputs, diff: BindingDiff
    ) -> dict[str, list[BindingIssue]]:
        """The counter check's issues of QPs whose binding this step keeps as it is (a QP
        bound anew is judged afresh by the next check)."""
        with self._deviations_lock:
            found = dict(self._deviations)
        out: dict[str, list[BindingIssue]] = {}
        for job, issues in found.items():
            held = inputs.held.get(job, {})
            for i in issues:
                key = (i.job, i.communicator, i.connection, i.qp)
                old, new = held.get(key), diff.bound.get(key)
                if old is not None and new is not None and unchanged(old, new):
                    out.setdefault(job, []).append(i)
        return out

    def _applied(self, status: dict[int, LinkStatus]) -> tuple[Fabric, tuple[Any, ...]]:
        """The fabric with ``status`` applied (others up), and its cache key."""
        base = self.state.fabric
        changes = {i: LinkStatus.UP for i, link in enumerate(base.links) if not link.usable}
        changes.update(status)
        changes = {i: s for i, s in changes.items() if base.links[i].status is not s}
        key = tuple(sorted(changes.items()))
        return (base.with_link_status(changes) if changes else base), key

    def snapshot(
        self, status: dict[int, LinkStatus], forwarding: dict[int, LinkStatus] | None = None
    ) -> tuple[Fabric, PortSource]:
        """The fabric the planner sees (``status`` applied: drains, faults, held links), and
        the port source of the fabric the *switches* forward on (``forwarding``: only what they
        left out of their groups; default ``status``); both cached while the statuses stay.

        Two snapshots because an operator drain removes a link from the planner's choices,
        not from any ECMP group: ports predicted on the drained snapshot would hash over a
        group the switch does not have (issue 30: 35 unchanged QPs re-ported, 13 onto the
        drained link)."""
        planning, key = self._applied(status)
        forward_key = key
        if forwarding is not None:
            forward_key = self._applied(forwarding)[1]
        both = (key, forward_key)
        if both != self._snapshot_key or self._ports is None:
            self._snapshot = planning
            old_forward = self._snapshot_key[1] if self._snapshot_key is not None else None
            if (
                self._ports is None
                or forward_key != old_forward
                or not isinstance(self._ports, PredictedPorts)  # a learner's: called anew
            ):
                # The switches' groups changed: a new port source. An operator drain alone
                # keeps it (and with it the bindings of the NIC pairs the drain leaves alone).
                switches = planning if forward_key == key else self._applied(forwarding or {})[0]
                self._ports = self._ports_for(switches)
            self._snapshot_key = both
            self._ecmp = {}
        return self._snapshot, self._ports

    def step(self, now: float, keys: Sequence[Key]) -> StepOutcome | None:
        """One reconcile step at wall time ``now``; ``None`` when nothing needed doing."""
        rewiring = self.state.swap_fabric(now)  # a re-discovered snapshot, if one was offered
        if rewiring is not None:
            self._rewired(rewiring)
        inputs = self.state.plan_inputs(now, rewiring)
        force = any(k.force for k in keys) or rewiring is not None
        if inputs.fingerprint == inputs.last_fingerprint and not force:
            self.state.covered(inputs.revision)
            return None
        epoch = inputs.epoch + 1
        planned = self._quarantine.apply(inputs)
        base = self._base(planned, keys, now, epoch, rewiring)
        culprits: dict[str, str] = {}
        try:
            try:
                draft, result = self._draft(planned, base, epoch)
            except Exception as exc:
                culprits = self._quarantine.culprits(
                    planned, exc, lambda trial: self._draft(trial, base, epoch, budget=0.0)
                )
                if not culprits:
                    raise
                planned = without(planned, culprits)
                base = self._base(planned, keys, now, epoch, rewiring)
                draft, result = self._draft(planned, base, epoch)
            decision, changed = self.state.commit(self.store, draft)
        except Exception as exc:  # fail-static: log it, keep everything as it is
            log.exception("plan failed", extra={"event": "plan-failed", "epoch": inputs.epoch})
            failed = base.model_copy(
                update={
                    "epoch": inputs.epoch,
                    "result": DecisionResult.FAILED,
                    "error": f"{type(exc).__name__}: {exc}"[:2000],
                    "fingerprint": inputs.last_fingerprint,
                    "job_revisions": {},  # nothing was planned
                }
            )
            try:
                failed = self.state.fail(self.store, failed, inputs)
            except StoreError:
                log.exception("cannot log the failed decision")
            return StepOutcome(failed, frozenset(j.job_id for j in inputs.jobs), failed=True)
        if rewiring is not None or inputs.unplaced:  # some bindings were kept over the plan
            with self.state.lock:
                held = {job: dict(b) for job, b in self.state.held.items()}
            self._previous = previous_plan(self._snapshot, on_fabric(self._snapshot, held))
        elif result is not None:
            self._previous = result
        if culprits:
            changed = changed | self.state.fail_jobs(culprits, inputs, decision.epoch)
        return StepOutcome(decision, changed)

    def _base(
        self,
        inputs: PlanInputs,
        keys: Sequence[Key],
        now: float,
        epoch: int,
        rewiring: Rewiring | None = None,
    ) -> DecisionRecord:
        return DecisionRecord(
            sequence=1,
            epoch=epoch,
            at=now,
            reason=_reason(keys, rewiring),
            triggers=tuple(str(k) for k in keys)
            + ((f"rewired {rewiring.summary()}",) if rewiring is not None else ()),
            result=DecisionResult.PLANNED,
            covers_revision=inputs.revision,
            fingerprint=inputs.fingerprint,
            job_revisions={j.job_id: j.revision for j in inputs.jobs},
            jobs_on_links=tuple(
                sorted(rewiring.touched) if rewiring is not None else self._jobs_on_links(keys)
            ),
            jobs_off=tuple(j.job_id for j in inputs.jobs if j.mode is ControlMode.OFF),
        )

    def _rewired(self, rewiring: Rewiring) -> None:
        """A new snapshot is in force: every cache of the old one goes (the port source is
        rebuilt for it on first use: the hash model anew, a learned table moved or rebuilt)."""
        self._snapshot_key = None
        self._ports = None
        self._ecmp = {}
        self._path_resources = {}
        self._bindings.clear()
        log.warning(
            "fabric snapshot swapped in: %s",
            rewiring.summary(),
            extra={
                "event": "rewired",
                "added": list(rewiring.added),
                "removed": list(rewiring.removed),
                "respeeded": list(rewiring.respeeded),
                "touched": dict(rewiring.touched),
                "wiring": rewiring.digest,
            },
        )

    def _jobs_on_links(self, keys: Sequence[Key]) -> list[str]:
        links = []
        for key in keys:
            if key.kind in (KeyKind.LINK, KeyKind.DRAIN):
                try:
                    links.append(self.state.fabric.index.link_number(key.name))
                except TopologyError:
                    continue
        return self.state.jobs_on_links(links) if links else []

    def _draft(
        self, inputs: PlanInputs, base: DecisionRecord, epoch: int, budget: float | None = None
    ) -> tuple[StepDraft, Plan | None]:
        snapshot, ports = self.snapshot(inputs.link_status, inputs.forwarding)
        specs = tuple(
            j.spec
            for j in inputs.jobs
            if j.spec is not None
            and j.mode is not ControlMode.OFF
            and j.job_id not in inputs.unplaced  # its NICs are gone: fail-static, issues
        )
        started = time.perf_counter()
        workload: Workload | None = None
        result: Plan | None = None
        bound: tuple[Binding, ...] = ()
        fallbacks = unbound = 0
        issues_by_job: dict[str, list[BindingIssue]] = {}
        probe_notes: tuple[str, ...] = ()
        if specs:
            workload = derive_workload(snapshot, JobsFile(jobs=specs))
            s = self.settings
            if s.balance_ports:  # a job's ranks all on port 0 would leave plane 1 idle
                flows, _ = balance_jobs(snapshot, workload.flows)
                workload = replace(workload, flows=tuple(flows))
            result = plan(
                snapshot,
                workload,
                self._previous,
                budget=s.budget_s if budget is None else budget,
                seed=s.seed,
                strategy=s.strategy,
            )
            previous = BindingSet(
                fabric=snapshot.name,
                epoch=inputs.epoch,
                mode=SynthesisMode(ports.mode),
                bindings=tuple(
                    h.binding
                    for held in (*inputs.held.values(), *inputs.shadow.values())
                    for h in held.values()
                ),
            )  # bindings keep the epoch that set each of them, so the set mixes epochs
            routes = routes_from_flows(result.flows, result.paths)
            bset = self._bindings.synthesize(
                snapshot, routes, epoch, previous=previous, source=ports
            )
            stats = vars(self._bindings.stats)
            log.debug("bindings: %s", stats, extra={"event": "bindings", **stats})
            if isinstance(ports, LearningPorts):  # learned/verified: mark what probes saw
                bset, probe_notes = ports.learner.annotate(snapshot, bset, routes)
            bound, fallbacks, unbound = bset.bindings, len(bset.fallbacks), len(bset.unbound)
            for issue in bset.issues:
                issues_by_job.setdefault(issue.job, []).append(issue)
        draft = diff_bindings(inputs, workload, bound)
        for job, found in self._deviation_issues(inputs, draft).items():
            issues_by_job.setdefault(job, []).extend(found)
        predictions: dict[str, JobPredictionRecord] = {}
        hottest: tuple[str, ...] = ()
        over: tuple[int, int] = (0, 0)
        if workload is not None and self.settings.predict:
            moved = result.moved if result is not None else ()
            ecmp = self._ecmp_paths(snapshot, workload)
            predictions, hottest, over = predict(
                snapshot, workload, inputs, draft, moved, ecmp, self._path_resources
            )
        decision = base
        if result is not None:
            decision = base.model_copy(
                update={
                    "strategy": result.strategy,
                    "status": result.status,
                    "flows": len(result.flows),
                    "moved": len(result.moved),
                    "max_utilization": _finite(result.objective.max_utilization),
                    "links_at_max": result.objective.links_at_max,
                    "bound": _finite(result.bounds.best),
                    "combinatorial_bound": _finite(result.bounds.combinatorial),
                    "lp_bound": result.bounds.lp,
                    "solver_bound": result.bounds.solver,
                    "gap": _finite(result.gap),
                    "unreachable": len(result.unreachable),
                }
            )
        decision = decision.model_copy(
            update={
                "solve_seconds": time.perf_counter() - started,
                "fallbacks": fallbacks,
                "unbound": unbound,
                "ports_mode": getattr(ports, "learner", ports).mode,
                "bindings_verified": sum(b.verified for b in bound),
                "probe_findings": probe_notes,
                "predictions": tuple(predictions[j] for j in sorted(predictions)),
                "hottest": hottest,
                "links_over_ecmp": over[0],
                "links_over_planned": over[1],
                "ecmp_seed": self.settings.seed,
            }
        )
        for job, why in inputs.unplaced.items():
            issues_by_job[job] = _unplaced_issues(job, why, inputs.held.get(job, {}))
        # Validated, not copied: a non-finite figure fails this step instead of the log.
        decision = DecisionRecord.model_validate(decision.model_dump())
        issues = {job: tuple(found) for job, found in issues_by_job.items()}
        return (
            StepDraft(
                inputs=inputs,
                decision=decision,
                upserts=draft.upserts,
                removals=draft.removals,
                issues=issues,
                predictions=predictions,
                shadow=draft.shadow,
            ),
            result,
        )

    def _ecmp_paths(self, snapshot: Fabric, workload: Workload) -> list[tuple[int, ...]]:
        """Each flow's path under ECMP (``solver.yardstick.ecmp.ecmp_paths``), new flows only."""
        missing = [f for f in workload.flows if f.id not in self._ecmp]
        if missing:
            found = ecmp_paths(snapshot, missing, self.settings.seed)
            self._ecmp.update(zip((f.id for f in missing), found.paths, strict=True))
        self._ecmp = {f.id: self._ecmp[f.id] for f in workload.flows}  # released jobs go
        return list(self._ecmp.values())


def _reason(keys: Sequence[Key], rewiring: Rewiring | None) -> str:
    reason = describe(keys) or "reconcile"
    if rewiring is not None:
        reason = f"{reason}; rewired: {rewiring.summary()}"
    return reason


def _unplaced_issues(job: str, why: str, held: dict[QpKey, HeldBinding]) -> list[BindingIssue]:
    """A job whose NICs the fabric lacks: each QP an ``unbound`` issue (its binding in force
    stays, fail-static); one issue for the job when it holds none."""
    reason = f"not planned: the fabric in force lacks its NICs ({why})"[:1000]
    keys = sorted(held) or [(job, "", 0, 0)]
    return [
        BindingIssue(
            job=job, communicator=c, connection=n, qp=q, kind=IssueKind.UNBOUND, reason=reason
        )
        for _, c, n, q in keys
    ]
