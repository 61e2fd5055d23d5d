"""Errors raised by the fabric layer, and the root of every c4p error.

Why the root lives here: ``topology`` is the one package every other layer imports (``solver``,
``southbound`` and ``c4p`` all sit on it, and it imports none of them), so :class:`C4pError`
defined here can be the base of every layer's errors and a caller catches all of c4p's errors
with one class. ``c4p.errors`` re-exports the whole tree and draws it in its docstring.

Hierarchy of this layer::

    C4pError                      the root of every error c4p raises (any layer)
    TopologyError                 anything wrong with a fabric or a question about it
    ├── FabricFileError           a file could not be read or is not a valid fabric (terminal)
    ├── UnknownNameError          a switch, port, address or link name that does not exist
    └── PathError                 a path that is not a path of the fabric, or no path at all
        └── UnreachableError      a packet or flow cannot reach its destination (retryable
                                  when links come back)
"""

from __future__ import annotations

from collections.abc import Sequence


class C4pError(Exception):
    """The root of every error c4p raises, in any layer; ``retryable`` says whether the same
    action can succeed later."""

    retryable = False


class TopologyError(C4pError):
    """Base of every fabric-layer error."""

    retryable = False


class FabricFileError(TopologyError):
    """A fabric file that cannot be used; ``problems`` holds ``(field path, reason)`` pairs."""

    def __init__(self, file: str, problems: Sequence[tuple[str, str]]) -> None:
        self.file = file
        self.problems = list(problems)
        lines = [
            f"{file}: {path}: {reason}" if path else f"{file}: {reason}"
            for path, reason in self.problems
        ]
        super().__init__("\n".join(lines) if lines else f"{file}: invalid")


class UnknownNameError(TopologyError, KeyError):
    """A name that the fabric does not have."""

    def __str__(self) -> str:  # KeyError would add quotes around the message
        return str(self.args[0]) if self.args else ""


class PathError(TopologyError):
    """A path that does not exist in the fabric."""


class UnreachableError(PathError):
    """No usable path between two points; may become reachable when links recover."""

    retryable = True
