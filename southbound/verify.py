"""Proof that bindings steer traffic: apply them in the modelled data plane and compare the
realized per-link load with the plan's.

Why a separate check: port synthesis (predicted with an affine shortcut of the hash, or learned
from probes) and the data plane are different code. Verification trusts neither: it forwards
every bound QP with its bound source port through ``topology.forwarding.forward_many``, the same
model the ECMP baseline uses, hop by hop with each switch's own hash profile, and compares

* per QP: the realized path with the path the binding promises (a mismatch is a wrong port);
* per QP: the binding's path with the planned path (they differ only for reported fallbacks);
* per directed link: the load the plan puts on it with the load the bindings realize.

Give it the fabric whose hashes are the truth: for learned tables that is the prober's fabric,
which the table never saw. ``VerifyReport.ok`` holds when every bound QP realizes its binding's
path; ``as_planned`` additionally when no QP fell back or stayed unbound, and then the two load
vectors are equal link by link.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from southbound.bindings import Binding, BindingSet
from southbound.routes import QpKey, QpRoute
from topology.forwarding import forward_many
from topology.index import FabricIndex, FloatArray
from topology.model import Fabric


@dataclass(frozen=True)
class Mismatch:
    """A bound QP whose packets do not take the path its binding promises."""

    id: str
    sport: int
    expected: tuple[str, ...]
    realized: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class VerifyReport:
    """Bindings applied in the data plane, QP by QP and link by link."""

    fabric: str
    epoch: int
    mode: str
    checked: int
    realized_as_bound: int
    bound_as_planned: int
    fallbacks: int
    unbound: int
    mismatches: tuple[Mismatch, ...]
    planned_load: FloatArray = field(repr=False)
    realized_load: FloatArray = field(repr=False)

    @property
    def ok(self) -> bool:
        """Every bound QP takes exactly the path its binding promises."""
        return not self.mismatches

    @property
    def as_planned(self) -> bool:
        """``ok``, and every planned QP is bound to its planned path."""
        return self.ok and not self.fallbacks and not self.unbound

    @property
    def differing_links(self) -> int:
        """Directed links whose realized load differs from the plan's."""
        return int(np.count_nonzero(~np.isclose(self.planned_load, self.realized_load)))

    def summary(self) -> str:
        """A few lines for a person (the CLI prints them)."""
        lines = [
            f"bindings ({self.mode}, epoch {self.epoch}) on {self.fabric}: {self.checked} QPs "
            f"forwarded, {self.realized_as_bound} take their bound path, "
            f"{self.bound_as_planned} bound to the planned path",
            f"  fallbacks {self.fallbacks}, unbound {self.unbound}, "
            f"wrong port {len(self.mismatches)}; links whose load differs from the plan: "
            f"{self.differing_links}; max load planned {self.planned_load.max(initial=0):g}, "
            f"realized {self.realized_load.max(initial=0):g}",
        ]
        lines.extend(
            f"  {m.id} port {m.sport:#x}: expected {' -> '.join(m.expected)}, "
            f"realized {' -> '.join(m.realized) or '(dropped)'}"
            for m in self.mismatches[:10]
        )
        verdict = "as planned" if self.as_planned else "ok" if self.ok else "FAILED"
        lines.append(f"  verdict: {verdict}")
        return "\n".join(lines)


def _load(
    index: FabricIndex, paths: Sequence[tuple[int, ...]], rates: Sequence[float]
) -> FloatArray:
    flat = [r for path in paths for r in path]
    weights = [rate for path, rate in zip(paths, rates, strict=True) for _ in path]
    return np.bincount(
        np.asarray(flat, dtype=np.int64),
        weights=np.asarray(weights, dtype=np.float64),
        minlength=index.num_resources,
    ).astype(np.float64)


def realized_paths(fabric: Fabric, bindings: Sequence[Binding]) -> list[tuple[int, ...]]:
    """The resources each binding's packets take in ``fabric`` (``()`` if dropped)."""
    if not bindings:
        return []
    index = fabric.index
    src = np.fromiter((index.node(b.src) for b in bindings), np.int64, count=len(bindings))
    dst = np.fromiter((index.node(b.dst) for b in bindings), np.int64, count=len(bindings))
    sports = np.fromiter((b.sport for b in bindings), np.int64, count=len(bindings))
    return forward_many(fabric, src, dst, sports)


def verify(
    fabric: Fabric, bindings: BindingSet, routes: Sequence[QpRoute] | None = None
) -> VerifyReport:
    """Forward every binding in ``fabric`` and compare with the bindings and the plan.

    ``routes`` is the plan (its paths as resources of ``fabric``); without it the bindings'
    own paths stand for the plan, and only fallbacks recorded in the set are counted.
    """
    index = fabric.index
    bound = list(bindings.bindings)
    realized = realized_paths(fabric, bound)
    promised = [index.path_resources(b.path) for b in bound]
    mismatches = tuple(
        Mismatch(b.id, b.sport, b.path, index.path_nodes(r) if r else ())
        for b, r, p in zip(bound, realized, promised, strict=True)
        if r != p
    )
    if routes is None:
        # The set's own record of the plan: bound paths, and the planned path of every issue
        # (a fallback's rate is its binding's; an unbound QP's rate is not recorded: 1).
        issues = {i.id: i for i in bindings.issues}
        rate_of = {b.id: b.rate for b in bound}
        planned_paths = [
            p
            if b.id not in issues
            else index.path_resources(issues[b.id].planned)
            if issues[b.id].planned
            else ()
            for b, p in zip(bound, promised, strict=True)
        ]
        planned_rates = [b.rate for b in bound]
        for issue in bindings.unbound:
            if issue.planned:
                planned_paths.append(index.path_resources(issue.planned))
                planned_rates.append(rate_of.get(issue.id, 1.0))
        as_planned = sum(b.id not in issues for b in bound)
        unbound = len(bindings.unbound)
    else:
        plan: dict[QpKey, QpRoute] = {r.key: r for r in routes}
        planned_paths = [r.path for r in routes]
        planned_rates = [r.rate for r in routes]
        as_planned = sum(
            1
            for b, p in zip(bound, promised, strict=True)
            if b.key in plan and plan[b.key].path == p
        )
        unbound = len(plan) - sum(b.key in plan for b in bound)
    return VerifyReport(
        fabric=fabric.name,
        epoch=bindings.epoch,
        mode=bindings.mode.value,
        checked=len(bound),
        realized_as_bound=len(bound) - len(mismatches),
        bound_as_planned=as_planned,
        fallbacks=len(bound) - as_planned,
        unbound=unbound,
        mismatches=mismatches,
        planned_load=_load(index, planned_paths, planned_rates),
        realized_load=_load(index, realized, [b.rate for b in bound]),
    )
