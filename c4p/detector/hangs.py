"""The hang rules over progress reports: a rank that never arrives, a rank frozen inside its
call, a connection that stopped the collective (see ``docs/detector.md``, Rules).

Why apart from the per-step rules: a hang has no step to judge (the step never completes); it is
read from the heartbeats every host sends while its ranks wait, on its own time threshold
(``hang_min_s`` and ``hang_steps`` median steps), without the per-step persistence.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from operator import attrgetter

import numpy as np

from c4p.detector import localize
from c4p.detector.findings import DetectorSettings, ElementKind, Finding, FindingClass
from c4p.detector.paths import pack
from c4p.detector.rules import Hung, hung_connections, hung_ranks
from c4p.detector.state import CommState, JobState, connection_name, host_of

Confirm = Callable[[Finding, int], list[Finding]]
"""Opens a finding (or notes that an open one still holds): the detector's ``_confirm``."""

_PROGRESS = attrgetter("rank", "last_arrived", "last_completed", "inside_ns", "idle_ns")
_CONN_PROGRESS = attrgetter(
    "key.src_rank", "key.dst_rank", "key.channel", "key.qp", "posted", "idle_ns"
)


def hang_findings(
    s: DetectorSettings, confirm: Confirm, job_id: str, name: str, comm: CommState, job: JobState
) -> list[Finding]:
    """A communicator's hangs from its hosts' latest progress reports (see the module)."""
    ranks = [r for p in job.progress.values() for r in p.ranks if r.communicator == name]
    if not ranks:
        return []
    arr = np.fromiter(
        chain.from_iterable(map(_PROGRESS, ranks)), dtype=np.int64, count=5 * len(ranks)
    ).reshape(-1, 5)
    if len(comm.seen_ranks) < len(ranks):
        comm.seen_ranks.update(arr[:, 0].tolist())
    hang_ns = max(s.hang_min_s * 1e9, s.hang_steps * comm.step_ns)
    hung = hung_ranks(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], hang_ns)
    if hung is None:
        return []
    out: list[Finding] = []
    if hung.behind:
        return _behind(s, confirm, job_id, name, comm, job, hung, hang_ns)
    if len(hung.missing) and hung.waiting >= max(1, (hung.ranks - len(hung.missing)) // 2):
        for r in hung.missing[: s.max_candidates * 4].tolist():
            out.extend(
                confirm(
                    Finding(
                        job_id,
                        FindingClass.NONCOMM_HANG,
                        ElementKind.RANK,
                        f"rank {r}",
                        round(1.0 / max(1, len(hung.missing)) ** 0.5, 3),
                        name,
                        hung.step,
                        hung.step,
                        host=host_of(job, name, r),
                        evidence=(
                            f"rank {r} never arrived at step {hung.step}; {hung.waiting} of "
                            f"{hung.ranks} ranks inside it for over {hang_ns / 1e9:.1f} s",
                        ),
                    ),
                    hung.step,
                )
            )
    elif hung.all_inside:
        out.extend(_comm_hang(s, confirm, job_id, name, comm, job, hung.step, hung.ranks, hang_ns))
    return out


def _behind(
    s: DetectorSettings,
    confirm: Confirm,
    job_id: str,
    name: str,
    comm: CommState,
    job: JobState,
    hung: Hung,
    hang_ns: float,
) -> list[Finding]:
    """Every rank stuck inside a call, some steps behind the others: the rank that holds
    them is the head of the chain of waits among those furthest behind, the one whose
    peers sending to it are not behind (they went on; it never took their data). In a
    ring that is one rank; where the plan is unknown, every rank behind is a candidate."""
    behind = set(hung.missing.tolist())
    heads = sorted(behind)
    if comm.paths is not None and len(comm.paths.ids):
        src = comm.paths.ids >> 40
        dst = (comm.paths.ids >> 16) & 0xFFFFFF
        fed_by_behind = set(dst[np.isin(src, hung.missing)].tolist())
        heads = sorted(behind - fed_by_behind) or _centre(behind, src, dst) or heads
    r = heads[0]
    f = Finding(
        job_id,
        FindingClass.NONCOMM_HANG,
        ElementKind.RANK,
        f"rank {r}",
        round(1.0 / len(heads) ** 0.5, 3),
        name,
        hung.step,
        hung.step,
        host=host_of(job, name, r),
        candidates=tuple((f"rank {o}", 1.0) for o in heads[1 : s.max_candidates]),
        evidence=(
            f"every rank inside a call for over {hang_ns / 1e9:.1f} s; rank {r} is at step "
            f"{hung.step}, the lowest, with {len(behind)} of {hung.ranks} ranks; the ranks "
            "behind wait for it",
        ),
    )
    return confirm(f, hung.step)


def _centre(behind: set[int], src: np.ndarray, dst: np.ndarray) -> list[int]:
    """The ranks behind at the centre of their own wait graph (least eccentricity over the
    connections among them, either way), or ``[]`` if they are not one connected part.

    Why: where data flows both ways (a ring run in both directions, a tree) every rank behind
    is fed by another rank behind, so no head shows by direction; but a frozen rank holds its
    neighbours on both sides, they hold theirs, and the ranks behind spread out from it evenly:
    it is the centre of the part they make (ties, an even spread, name every centre)."""
    among = np.isin(src, list(behind)) & np.isin(dst, list(behind))
    near: dict[int, set[int]] = {r: set() for r in behind}
    for a, b in zip(src[among].tolist(), dst[among].tolist(), strict=True):
        if a != b:
            near[a].add(b)
            near[b].add(a)
    widest: dict[int, int] = {}
    for start in behind:
        seen, frontier, depth = {start}, [start], 0
        while frontier:
            nxt = [n for r in frontier for n in near[r] if n not in seen]
            seen.update(nxt)
            frontier = list(set(nxt))
            depth += 1 if frontier else 0
        if len(seen) != len(behind):
            return []
        widest[start] = depth
    least = min(widest.values())
    return sorted(r for r, w in widest.items() if w == least)


def _comm_hang(
    s: DetectorSettings,
    confirm: Confirm,
    job_id: str,
    name: str,
    comm: CommState,
    job: JobState,
    step: int,
    ranks: int,
    hang_ns: float,
) -> list[Finding]:
    conns = [c for p in job.progress.values() for c in p.connections if c.key.communicator == name]
    if not conns:
        return []
    k = np.fromiter(
        chain.from_iterable(map(_CONN_PROGRESS, conns)), dtype=np.int64, count=6 * len(conns)
    ).reshape(-1, 6)
    packed = pack(k[:, 0], k[:, 1], k[:, 2], k[:, 3])
    stuck = hung_connections(k[:, 4], k[:, 5], comm.step_ns, s)
    idx = np.flatnonzero(stuck)
    names = [connection_name(name, int(packed[i])) for i in idx[: s.max_evidence]]
    evidence = [f"all {ranks} ranks inside step {step} for over {hang_ns / 1e9:.1f} s"] + [
        f"{n}: idle {k[i, 5] / 1e9:.1f} s, {k[i, 4]} posted"
        for n, i in zip(names, idx, strict=False)
    ]
    kind, element, conf = ElementKind.CONNECTION, names[0], 1.0 / len(idx)
    candidates: tuple[tuple[str, float], ...] = ()
    if comm.paths is not None:
        rows = comm.paths.rows(packed)
        located = localize.tomography(comm.paths, rows[idx], rows[~stuck], s.max_candidates)
        if len(idx) > 1 and located.kind:
            kind, element, conf = ElementKind(located.kind), located.element, located.confidence
        candidates = ((located.element, round(located.confidence, 3)), *located.candidates)
        if located.kind:
            evidence.append(f"on its path: {', '.join(c for c, _ in candidates)}")
    f = Finding(
        job_id,
        FindingClass.COMM_HANG,
        kind,
        element,
        round(conf, 3),
        name,
        step,
        step,
        candidates=candidates[: s.max_candidates],
        evidence=tuple(evidence),
    )
    return confirm(f, step)
