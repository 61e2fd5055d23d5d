"""SubmitIntents judged while it is read: counts and ranges straight from the protobuf message,
before a single dict or pydantic model is built from it.

Why here, in front of the intake: converting a message to the domain's plain mappings and
validating them with pydantic costs memory and CPU in proportion to the *whole* request, and
pydantic collects every error it finds. One 4 MB request of 9 explicit communicators x 65k
connections with out-of-range ranks cost the controller 4.5 s of CPU and +565 MB before it was
refused (issue 33). Here the work is bounded first by counts (every connection is at least one
flow, so a request with more connections than a job may have flows is refused unread), then
each connection is checked in one pass over the message (ends given, in range, distinct; QPs
and rate within bounds) and reading stops at the first :data:`MAX_PROBLEMS` problems. What
passes is exactly what the intake would accept field by field; cross-communicator rules (ids,
versions, budgets) stay the intake's.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from c4p.api.v1 import intents_pb2 as pb
from c4p.controller.errors import InvalidRequest, LimitExceeded, Problem
from c4p.controller.intake import MAX_PROBLEMS, IntakeLimits
from solver.workload.jobs import MAX_QPS_PER_CONNECTION, MAX_RATE, MIN_RATE


def admit_connections(communicators: Sequence[pb.CommunicatorIntent], limits: IntakeLimits) -> None:
    """Refuse a request whose connections alone exceed what a job may hold (read: counts)."""
    total = sum(len(c.connections) for c in communicators)
    if total > limits.max_flows_per_job:
        raise LimitExceeded(
            f"{total:,} connections in one request; a job has at most "
            f"{limits.max_flows_per_job:,} flows and each connection is at least one",
            "communicators",
        )


def _rank(value: int, size: int, at: str, problems: list[Problem]) -> None:
    if value >= size:
        problems.append((at, f"rank {value} is out of range 0..{size - 1}"))


def connection_problems(
    communicators: Sequence[pb.CommunicatorIntent], ranks: int, nics: Collection[str]
) -> list[Problem]:
    """The first :data:`MAX_PROBLEMS` problems of the communicators' rank subsets and explicit
    connections for a job of ``ranks`` ranks on NICs ``nics`` ("host:nic")."""
    problems: list[Problem] = []
    for i, c in enumerate(communicators):
        for k, r in enumerate(c.ranks):
            _rank(r, ranks, f"communicators[{i}].ranks[{k}]", problems)
            if len(problems) >= MAX_PROBLEMS:
                return problems
        for k, conn in enumerate(c.connections):
            at = f"communicators[{i}].connections[{k}]"
            ends: list[int | str] = []
            for side in ("src", "dst"):
                which = conn.WhichOneof(side)
                if which is None:
                    problems.append(
                        (f"{at}.{side}_rank", f"missing: give {side}_rank or {side}_nic")
                    )
                elif which.endswith("_rank"):
                    value = getattr(conn, which)
                    _rank(value, ranks, f"{at}.{which}", problems)
                    ends.append(value)
                else:
                    nic = getattr(conn, which)
                    if nic not in nics:
                        problems.append(
                            (f"{at}.{which}", f"NIC {nic[:80]!r} holds no rank of this job")
                        )
                    ends.append(nic)
            if len(ends) == 2 and ends[0] == ends[1]:
                problems.append((f"{at}.dst_{'rank' if isinstance(ends[1], int) else 'nic'}",
                                 f"src and dst are both {ends[0]!r}"))  # fmt: skip
            if conn.HasField("qps") and not 1 <= conn.qps <= MAX_QPS_PER_CONNECTION:
                problems.append((f"{at}.qps", f"{conn.qps} is not in 1..{MAX_QPS_PER_CONNECTION}"))
            if conn.HasField("rate") and not (
                math.isfinite(conn.rate) and MIN_RATE <= conn.rate <= MAX_RATE
            ):
                problems.append((f"{at}.rate", f"{conn.rate} is not in {MIN_RATE:g}..{MAX_RATE:g}"))
            if len(problems) >= MAX_PROBLEMS:
                return problems[:MAX_PROBLEMS]
    return problems


def refuse(problems: list[Problem]) -> None:
    """Raise the problems found (saying when reading stopped at the cap)."""
    if not problems:
        return
    error = InvalidRequest(problems)
    if len(problems) >= MAX_PROBLEMS:
        error.args = (f"the first {MAX_PROBLEMS} problems (reading stopped there): {error}",)
    raise error
