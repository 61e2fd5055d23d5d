"""Binding synthesis across steps: re-synthesise only the NIC pairs whose output can change.

Why: a controller step re-binds every QP of every job (262,144 at 131k GPUs) although a drain
moves a handful; :func:`~southbound.bindings.bindings_for_paths` was a third of a step's CPU.
Its output for one QP depends only on (a) the QPs of the same NIC pair (ports are spread over
a pair's QPs per path, kept ports are excluded for the others), (b) the binding in force of
each of those QPs (kept when its path stays), (c) the port source, and (d) the planning
snapshot, through the checks of ``_resolve`` and through fall-backs. So the unit reused here is
a NIC pair (source port, destination port), and it is reused only when:

* the port source is the same object and is the pure hash model
  (:class:`~southbound.ports.PredictedPorts`); a learned source has side effects (it asks for
  probes, records findings) and tables that change under it: then everything is recomputed;
* the fabric has the same wiring (resource ends) as the cached step;
* the pair's routes (keys, paths, rates, order) are what they were, and so are their bindings
  in force (ports, ends, paths), or those are the very bindings this pair got last time (then
  every QP keeps its port: the usual case, the step after the one that bound them);
* the pair's last result had no issue (every QP bound to its planned path: no fall-back, which
  would look at the snapshot's usable links at large);
* if links changed usability since: no link of the pair's paths changed, and the distances
  toward its destination leaf are the same (compared by digest). Then each path is still an
  equal-cost path of the planning snapshot: a link is a member of a group toward a leaf when it
  is usable and leads one hop closer by those distances (``Routing.next_hops``), so with the
  distances equal only the changed links enter or leave groups, and the pair uses none.

Everything else is recomputed with ``bindings_for_paths`` on the routes of those pairs, and
the result is assembled in the order of ``routes``, every binding stamped with ``epoch``: the
same set a full synthesis gives (``tests/test_incremental_bindings.py`` checks it step by step).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from southbound.bindings import Binding, BindingIssue, BindingSet, SynthesisMode, bindings_for_paths
from southbound.ports import PortSource, PredictedPorts
from southbound.routes import QpKey, QpRoute
from topology.errors import TopologyError
from topology.model import Fabric

Pair = tuple[str, str]
Held = tuple[str, str, int, tuple[str, ...]]
"""What ``_keep_previous`` reads of a binding in force: src, dst, sport, path."""


@dataclass(frozen=True)
class _Unit:
    routes: tuple[QpRoute, ...]
    held: tuple[Held | None, ...]
    bindings: tuple[Binding, ...]
    made: tuple[Held, ...]
    """``bindings`` as bindings in force: with these as ``previous`` every QP keeps its port
    (each is on its planned path, and the same source said the port takes it)."""
    dst_leaf: int
    resources: frozenset[int]


@dataclass
class IncrementalStats:
    """What the last call reused: NIC pairs and QPs (for logs and measurements)."""

    pairs_reused: int = 0
    pairs_synthesised: int = 0
    qps_reused: int = 0
    qps_synthesised: int = 0
    full: bool = True


class IncrementalBindings:
    """:func:`~southbound.bindings.bindings_for_paths` with a per-NIC-pair cache (see above)."""

    def __init__(self) -> None:
        self._units: dict[Pair, _Unit] = {}
        self._source: PortSource | None = None
        self._ends: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None
        self._usable: npt.NDArray[np.bool_] | None = None
        self._leaf_digests: dict[int, bytes] = {}
        self.stats = IncrementalStats()

    def clear(self) -> None:
        """Forget everything (a new snapshot was swapped in)."""
        self._units = {}
        self._source = None
        self._ends = None
        self._usable = None
        self._leaf_digests = {}

    def synthesize(
        self,
        fabric: Fabric,
        routes: Sequence[QpRoute],
        epoch: int,
        *,
        previous: BindingSet | None,
        source: PortSource,
    ) -> BindingSet:
        """The bindings :func:`bindings_for_paths` gives for these arguments."""
        if not isinstance(source, PredictedPorts):
            self.clear()  # learned tables change under us and their lookups have effects
            self.stats = IncrementalStats(0, 0, 0, len(routes), True)
            return bindings_for_paths(fabric, routes, epoch, previous=previous, source=source)
        pairs: dict[Pair, list[QpRoute]] = {}
        seen: set[QpKey] = set()
        for route in routes:
            if route.key in seen:
                raise ValueError(f"routes: QP {route.id} appears more than once")
            seen.add(route.key)
            pairs.setdefault((route.src, route.dst), []).append(route)
        before = previous.by_key() if previous is not None else {}
        held = {pair: _held(rs, before) for pair, rs in pairs.items()}
        reusable = self._reusable(fabric, source)
        reused: dict[Pair, _Unit] = {}
        if reusable is not None:
            changed, leaves = reusable
            for pair, rs in pairs.items():
                unit = self._units.get(pair)
                if (
                    unit is not None
                    and unit.routes == tuple(rs)
                    and (unit.held == held[pair] or unit.made == held[pair])
                    and (
                        changed is None
                        or (unit.resources.isdisjoint(changed) and unit.dst_leaf in leaves)
                    )
                ):
                    reused[pair] = unit
        todo = [r for pair, rs in pairs.items() if pair not in reused for r in rs]
        fresh = bindings_for_paths(fabric, todo, epoch, previous=previous, source=source)
        out = _merge(fabric, routes, epoch, reused, fresh, source)
        self._remember(fabric, source, pairs, held, reused, fresh, reusable is not None)
        self.stats = IncrementalStats(
            len(reused),
            len(pairs) - len(reused),
            len(routes) - len(todo),
            len(todo),
            reusable is None,
        )
        return out

    def _reusable(
        self, fabric: Fabric, source: PortSource
    ) -> tuple[frozenset[int] | None, set[int]] | None:
        """``None`` when nothing may be reused; else the links whose usability changed
        (``None``: none) and the destination leaves whose distances are unchanged."""
        index = fabric.index
        if source is not self._source or self._ends is None or self._usable is None:
            return None
        if not (
            np.array_equal(self._ends[0], index.res_src)
            and np.array_equal(self._ends[1], index.res_dst)
        ):
            return None
        diff = np.flatnonzero(self._usable != index.res_usable)
        if not diff.size:
            return None, set()
        changed = frozenset(int(r) for r in diff)
        now = _leaf_digests(fabric, list(self._leaf_digests))
        leaves = {leaf for leaf, digest in self._leaf_digests.items() if now[leaf] == digest}
        self._leaf_digests = now  # of this fabric, for _remember
        return changed, leaves

    def _remember(
        self,
        fabric: Fabric,
        source: PortSource,
        pairs: dict[Pair, list[QpRoute]],
        held: dict[Pair, tuple[Held | None, ...]],
        reused: dict[Pair, _Unit],
        fresh: BindingSet,
        reusable: bool,
    ) -> None:
        index = fabric.index
        troubled = {(i.job, i.communicator, i.connection, i.qp) for i in fresh.issues}
        made = fresh.by_key()
        units: dict[Pair, _Unit] = dict(reused)
        for pair, rs in pairs.items():
            if pair in reused or any(r.key in troubled for r in rs):
                continue
            try:
                dst_leaf = int(index.res_src[index.downlink(index.port(pair[1]).node)])
            except TopologyError:
                continue
            resources = frozenset(res for r in rs for res in r.path)
            bound = tuple(made[r.key] for r in rs)
            units[pair] = _Unit(
                routes=tuple(rs),
                held=held[pair],
                bindings=bound,
                made=tuple((b.src, b.dst, b.sport, b.path) for b in bound),
                dst_leaf=dst_leaf,
                resources=resources,
            )
        self._units = units
        self._source = source
        self._ends = (index.res_src.copy(), index.res_dst.copy())
        self._usable = index.res_usable.copy()
        known = self._leaf_digests if reusable else {}
        leaves = {u.dst_leaf for u in units.values()}
        known.update(_leaf_digests(fabric, sorted(leaves - set(known))))
        self._leaf_digests = {leaf: known[leaf] for leaf in leaves}


def _held(routes: Sequence[QpRoute], before: dict[QpKey, Binding]) -> tuple[Held | None, ...]:
    out: list[Held | None] = []
    for r in routes:
        b = before.get(r.key)
        out.append(None if b is None else (b.src, b.dst, b.sport, b.path))
    return tuple(out)


def _leaf_digests(fabric: Fabric, leaves: list[int]) -> dict[int, bytes]:
    """Per leaf, a digest of the distances toward it that the planning snapshot's groups
    derive from: one pass over all of them in narrow integers (``Routing.narrow_rows``; as
    64-bit tables, 4,096 leaves at 131k GPUs were 600 MB and seconds), values at or above the
    pass's sentinel all meaning unreachable."""
    if not leaves:
        return {}
    down, up, far = fabric.index.routing.narrow_rows(np.asarray(leaves, dtype=np.int64))
    out: dict[int, bytes] = {}
    for i, leaf in enumerate(leaves):
        h = hashlib.blake2b(far.to_bytes(8, "little", signed=True), digest_size=16)
        for rows in (down, up):
            h.update(np.ascontiguousarray(np.minimum(rows[i], far)).tobytes())
        out[leaf] = h.digest()
    return out


def _merge(
    fabric: Fabric,
    routes: Sequence[QpRoute],
    epoch: int,
    reused: dict[Pair, _Unit],
    fresh: BindingSet,
    source: PortSource,
) -> BindingSet:
    """One set in the order of ``routes`` (as one synthesis would give it)."""
    if not reused:
        return fresh
    made = fresh.by_key()
    for unit in reused.values():
        for b in unit.bindings:
            made[b.key] = b if b.epoch == epoch else b.model_copy(update={"epoch": epoch})
    issues: dict[QpKey, list[BindingIssue]] = {}
    for i in fresh.issues:
        issues.setdefault((i.job, i.communicator, i.connection, i.qp), []).append(i)
    bindings = [made[r.key] for r in routes if r.key in made]
    ordered = [i for r in routes for i in issues.get(r.key, ())]
    return BindingSet(
        fabric=fabric.name,
        epoch=epoch,
        mode=SynthesisMode(source.mode),
        bindings=tuple(bindings),
        issues=tuple(ordered),
    )
