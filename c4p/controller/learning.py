"""Port modes of the live controller: learned, verified and predicted ports, and what to probe.

Why: a binding is worth what the data plane does with it, and the hash model is not the network
(real switches do not publish their hash; Linux seeds its own). So in ``learned`` mode every
port comes from a :class:`~southbound.pathtable.PathTable` filled by probes the host agents ran;
in ``verified`` mode the hash model proposes and a probe of exactly that 5-tuple must confirm a
port before it is pushed (a port seen on another path is *re-bound* from what the probes saw and
reported); ``predicted`` is the hash model alone. A binding is marked ``verified`` only when a
trusted table entry (a probe) says its port takes its path: never by the model.

Why this module does no I/O (faucet's shape): probing is asynchronous I/O and the reconcile step
must stay a function of the state. The step asks its port source (:class:`LearningPorts`) for
ports; what the table does not know yet becomes a *want* (learn these planned paths of these
keys; confirm this exact port), and the QPs concerned stay as they are (a new QP is held back,
an existing one keeps the binding in force). The service's probe worker takes the wants
(:meth:`PortLearner.take_wants`), runs them through the agents, records the traces under
:attr:`PortLearner.lock` (released while packets are in flight) and enqueues a ``probe`` key;
the next step finds the table knows and binds. A re-plan whose paths the table already knows
binds at once, without a probe on its path.

Bounded: a want is sent at most ``attempts`` times per topology snapshot, so a path no port
takes, or a silent agent, costs a few rounds and then a fallback with an issue, not a loop.

A link event gives the step a new snapshot: :meth:`PortLearner.source` invalidates exactly the
entries whose ECMP groups changed (``PathTable.invalidate``) and the worker re-probes exactly
those (``ProbePlanner.reprobe``, limited to the planned paths).

Hosts without a connected agent cannot probe: their QPs get predicted ports (or learned ones if
the table already knows) and a ``predicted`` binding issue that says so.

A port is learned only when spaced probes agreed (``ConfidenceRule``); ports whose probes
disagreed are *unstable*: never bound, and every QP whose planned path one of them was seen on
gets an ``unstable`` issue naming them, for as long as they stay so, even when it is bound to
another port that two probes agreed on: where one port's probes disagree, the others' agreement
is weaker evidence (see ``PathTable``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence

from c4p.controller.portmodes import Exact, Finding, issue_for, issue_of, same_topology
from c4p.controller.portmodes import PortMode as PortMode  # re-exported (service, tests)
from c4p.controller.portmodes import PortsSettings as PortsSettings  # re-exported (service)
from c4p.controller.portmodes import ProbeWants as ProbeWants  # re-exported (service)
from southbound.bindings import BindingIssue, BindingSet, IssueKind
from southbound.pathtable import PathTable, TableKey
from southbound.ports import PortRequest, PortSource, PredictedPorts
from southbound.probeplan import MAX_RETRIES, ProbePlanner, ProbeReport
from southbound.probing import AddressBook, IPv4, Probe, Prober, Trace
from southbound.routes import Middle, QpKey, QpRoute, middle_of
from topology.errors import TopologyError
from topology.model import Fabric


class PortLearner:
    """The learned table of a live controller and what it still needs (module docstring)."""

    def __init__(
        self,
        fabric: Fabric,
        settings: PortsSettings,
        mode: PortMode,
        agent_hosts: Callable[[], frozenset[str]],
    ) -> None:
        self.settings = settings
        self.mode = mode
        self.agent_hosts = agent_hosts
        self.lock = threading.RLock()
        self.table = PathTable(fabric, settings.scope)
        self._wants = ProbeWants()
        self._sent: Counter[object] = Counter()  # want -> rounds sent, this snapshot
        self._pending: set[tuple[int, int]] = set()  # (src, dst) waiting for probes
        self._holes: dict[Exact, str] = {}
        self._findings: dict[tuple[int, int, Middle], list[Finding]] = {}
        self._pair_findings: dict[tuple[int, int], list[Finding]] = {}
        self._notes: list[str] = []
        self.traces = 0
        self.rounds = 0

    # -- the reconcile step's side ------------------------------------------------------------

    def source(self, snapshot: Fabric) -> PortSource:
        """The port source of a snapshot (the reconciler's factory); moves the table to it."""
        if self.mode is PortMode.PREDICTED:
            return PredictedPorts(snapshot)
        with self.lock:
            if self.table.fabric is not snapshot and not same_topology(self.table.fabric, snapshot):
                # Re-wired (a snapshot swapped in): entries are carried across by names,
                # those whose ECMP groups changed are stale and re-probed, exactly as for a
                # link event; wants and findings in the old node numbering are dropped.
                self.table, invalidation = self.table.rewire(snapshot)
                self._wants = ProbeWants(invalidations=[invalidation])
                self._pending.clear()
                self._findings.clear()
                self._pair_findings.clear()
                self._sent.clear()
                self._holes.clear()
            elif self.table.fabric is not snapshot:
                invalidation = self.table.invalidate(snapshot)
                self._wants.invalidations.append(invalidation)
                self._sent.clear()
                self._holes.clear()
            return LearningPorts(self, snapshot)

    def want_cover(self, key: TableKey, middle: Middle, pair: tuple[int, int]) -> bool:
        """Ask for a planned path to be learned; ``False`` when its attempts are used up."""
        if self._sent[(key, middle)] >= self.settings.attempts:
            return False
        self._wants.cover.setdefault(key, set()).add(middle)
        self._pending.add(pair)
        return True

    def want_exact(self, exact: Exact) -> bool:
        if self._sent[exact] >= self.settings.attempts:
            return False
        self._wants.exact.add(exact)
        self._pending.add(exact[:2])
        return True

    def find_finding(self, src: int, dst: int, middle: Middle, finding: Finding) -> None:
        found = self._findings.setdefault((src, dst, middle), [])
        if finding not in found:
            found.append(finding)

    def waiting(self, pair: tuple[int, int]) -> bool:
        """True while probes asked for this NIC pair have not come back."""
        return pair in self._pending

    def find_pair_finding(self, src: int, dst: int, finding: Finding) -> None:
        """A finding about a port of a NIC pair (its QPs in this step get the issue)."""
        found = self._pair_findings.setdefault((src, dst), [])
        if finding not in found:
            found.append(finding)

    def suspect(self, exacts: Sequence[Exact]) -> int:
        """Ports the switches' counters contradict (:mod:`c4p.controller.deviation`): their
        table entries are distrusted and their probe rounds counted afresh, so the next step
        re-probes them (verified mode: exactly these ports; learned: the planned paths) and
        re-binds what the probes show. Returns how many entries were distrusted."""
        count = 0
        with self.lock:
            for src, dst, sport in exacts:
                key = self.table.key_of(src, dst)
                count += self.table.make_stale(key, sport)
                self._sent.pop((src, dst, sport), None)
                for want in [w for w in self._sent if isinstance(w, tuple) and w[:1] == (key,)]:
                    del self._sent[want]
        return count

    def black_hole(self, exact: Exact) -> str | None:
        return self._holes.get(exact)

    # -- the probe worker's side -------------------------------------------------------------

    def take_wants(self) -> ProbeWants:
        """The wants gathered since the last call (each counted as one more round sent)."""
        with self.lock:
            wants, self._wants = self._wants, ProbeWants()
            for key, middles in wants.cover.items():
                for middle in middles:
                    self._sent[(key, middle)] += 1
            for exact in wants.exact:
                self._sent[exact] += 1
            return wants

    def answered(self) -> None:
        """A probe round finished: nothing is pending any more."""
        with self.lock:
            self._pending.clear()

    def probe(self, wants: ProbeWants, prober: Prober) -> ProbeReport:
        """Run one round of wants through ``prober`` into the table (the worker's thread).

        The table lock is held while the planner reads and records, and released while the
        prober has packets in flight, so a reconcile step never waits for the network.
        """
        report = ProbeReport()
        with self.lock:
            planner = ProbePlanner(self.table, _Unlocked(prober, self.lock))
            cover = {k: set(m) for k, m in wants.cover.items()}
            settings = self.settings

            def budget(keys: int, extra: int = 0) -> int:
                per_key = settings.max_traces_per_key * max(1, keys) + extra
                return min(settings.max_probes_per_round, per_key)

            for invalidation in wants.invalidations:
                # Re-trace exactly the stale entries; re-cover only the planned paths.
                only = {k: cover.get(k, set()) for k in invalidation.keys}
                spend = budget(len(only), 4 * len(invalidation.stale))
                report.add(planner.reprobe(invalidation, only=only, budget=spend))
            if cover:
                report.add(planner.cover(only=cover, budget=budget(len(cover))))
            self._exact(planner, wants.exact, report)
            self.traces += report.traces
            self.rounds += 1
        return report

    def _exact(self, planner: ProbePlanner, wanted: set[Exact], report: ProbeReport) -> None:
        """Trace exactly these ports (verified mode), again while answers are lost."""
        todo: list[tuple[TableKey, TableKey, int]] = []
        for src, dst, sport in sorted(wanted):
            key = self.table.key_of(src, dst)
            ends = self.table.endpoints(key)
            if ends is not None and not self.table.is_trivial(key):
                todo.append((key, ends, sport))
        for _ in range(MAX_RETRIES + self.table.rule.probes_per_port):
            batch = [
                (key, planner._probe(key, ends, sport))
                for key, ends, sport in todo
                if self.table.middle_of_port(key, sport) is None
                and sport not in self.table.unstable(key)
            ]
            if not batch:
                return
            planner._send(batch, report)

    def record_black_holes(self, holes: Sequence[tuple[Probe, int, IPv4, int]]) -> None:
        """Probes answered "unreachable" ``(probe, ttl, router address, ICMP code)``: their
        5-tuples die on the way; no binding may use them until the topology changes."""
        index = self.table.fabric.index
        book = AddressBook(self.table.fabric)
        with self.lock:
            for probe, ttl, address, code in holes:
                src = index.node_of_address.get(probe.src)
                dst = index.node_of_address.get(probe.dst)
                if src is None or dst is None:
                    continue
                node = book.node(address)
                who = index.node_names[node] if node is not None else str(address)
                what = "host" if code == 1 else "net"
                exact = (src, dst, probe.sport)
                text = (
                    f"black hole: port {probe.sport:#06x} from {index.node_names[src]} to "
                    f"{index.node_names[dst]} answered '{what} unreachable' by {who} at TTL {ttl}"
                )
                if exact not in self._holes:
                    self._notes.append(text)  # for the decision log even if no QP uses it
                self._holes[exact] = text

    # -- after binding ------------------------------------------------------------------------

    def annotate(
        self, snapshot: Fabric, bset: BindingSet, routes: Sequence[QpRoute]
    ) -> tuple[BindingSet, tuple[str, ...]]:
        """Mark the bindings probes confirmed, and add the issues probes (or their absence)
        explain; returns the set and the findings for the decision log (each reported once)."""
        index = snapshot.index
        with self.lock:
            agents = self.agent_hosts()
            planned: dict[QpKey, tuple[int, int, Middle]] = {}
            for r in routes:
                try:
                    planned[r.key] = (index.node(r.src), index.node(r.dst), middle_of(r.path))
                except TopologyError:
                    continue
            issues = list(bset.issues)
            bindings = []
            verified = 0
            for b in bset.bindings:
                src, dst = index.node(b.src), index.node(b.dst)
                try:
                    middle = middle_of(index.path_resources(b.path))
                except TopologyError:
                    middle = None
                seen = self.table.middle_of_port(self.table.key_of(src, dst), b.sport)
                ok = middle is not None and seen == middle
                verified += ok
                bindings.append(b.model_copy(update={"verified": ok}) if ok != b.verified else b)
                host = b.src.partition(":")[0]
                if not ok and host not in agents:
                    issues.append(
                        issue_of(
                            b,
                            IssueKind.PREDICTED,
                            f"no agent connected on host {host}: port {b.sport:#06x} is the "
                            "hash model's prediction, not seen by probes",
                        )
                    )
            notes: list[str] = []
            for key, where in planned.items():
                unstable = self._unstable(snapshot, *where)
                if unstable is not None:
                    issues.append(issue_for(key, unstable))
                for finding in self._findings.get(where, ()):
                    issues.append(issue_for(key, finding))
                for finding in self._pair_findings.get(where[:2], ()):
                    issues.append(issue_for(key, finding))
            for found in (*self._findings.values(), *self._pair_findings.values()):
                notes.extend(f.text for f in found)
            notes.extend(self._notes)
            self._notes.clear()
            self._findings.clear()
            self._pair_findings.clear()
            issues = [self._explain(i, planned) for i in issues]
            out = bset.model_copy(update={"bindings": tuple(bindings), "issues": tuple(issues)})
            header = f"ports {self.mode.value}: {verified}/{len(bindings)} bindings seen by probes"
            return out, (header, *sorted(set(notes))[:50])

    def _unstable(self, snapshot: Fabric, src: int, dst: int, middle: Middle) -> Finding | None:
        """The ports of a QP's key whose probes disagreed and one of which saw its planned
        path (they would have been candidates for it), as one finding."""
        found = [
            (sport, pair)
            for sport, pair in self.table.unstable(self.table.key_of(src, dst)).items()
            if middle in pair
        ]
        if not found:
            return None
        names, index = snapshot.index.node_names, snapshot.index

        def path(m: Middle) -> str:
            return "-".join(names[int(index.res_dst[r])] for r in m[:-1]) or "direct"

        shown = ", ".join(f"{p:#06x} ({path(a)} then {path(b)})" for p, (a, b) in found[:3])
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        text = (
            f"unstable: probes of {len(found)} port(s) from {names[src]} to {names[dst]} "
            f"disagreed on the path: {shown}{more}; not used for a binding (a path that is "
            "not a function of the 5-tuple makes every learned port of this pair doubtful)"
        )
        return Finding(IssueKind.UNSTABLE, text)

    def _explain(
        self, issue: BindingIssue, planned: dict[QpKey, tuple[int, int, Middle]]
    ) -> BindingIssue:
        """An unbound QP waiting for probes says so (it is held back, not lost)."""
        where = planned.get((issue.job, issue.communicator, issue.connection, issue.qp))
        if issue.kind is IssueKind.UNBOUND and where is not None and self.waiting(where[:2]):
            return issue.model_copy(
                update={"reason": "waiting for probes of the planned path (held back until seen)"}
            )
        return issue


class _Unlocked:
    """A prober that releases the table lock while its packets are in flight."""

    def __init__(self, inner: Prober, lock: threading.RLock) -> None:
        self.inner = inner
        self.lock = lock

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        self.lock.release()
        try:
            return self.inner.trace_many(probes)
        finally:
            self.lock.acquire()


class LearningPorts:
    """The port source of the learned and verified modes (see the module docstring)."""

    mode = "learned"

    def __init__(self, learner: PortLearner, snapshot: Fabric) -> None:
        self.learner = learner
        self.table = learner.table
        self.snapshot = snapshot
        self._predicted = PredictedPorts(snapshot)
        self._names = snapshot.index.node_names

    def _host(self, node: int) -> str:
        return self._names[node].partition(":")[0]

    def find(self, requests: Sequence[PortRequest]) -> list[tuple[int, ...]]:
        with self.learner.lock:
            agents = self.learner.agent_hosts()
            return [self._find(r, self._host(r.src) in agents) for r in requests]

    def _usable(self, r: PortRequest, ports: Sequence[int]) -> list[int]:
        return [
            p
            for p in ports
            if p not in r.exclude and self.learner.black_hole((r.src, r.dst, p)) is None
        ]

    def _learned(self, r: PortRequest) -> list[int]:
        key = self.table.key_of(r.src, r.dst)
        found = self.table.ports_of_middle(key, r.middle, r.count + len(r.exclude) + 8)
        return self._usable(r, found)[: r.count]

    def _find(self, r: PortRequest, agent: bool) -> tuple[int, ...]:
        learner, key = self.learner, self.table.key_of(r.src, r.dst)
        learned = self._learned(r)
        if not agent:
            if learned:
                return tuple(learned)
            return self._predicted.find([r])[0]  # annotated as predicted, with an issue
        if learner.mode is PortMode.LEARNED:
            if not learned:
                learner.want_cover(key, r.middle, (r.src, r.dst))
            return tuple(learned)
        # verified: the model proposes, probes dispose
        ask = PortRequest(r.src, r.dst, r.middle, r.count + 4, r.exclude)
        proposed = self._predicted.find([ask])[0]
        confirmed: list[int] = []
        waiting = 0
        refuted = False
        for port in proposed:
            if len(confirmed) + waiting >= r.count:
                break
            hole = learner.black_hole((r.src, r.dst, port))
            seen = self.table.middle_of_port(key, port)
            if port in self.table.unstable(key):
                refuted = True  # the probes disagreed: the model's port is not trusted here
            elif hole is not None:
                refuted = True
                learner.find_finding(r.src, r.dst, r.middle, Finding(IssueKind.BLACK_HOLE, hole))
            elif seen == r.middle:
                confirmed.append(port)
            elif seen is not None:
                refuted = True
                text = (
                    f"predicted port {port:#06x} from {self._names[r.src]} to "
                    f"{self._names[r.dst]} was seen on {self._path(seen)}, not the planned "
                    f"{self._path(r.middle)}; re-bound from the probes"
                )
                learner.find_finding(r.src, r.dst, r.middle, Finding(IssueKind.MISMATCH, text))
            elif learner.want_exact((r.src, r.dst, port)):
                waiting += 1
        if confirmed:
            return tuple(confirmed[: r.count])
        if refuted:
            # The model was wrong here: bind from what probes saw (learn it if need be).
            if not learned:
                learner.want_cover(key, r.middle, (r.src, r.dst))
            return tuple(learned)
        if waiting:
            return ()
        if not learned:
            learner.want_cover(key, r.middle, (r.src, r.dst))
        return tuple(learned)

    def _path(self, middle: Middle) -> str:
        index = self.snapshot.index
        return "-".join(self._names[int(index.res_dst[r])] for r in middle[:-1]) or "direct"

    def alternatives(self, src: int, dst: int) -> dict[Middle, tuple[int, ...]]:
        """Paths probes have shown, for a fallback; none while probes for the pair are out
        (a QP waits for its planned path rather than moving twice)."""
        with self.learner.lock:
            if self.learner.waiting((src, dst)):
                return {}
            agents = self.learner.agent_hosts()
            key = self.table.key_of(src, dst)
            found = {
                m: tuple(
                    p
                    for p in self.table.ports_of_middle(key, m, 64)
                    if self.learner.black_hole((src, dst, p)) is None
                )
                for m in sorted(self.table.middles(key))
            }
            found = {m: ports for m, ports in found.items() if ports}
            if not found and self._host(src) not in agents:
                return self._predicted.alternatives(src, dst)
            return found

    def middles_of(
        self, src: Sequence[int], dst: Sequence[int], sports: Sequence[int]
    ) -> list[Middle | None]:
        """What the table has seen each port take (a black hole takes nothing); the model's
        guess only for hosts without an agent."""
        with self.learner.lock:
            agents = self.learner.agent_hosts()
            out: list[Middle | None] = []
            for s, d, p in zip(src, dst, sports, strict=True):
                hole = self.learner.black_hole((s, d, p))
                if hole is not None:  # a port in force now dies on the way: say so, re-bind
                    self.learner.find_pair_finding(s, d, Finding(IssueKind.BLACK_HOLE, hole))
                    out.append(None)
                    continue
                seen = self.table.middle_of_port(self.table.key_of(s, d), p)
                if seen is None and self._host(s) not in agents:
                    seen = self._predicted.middles_of([s], [d], [p])[0]
                out.append(seen)
            return out
