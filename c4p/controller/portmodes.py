"""The port modes and their settings, what the reconcile step wants probed
(:class:`ProbeWants`), and what probes found against a binding (:class:`Finding`), as the
binding issues a job's stream shows.

Why apart from :mod:`c4p.controller.learning`: these are the words the learner, the step's
port source, the service's probe worker and its config share; the learner's logic (what to
probe, when a port is learned, how a binding is annotated) reads better without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from southbound.bindings import BindingIssue, IssueKind
from southbound.pathtable import Invalidation, Scope, TableKey
from southbound.routes import Middle, QpKey
from topology.model import Fabric


class PortMode(StrEnum):
    LEARNED = "learned"
    VERIFIED = "verified"
    PREDICTED = "predicted"


class PortsSettings(BaseModel):
    """``ports:`` in the controller config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: PortMode | None = Field(
        default=None, description="learned | verified | predicted (default: learned with agents)."
    )
    scope: Scope = Field(default=Scope.PAIR, description="pair | leaf-pair (see PathTable).")
    attempts: int = Field(default=3, ge=1, le=20, description="Probe rounds per want.")
    max_probes_per_round: int = Field(default=50_000, ge=1, description="Traces per round.")
    max_traces_per_key: int = Field(
        default=512,
        ge=1,
        description="Traces a round may spend per NIC pair (a path no port takes, or a black "
        "hole, must not cost all 16,384 ports).",
    )


Exact = tuple[int, int, int]
"""``(source NIC port node, destination NIC port node, source port)``."""


@dataclass
class ProbeWants:
    """What the table must learn for the plans: planned paths per key, exact ports to confirm,
    and the entries a topology change made stale."""

    cover: dict[TableKey, set[Middle]] = field(default_factory=dict)
    exact: set[Exact] = field(default_factory=set)
    invalidations: list[Invalidation] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.cover or self.exact or any(i.stale or i.keys for i in self.invalidations))


@dataclass(frozen=True)
class Finding:
    """What a probe showed against a binding: another path than predicted, or a black hole."""

    kind: IssueKind
    text: str


def same_topology(a: Fabric, b: Fabric) -> bool:
    """The same links in the same order and the same switches (statuses aside): what
    :meth:`PathTable.invalidate` can move a table across."""
    return [(k.a, k.b) for k in a.links] == [(k.a, k.b) for k in b.links] and [
        s.name for s in a.switches
    ] == [s.name for s in b.switches]


def issue_of(b: object, kind: IssueKind, reason: str) -> BindingIssue:
    job, communicator, connection, qp = b.key  # type: ignore[attr-defined]
    return BindingIssue(
        job=job,
        communicator=communicator,
        connection=connection,
        qp=qp,
        kind=kind,
        reason=reason,
        planned=b.path,  # type: ignore[attr-defined]
    )


def issue_for(key: QpKey, finding: Finding) -> BindingIssue:
    job, communicator, connection, qp = key
    return BindingIssue(
        job=job,
        communicator=communicator,
        connection=connection,
        qp=qp,
        kind=finding.kind,
        reason=finding.text,
    )
