"""What the controller tells operators about itself: Prometheus metrics and structured logs.

Why a metrics registry per service: tests, the demo and the benchmark start several services in
one process; the global default registry would refuse the second one's metrics. Names follow
Prometheus conventions (``_total`` counters, ``_seconds`` histograms) under ``c4p_``. What an
operator watches: plans by reason and result (a storm of ``link`` plans is a flapping link;
``failed`` is a planner problem), solve time, flows moved (churn), bindings pushed, active jobs
and streams, the worst link's utilization and the plan's gap to its lower bound (how far from
optimal the fabric runs), and calls by method and status code.

Why JSON-lines logs: the log is read by machines first (Loki, Elasticsearch, ``jq``) and a
person second; fields such as ``job``, ``epoch``, ``moved`` or ``code`` must be queryable without
parsing sentences. Callers add fields with the standard ``extra=`` argument, so any library's
logging ends up in the same stream; ``format: text`` gives plain lines for a terminal.
"""

from __future__ import annotations

import json
import logging
import sys
from collections import Counter as Tally
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from c4p.controller.triggers import KeyKind
from c4p.store.base import DecisionRecord, DecisionResult


class Metrics:
    """The controller's metrics (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.plans = Counter(
            "c4p_plans_total", "Plans by trigger kind and result.", ["reason", "result"], registry=r
        )
        self.solve_seconds = Histogram(
            "c4p_solve_seconds",
            "Time to plan, bind and diff one step.",
            buckets=(0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100),
            registry=r,
        )
        self.flows_moved = Counter("c4p_flows_moved_total", "Flows given a new path.", registry=r)
        self.bindings_pushed = Counter(
            "c4p_bindings_pushed_total", "Bindings sent to clients on streams.", registry=r
        )
        self.bindings_changed = Counter(
            "c4p_bindings_changed_total", "Bindings added or changed by plans.", registry=r
        )
        self.active_jobs = Gauge("c4p_active_jobs", "Registered jobs.", registry=r)
        self.active_streams = Gauge("c4p_active_streams", "Open WatchBindings streams.", registry=r)
        self.max_link_utilization = Gauge(
            "c4p_max_link_utilization", "Worst switch link utilization of the plan.", registry=r
        )
        self.gap = Gauge("c4p_plan_gap", "(max utilization - bound) / bound.", registry=r)
        self.epoch = Gauge("c4p_plan_epoch", "The plan epoch in force.", registry=r)
        self.control_modes = Gauge(
            "c4p_jobs_by_control_mode", "Jobs per control mode at the last plan.", ["mode"],
            registry=r,
        )  # fmt: skip
        self.links_over = Gauge(
            "c4p_links_over_line_rate",
            "Switch link directions over line rate at the last plan (offered load), if every "
            "planned job ran on ECMP and as planned.", ["scenario"], registry=r,
        )  # fmt: skip
        self.requests = Counter(
            "c4p_requests_total", "API calls by method and status code.", ["method", "code"],
            registry=r,
        )  # fmt: skip
        self.leader = Gauge("c4p_leader", "1 while this replica leads (HA), else 0.", registry=r)
        self.store_writable = Gauge(
            "c4p_store_writable", "1 while the store takes writes; 0: serving read-only.",
            registry=r,
        )  # fmt: skip
        self.store_writable.set(1)
        self.fenced_writes = Counter(
            "c4p_fenced_writes_total", "Writes etcd refused: leadership was lost.", registry=r
        )
        self.agent_telemetry = Counter(
            "c4p_agent_telemetry_total",
            "Host agents' telemetry messages: accepted (to the detector), dropped (no detector), "
            "refused (a bad field).", ["outcome"], registry=r,
        )  # fmt: skip

    def record_plan(self, decision: DecisionRecord) -> None:
        kinds = sorted({t.split(" ", 1)[0] for t in decision.triggers}) or [KeyKind.STARTUP.value]
        self.plans.labels(reason="+".join(kinds), result=decision.result.value).inc()
        if decision.result is DecisionResult.PLANNED:
            self.solve_seconds.observe(decision.solve_seconds)
            self.flows_moved.inc(decision.moved)
            self.bindings_changed.inc(decision.bindings_added + decision.bindings_changed)
            self.max_link_utilization.set(decision.max_utilization)
            self.gap.set(decision.gap)
            self.epoch.set(decision.epoch)
            self.links_over.labels(scenario="ecmp").set(decision.links_over_ecmp)
            self.links_over.labels(scenario="planned").set(decision.links_over_planned)

    def record_modes(self, modes: Iterable[str]) -> None:
        """Jobs per control mode (every mode reported, 0 when none)."""
        counted = Tally(modes)
        for mode in ("off", "shadow", "active"):
            self.control_modes.labels(mode=mode).set(counted.get(mode, 0))


_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., <extra fields>}``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(level: str = "info", fmt: str = "json") -> None:
    """Send the ``c4p`` loggers to standard error in ``fmt`` (``json`` or ``text``)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("c4p")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
