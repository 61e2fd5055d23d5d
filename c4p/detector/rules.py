"""The per-step rules: each connection and rank against its peers in the same step.

Why robust statistics (median and MAD): a step's few faulty connections must not move the
reference they are judged against; a mean and a standard deviation would follow the outliers.
Every rule works on one step's arrays at once (numpy), so a 16,384-rank step costs
milliseconds. The rules only mark; persistence, grace and localization are the detector's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from c4p.detector.findings import DetectorSettings
from c4p.detector.frame import StepFrame

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

MAD_SCALE = 1.4826  # MAD to a normal distribution's standard deviation


def robust(values: FloatArray) -> tuple[float, float]:
    """Median and scaled MAD (floored at 1% of the median, so a quiet job is not a hair
    trigger)."""
    med = float(np.median(values))
    mad = MAD_SCALE * float(np.median(np.abs(values - med)))
    return med, max(mad, 0.01 * abs(med), 1e-12)


@dataclass(frozen=True)
class SlowConnections:
    rates: FloatArray  # Gbit/s, NaN for connections that moved nothing
    judged: BoolArray  # moved bytes and not in grace
    slow: BoolArray
    median: float
    mad: float


def slow_connections(
    frame: StepFrame, grace: BoolArray, s: DetectorSettings
) -> SlowConnections | None:
    """Connections well below the step's median rate (``None``: too few to judge)."""
    rates = frame.rates()
    judged = np.isfinite(rates) & ~grace
    if int(judged.sum()) < s.min_peers:
        return None
    med, mad = robust(rates[judged])
    with np.errstate(invalid="ignore"):
        slow = judged & (rates < s.slow_ratio * med) & ((med - rates) / mad > s.slow_z)
    return SlowConnections(rates, judged, slow, med, mad)


@dataclass(frozen=True)
class LateRanks:
    late: BoolArray  # per entry of ``frame.rank``
    step_ns: float  # the step's median duration (compute + wait)
    compute_median: float
    wait_median: float


def late_ranks(frame: StepFrame, slow_ranks: IntArray, s: DetectorSettings) -> LateRanks | None:
    """Ranks that arrive late while their peers wait for them and whose own transfers are not
    slow (``slow_ranks``: ranks with a slow connection this step)."""
    n = len(frame.rank)
    if n < s.min_peers:
        return None
    compute = frame.compute_ns.astype(np.float64)
    wait = frame.wait_ns.astype(np.float64)
    step_ns = float(np.median(compute + wait))
    med_c, mad_c = robust(compute)
    med_w = float(np.median(wait))
    extra = compute - med_c
    late = (
        (extra > max(s.late_fraction * step_ns, s.late_z * mad_c))
        & (wait < 0.5 * med_w)  # it waits little ...
        & (med_w > 0.5 * extra)  # ... while its peers wait for it
        & ~np.isin(frame.rank, slow_ranks)  # and its transfers are fast
    )
    return LateRanks(late, step_ns, med_c, med_w)


@dataclass(frozen=True)
class Hung:
    """One communicator's hang syndrome from the latest progress reports."""

    missing: IntArray  # ranks that never arrived at the step their peers wait in
    step: int
    waiting: int  # ranks inside that step longer than the threshold
    ranks: int
    all_inside: bool  # every rank inside the step: a communication hang
    behind: bool = False  # every rank stuck inside a call, ``missing`` at the lowest step


def hung_ranks(
    rank: IntArray,
    arrived: IntArray,
    completed: IntArray,
    inside_ns: IntArray,
    idle_ns: IntArray,
    hang_ns: float,
) -> Hung | None:
    """Ranks of one communicator stuck for longer than ``hang_ns`` (``None``: no hang).

    Why "inside any step" and not "inside the newest step": when a rank stops, its peers do
    not all stop in one step. In a ring each rank finishes the rounds its predecessor fed it
    and blocks on the next, so the ranks spread over two or three steps; counting only those
    in the newest step as waiting, a hung rank was missed about one run in three in the lab."""
    if len(rank) < 2:
        return None
    inside_now = completed < arrived
    stuck = inside_now & (inside_ns > hang_ns)
    waiting = int(stuck.sum())
    if waiting == 0:
        return None
    step = int(arrived.max())
    missing = rank[~inside_now & (idle_ns > hang_ns)]
    if len(missing):
        return Hung(missing, step, waiting, len(rank), False)
    if waiting < len(rank):
        return None  # some ranks still move: not a hang (yet)
    low = int(arrived.min())
    if low == step:  # every rank inside the same step: a communication hang
        return Hung(missing, step, waiting, len(rank), True)
    # Every rank inside a call and none moving, at different steps: a rank stopped inside its
    # call (a process frozen mid-collective) lets its successors run a few rounds ahead, so
    # nobody is outside; those furthest behind hold the others.
    return Hung(rank[arrived == low], low, waiting, len(rank), False, behind=True)


def hung_connections(
    posted: IntArray, idle_ns: IntArray, step_ns: float, s: DetectorSettings
) -> BoolArray:
    """In a communication hang, the connections that stopped it: work posted and never
    completed where the library reports it; else those idle longest (within a quarter of a
    step of the longest: the rest stopped after them, waiting for their data)."""
    if int((posted > 0).sum()) > 0:
        out: BoolArray = posted > 0
        return out
    longest = float(idle_ns.max()) if len(idle_ns) else 0.0
    return np.asarray(idle_ns >= longest - s.hang_tolerance * step_ns, dtype=np.bool_)


def busbw_gbps(collective: str, size: int, ranks: int, comm_ns: float) -> float:
    """Bus bandwidth of one call (nccl-tests' definition): the algorithm bandwidth (message
    over duration) times the share of it each rank's link carries: 2(n-1)/n for an
    all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 otherwise."""
    if comm_ns <= 0 or ranks < 2:
        return 0.0
    factor = {"allreduce": 2 * (ranks - 1) / ranks}.get(collective, 1.0)
    if collective in ("allgather", "reducescatter", "alltoall"):
        factor = (ranks - 1) / ranks
    return size * 8 / comm_ns * factor
