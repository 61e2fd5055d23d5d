"""``c4p report``: the rollout report (per interval and control mode) from a decision log.

Why two sources: an operator asks a running controller (``--controller``, through the admin
API's ``GetDecisionLog``); a post-mortem, or a controller that is down, reads the store file
(``--store``, opened read-only, safe beside a running controller). Both feed the same
computation (:mod:`c4p.rollout`), so they print the same table. gRPC is imported inside the
command so the offline commands stay fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from c4p.cli.common import JsonOption, console, emit, fail, guarded
from c4p.errors import C4pError

if TYPE_CHECKING:
    from c4p.rollout import RolloutReport


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def render(report: RolloutReport) -> Table:
    """The interval table as printed (also used by the rollout demo)."""
    table = Table(
        title=f"rollout report: {report.decisions} plans, intervals of {report.interval_s:g} s",
        title_justify="left",
    )
    for name in (
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
    ):
        table.add_column(name, justify="left" if name in ("mode",) else "right")
    origin = report.rows[0].start if report.rows else 0.0
    for r in report.rows:
        gain = r.gain
        table.add_row(
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
        )
    return table


def report_cmd(
    controller: Annotated[
        str | None, typer.Option(help="Ask this controller (host:port) through the admin API.")
    ] = None,
    store: Annotated[
        Path | None, typer.Option(help="Read this store file (SQLite) instead, read-only.")
    ] = None,
    token_env: Annotated[
        str, typer.Option(help="Environment variable holding the admin token (--controller).")
    ] = "C4P_ADMIN_TOKEN",
    ca_file: Annotated[
        Path | None, typer.Option(help="CA of the controller's certificate (TLS); else plaintext.")
    ] = None,
    interval: Annotated[float, typer.Option(help="Interval length in seconds.")] = 60.0,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", help="Write a plot over time here (PNG).")
    ] = None,
    json_path: JsonOption = None,
) -> None:
    """Per interval and control mode: jobs, predicted busbw under ECMP and c4p, re-plans,
    moves, failures handled (from the decision log)."""
    if (controller is None) == (store is None):
        fail("give exactly one of --controller HOST:PORT or --store FILE")
    if not interval > 0:
        fail(f"--interval: must be > 0 seconds, got {interval}")
    if plot_path is not None and plot_path.suffix.lower() != ".png":
        fail(f"--plot {plot_path}: the plot is written as PNG; name it *.png")

    def body() -> None:
        from c4p import rollout

        if store is not None:
            from c4p.store.base import StoreError
            from c4p.store.sqlite import read_decisions

            try:
                decisions = read_decisions(store)
            except StoreError as exc:
                raise C4pError(str(exc)) from None
        else:
            found = _from_controller(controller or "", token_env, ca_file)
            decisions = [rollout.from_pb(d) for d in found]
        report = rollout.rollout(decisions, interval)
        if plot_path is not None:
            rollout.plot(report, plot_path)

        def show() -> None:
            console.print(render(report))
            if plot_path is not None:
                console.print(f"wrote {plot_path}")

        emit(json_path, report.model_dump(mode="json"), show)

    guarded(body)


def _from_controller(address: str, token_env: str, ca_file: Path | None) -> list[Any]:
    """The whole decision log of a running controller (oldest first)."""
    from c4p.client import AdminClient, ApiError, ClientTls

    token = os.environ.get(token_env, "")
    if not token:
        raise C4pError(f"--token-env: environment variable {token_env!r} is not set")
    if ca_file is not None and not ca_file.is_file():
        raise C4pError(f"--ca-file: no such file: {ca_file}")
    tls = ClientTls(ca_file) if ca_file is not None else None
    client = AdminClient(address, token, tls=tls, timeout=30.0, wait_for_ready=False)
    try:
        return list(client.decision_log())
    except ApiError as exc:
        raise C4pError(f"--controller {address}: {exc}") from None
    finally:
        client.close()
