"""Every error c4p raises, in one place.

Hierarchy::

    C4pError (this module)            a product-level failure shown to the user
    TopologyError (topology.errors)   the fabric layer
    ├── FabricFileError               a file that cannot be used: file, field path, reason
    ├── UnknownNameError              a switch, port, address or link that does not exist
    └── PathError                     not a path of the fabric
        └── UnreachableError          no usable path (retryable: links may come back)
    SolverError (solver.errors)       jobs, flows, plans and evaluation

``retryable`` on each class says whether trying again later can succeed. The CLI prints any of
them as a one-line (or one line per problem) message and exits with status 2.
"""

from __future__ import annotations

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
    "FabricFileError",
    "PathError",
    "TopologyError",
    "UnknownNameError",
    "UnreachableError",
]
