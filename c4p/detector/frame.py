"""One step of one communicator, joined over every host's summary, as numpy arrays.

Why a window with a lag: hosts report independently, so the summaries of step ``s`` arrive
over some time. A step is judged once every host seen in this communicator has reported it,
or once a step ``lag`` later is complete (a host that stopped reporting must not stall the
detector: its silence is the hang rules' business, from progress reports).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, is_

import numpy as np
import numpy.typing as npt

from c4p.detector.paths import pack
from c4p.detector.summary import StepSummary

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_KEY = attrgetter("key")
_KEY_FIELDS = attrgetter("src_rank", "dst_rank", "channel", "qp")
_CONN = attrgetter("bytes", "busy_ns")
_RANK = attrgetter("rank", "compute_ns", "wait_ns")


@dataclass
class KeyCache:
    """The last step's connection keys and their arrays, per communicator.

    Why: a step's keys are the same QPs as the step before; an agent keeps one key object per
    QP, so checking that a step's keys *are* the last step's objects (identity, at C speed)
    saves reading four fields of every connection again. Any difference re-reads them all.
    """

    keys: list[object] = field(default_factory=list)
    table: IntArray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.int64))


@dataclass(frozen=True)
class StepFrame:
    """Everything reported about one step of one communicator."""

    job_id: str
    communicator: str
    step: int
    plan_epoch: int
    collective: str
    bytes: int
    hosts: tuple[str, ...]
    rank: IntArray
    rank_host: IntArray  # index into ``hosts``
    compute_ns: IntArray
    wait_ns: IntArray
    conn: IntArray  # packed (src, dst, channel, qp), see :func:`c4p.detector.paths.pack`
    src: IntArray
    dst: IntArray
    conn_bytes: IntArray
    busy_ns: IntArray

    @property
    def version(self) -> tuple[int, str, int]:
        """The baseline version: a re-plan or a new message size starts new statistics."""
        return (self.plan_epoch, self.collective, self.bytes)

    def rates(self) -> FloatArray:
        """Achieved rate of each connection while busy, Gbit/s (NaN when it moved nothing)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            out: FloatArray = np.where(
                self.busy_ns > 0, self.conn_bytes * 8.0 / np.maximum(self.busy_ns, 1), np.nan
            )
        return out


def join(summaries: Sequence[StepSummary], cache: KeyCache | None = None) -> StepFrame:
    """One frame from the summaries of one step (same job, communicator and step)."""
    first = summaries[0]
    hosts = tuple(s.host for s in summaries)
    # one C-level pass per table: attrgetter tuples chained straight into an int64 array
    n_ranks = sum(len(s.ranks) for s in summaries)
    n_conns = sum(len(s.connections) for s in summaries)
    ranks = np.fromiter(
        chain.from_iterable(chain.from_iterable(map(_RANK, s.ranks) for s in summaries)),
        dtype=np.int64,
        count=3 * n_ranks,
    ).reshape(-1, 3)
    keys: list[object] = list(chain.from_iterable(map(_KEY, s.connections) for s in summaries))
    if cache is not None and len(keys) == len(cache.keys) and all(map(is_, keys, cache.keys)):
        table = cache.table
    else:
        table = np.fromiter(
            chain.from_iterable(map(_KEY_FIELDS, keys)), dtype=np.int64, count=4 * n_conns
        ).reshape(-1, 4)
        if cache is not None:
            cache.keys, cache.table = keys, table
    moved = np.fromiter(
        chain.from_iterable(chain.from_iterable(map(_CONN, s.connections) for s in summaries)),
        dtype=np.int64,
        count=2 * n_conns,
    ).reshape(-1, 2)
    rank_host = np.repeat(
        np.arange(len(summaries), dtype=np.int64),
        np.fromiter((len(s.ranks) for s in summaries), dtype=np.int64, count=len(summaries)),
    )
    src, dst = table[:, 0], table[:, 1]
    return StepFrame(
        job_id=first.job_id,
        communicator=first.communicator,
        step=first.step,
        plan_epoch=max(s.plan_epoch for s in summaries),
        collective=first.collective,
        bytes=first.bytes,
        hosts=hosts,
        rank=ranks[:, 0].copy(),
        rank_host=rank_host,
        compute_ns=ranks[:, 1].copy(),
        wait_ns=ranks[:, 2].copy(),
        conn=pack(src, dst, table[:, 2], table[:, 3]),
        src=src,
        dst=dst,
        conn_bytes=moved[:, 0].copy(),
        busy_ns=moved[:, 1].copy(),
    )


@dataclass
class _Pending:
    parts: dict[str, StepSummary] = field(default_factory=dict)


class StepWindow:
    """Collects one communicator's summaries until each step is complete (see the module
    docstring); bounded: at most ``keep`` steps are pending."""

    def __init__(self, lag: int = 2, keep: int = 64) -> None:
        self.lag = lag
        self.keep = keep
        self.hosts: set[str] = set()
        self._pending: dict[int, _Pending] = {}
        self.done_through = -1  # every step up to this one was emitted (or skipped)
        self.late = 0  # summaries of steps already judged (counted, dropped)
        self.incarnation = 0  # counts the times the steps started over (a restarted job)

    def add(self, summary: StepSummary) -> None:
        if summary.step + self.keep < self.done_through:
            # far behind what was judged: not a late summary but a new incarnation of the
            # communicator numbering its calls from the start again (a restarted job)
            self.incarnation += 1
            self._pending.clear()
            self.hosts.clear()
            self.done_through = -1
        if summary.step <= self.done_through:
            self.late += 1
            return
        self.hosts.add(summary.host)
        pending = self._pending.get(summary.step)
        if pending is None:
            pending = self._pending[summary.step] = _Pending()
        pending.parts[summary.host] = summary
        while len(self._pending) > self.keep:
            del self._pending[min(self._pending)]

    def ready(self) -> list[list[StepSummary]]:
        """The steps that are complete, oldest first (each as its hosts' summaries)."""
        out: list[list[StepSummary]] = []
        complete = [s for s, p in self._pending.items() if self.hosts.issubset(p.parts)]
        newest = max(complete, default=-1)
        for step in sorted(self._pending):
            if step in complete or step + self.lag <= newest:
                parts = self._pending.pop(step).parts
                out.append([parts[h] for h in sorted(parts)])
                self.done_through = max(self.done_through, step)
        return out
