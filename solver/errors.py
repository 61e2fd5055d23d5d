"""Errors raised by the solver layer.

Why a module of its own: the CLI and the controller turn these into messages for a person (a
job file that names a host the fabric does not have, a plan file with a path that is not a path)
or into gRPC status codes, so every error says *where* (a field path such as ``jobs[1].hosts[3]``
or a flow id such as ``train/ring/12/0``) and *why*, and says whether trying again can help.

Hierarchy (``c4p.errors`` re-exports all of it beside the topology errors)::

    C4pError (topology.errors)    the root of every c4p error
    └── SolverError               anything the solver refuses (terminal unless noted)
        ├── LocatedError          one or more (location, reason) problems in an input
        │   ├── JobError          job intents that do not fit the fabric (or each other)
        │   └── PlanError         a plan that does not fit the fabric or the jobs' flows
        └── PlacementError        not enough free hosts for a job (retryable: hosts free up)
"""

from __future__ import annotations

from collections.abc import Sequence

from topology.errors import C4pError

MAX_SHOWN = 50
"""Problems listed in an error's message; the rest are counted (all stay in ``problems``)."""


class SolverError(C4pError):
    """Base of every solver-layer error."""

    retryable = False


class LocatedError(SolverError):
    """Problems of an input, each ``(location, reason)``; the message lists them one a line.

    ``source`` names the input as a person knows it (a file name, ``<jobs>``); it prefixes
    every line, like :class:`topology.errors.FabricFileError` does.
    """

    def __init__(self, problems: Sequence[tuple[str, str]], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        prefix = f"{source}: " if source else ""
        lines = [
            f"{prefix}{where}: {reason}" if where else f"{prefix}{reason}"
            for where, reason in self.problems[:MAX_SHOWN]
        ]
        if len(self.problems) > MAX_SHOWN:
            lines.append(f"{prefix}(and {len(self.problems) - MAX_SHOWN} more problems)")
        super().__init__("\n".join(lines) if lines else f"{prefix}invalid")


class JobError(LocatedError):
    """Job intents that cannot be placed on the fabric; locations are field paths."""


class PlanError(LocatedError):
    """A plan that cannot be used with the fabric and the jobs; locations are flow ids."""


class PlacementError(SolverError):
    """A job asks for more free hosts than the fabric has."""

    retryable = True
