"""Every error c4p raises, in one place.

Hierarchy (each layer defines its own; this module re-exports them)::

    C4pError (here)                    a product-level failure shown to the user
    └── RequestError                   (c4p.controller.errors) an API request refused whole,
        ├── InvalidRequest, NotFound,   one class per gRPC status, each with (field, reason)
        ├── AlreadyExists, ...          problems; see that module's docstring
    TopologyError (topology.errors)    the fabric layer
    ├── FabricFileError                a file that cannot be used: file, field path, reason
    ├── UnknownNameError               a switch, port, address or link that does not exist
    └── PathError                      not a path of the fabric
        └── UnreachableError           no usable path (retryable: links may come back)
    SolverError (solver.errors)        jobs, flows, plans
    ├── LocatedError                   (location, reason) problems in an input
    │   ├── JobError                   job intents that do not fit the fabric
    │   └── PlanError                  a plan that does not fit the fabric or the flows
    └── PlacementError                 not enough free hosts (retryable)
    SouthboundError (southbound.driver_errors)   talking to switches
    ├── TargetConfigError              a targets file or credential that cannot be used
    ├── TargetUnreachable              no answer, refused, timed out (retryable)
    │   ├── TargetAuthError            credentials refused (terminal)
    │   └── TargetTlsError             certificate refused / TLS-plaintext mismatch (terminal)
    ├── CapabilityError                no JSON_IETF or a missing model (terminal)
    └── MalformedAnswer                an answer that is not the model: target and path

``retryable`` on each class says whether trying again later can succeed. The CLI prints any of
them as one line per problem and exits with status 2; the gRPC layer maps them to status codes.
"""

from __future__ import annotations

from solver.errors import JobError, LocatedError, PlacementError, PlanError, SolverError
from southbound.driver_errors import (
    CapabilityError,
    MalformedAnswer,
    SouthboundError,
    TargetAuthError,
    TargetConfigError,
    TargetTlsError,
    TargetUnreachable,
)
from topology.errors import (
    FabricFileError,
    PathError,
    TopologyError,
    UnknownNameError,
    UnreachableError,
)


class C4pError(Exception):
    """A product-level error (bad command-line option, inconsistent inputs)."""

    retryable = False


__all__ = [
    "C4pError",
    "CapabilityError",
    "FabricFileError",
    "JobError",
    "LocatedError",
    "MalformedAnswer",
    "PathError",
    "PlacementError",
    "PlanError",
    "SolverError",
    "SouthboundError",
    "TargetAuthError",
    "TargetConfigError",
    "TargetTlsError",
    "TargetUnreachable",
    "TopologyError",
    "UnknownNameError",
    "UnreachableError",
]
