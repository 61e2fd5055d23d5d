"""``c4p report``: the rollout report (per interval and control mode) from a decision log.

Why two sources: an operator asks a running controller (``--controller``, through the admin
API's ``GetDecisionLog``); a post-mortem, or a controller that is down, reads the store file
(``--store``, opened read-only, safe beside a running controller). Both feed the same
computation (:mod:`c4p.figures.rollout`), so they print the same table. gRPC is imported inside the
command so the offline commands stay fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from c4p.cli.common import JsonOption, console, emit, fail, guarded
from c4p.cli.outputs import check_outputs
from c4p.cli.tables import WideOption, fitted
from c4p.errors import C4pError

if TYPE_CHECKING:
    from c4p.detector.report import DetectionRow
    from c4p.figures.rollout import RolloutReport


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


COLUMNS = (
    "interval (s)",
    "mode",
    "jobs",
    "busbw ECMP",
    "busbw c4p",
    "gain",
    "re-plans",
    "moves",
    "pushed",
    "failures",
    "over-rate ECMP→c4p",
)


def title(report: RolloutReport) -> str:
    return f"rollout report: {report.decisions} plans, intervals of {report.interval_s:g} s"


def cells(report: RolloutReport) -> list[list[str]]:
    """One row of :data:`COLUMNS` per interval and mode, as printed."""
    origin = report.rows[0].start if report.rows else 0.0
    out = []
    for r in report.rows:
        gain = r.gain
        out.append(
            [
                f"{r.start - origin:g}–{r.end - origin:g}",
                r.mode.value,
                str(r.jobs),
                _fmt(r.busbw_ecmp_gbps),
                _fmt(r.busbw_c4p_gbps),
                "-" if gain is None else f"{gain:+.0%}",
                str(r.replans),
                str(r.moves),
                str(r.pushed),
                str(r.failures),
                f"{r.over_ecmp}→{r.over_c4p}",
            ]
        )
    return out


def render(report: RolloutReport) -> Table:
    """The interval table at full width (the rollout demo prints it on a 120-column console;
    ``c4p report`` fits the terminal with :func:`c4p.cli.tables.fitted`)."""
    table = Table(title=title(report), title_justify="left")
    for name in COLUMNS:
        table.add_column(name, justify="left" if name == "mode" else "right", no_wrap=True)
    for row in cells(report):
        table.add_row(*row)
    return table


def report_cmd(
    controller: Annotated[
        str | None, typer.Option(help="Ask this controller (host:port) through the admin API.")
    ] = None,
    store: Annotated[
        Path | None, typer.Option(help="Read this store file (SQLite) instead, read-only.")
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(help="File holding the admin credential (default: $C4P_ADMIN_TOKEN)."),
    ] = None,
    token_env: Annotated[
        str | None,
        typer.Option(
            help="Deprecated: the environment variable holding the admin token (use "
            "--token-file or $C4P_ADMIN_TOKEN, as c4p admin does).",
            hidden=True,
        ),
    ] = None,
    ca_file: Annotated[
        Path | None, typer.Option(help="CA of the controller's certificate (TLS); else plaintext.")
    ] = None,
    interval: Annotated[float, typer.Option(help="Interval length in seconds.")] = 60.0,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", help="Write a plot over time here (PNG).")
    ] = None,
    events: Annotated[
        Path | None,
        typer.Option(
            help="The detector's events (`c4p admin events --json FILE`): adds detections by "
            "class, latency, false positives, collective wait and busbw. With --controller "
            "they are read from it."
        ),
    ] = None,
    wide: WideOption = False,
    json_path: JsonOption = None,
) -> None:
    """Per interval and control mode: jobs, predicted busbw under ECMP and c4p, re-plans,
    moves, failures handled (from the decision log); and the detector's figures."""
    if (controller is not None and store is not None) or (
        controller is None and store is None and events is None
    ):
        fail("give exactly one of --controller HOST:PORT or --store FILE (or only --events FILE)")
    if not interval > 0:
        fail(f"--interval: must be > 0 seconds, got {interval}")
    guarded(lambda: check_outputs(("--plot", plot_path, (".png",))))

    def body() -> None:
        from c4p.detector.report import detection_report
        from c4p.figures import rollout

        decisions: list[Any] = []
        seen: list[dict[str, Any]] = _read_events(events) if events is not None else []
        if store is not None:
            from c4p.store.base import StoreError
            from c4p.store.sqlite import read_decisions

            try:
                decisions = read_decisions(store)
            except StoreError as exc:
                raise C4pError(str(exc)) from None
        elif controller is not None:
            found, seen = _from_controller(
                controller, _token(token_file, token_env), ca_file, events is None
            )
            decisions = [rollout.from_pb(d) for d in found]
        report = rollout.rollout(decisions, interval) if decisions or events is None else None
        detections = detection_report(seen, interval)
        if plot_path is not None and report is not None:
            rollout.plot(report, plot_path)

        def show() -> None:
            if report is not None:
                right = [c for c in COLUMNS if c != "mode"]
                fitted(console, title(report), COLUMNS, cells(report), right=right, wide=wide)
            if detections:
                console.print(render_detections(detections, interval))
            if plot_path is not None:
                console.print(f"wrote {plot_path}")

        data = report.model_dump(mode="json") if report is not None else {}
        if detections:  # without events the JSON stays the rollout report's own
            data["detections"] = [row.model_dump(mode="json") for row in detections]
        emit(json_path, data, show)

    guarded(body)


