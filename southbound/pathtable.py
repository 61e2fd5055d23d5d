"""Learned source-port tables: which port takes which path, from probe results alone.

Why: the controller must steer QPs even where it knows nothing of the switches' hashes (probing is
the truth: what the fabric does beats any model of it). A :class:`PathTable` is built only from
traces (source address, destination address, source port, the hops that answered) and the topology;
it never sees a hash profile. It answers both questions binding needs: "which ports take this path"
and "which path does this port take".

**Scope.** With the usual 5-tuple hash, the sport -> path mapping is different for every NIC
pair, so entries are kept per ``(source port, destination port)`` (:attr:`Scope.PAIR`). Where
switches ignore the host bits of the addresses, every NIC pair of two leaves shares one mapping,
and one table entry per *leaf pair* serves them all (:attr:`Scope.LEAF_PAIR`): far fewer probes.
The operator declares the scope, or ``southbound.probeplan.detect_scope`` measures it.

**Reading a trace.** Hop ``t`` is the switch at position ``t - 1`` of the path. Starting at the
source leaf, the table walks the ECMP groups of the topology (``Routing.next_hops``): where a
group has one member the hop is known without an answer, where it has several the answering
switch says which member was taken. An answer from a switch that is no member is
``UNEXPECTED`` (the topology view is wrong or stale); a silent hop where there is a choice is
``INCOMPLETE``. So probes need only the TTLs right after the branching switches.

**Confidence** (:class:`ConfidenceRule`): a port's entry is trusted (*learned*) once
``probes_per_port`` traces, each at least ``spacing_s`` after the last one counted, agreed on
its path; a path is covered once it has ``ports_per_path`` trusted ports. Defaults 2 probes,
50 ms apart, and 1 port. Why confirm at all, when a 5-tuple hash is deterministic: a probe is
only worth what it shares with the traffic, and what it shares is an assumption (a prober
whose sockets were connected once took a random per-socket path under Linux's hash
policy 1, and one probe per port hid it: every binding was marked verified while most QPs
ran elsewhere). A second probe from another socket, later, is the cheapest test of that
assumption. A **disagreement** between probes of a live entry makes it :attr:`PortEntry.unstable`:
never trusted, never bound, listed by :meth:`PathTable.unstable` so the controller can say so
(``IssueKind.UNSTABLE``), and not probed again until a topology change makes it stale (a
change of its ECMP groups between the two probes is the one innocent explanation, and the
invalidation then clears it). A stale entry that answers differently has *moved*
(``CHANGED``), which is what a group change does.

**Invalidation.** An entry is stale exactly when an ECMP group its path consults changes
(members gained or lost: vendors remap ``hash mod n``). :meth:`PathTable.invalidate` compares
the groups of the old and new topology snapshots through a reverse index ``group -> leaf pairs``
(ONOS-style), marks only those entries stale and names the keys whose set of paths may have
changed, for ``ProbePlanner.reprobe``.

**Where.** The table's vocabulary (keys, scope, entries, outcomes, the confidence rule,
invalidations) is :mod:`southbound.pathentries`, re-exported here; the walk of a trace through
the ECMP groups is :mod:`southbound.tracewalk`; binding's view of a table (the learned port
source) is :mod:`southbound.learnedports`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from southbound.pathentries import ConfidenceRule as ConfidenceRule
from southbound.pathentries import Invalidation as Invalidation
from southbound.pathentries import Outcome as Outcome
from southbound.pathentries import PortEntry as PortEntry
from southbound.pathentries import Scope as Scope
from southbound.pathentries import TableKey as TableKey
from southbound.pathentries import _KeyState
from southbound.ports import PORT_ORDER, port_rank
from southbound.probing import AddressBook, Trace
from southbound.routes import GroupKey, Middle, full_path, middle_of
from southbound.tracewalk import group_closure, groups_along, read_trace
from topology.errors import PathError
from topology.index import FabricIndex
from topology.model import Fabric
from topology.roce import SPORT_COUNT


class PathTable:
    """Learned sport -> path entries of one fabric topology (see the module docstring)."""

    def __init__(
        self,
        fabric: Fabric,
        scope: Scope | str = Scope.PAIR,
        rule: ConfidenceRule | None = None,
        addresses: AddressBook | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scope = Scope(scope)
        self.rule = rule or ConfidenceRule()
        self._clock = clock
        self._book = addresses or AddressBook(fabric)
        self._keys: dict[TableKey, _KeyState] = {}
        self._by_group: dict[GroupKey, set[TableKey]] = {}
        self._leaf_keys: dict[TableKey, set[TableKey]] = {}
        self._use(fabric)

    def _use(self, fabric: Fabric) -> None:
        self._fabric = fabric
        self._index: FabricIndex = fabric.index
        self._routing = self._index.routing
        self._middles: dict[TableKey, frozenset[Middle]] = {}
        self._trivial: dict[TableKey, bool] = {}
        self._ordered: dict[TableKey, tuple[Middle, ...]] = {}
        self._towards: dict[tuple[int, ...], dict[int, int]] = {}  # group -> next node -> member
        index = self._index
        self._ports_on: dict[int, list[int]] = {}
        for port in index.ports:
            out = index.out_resources[port.node]
            if len(out) == 1 and index.res_usable[out[0]]:
                self._ports_on.setdefault(int(index.res_dst[out[0]]), []).append(port.node)

    @property
    def fabric(self) -> Fabric:
        """The topology snapshot the entries are valid for."""
        return self._fabric

    # -- keys -------------------------------------------------------------------------------

    def key_of(self, src: int, dst: int) -> TableKey:
        """The key whose entries serve NIC ports ``src`` -> ``dst`` (node numbers)."""
        if self.scope is Scope.PAIR:
            return (src, dst)
        return (self._index.leaf_of(src), self._index.leaf_of(dst))

    def leaves(self, key: TableKey) -> TableKey:
        """The ``(source leaf, destination leaf)`` of a key."""
        if self.scope is Scope.LEAF_PAIR:
            return key
        return (self._index.leaf_of(key[0]), self._index.leaf_of(key[1]))

    def endpoints(self, key: TableKey) -> TableKey | None:
        """A NIC port pair to probe ``key`` with (usable NIC links), or ``None``."""
        index = self._index
        if self.scope is Scope.PAIR:
            try:
                usable = all(index.res_usable[index.uplink(n)] for n in key)
            except PathError:  # a NIC port without its one cable
                return None
            return key if usable and key[0] != key[1] else None
        sources, targets = self._ports_on.get(key[0], []), self._ports_on.get(key[1], [])
        if not sources:
            return None
        dst = next((d for d in targets if d != sources[0]), None)
        return None if dst is None else (sources[0], dst)

    def leaf_pair_keys(self) -> list[TableKey]:
        """Every ordered pair of distinct leaves that have NIC ports (leaf-pair scope only)."""
        if self.scope is not Scope.LEAF_PAIR:
            raise ValueError("leaf_pair_keys: the table is per NIC pair; give pairs instead")
        leaves = sorted(self._ports_on)
        return [(a, b) for a in leaves for b in leaves if a != b]

    def middles(self, key: TableKey) -> frozenset[Middle]:
        """The equal-cost middles of a key in the current topology."""
        leaves = self.leaves(key)
        cached = self._middles.get(leaves)
        if cached is None:
            cached = frozenset(self._routing.switch_paths(*leaves))
            self._middles[leaves] = cached
        return cached

    def is_trivial(self, key: TableKey) -> bool:
        """True if no switch on the way has a choice: every port takes the one path (if any),
        nothing to learn."""
        leaves = self.leaves(key)
        trivial = self._trivial.get(leaves)
        if trivial is None:
            groups = group_closure(self._index, self._routing, *leaves)
            trivial = all(len(self._routing.next_hops(*g)) <= 1 for g in groups)
            self._trivial[leaves] = trivial
        return trivial

    # -- recording --------------------------------------------------------------------------

    def record(self, trace: Trace) -> Outcome:
        """Add what one trace shows to the table."""
        index = self._index
        src = index.node_of_address.get(trace.probe.src)
        dst = index.node_of_address.get(trace.probe.dst)
        if src is None or dst is None or src == dst:
            return Outcome.UNKNOWN_ENDPOINT
        try:
            key = self.key_of(src, dst)
            outcome, middle = read_trace(
                self._index, self._routing, self._book, self._towards, trace, src, dst
            )
        except PathError:  # a NIC port without its one cable
            return Outcome.UNKNOWN_ENDPOINT
        if middle is None:
            return outcome
        state = self._state(key)
        sport = trace.probe.sport
        entry = state.entries.get(sport)
        now = self._clock()
        if entry is None:
            entry = state.entries[sport] = PortEntry(middle, agreeing=0)
            state.by_middle.setdefault(middle, set()).add(sport)
            outcome = Outcome.NEW
        elif entry.unstable is not None:
            entry.probes += 1
            return Outcome.UNSTABLE
        elif entry.stale:
            outcome = Outcome.AGREED if entry.middle == middle else Outcome.CHANGED
        elif entry.middle != middle:
            # Two probes of one 5-tuple, no topology change between: not a function of it.
            entry.probes += 1
            if self.trusted(entry):
                state.trusted[entry.middle] -= 1
            state.pending.discard(sport)
            state.unstable.add(sport)
            entry.unstable = middle
            return Outcome.UNSTABLE
        elif now - entry.at < self.rule.spacing_s:
            entry.probes += 1  # too soon after the last one to count as a second opinion
            return Outcome.AGREED
        else:
            outcome = Outcome.AGREED
        entry.probes += 1
        entry.at = now
        self._update(state, sport, entry, middle, outcome is Outcome.CHANGED or entry.stale)
        return outcome

    def due_in(self, key: TableKey, sport: int) -> float:
        """Seconds until a probe of ``sport`` would count for its entry (0: now)."""
        entry = self.entries(key).get(sport)
        if entry is None or entry.stale:
            return 0.0
        return max(0.0, entry.at + self.rule.spacing_s - self._clock())

    def unstable(self, key: TableKey) -> Mapping[int, tuple[Middle, Middle]]:
        """Ports whose probes disagreed: port -> (the path seen first, the other one)."""
        state = self._keys.get(key)
        if state is None:
            return {}
        out = {}
        for sport in sorted(state.unstable):
            entry = state.entries[sport]
            if entry.unstable is not None:
                out[sport] = (entry.middle, entry.unstable)
        return out

    def confirmation(self) -> tuple[int, int]:
        """``(trusted entries, traces recorded for them)``: probes per learned entry is the
        ratio (the path table's cost of confirming; trivial keys hold no entries)."""
        entries = probes = 0
        for state in self._keys.values():
            for entry in state.entries.values():
                if self.trusted(entry):
                    entries += 1
                    probes += entry.probes
        return entries, probes

    def _update(
        self, state: _KeyState, sport: int, entry: PortEntry, middle: Middle, restart: bool
    ) -> None:
        """Count one more observation of ``middle`` for an entry (``restart``: its count
        starts afresh), keeping the key's trusted counts and pending set right."""
        if self.trusted(entry):
            state.trusted[entry.middle] -= 1
        if entry.middle != middle:
            state.by_middle[entry.middle].discard(sport)
            state.by_middle.setdefault(middle, set()).add(sport)
            entry.changes += 1
        entry.middle, entry.stale = middle, False
        entry.agreeing = 1 if restart else entry.agreeing + 1
        if self.trusted(entry):
            state.trusted[middle] += 1
            state.pending.discard(sport)
        else:
            state.pending.add(sport)

    def _make_stale(self, state: _KeyState, sport: int, entry: PortEntry) -> None:
        if self.trusted(entry):
            state.trusted[entry.middle] -= 1
        state.pending.discard(sport)
        state.unstable.discard(sport)  # a group change explains a disagreement: learn anew
        entry.stale, entry.agreeing, entry.unstable = True, 0, None

    def make_stale(self, key: TableKey, sport: int) -> bool:
        """Distrust one entry (something other than a probe contradicted it, e.g. the
        switches' counters): it binds nothing until a probe sees it again. ``False`` when the
        table holds no such entry."""
        state = self._keys.get(key)
        entry = state.entries.get(sport) if state is not None else None
        if state is None or entry is None or entry.stale:
            return False
        self._make_stale(state, sport, entry)
        return True

    def record_many(self, traces: Iterable[Trace]) -> Counter[Outcome]:
        return Counter(self.record(t) for t in traces)

    def _state(self, key: TableKey) -> _KeyState:
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _KeyState()
            self._register(key)
        return state

    def _register(self, key: TableKey) -> None:
        """Index every group any equal-cost path of the key consults (its closure)."""
        leaves = self.leaves(key)
        known = self._leaf_keys.get(leaves)
        if known is None:
            known = self._leaf_keys[leaves] = set()
            for group in group_closure(self._index, self._routing, *leaves):
                self._by_group.setdefault(group, set()).add(leaves)
        known.add(key)

    # -- questions --------------------------------------------------------------------------

    def trusted(self, entry: PortEntry) -> bool:
        return (
            not entry.stale
            and entry.unstable is None
            and entry.agreeing >= self.rule.probes_per_port
        )

    def entries(self, key: TableKey) -> Mapping[int, PortEntry]:
        state = self._keys.get(key)
        return state.entries if state is not None else {}

    def known_keys(self) -> Iterator[TableKey]:
        """Every key the table holds entries (or a probe record) for."""
        return iter(self._keys)

    def ports_of_middle(
        self, key: TableKey, middle: Middle, limit: int | None = None
    ) -> tuple[int, ...]:
        """Trusted ports of ``key`` that take ``middle``, in port preference order (any port
        when the key is trivial)."""
        if self.is_trivial(key):
            return PORT_ORDER[:limit] if middle in self.middles(key) else ()
        state = self._keys.get(key)
        if state is None:
            return ()
        if not state.trusted[middle]:
            return ()
        ports = sorted(
            (s for s in state.by_middle.get(middle, ()) if self.trusted(state.entries[s])),
            key=port_rank,
        )
        return tuple(ports[:limit] if limit is not None else ports)

    def ports_for(self, src: int, dst: int, path: Sequence[int]) -> tuple[int, ...]:
        """Trusted ports that take ``path`` (NIC-to-NIC resources) from ``src`` to ``dst``."""
        return self.ports_of_middle(self.key_of(src, dst), middle_of(path))

    def middle_of_port(self, key: TableKey, sport: int) -> Middle | None:
        """The middle a trusted port takes for a key; the only one when trivial."""
        if self.is_trivial(key):
            only = self.middles(key)
            return next(iter(only)) if only else None
        entry = self.entries(key).get(sport)
        return entry.middle if entry is not None and self.trusted(entry) else None

    def path_of(self, src: int, dst: int, sport: int) -> tuple[int, ...] | None:
        """The NIC-to-NIC path ``sport`` takes from ``src`` to ``dst``, if the table knows."""
        middle = self.middle_of_port(self.key_of(src, dst), sport)
        return None if middle is None else full_path(self._index, src, dst, middle)

    def missing(self, key: TableKey) -> tuple[Middle, ...]:
        """Equal-cost middles of ``key`` without ``ports_per_path`` trusted ports."""
        if self.is_trivial(key):
            return ()
        state = self._keys.get(key)
        need = self.rule.ports_per_path
        ordered = self._ordered_middles(key)
        if state is None:
            return ordered
        return tuple(m for m in ordered if state.trusted[m] < need)

    def pending(self, key: TableKey) -> Mapping[int, Middle]:
        """Entries seen but not trusted yet (and not stale): port -> middle."""
        state = self._keys.get(key)
        if state is None:
            return {}
        return {sport: state.entries[sport].middle for sport in sorted(state.pending)}

    def _ordered_middles(self, key: TableKey) -> tuple[Middle, ...]:
        leaves = self.leaves(key)
        cached = self._ordered.get(leaves)
        if cached is None:
            cached = self._ordered[leaves] = tuple(sorted(self.middles(key)))
        return cached

    def take_ports(self, key: TableKey, count: int) -> list[int]:
        """The next ``count`` never-probed ports of a key, in port preference order."""
        state = self._state(key)
        start = state.cursor
        state.cursor = min(SPORT_COUNT, start + count)
        return [p for p in PORT_ORDER[start : state.cursor] if p not in state.entries]

    def exhausted(self, key: TableKey) -> bool:
        """True once every port of a key has been offered for probing."""
        state = self._keys.get(key)
        return state is not None and state.cursor >= SPORT_COUNT

    # -- topology changes -------------------------------------------------------------------

    def invalidate(self, fabric: Fabric) -> Invalidation:
        """Move to a new snapshot of the same topology; mark stale what its changes touched."""
        old = self._fabric
        if [(k.a, k.b) for k in old.links] != [(k.a, k.b) for k in fabric.links] or [
            s.name for s in old.switches
        ] != [s.name for s in fabric.switches]:
            raise PathError(
                "invalidate: the new fabric is not the same topology (links or switches differ); "
                "build a new table"
            )
        before, after = self._routing, fabric.index.routing
        changed = sorted(g for g in self._by_group if before.next_hops(*g) != after.next_hops(*g))
        changed_set = set(changed)
        touched = {leaves for g in changed for leaves in self._by_group[g]}
        stale: list[tuple[TableKey, int]] = []
        keys: list[TableKey] = []
        for leaves in sorted(touched):
            for key in sorted(self._leaf_keys.get(leaves, ())):
                keys.append(key)
                for sport, entry in sorted(self._keys[key].entries.items()):
                    if changed_set & groups_along(self._index, leaves, entry.middle):
                        self._make_stale(self._keys[key], sport, entry)
                        stale.append((key, sport))
        self._use(fabric)
        for leaves in touched:
            for group in group_closure(self._index, self._routing, *leaves):
                self._by_group.setdefault(group, set()).add(leaves)
        return Invalidation(tuple(changed), tuple(stale), tuple(keys))

    def rewire(self, fabric: Fabric) -> tuple[PathTable, Invalidation]:
        """A table for a *re-cabled* topology (links added, removed or moved: node and
        resource numbers differ, so :meth:`invalidate` cannot move this one), carrying every
        entry across by node names.

        An entry is kept as it is when its path exists in ``fabric`` and every ECMP group it
        consults has the same members (by the members' names); it is kept *stale* when one of
        those groups changed (vendors remap ``hash mod n``), and dropped when its path or an
        endpoint is gone or a NIC moved to another leaf. The invalidation names, in the new
        numbering, the stale entries and the keys that lost or staled entries, for
        ``ProbePlanner.reprobe``: exactly what the change touched is probed again."""
        new = PathTable(fabric, self.scope, self.rule, clock=self._clock)
        old_i, new_i = self._index, fabric.index

        def moved(n: int) -> int | None:
            return new_i.node_of.get(old_i.node_names[n])

        def members(index: FabricIndex, group: GroupKey) -> frozenset[str]:
            hops = index.routing.next_hops(*group)
            return frozenset(index.node_names[int(index.res_dst[r])] for r in hops)

        changed: set[GroupKey] = set()
        stale: list[tuple[TableKey, int]] = []
        keys: set[TableKey] = set()
        for key, state in sorted(self._keys.items()):
            a, b = moved(key[0]), moved(key[1])
            if a is None or b is None:
                continue
            try:
                new_key: TableKey = (a, b)
                old_leaves, new_leaves = self.leaves(key), new.leaves(new_key)
            except PathError:  # a NIC port without its one cable now
                continue
            if (moved(old_leaves[0]), moved(old_leaves[1])) != new_leaves:
                keys.add(new_key)  # a NIC moved to another leaf: learn this key anew
                continue
            for sport, entry in sorted(state.entries.items()):
                try:
                    middle = new_i.path_resources(old_i.path_nodes(entry.middle))
                except PathError:
                    keys.add(new_key)
                    continue
                groups_changed = False
                for group in groups_along(self._index, old_leaves, entry.middle):
                    node = moved(group[0])
                    after = None if node is None else (node, new_leaves[1], group[2])
                    if after is None or members(old_i, group) != members(new_i, after):
                        groups_changed = True
                        if after is not None:
                            changed.add(after)
                target = new._state(new_key)
                kept = PortEntry(
                    middle,
                    agreeing=entry.agreeing,
                    changes=entry.changes,
                    probes=entry.probes,
                    at=entry.at,
                )
                target.entries[sport] = kept
                target.by_middle.setdefault(middle, set()).add(sport)
                if groups_changed or entry.stale or entry.unstable is not None:
                    kept.stale, kept.agreeing = True, 0
                    stale.append((new_key, sport))
                    keys.add(new_key)
                elif new.trusted(kept):
                    target.trusted[middle] += 1
                else:
                    target.pending.add(sport)
        return new, Invalidation(tuple(sorted(changed)), tuple(stale), tuple(sorted(keys)))
