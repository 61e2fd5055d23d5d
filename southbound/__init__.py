"""Everything that talks down to the infrastructure: probing (sport -> path tables), source-port
synthesis and bindings for the transport, and (elsewhere in this package) discovery drivers.

Depends on :mod:`topology` only. The path from a plan to the wire:

* :func:`bindings_for_paths` turns planned paths (:class:`QpRoute`) into a :class:`BindingSet`
  (UDP source port + GRH flow label per QP), predicted from the hash model
  (:class:`PredictedPorts`) or learned by probing (:class:`PathTable` filled by a
  :class:`ProbePlanner` through a :class:`Prober`);
* :func:`diff_bindings` gives what to push when a plan changes;
* :func:`verify` applies a binding set in the modelled data plane and compares with the plan;
* :func:`balance_ports` spreads QPs over dual-port NICs before planning.
"""

from southbound.balance import (
    BalanceResult,
    JobsBalance,
    balance_jobs,
    balance_ports,
    multi_ported,
    port_spread,
    rebalanced,
)
from southbound.bindings import (
    Binding,
    BindingDiff,
    BindingIssue,
    BindingSet,
    IssueKind,
    SynthesisMode,
    bindings_for_paths,
    diff_bindings,
    port_source,
)
from southbound.learnedports import LearnedPorts
from southbound.pathtable import (
    ConfidenceRule,
    Invalidation,
    Outcome,
    PathTable,
    PortEntry,
    Scope,
    TableKey,
)
from southbound.ports import PortRequest, PortSource, PredictedPorts
from southbound.probeplan import ProbePlanner, ProbeReport, ScopeEvidence, detect_scope
from southbound.probing import AddressBook, HopReply, ModeledProber, Probe, Prober, Trace
from southbound.routes import (
    FlowLike,
    QpRoute,
    Stage,
    middle_stages,
    nearest_middle,
    round_robin_paths,
    routes_from_flows,
)
from southbound.verify import Mismatch, VerifyReport, realized_paths, verify

__all__ = [
    "JobsBalance",
    "AddressBook",
    "BalanceResult",
    "Binding",
    "BindingDiff",
    "BindingIssue",
    "BindingSet",
    "ConfidenceRule",
    "FlowLike",
    "HopReply",
    "Invalidation",
    "IssueKind",
    "LearnedPorts",
    "Mismatch",
    "ModeledProber",
    "Outcome",
    "PathTable",
    "PortEntry",
    "PortRequest",
    "PortSource",
    "PredictedPorts",
    "Probe",
    "ProbePlanner",
    "ProbeReport",
    "Prober",
    "QpRoute",
    "Scope",
    "ScopeEvidence",
    "Stage",
    "SynthesisMode",
    "TableKey",
    "Trace",
    "VerifyReport",
    "balance_jobs",
    "balance_ports",
    "bindings_for_paths",
    "detect_scope",
    "diff_bindings",
    "middle_stages",
    "nearest_middle",
    "port_source",
    "port_spread",
    "realized_paths",
    "multi_ported",
    "rebalanced",
    "round_robin_paths",
    "routes_from_flows",
    "verify",
]
