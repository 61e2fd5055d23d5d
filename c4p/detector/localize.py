"""Localization: from a set of bad connections to the element that explains them.

Two views, as C4D has them plus what only a path-aware controller has:

* the **rank-to-rank delay matrix** (a sparse one: the job's connections): when all of one
  rank's outgoing or incoming connections are bad and they are most of the bad ones, the row or
  column points at that rank (its NIC, its host link, its host);
* **tomography** over the plan in force: every link scores by how many bad paths cross it
  (coverage) and how few good ones do (purity: a link carrying healthy traffic at full rate is
  not the bottleneck of the slow paths). The best link, or a switch when the bad paths cross
  several of one switch's links and no single link explains them; the links that score nearly
  as well are the candidates, and the confidence falls with their number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from c4p.detector.paths import PathIndex

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

NEAR = 0.9  # a candidate scores at least this share of the best


@dataclass(frozen=True)
class Located:
    kind: str  # "link" | "switch" | "rank" | ""
    element: str
    confidence: float
    candidates: tuple[tuple[str, float], ...]
    bad_paths: int = 0
    good_paths: int = 0


NOWHERE = Located("", "", 0.0, ())


def rank_pattern(src: IntArray, dst: IntArray, bad: BoolArray) -> tuple[int, float] | None:
    """A rank whose row (as source) or column (as destination) of the delay matrix is bad:
    every connection of it in that direction bad, and together most of the bad ones. Returns
    the rank and the share of bad connections it explains, or ``None``."""
    total = int(bad.sum())
    if total == 0:
        return None
    best: tuple[int, float] | None = None
    for ends in (src, dst):
        bad_of = np.bincount(ends[bad], minlength=int(ends.max()) + 1)
        all_of = np.bincount(ends, minlength=int(ends.max()) + 1)
        r = int(np.argmax(bad_of))
        share = bad_of[r] / total
        if bad_of[r] == all_of[r] and share >= 0.6 and (best is None or share > best[1]):
            best = (r, float(share))
    # both directions of one rank (a host link slows what it sends and what it receives)
    both = np.bincount(np.concatenate([src[bad], dst[bad]]))
    r = int(np.argmax(both))
    mine = bad & ((src == r) | (dst == r))
    share = float(mine.sum()) / total
    if (
        share >= 0.9
        and bool(bad[(src == r) | (dst == r)].all())
        and (best is None or share > best[1])
    ):
        best = (r, share)
    return best


def tomography(index: PathIndex, bad_rows: IntArray, good_rows: IntArray, limit: int) -> Located:
    """The link (or switch) that best explains the bad paths against the good ones. The index's
    "links" may be directed resources named by their link: the best direction names it."""
    bad_rows, good_rows = bad_rows[bad_rows >= 0], good_rows[good_rows >= 0]
    n_bad = len(bad_rows)
    if n_bad == 0:
        return NOWHERE
    bad = index.link_counts(bad_rows).astype(np.float64)
    good = index.link_counts(good_rows).astype(np.float64)
    coverage = bad / n_bad
    purity = bad / np.maximum(bad + good, 1.0)
    score = coverage * purity
    best = int(np.argmax(score))
    top = float(score[best])
    if top <= 0:
        return NOWHERE
    inverse, unique = _groups(index)
    if len(unique) < len(index.links):
        located = _by_name(index, inverse, unique, bad, good, score, n_bad, limit)
        top = located.confidence * (1 + len(located.candidates))
        sw = _switch(index, bad, good, n_bad, top)
        return sw if sw is not None and sw.confidence > located.confidence else located
    near = np.flatnonzero(score >= NEAR * top)
    near = near[np.argsort(-score[near], kind="stable")]
    located = Located(
        "link",
        index.links[best],
        top / len(near),
        tuple((index.links[int(li)], round(float(score[li]), 3)) for li in near[1:limit]),
        int(bad[best]),
        int(good[best]),
    )
    sw = _switch(index, bad, good, n_bad, top)
    return sw if sw is not None and sw.confidence > located.confidence else located


_GROUPS: dict[int, tuple[object, IntArray, list[str]]] = {}


def _groups(index: PathIndex) -> tuple[IntArray, list[str]]:
    """Per entry of ``index.links`` the number of its name, and the distinct names (cached)."""
    got = _GROUPS.get(id(index.links))
    if got is not None and got[0] is index.links:
        return got[1], got[2]
    unique, inverse = np.unique(np.asarray(index.links, dtype=object), return_inverse=True)
    if len(_GROUPS) > 64:
        _GROUPS.clear()
    names = [str(n) for n in unique]
    _GROUPS[id(index.links)] = (index.links, inverse.astype(np.int64), names)
    return inverse.astype(np.int64), names


def _by_name(
    index: PathIndex,
    inverse: IntArray,
    names: list[str],
    bad: npt.NDArray[np.float64],
    good: npt.NDArray[np.float64],
    score: npt.NDArray[np.float64],
    n_bad: int,
    limit: int,
) -> Located:
    """Directed entries (the two directions of a link share its name): a link scores by its
    best direction (a queue shaped one way) or by both together (slow both ways), whichever
    explains the bad paths better; candidates are other links, never its other direction."""
    bad_u = np.bincount(inverse, weights=bad, minlength=len(names))
    good_u = np.bincount(inverse, weights=good, minlength=len(names))
    both = (bad_u / n_bad) * (bad_u / np.maximum(bad_u + good_u, 1.0))
    one = np.zeros(len(names))
    np.maximum.at(one, inverse, score)
    named = np.maximum(both, one)
    best = int(np.argmax(named))
    top = float(named[best])
    if top <= 0:
        return NOWHERE
    near = np.flatnonzero(named >= NEAR * top)
    near = near[np.argsort(-named[near], kind="stable")]
    return Located(
        "link",
        names[best],
        top / len(near),
        tuple((names[int(li)], round(float(named[li]), 3)) for li in near[1:limit]),
        int(bad_u[best]),
        int(good_u[best]),
    )


def _switch(
    index: PathIndex,
    bad: npt.NDArray[np.float64],
    good: npt.NDArray[np.float64],
    n_bad: int,
    link_top: float,
) -> Located | None:
    """A switch whose links together carry the bad paths purely while no one link does."""
    ends = index.link_switches
    if len(ends) == 0 or len(index.switches) == 0:
        return None
    n_sw = len(index.switches)
    bad_sw = np.zeros(n_sw)
    good_sw = np.zeros(n_sw)
    for side in (0, 1):
        ok = ends[:, side] >= 0
        np.add.at(bad_sw, ends[ok, side], bad[ok])
        np.add.at(good_sw, ends[ok, side], good[ok])
    # a path crosses a switch on two of its links: count it once
    bad_sw, good_sw = bad_sw / 2, good_sw / 2
    coverage = np.minimum(bad_sw / n_bad, 1.0)
    purity = bad_sw / np.maximum(bad_sw + good_sw, 1.0)
    score = coverage * purity
    s = int(np.argmax(score))
    if score[s] <= 1.25 * link_top:  # a switch only when clearly better than any one link
        return None
    return Located(
        "switch", index.switches[s], float(score[s]), (), int(bad_sw[s]), int(good_sw[s])
    )
