"""The table ``c4p lab detect`` prints: one row per scenario of :func:`c4p.lab.detect.run_detect`'s
result (its JSON form), kept apart from the scenarios so the bench reads as what it runs."""

from __future__ import annotations

from typing import Any


def render(result: dict[str, Any]) -> list[list[str]]:
    """Rows: scenario, injected, detected, confidence, latency, action, step times, FPs."""

    def num(v: Any, fmt: str = "{:.3f}") -> str:
        return "-" if v is None else fmt.format(v)

    rows = []
    for s in result["scenarios"]:
        d = s["detected"]
        rows.append([
            s["scenario"],
            f"{s['injected'].get('class', '')} {s['injected'].get('element', '')}".strip(),
            f"{d['class']} {d['element']}" if d else "-",
            num(d.get("confidence"), "{:.2f}") if d else "-",
            num(s["latency_s"], "{:.1f}"),
            s["action"],
            f"{num(s['step_time_before_s'])}/{num(s['step_time_during_s'])}/"
            f"{num(s['step_time_after_s'])}",
            num(s["false_positives"], "{}"),
        ])  # fmt: skip
    return rows


HEADERS = ["scenario", "injected", "detected", "conf", "latency s", "action",
           "step s before/during/after", "FP"]  # fmt: skip

__all__ = ["HEADERS", "render"]
