"""What a host agent reports of its ranks' collectives: the detector's only input.

Why durations rather than timestamps: each host reads its own ``CLOCK_MONOTONIC``, which no
other host shares. A rank's *wait* (arrival at a collective to its completion) and its *compute*
gap (the previous completion to this arrival) are measured on one clock and mean the same on
every host, so ranks can be compared without synchronized clocks. A late rank waits little
while its peers wait long; a slow connection moves its bytes at a lower rate than its peers.

Why frozen dataclasses and not pydantic: a 16,384-rank job yields tens of thousands of
records per step, and the detector has a budget of milliseconds per step; these records are
built by the agent's own code from a format it has already checked (``c4p.agent``'s wire), and
decoded from the ``c4p.v1`` telemetry message, whose conversion checks every field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class ConnectionKey:
    """One QP as the bindings name it (``c4p.agent.wire.QpKey``'s fields)."""

    communicator: str
    src_rank: int
    dst_rank: int
    channel: int
    qp: int


@dataclass(frozen=True, slots=True)
class ConnectionStep:
    """What one QP carried in one step: bytes and the time it spent moving them."""

    key: ConnectionKey
    bytes: int
    busy_ns: int  # union of the transfers' [start, end) intervals
    transfers: int

    @property
    def rate_gbps(self) -> float:
        """Achieved rate while busy (0 when it moved nothing)."""
        return self.bytes * 8 / self.busy_ns if self.busy_ns > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RankStep:
    """One rank in one collective call, measured on its own host's clock."""

    rank: int
    compute_ns: int  # previous completion -> this arrival (0 for a communicator's first call)
    wait_ns: int  # arrival -> completion


@dataclass(frozen=True, slots=True)
class StepSummary:
    """One agent's view of one collective call (a *step*) of one communicator.

    ``step`` is the communicator's call sequence number, the same on every rank, so the
    controller can join the summaries of all hosts for a step. ``plan_epoch`` is the bindings
    epoch the host's ranks ran under: baselines are kept per epoch and collective shape, so a
    re-plan or a change of message size is not read as a fault.
    """

    job_id: str
    host: str
    communicator: str
    step: int
    plan_epoch: int
    collective: str  # "allreduce", "allgather", ... as the library names it
    bytes: int  # the call's message size
    ranks: tuple[RankStep, ...] = ()
    connections: tuple[ConnectionStep, ...] = ()


@dataclass(frozen=True, slots=True)
class RankProgress:
    """Where a rank stands now: what tells a hang from a slowdown."""

    communicator: str
    rank: int
    last_arrived: int  # step number of its latest arrival (-1: none yet)
    last_completed: int  # step number of its latest completion (-1: none yet)
    inside_ns: int  # time since that arrival while it has not completed (0 when outside)
    idle_ns: int  # time since its latest completion while outside a call (0 when inside)


@dataclass(frozen=True, slots=True)
class ConnectionProgress:
    """A QP's latest activity: a hang leaves QPs with no completed transfer for long."""

    key: ConnectionKey
    bytes_total: int
    idle_ns: int  # time since its latest completed transfer
    posted: int = 0  # transfers posted and not completed (0 when the library cannot tell)


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """A host's periodic heartbeat for one job, sent even when no step completes."""

    job_id: str
    host: str
    ranks: tuple[RankProgress, ...] = ()
    connections: tuple[ConnectionProgress, ...] = ()
    dropped: int = 0  # samples the ranks' rings or the agent dropped since the last report


@dataclass(frozen=True, slots=True)
class TelemetryReport:
    """One message of an agent's telemetry: finished steps and the current progress."""

    host: str
    steps: tuple[StepSummary, ...] = ()
    progress: tuple[ProgressReport, ...] = field(default=())


class TelemetrySink(Protocol):
    """Where the controller's agent service hands what agents report (the detector)."""

    def accept(self, report: TelemetryReport) -> None: ...
