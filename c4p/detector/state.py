"""What the detector keeps per job and communicator between steps (no logic beyond growing it).

Why a module of its own: the per-step rules (:mod:`c4p.detector.detector`) and the hang rules
(:mod:`c4p.detector.hangs`) both read and update this state; kept apart, neither imports the
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from c4p.detector.frame import KeyCache, StepWindow
from c4p.detector.paths import PathIndex
from c4p.detector.summary import ProgressReport

IntArray = npt.NDArray[np.int64]


def connection_name(communicator: str, packed: int) -> str:
    qp, channel = packed & 0xFF, (packed >> 8) & 0xFF
    dst, src = (packed >> 16) & 0xFFFFFF, packed >> 40
    return f"{communicator} {src}->{dst} ch{channel} qp{qp}"


@dataclass
class CommState:
    window: StepWindow = field(default_factory=StepWindow)
    keys: KeyCache = field(default_factory=KeyCache)
    paths: PathIndex | None = None
    version: tuple[int, str, int] | None = None
    ids: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    streak: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    first_slow: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    history: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # slow bits
    grace_until: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    grace_until_ns: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    signature: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    late: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (streak, first)
    step: int = -1
    incarnation: int = 0  # the window's, when last judged
    settle_until: tuple[int, float] = (-1, 0.0)  # whole-communicator grace: (step, seconds)
    step_ns: float = 0.0  # a recent median step duration (for the hang threshold)
    rank_host: dict[int, str] = field(default_factory=dict)
    judged_at: dict[int, float] = field(default_factory=dict)  # step -> when it was judged
    seen_ranks: set[int] = field(default_factory=set)
    seen_conns: set[int] = field(default_factory=set)

    def slots(self, packed: IntArray) -> IntArray:
        """Each connection's slot in the per-connection arrays (growing them for new ones)."""
        at = np.searchsorted(self.ids, packed)
        if len(self.ids):
            known = (at < len(self.ids)) & (self.ids[np.minimum(at, len(self.ids) - 1)] == packed)
            complete = bool(known.all())
        else:
            complete = len(packed) == 0
        if not complete:
            merged = np.union1d(self.ids, packed)
            where = np.searchsorted(merged, self.ids)
            grown = []
            olds = (self.streak, self.first_slow, self.history, self.grace_until,
                    self.grace_until_ns, self.signature)  # fmt: skip
            for old in olds:
                new = np.zeros(len(merged), dtype=np.int64)
                new[where] = old
                grown.append(new)
            (self.streak, self.first_slow, self.history, self.grace_until, self.grace_until_ns,
             self.signature) = grown  # fmt: skip
            self.ids = merged
            at = np.searchsorted(self.ids, packed)
        return at.astype(np.int64)


@dataclass
class JobStats:
    """A job's steps judged, their median wait summed, and their bus bandwidths summed."""

    steps: int = 0
    wait_s: float = 0.0
    busbw_sum: float = 0.0

    @property
    def busbw_gbps(self) -> float:
        return self.busbw_sum / self.steps if self.steps else 0.0


@dataclass
class JobState:
    comms: dict[str, CommState] = field(default_factory=dict)
    progress: dict[str, ProgressReport] = field(default_factory=dict)  # by host
    first_seen_s: float | None = None


def host_of(job: JobState, communicator: str, rank: int) -> str:
    for p in job.progress.values():
        if any(r.rank == rank and r.communicator == communicator for r in p.ranks):
            return p.host
    return ""
