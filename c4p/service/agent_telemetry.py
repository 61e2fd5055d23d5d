"""The controller's side of agent telemetry: a ``TelemetryReport`` checked and converted.

Why every field is checked here: the detector trusts :mod:`c4p.detector.summary`'s records
(frozen dataclasses, no validation, for speed), so this is the one place where what an agent
sent is judged. A bad field ends the agent's stream with ``INVALID_ARGUMENT`` naming the field
(the agent reconnects): a broken or hostile agent gets a clear answer, never a traceback, and
the detector never sees a half-checked record.
"""

from __future__ import annotations

from c4p.api.v1 import agent_pb2 as pb
from c4p.detector.summary import (
    ConnectionKey,
    ConnectionProgress,
    ConnectionStep,
    ProgressReport,
    RankProgress,
    RankStep,
    StepSummary,
    TelemetryReport,
)

MAX_NAME = 128  # job, communicator and collective names (bytes), as on the local wire
MAX_STEPS = 4_096  # per message
MAX_ENTRIES = 1_000_000  # ranks + connections in one message


class BadTelemetry(ValueError):
    """A field that fails its check: ``str(exc)`` names it, its value and why."""


def _name(value: str, where: str, *, empty: bool = False) -> str:
    if not value and not empty:
        raise BadTelemetry(f"{where}: empty")
    if len(value.encode("utf-8")) > MAX_NAME:
        raise BadTelemetry(f"{where}: {len(value.encode('utf-8'))} bytes, over {MAX_NAME}")
    return value


def _key(k: pb.TelemetryConnectionKey, where: str, has: bool) -> ConnectionKey:
    if not has:
        raise BadTelemetry(f"{where}: missing")
    comm = _name(k.communicator, f"{where}.communicator")
    return ConnectionKey(comm, k.src_rank, k.dst_rank, k.channel, k.qp)


def _step(s: pb.TelemetryStepSummary, host: str, where: str) -> StepSummary:
    if s.host != host:
        raise BadTelemetry(f"{where}.host: {s.host!r}, but the report is from {host!r}")
    ranks = [RankStep(r.rank, r.compute_ns, r.wait_ns) for r in s.ranks]
    if len({r.rank for r in ranks}) != len(ranks):
        raise BadTelemetry(f"{where}.ranks: a rank is listed twice")
    connections = []
    for j, c in enumerate(s.connections):
        at = f"{where}.connections[{j}]"
        key = _key(c.key, f"{at}.key", c.HasField("key"))
        if c.bytes > 0 and c.transfers == 0:
            raise BadTelemetry(f"{at}.transfers: 0 with {c.bytes} bytes")
        connections.append(ConnectionStep(key, c.bytes, c.busy_ns, c.transfers))
    return StepSummary(
        job_id=_name(s.job_id, f"{where}.job_id"),
        host=s.host,
        communicator=_name(s.communicator, f"{where}.communicator"),
        step=s.step,
        plan_epoch=s.plan_epoch,
        collective=_name(s.collective, f"{where}.collective", empty=True),
        bytes=s.bytes,
        ranks=tuple(ranks),
        connections=tuple(connections),
    )


def _progress(p: pb.TelemetryProgress, host: str, where: str) -> ProgressReport:
    if p.host != host:
        raise BadTelemetry(f"{where}.host: {p.host!r}, but the report is from {host!r}")
    ranks = []
    for j, r in enumerate(p.ranks):
        at = f"{where}.ranks[{j}]"
        for name in ("last_arrived", "last_completed"):
            if getattr(r, name) < -1:
                raise BadTelemetry(f"{at}.{name}: {getattr(r, name)}, below -1 (none yet)")
        if r.inside_ns and r.idle_ns:
            raise BadTelemetry(f"{at}: both inside_ns and idle_ns set (inside or outside a call)")
        ranks.append(
            RankProgress(
                _name(r.communicator, f"{at}.communicator"),
                r.rank,
                r.last_arrived,
                r.last_completed,
                r.inside_ns,
                r.idle_ns,
            )
        )
    connections = tuple(
        ConnectionProgress(
            _key(c.key, f"{where}.connections[{j}].key", c.HasField("key")),
            c.bytes_total,
            c.idle_ns,
            c.posted,
        )
        for j, c in enumerate(p.connections)
    )
    job_id = _name(p.job_id, f"{where}.job_id")
    return ProgressReport(job_id, p.host, tuple(ranks), connections, p.dropped)


def from_pb(message: pb.TelemetryReport, session_host: str) -> TelemetryReport:
    """The checked report of an agent whose session is for ``session_host``."""
    if message.host != session_host:
        raise BadTelemetry(
            f"telemetry.host: {message.host!r}, but the session is for {session_host!r}"
        )
    if len(message.steps) > MAX_STEPS:
        raise BadTelemetry(f"telemetry.steps: {len(message.steps)} steps, over {MAX_STEPS}")
    entries = sum(len(s.ranks) + len(s.connections) for s in message.steps) + sum(
        len(p.ranks) + len(p.connections) for p in message.progress
    )
    if entries > MAX_ENTRIES:
        raise BadTelemetry(f"telemetry: {entries} ranks and connections, over {MAX_ENTRIES}")
    steps = tuple(
        _step(s, message.host, f"telemetry.steps[{i}]") for i, s in enumerate(message.steps)
    )
    progress = tuple(
        _progress(p, message.host, f"telemetry.progress[{i}]")
        for i, p in enumerate(message.progress)
    )
    return TelemetryReport(message.host, steps, progress)
