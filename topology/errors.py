"""Errors raised by the fabric layer.

Hierarchy (``c4p.errors`` re-exports all of it and adds the layers above)::

    TopologyError                 anything wrong with a fabric or a question about it
    ├── FabricFileError           a file could not be read or is not a valid fabric (terminal)
    ├── UnknownNameError          a switch, port, address or link name that does not exist
    └── PathError                 a path that is not a path of the fabric, or no path at all
        └── UnreachableError      a packet or flow cannot reach its destination (retryable
                                  when links come back)
"""

from __future__ import annotations

from collections.abc import Sequence


class TopologyError(Exception):
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
