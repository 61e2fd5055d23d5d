"""Probe planning: the fewest Paris-traceroute probes that teach a :class:`PathTable` every
equal-cost path of the pairs that matter, re-probing after topology changes, and measuring the
table scope.

Why a planner: without the hash, which port takes which path is a coupon-collector draw. Each
probe of a fresh port lands on one of ``P`` paths uniformly, so covering all of them costs about
``P * H(P)`` probes per key (about 130 for 32 spines, 7,700 for 1,024 fat-tree core paths), and
every probe beyond that is waste. The planner therefore works in rounds: per key, it sends as
many fresh ports as paths still lack a trusted port (the expected useful draws), re-probes ports
whose entry still needs agreement, and retries ports whose answers were lost; all keys of a round
go to the prober in one batch. A key whose 16,384 ports were all probed and still misses a path
is reported: no port takes that path (a degenerate hash).

Each probe sends only the TTLs that carry information: the answers right after switches that
have a choice (``routes.branching_positions``). On a 2-tier fabric that is one packet per probe
(TTL 2, the spine); ``full_traces`` asks for every hop up to the destination instead.

:func:`detect_scope` tells whether the switches hash the host bits of the addresses: it traces
the same ports for two NIC pairs of the same leaf pair and compares the paths.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from southbound.pathtable import Invalidation, Outcome, PathTable, Scope, TableKey
from southbound.ports import PORT_ORDER
from southbound.probing import Probe, Prober
from southbound.routes import Middle, QpRoute, branching_positions, middle_of
from topology.model import Fabric

MAX_RETRIES = 3
"""Times a port whose answers were lost is probed again before it is given up."""

UNEXPECTED_LIMIT = 16
"""Answers off the topology's ECMP groups after which a key is given up (the topology view is
wrong or stale: refresh it rather than burn ports). Any such answer lists the key as
``inconsistent``."""


@dataclass(frozen=True)
class BlackHole:
    """A probe a router answered with "no route" (net/host unreachable): where and from whom."""

    key: TableKey
    sport: int
    ttl: int
    address: str


@dataclass
class ProbeReport:
    """What a planning run sent and learned."""

    traces: int = 0
    packets: int = 0
    rounds: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    keys: int = 0
    trivial: int = 0
    unreachable: list[TableKey] = field(default_factory=list)
    uncovered: dict[TableKey, tuple[Middle, ...]] = field(default_factory=dict)
    exhausted: list[TableKey] = field(default_factory=list)
    inconsistent: list[TableKey] = field(default_factory=list)
    black_holes: list[BlackHole] = field(default_factory=list)
    reprobed: int = 0
    settled: int = 0
    moved: int = 0

    @property
    def complete(self) -> bool:
        """True if every reachable key has every equal-cost path covered."""
        return not self.uncovered

    def add(self, other: ProbeReport) -> None:
        self.traces += other.traces
        self.packets += other.packets
        self.rounds += other.rounds
        self.outcomes.update(other.outcomes)
        self.unreachable.extend(k for k in other.unreachable if k not in self.unreachable)
        self.uncovered.update(other.uncovered)
        self.exhausted.extend(k for k in other.exhausted if k not in self.exhausted)
        self.inconsistent.extend(k for k in other.inconsistent if k not in self.inconsistent)
        self.black_holes.extend(other.black_holes)


class ProbePlanner:
    """Plans and sends probes for one :class:`PathTable` through one :class:`Prober`."""

    def __init__(self, table: PathTable, prober: Prober, *, full_traces: bool = False) -> None:
        self.table = table
        self.prober = prober
        self.full_traces = full_traces
        self._ttl_cache: dict[TableKey, tuple[int, int]] = {}
        self._ttl_fabric: Fabric | None = None

    def _ttls(self, key: TableKey) -> tuple[int, int]:
        """The TTLs worth sending for a key: after its branching switches, or every hop."""
        if self._ttl_fabric is not self.table.fabric:
            self._ttl_cache.clear()
            self._ttl_fabric = self.table.fabric
        leaves = self.table.leaves(key)
        cached = self._ttl_cache.get(leaves)
        if cached is None:
            routing = self.table.fabric.index.routing
            if self.full_traces:
                hops = len(next(iter(routing.switch_paths(*leaves)), ()))
                cached = (1, hops + 2)
            else:
                positions = branching_positions(routing, *leaves) or (0,)
                cached = (positions[0] + 2, positions[-1] + 2)
            self._ttl_cache[leaves] = cached
        return cached

    def _probe(self, key: TableKey, ends: TableKey, sport: int) -> Probe:
        ports = self.table.fabric.index.port_by_node
        first, last = self._ttls(key)
        return Probe(
            ports[ends[0]].port.address,
            ports[ends[1]].port.address,
            sport,
            first_ttl=first,
            max_ttl=last,
        )

    def _send(self, batch: list[tuple[TableKey, Probe]], report: ProbeReport) -> list[Outcome]:
        # A confirming probe must come later than the one it confirms (``spacing_s``): wait
        # for the latest of them; fresh ports in the batch lose that little time.
        wait = max((self.table.due_in(key, p.sport) for key, p in batch), default=0.0)
        if wait > 0:
            time.sleep(min(wait, self.table.rule.spacing_s))
        traces = self.prober.trace_many([p for _, p in batch])
        outcomes = [self.table.record(t) for t in traces]
        for (key, _), trace, outcome in zip(batch, traces, outcomes, strict=True):
            hole = trace.black_hole
            if outcome is Outcome.BLACK_HOLE and hole is not None:
                report.black_holes.append(
                    BlackHole(key, trace.probe.sport, hole.ttl, str(hole.address))
                )
        report.rounds += 1
        report.traces += len(traces)
        report.packets += sum(p.packets for _, p in batch)
        report.outcomes.update(outcomes)
        return outcomes

    def cover(
        self,
        pairs: Iterable[tuple[int, int]] = (),
        *,
        keys: Iterable[TableKey] = (),
        only: Mapping[TableKey, Collection[Middle]] | None = None,
        budget: int | None = None,
    ) -> ProbeReport:
        """Probe until every equal-cost path of every key has its trusted ports.

        ``pairs`` are NIC port node pairs (turned into keys by the table's scope); ``keys`` are
        table keys directly. ``only`` restricts the paths to learn, per key, to the middles
        given (the paths a plan uses: far fewer probes where pairs have many paths; keys in
        ``only`` are probed too). ``budget`` caps the traces sent; paths still missing when it
        runs out are reported in ``uncovered`` (and the key is not ``exhausted``).
        """
        report = ProbeReport()
        wanted = dict.fromkeys(
            [self.table.key_of(s, d) for s, d in pairs] + list(keys) + list(only or ())
        )
        report.keys = len(wanted)

        def missing_of(key: TableKey) -> tuple[Middle, ...]:
            missing = self.table.missing(key)
            if only is None or key not in only:
                return missing
            return tuple(m for m in missing if m in only[key])

        active: dict[TableKey, TableKey] = {}
        for key in wanted:
            ends = self.table.endpoints(key)
            if ends is None:
                report.unreachable.append(key)
            elif self.table.is_trivial(key):
                report.trivial += 1
            else:
                active[key] = ends
        attempts: Counter[tuple[TableKey, int]] = Counter()
        unexpected: Counter[TableKey] = Counter()
        holes: Counter[TableKey] = Counter()  # black holes: give up on the key as for unexpected
        stalled: Counter[TableKey] = Counter()
        last_missing: dict[TableKey, int] = {}
        retry: dict[TableKey, list[int]] = {}
        while active and (budget is None or report.traces < budget):
            batch: list[tuple[TableKey, Probe]] = []
            for key, ends in list(active.items()):
                missing = missing_of(key)
                if unexpected[key] + holes[key] >= UNEXPECTED_LIMIT:
                    del active[key]
                    report.uncovered[key] = missing
                    continue
                if len(missing) < last_missing.get(key, len(missing) + 1):
                    stalled[key] = 0
                else:
                    stalled[key] += 1
                last_missing[key] = len(missing)
                fresh = 1 << min(stalled[key], 10)
                sports = self._next_ports(key, missing, retry.pop(key, []), attempts, fresh)
                if not sports:
                    del active[key]
                    if missing:
                        report.uncovered[key] = missing
                        if self.table.exhausted(key):
                            report.exhausted.append(key)
                    continue
                batch.extend((key, self._probe(key, ends, s)) for s in sports)
            if budget is not None:
                batch = batch[: budget - report.traces]
            if not batch:
                break
            for (key, probe), outcome in zip(batch, self._send(batch, report), strict=True):
                attempts[(key, probe.sport)] += 1
                if outcome is Outcome.UNEXPECTED:
                    unexpected[key] += 1
                elif outcome is Outcome.BLACK_HOLE:
                    holes[key] += 1
                elif outcome is Outcome.INCOMPLETE:
                    retry.setdefault(key, []).append(probe.sport)
        for key in active:
            missing = missing_of(key)
            if missing:
                report.uncovered[key] = missing
        report.inconsistent = sorted(k for k, n in unexpected.items() if n)
        return report

    def cover_routes(self, routes: Iterable[QpRoute], *, budget: int | None = None) -> ProbeReport:
        """Learn just the planned paths of ``routes`` (``cover(only=...)``)."""
        index = self.table.fabric.index
        only: dict[TableKey, set[Middle]] = {}
        for r in routes:
            if len(r.path) >= 2:
                key = self.table.key_of(index.node(r.src), index.node(r.dst))
                only.setdefault(key, set()).add(middle_of(r.path))
        return self.cover(only=only, budget=budget)

    def _next_ports(
        self,
        key: TableKey,
        missing: tuple[Middle, ...],
        retry: list[int],
        attempts: Counter[tuple[TableKey, int]],
        growth: int,
    ) -> list[int]:
        """This round's ports for a key: lost answers again, entries on missing paths that
        need agreement, and fresh ports: as many as missing paths still lack candidates, times
        ``growth`` (doubled for every round in a row that covered nothing new, so a path that
        is hard or impossible to hit costs log rounds, not one round per port)."""
        if not missing:
            return []
        rule, wanted = self.table.rule, set(missing)
        limit = rule.probes_per_port + MAX_RETRIES
        candidates = {m: 0 for m in missing}
        for m in missing:
            candidates[m] = len(self.table.ports_of_middle(key, m, rule.ports_per_path))
        again = [s for s in retry if attempts[(key, s)] <= MAX_RETRIES]
        for sport, middle in self.table.pending(key).items():
            if middle in wanted and attempts[(key, sport)] < limit:
                candidates[middle] += 1
                again.append(sport)
        deficit = sum(max(0, rule.ports_per_path - n) for n in candidates.values())
        return list(dict.fromkeys(again + self.table.take_ports(key, deficit * growth)))

    def reprobe(
        self,
        invalidation: Invalidation,
        *,
        only: Mapping[TableKey, Collection[Middle]] | None = None,
        budget: int | None = None,
    ) -> ProbeReport:
        """Re-trace exactly the stale entries until trusted again, then re-cover the keys
        whose paths may have changed (new paths after a link came back).

        Stale entries of keys that are now unreachable or have no choice left are ``settled``
        without probes (they stay stale until a later change makes them matter). ``only`` limits
        the re-cover to the paths a plan uses, as in :meth:`cover`.
        """
        report = ProbeReport()
        todo: list[tuple[TableKey, TableKey, int]] = []
        for key, sport in invalidation.stale:
            ends = self.table.endpoints(key)
            if ends is None or self.table.is_trivial(key):
                report.settled += 1  # unreachable now, or no choice left: nothing to learn
            else:
                todo.append((key, ends, sport))
        report.reprobed = len(todo)
        for _ in range(self.table.rule.probes_per_port + MAX_RETRIES):
            if budget is not None and report.traces >= budget:
                break
            batch = [
                (key, self._probe(key, ends, sport))
                for key, ends, sport in todo
                if not self.table.trusted(entry := self.table.entries(key)[sport])
                and entry.unstable is None
            ]
            if not batch:
                break
            outcomes = self._send(batch, report)
            report.moved += sum(o is Outcome.CHANGED for o in outcomes)
        rest = None if budget is None else max(0, budget - report.traces)
        covered = self.cover(keys=invalidation.keys, only=only, budget=rest)
        report.add(covered)
        report.keys = covered.keys
        report.trivial = covered.trivial
        return report


@dataclass(frozen=True)
class ScopeEvidence:
    """What :func:`detect_scope` compared and concluded."""

    scope: Scope
    leaf_pairs: int
    ports: int
    disagreements: int
    traces: int


def detect_scope(
    fabric: Fabric, prober: Prober, *, leaf_pairs: int = 4, ports: int = 16, hosts: int = 4
) -> ScopeEvidence:
    """Whether the switches' hashes depend on host addresses (``PAIR``) or not (``LEAF_PAIR``).

    For up to ``leaf_pairs`` leaf pairs that have a choice of paths, trace the same ``ports``
    source ports from up to ``hosts`` NIC ports of one leaf to up to ``hosts`` of the other
    (every combination) and compare each combination's paths with the first's. Any
    disagreement means the addresses are hashed. Agreement everywhere is evidence that they are
    not, *for the addresses sampled*: a CRC's low bits can ignore some address bits, so sample
    the hosts that will carry traffic (the defaults take them spread over each leaf).
    """
    index = fabric.index
    table = PathTable(fabric, Scope.PAIR)
    on_leaf: dict[int, list[int]] = {}
    for port in index.ports:
        out = index.out_resources[port.node]
        if len(out) == 1 and index.res_usable[out[0]]:
            on_leaf.setdefault(index.leaf_of(port.node), []).append(port.node)

    def spread(nodes: list[int]) -> list[int]:
        step = max(1, len(nodes) // hosts)
        return nodes[::step][:hosts]

    groups: list[list[TableKey]] = []
    for a in sorted(on_leaf):
        for b in sorted(on_leaf):
            if len(groups) >= leaf_pairs or a == b or index.routing.path_count(a, b) < 2:
                continue
            combos = [(s, d) for s in spread(on_leaf[a]) for d in spread(on_leaf[b]) if s != d]
            if len(combos) >= 2:
                groups.append(combos)
    sports = PORT_ORDER[:ports]
    planner = ProbePlanner(table, prober, full_traces=True)
    probes = [planner._probe(pair, pair, sport) for g in groups for pair in g for sport in sports]
    table.record_many(prober.trace_many(probes))
    disagreements = 0
    for combos in groups:
        reference = table.entries(combos[0])
        for pair in combos[1:]:
            entries = table.entries(pair)
            disagreements += sum(
                1
                for sport in sports
                if sport in entries
                and sport in reference
                and entries[sport].middle != reference[sport].middle
            )
    scope = Scope.PAIR if disagreements or not groups else Scope.LEAF_PAIR
    return ScopeEvidence(scope, len(groups), ports, disagreements, len(probes))
