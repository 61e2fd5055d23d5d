"""Why the controller refuses a request; the gRPC layer maps each class to one status code.

Why one module: a client (and the NCCL plugin behind it) must be able to tell "fix your request"
from "try again later" from "you may not", and an operator reading logs must see the field and
the reason. Every refusal is *whole*: nothing the request asked for has changed.

Hierarchy (``retryable`` says whether the same request can succeed later)::

    C4pError (c4p.errors)
    └── RequestError                 a request refused whole, with (field, reason) problems
        ├── InvalidRequest           INVALID_ARGUMENT      bad fields; fix the request
        ├── NotFound                 NOT_FOUND             no such link
        ├── AlreadyExists            ALREADY_EXISTS        job id taken by another registration
        ├── PreconditionFailed       FAILED_PRECONDITION   stale/conflicting version, NIC in use
        ├── LimitExceeded            RESOURCE_EXHAUSTED    too many jobs, flows, streams, calls
        │                                                  (retryable)
        ├── Unauthenticated          UNAUTHENTICATED       no credential, or not one of ours
        ├── PermissionDenied         PERMISSION_DENIED     a credential that does not open this
        └── Unavailable              UNAVAILABLE           the store cannot be written
                                                           (retryable)
"""

from __future__ import annotations

from collections.abc import Sequence

from topology.errors import C4pError

Problem = tuple[str, str]
"""``(field path, reason)``; the field path uses the API's spelling (``communicators[2].qps``)."""

MAX_SHOWN = 20


class RequestError(C4pError):
    """A refused request; ``problems`` lists every reason found (not only the first)."""

    code = "UNKNOWN"

    def __init__(self, problems: Sequence[Problem] | str, field: str = "") -> None:
        if isinstance(problems, str):
            problems = [(field, problems)]
        self.problems: list[Problem] = list(problems)
        lines = [f"{f}: {r}" if f else r for f, r in self.problems[:MAX_SHOWN]]
        if len(self.problems) > MAX_SHOWN:
            lines.append(f"(and {len(self.problems) - MAX_SHOWN} more problems)")
        super().__init__("; ".join(lines) or self.code.lower())


class InvalidRequest(RequestError):
    code = "INVALID_ARGUMENT"


class NotFound(RequestError):
    code = "NOT_FOUND"


class AlreadyExists(RequestError):
    code = "ALREADY_EXISTS"


class PreconditionFailed(RequestError):
    code = "FAILED_PRECONDITION"


class LimitExceeded(RequestError):
    code = "RESOURCE_EXHAUSTED"
    retryable = True


class Unauthenticated(RequestError):
    code = "UNAUTHENTICATED"


class PermissionDenied(RequestError):
    code = "PERMISSION_DENIED"


class Unavailable(RequestError):
    code = "UNAVAILABLE"
    retryable = True


__all__ = [
    "AlreadyExists",
    "InvalidRequest",
    "LimitExceeded",
    "NotFound",
    "PermissionDenied",
    "PreconditionFailed",
    "Problem",
    "RequestError",
    "Unauthenticated",
    "Unavailable",
]
