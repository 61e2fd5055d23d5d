"""The detector's acceptance figures per interval and control mode, for ``c4p report``.

Why from events: the detector's findings, and the per-job stats it sends each ``stats_s``
(steps judged, collective wait, bus bandwidth), are all events; ``c4p admin events --json``
saves them, ``WatchEvents`` replays the ones a controller keeps. The figures are the seed's:
detections by class, detection latency, false positives (only where a replay marked the truth:
a live controller cannot know them), collective wait time and busbw.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel


class DetectionRow(BaseModel):
    start: float
    end: float
    mode: str
    detections: dict[str, int]  # by finding class
    latency_s: float | None  # median, syndrome start -> detection
    false_positives: int | None  # None: no event of the interval knows its truth
    cleared: int
    steps: int
    wait_s: float
    busbw_gbps: float | None


def _at(event: Mapping[str, Any]) -> float:
    at = event.get("at", 0.0)
    if isinstance(at, int | float):
        return float(at)
    return datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp()


def detection_report(events: Iterable[Mapping[str, Any]], interval_s: float) -> list[DetectionRow]:
    """Rows per interval (from the first event) and mode, oldest first. ``events`` are dicts
    as ``c4p admin events --json`` writes them (or :func:`c4p.service.detection.event_json`)."""
    items = sorted(((_at(e), e) for e in events), key=lambda p: p[0])
    if not items:
        return []
    origin = items[0][0]
    groups: dict[tuple[int, str], list[Mapping[str, Any]]] = {}
    for at, e in items:
        groups.setdefault((int((at - origin) // interval_s), str(e.get("mode", ""))), []).append(e)
    rows = []
    for (slot, mode), group in sorted(groups.items()):
        found = [e for e in group if e.get("kind") == "finding"]
        by_class: dict[str, int] = {}
        for e in found:
            key = str(e.get("finding_class") or (e.get("finding") or {}).get("cls", ""))
            by_class[key] = by_class.get(key, 0) + 1
        latencies = [float(e.get("latency_s", 0.0)) for e in found]
        truths = [e.get("truth", "") for e in found if e.get("truth")]
        stats = [e for e in group if e.get("kind") == "stats"]
        steps = sum(int(e.get("steps", 0)) for e in stats)
        weighted = sum(float(e.get("busbw_gbps", 0.0)) * int(e.get("steps", 0)) for e in stats)
        rows.append(
            DetectionRow(
                start=origin + slot * interval_s,
                end=origin + (slot + 1) * interval_s,
                mode=mode,
                detections=by_class,
                latency_s=statistics.median(latencies) if latencies else None,
                false_positives=sum(1 for t in truths if t == "fp") if truths else None,
                cleared=sum(1 for e in group if e.get("kind") == "cleared"),
                steps=steps,
                wait_s=sum(float(e.get("wait_s", 0.0)) for e in stats),
                busbw_gbps=weighted / steps if steps else None,
            )
        )
    return rows
