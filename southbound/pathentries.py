"""What a learned path table holds and reports: its keys and scope, a port's entry, the outcome of
recording one trace, the confidence rule, and what a topology change invalidated.

Why apart from :mod:`southbound.pathtable`: these are the table's vocabulary, read by the probe
planner, the controller's learning loop and the service (outcomes, invalidations, keys) without
the table's learning and invalidation logic; :mod:`southbound.pathtable` re-exports them and
explains what they mean.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from southbound.routes import GroupKey, Middle

TableKey = tuple[int, int]
"""``(source NIC port, destination NIC port)`` or ``(source leaf, destination leaf)`` nodes."""


class Scope(StrEnum):
    """What one set of table entries is shared by (see the module docstring)."""

    PAIR = "pair"
    LEAF_PAIR = "leaf-pair"


class Outcome(StrEnum):
    """What recording one trace did."""

    NEW = "new"
    AGREED = "agreed"
    CHANGED = "changed"
    UNSTABLE = "unstable"
    INCOMPLETE = "incomplete"
    UNEXPECTED = "unexpected"
    BLACK_HOLE = "black-hole"
    UNKNOWN_ENDPOINT = "unknown-endpoint"


@dataclass(frozen=True, slots=True)
class ConfidenceRule:
    """How much agreement an entry and a path need (see the module docstring)."""

    probes_per_port: int = 2
    ports_per_path: int = 1
    spacing_s: float = 0.05
    """Seconds between two probes of a port for both to count (the later one from another
    socket, in another batch)."""

    def __post_init__(self) -> None:
        if self.probes_per_port < 1 or self.ports_per_path < 1:
            raise ValueError(f"confidence rule needs counts >= 1, got {self}")
        if not 0 <= self.spacing_s <= 60:
            raise ValueError(f"spacing_s: {self.spacing_s} is not within 0..60 seconds")


@dataclass(slots=True)
class PortEntry:
    """What the table knows of one source port of one key."""

    middle: Middle
    agreeing: int = 1
    stale: bool = False
    changes: int = 0
    unstable: Middle | None = None
    """The other path a probe saw while the entry was live: the entry is *unstable*."""
    probes: int = 0
    """Traces recorded for this port (agreements too close together included)."""
    at: float = float("-inf")
    """When the last counted observation was recorded (the table's clock)."""


@dataclass(frozen=True)
class Invalidation:
    """What a topology change did to a table: the groups that changed, the entries made stale
    (``(key, sport)``) and the keys whose paths may have changed (to re-probe and re-cover)."""

    changed_groups: tuple[GroupKey, ...]
    stale: tuple[tuple[TableKey, int], ...]
    keys: tuple[TableKey, ...]


@dataclass(slots=True)
class _KeyState:
    """Entries of one key, with counts kept up to date so that a planning round costs
    O(paths + untrusted entries), not O(entries)."""

    entries: dict[int, PortEntry] = field(default_factory=dict)
    by_middle: dict[Middle, set[int]] = field(default_factory=dict)
    trusted: Counter[Middle] = field(default_factory=Counter)
    pending: set[int] = field(default_factory=set)  # neither trusted nor stale nor unstable
    unstable: set[int] = field(default_factory=set)
    cursor: int = 0
