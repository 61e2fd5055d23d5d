"""What the detector concludes: typed findings with their evidence, and the knobs it uses.

Why typed records and not log lines: a finding drives an action (a drain, a report to the
scheduler), is streamed to operators and scored by the simulation against what was injected;
all three need its class, the element it names, how sure it is and the samples that justify it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FindingClass(StrEnum):
    """C4D's taxonomy: the response differs per class (drain a link, report a rank)."""

    COMM_SLOWDOWN = "comm-slowdown"  # some connections move bytes well below their peers' rate
    COMM_HANG = "comm-hang"  # every rank is inside the step, some connections stopped first
    COMPUTE_SLOWDOWN = "compute-slowdown"  # a rank arrives late; its transfers are fast
    NONCOMM_HANG = "noncomm-hang"  # a rank never arrives while its peers wait inside the step
    STARTUP = "startup"  # a planned rank or connection never reported at all


class ElementKind(StrEnum):
    LINK = "link"
    SWITCH = "switch"
    RANK = "rank"
    CONNECTION = "connection"


@dataclass(frozen=True, slots=True)
class Finding:
    """One conclusion about one element of one job.

    ``element`` is a link id (``a--b``), a switch name, ``rank <n>`` or a connection
    (``<comm> <src>-><dst> ch<c> qp<q>``); ``host`` names the rank's host where known.
    ``candidates`` are the other elements that explain the evidence almost as well (ambiguous
    localization), each with its score. ``evidence`` holds the samples behind the finding as
    short texts, bounded in number. ``cleared`` marks the end of a finding that stopped being
    confirmed (the syndrome went away, e.g. after a drain).
    """

    job_id: str
    cls: FindingClass
    kind: ElementKind
    element: str
    confidence: float
    communicator: str
    step: int  # the step that confirmed it
    first_step: int  # the first step that showed the syndrome
    host: str = ""
    candidates: tuple[tuple[str, float], ...] = ()
    evidence: tuple[str, ...] = ()
    cleared: bool = False
    started_s: float = 0.0  # when the syndrome began, on the clock ``evaluate`` is given
    detected_s: float = 0.0  # when it was confirmed (or cleared), on that clock

    @property
    def key(self) -> tuple[str, FindingClass, str]:
        return (self.job_id, self.cls, self.element)


@dataclass(frozen=True, slots=True)
class DetectorSettings:
    """Thresholds; the defaults were chosen on the simulation (``c4p bench --detect``).

    Why both a ratio and a robust z-score: the ratio says "slow enough to matter" (a link at
    70% of its peers' rate costs the whole ring 30%), the z-score "unlike its peers given this
    job's own spread" (a noisy job needs a larger gap than a quiet one).

    Why a persistence in seconds besides the steps: at tens of steps a second, three steps are
    a tenth of a second, as long as a busy host keeps one rank's sender off the CPU; a link
    that is really slow stays slow. A slowdown (of connections or a rank's compute) becomes a
    finding when its element has been named for ``persist_s`` seconds, never more than
    ``clear_steps`` steps apart. Hangs have their own time threshold (``hang_min_s``).
    """

    slow_ratio: float = 0.75  # a connection slower than this fraction of the median rate ...
    slow_z: float = 4.0  # ... and this many robust deviations below it
    late_fraction: float = 0.15  # a rank's extra compute, as a fraction of the median step time
    late_z: float = 5.0
    persist_steps: int = 3  # consecutive steps a syndrome must show before a finding ...
    persist_s: float = 1.0  # ... and its element confirmed this long (a slowdown), see below
    clear_steps: int = 10  # steps without the syndrome before a finding is cleared
    grace_steps: int = 5  # steps a connection whose path changed is not judged ...
    grace_s: float = 3.0  # ... nor for this long (whichever ends later), also after a restart
    restart_gap_steps: int = 8  # a jump in step numbers this large: a new incarnation
    hang_min_s: float = 2.0  # a hang is at least this long ...
    hang_steps: float = 10.0  # ... and this many median step times
    hang_tolerance: float = 0.25  # connections that stopped within this share of the hang
    startup_s: float = 30.0  # a planned rank or QP silent this long after the job's first report
    min_peers: int = 8  # fewer connections or ranks than this: no statistics, no finding
    max_evidence: int = 8
    max_candidates: int = 5