def _token(token_file: Path | None, token_env: str | None) -> str:
    """The admin credential as every ``c4p admin`` command takes it (``--token-file``, else
    ``$C4P_ADMIN_TOKEN``); ``--token-env NAME``, this command's old spelling, still works with a
    note on standard error."""
    from c4p.cli.admin import admin_token

    if token_env is None or token_file is not None:
        return admin_token(token_file)
    Console(stderr=True).print(
        "note: --token-env is deprecated; give --token-file FILE or set C4P_ADMIN_TOKEN, "
        "as for c4p admin",
        highlight=False,
        soft_wrap=True,
    )
    token = os.environ.get(token_env, "").strip()
    if not token:
        raise C4pError(f"--token-env: environment variable {token_env!r} is not set")
    return token


def _read_events(path: Path) -> list[dict[str, Any]]:
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise C4pError(f"--events {path}: {exc}") from None
    found = data.get("events") if isinstance(data, dict) else None
    if not isinstance(found, list):
        raise C4pError(f"--events {path}: not `c4p admin events --json` output (no 'events' list)")
    return [e for e in found if isinstance(e, dict)]


def render_detections(rows: list[DetectionRow], interval_s: float) -> Table:
    """The detector's figures per interval and mode."""
    table = Table(title=f"detections, intervals of {interval_s:g} s", title_justify="left")
    for name in ("interval (s)", "mode", "by class", "latency (s)", "false pos.", "cleared",
                 "steps", "wait (s)", "busbw"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("mode", "by class") else "right")
    origin = rows[0].start
    for r in rows:
        table.add_row(
            f"{r.start - origin:g}–{r.end - origin:g}",
            r.mode,
            ", ".join(f"{k} {v}" for k, v in sorted(r.detections.items())) or "-",
            _fmt(r.latency_s),
            "-" if r.false_positives is None else str(r.false_positives),
            str(r.cleared),
            str(r.steps),
            _fmt(r.wait_s),
            _fmt(r.busbw_gbps),
        )
    return table


def _from_controller(
    address: str, token: str, ca_file: Path | None, with_events: bool
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The whole decision log of a running controller (oldest first), and the events it
    keeps (none when its detector is off)."""
    import grpc

    from c4p.client import AdminClient, ApiError, ClientTls

    if ca_file is not None and not ca_file.is_file():
        raise C4pError(f"--ca-file: no such file: {ca_file}")
    tls = ClientTls(ca_file) if ca_file is not None else None
    client = AdminClient(address, token, tls=tls, timeout=30.0, wait_for_ready=False)
    try:
        decisions = list(client.decision_log())
        events: list[dict[str, Any]] = []
        if with_events:
            from google.protobuf.json_format import MessageToDict

            try:
                events = [
                    MessageToDict(e, preserving_proto_field_name=True) for e in client.events()
                ]
            except ApiError as exc:
                if exc.code is not grpc.StatusCode.UNAVAILABLE:
                    raise
        return decisions, events
    except ApiError as exc:
        raise C4pError(f"--controller {address}: {exc}") from None
    finally:
        client.close()
