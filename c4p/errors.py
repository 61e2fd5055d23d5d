"""Every error c4p raises, in one place: one root, one branch per layer.

Why one root: a caller (the CLI, a plugin embedding the client, a test) catches everything c4p
refuses with ``except C4pError`` and lets real bugs through. The root lives in
:mod:`topology.errors` because ``topology`` is the one package every layer imports and that
imports none of them; this module re-exports the whole tree.

Hierarchy::

    C4pError (topology.errors)          the root; ``retryable`` on every class
    ├── TopologyError (topology.errors)  the fabric layer
    │   ├── FabricFileError              a file that cannot be used: file, field path, reason
    │   ├── UnknownNameError             a switch, port, address or link that does not exist
    │   └── PathError                    not a path of the fabric
    │       └── UnreachableError         no usable path (retryable: links may come back)
    ├── SolverError (solver.errors)      jobs, flows, plans
    │   ├── LocatedError                 (location, reason) problems in an input
    │   │   ├── JobError                 job intents that do not fit the fabric
    │   │   └── PlanError                a plan that does not fit the fabric or the flows
    │   └── PlacementError               not enough free hosts (retryable)
    ├── SouthboundError (southbound.driver_errors)   talking to switches
    │   ├── TargetConfigError            a targets file or credential that cannot be used
    │   ├── TargetUnreachable            no answer, refused, timed out (retryable)
    │   │   ├── TargetAuthError          credentials refused (terminal)
    │   │   └── TargetTlsError           certificate refused / TLS-plaintext mismatch (terminal)
    │   ├── CapabilityError              no JSON_IETF or a missing model (terminal)
    │   └── MalformedAnswer              an answer that is not the model: target and path
    ├── StoreError (c4p.store.base)      the store cannot be opened, checked or written
    ├── RequestError (c4p.controller.errors)   an API request refused whole, one class per
    │   ├── InvalidRequest, NotFound,     gRPC status, each with (field, reason) problems
    │   └── AlreadyExists, ...
    └── ApiError (c4p.client.wire)       a call the controller refused, seen by a client
                                         (not re-exported here: it would import gRPC)

The CLI prints any of them as one line per problem and exits with status 2; the gRPC layer maps
them to status codes.
"""

from __future__ import annotations

from c4p.controller.errors import RequestError
from c4p.store.base import StoreError
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
    C4pError,
    FabricFileError,
    PathError,
    TopologyError,
    UnknownNameError,
    UnreachableError,
)

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
    "RequestError",
    "SolverError",
    "SouthboundError",
    "StoreError",
    "TargetAuthError",
    "TargetConfigError",
    "TargetTlsError",
    "TargetUnreachable",
    "TopologyError",
    "UnknownNameError",
    "UnreachableError",
]
