"""Errors raised by the southbound drivers (gNMI, SNMP) and by discovery.

Why one module: the controller must decide, for every failure of a switch session, whether to
retry later (the target is down, slow or restarting) or to stop and tell a person (bad
credentials, a target that cannot speak JSON_IETF). ``retryable`` on each class says which.

Hierarchy::

    SouthboundError                 anything that went wrong talking to a switch
    ├── TargetConfigError           a targets file or credential that cannot be used (terminal)
    ├── TargetUnreachable           no answer, refused, timed out, stream broken (retryable)
    │   ├── TargetAuthError         the target refused our credentials (terminal)
    │   └── TargetTlsError          TLS could not be agreed: certificate refused, or one side
    │                               speaks TLS and the other plaintext (terminal)
    ├── CapabilityError             the target lacks JSON_IETF or a model we need (terminal)
    └── MalformedAnswer             the target answered, but not with the model; names the
                                    target and the path (retryable: the next answer may be fine)

A ``MalformedAnswer`` for one leaf never aborts a session: drivers collect them as
:class:`~southbound.observed.Problem` records beside what they could parse.
"""

from __future__ import annotations

from topology.errors import C4pError


class SouthboundError(C4pError):
    """Base of every southbound error; ``target`` names the switch session, if any."""

    retryable = False

    def __init__(self, message: str, *, target: str | None = None) -> None:
        self.target = target
        super().__init__(f"{target}: {message}" if target else message)


class TargetConfigError(SouthboundError):
    """A target's configuration cannot be used (missing certificate file, unset secret)."""


class TargetUnreachable(SouthboundError):
    """The target did not answer in time, refused the connection, or broke the stream."""

    retryable = True


class TargetAuthError(TargetUnreachable):
    """The target refused the credentials; retrying with the same ones will not help."""

    retryable = False


class TargetTlsError(TargetUnreachable):
    """TLS failed for a reason retrying cannot fix: the target's certificate was refused, or
    a plaintext client met a TLS server (or the reverse). Failed, with the reason, never
    retried as merely stale."""

    retryable = False


class CapabilityError(SouthboundError):
    """The target does not offer what c4p needs (JSON_IETF encoding, OpenConfig models)."""


class MalformedAnswer(SouthboundError):
    """An answer that is not the model at ``path`` (e.g. an unknown oper-status)."""

    retryable = True

    def __init__(self, target: str, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}", target=target)


__all__ = [
    "CapabilityError",
    "MalformedAnswer",
    "SouthboundError",
    "TargetAuthError",
    "TargetConfigError",
    "TargetTlsError",
    "TargetUnreachable",
]
