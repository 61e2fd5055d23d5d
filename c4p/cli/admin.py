"""``c4p admin``: the operator's view of a running controller, so nobody needs grpcurl.

Why a command group over the AdminService and not over the store: the controller is the one
writer of its state (a second reader of the SQLite file could see a half-applied step, and etcd
may hold it elsewhere); the API answers what the controller itself believes, with the same
credentials and TLS as any other client.

Every command takes the controller's address (``--address``, or ``C4P_ADDRESS``), the admin
credential from ``C4P_ADMIN_TOKEN`` or ``--token-file`` (never from the command line, where
``ps`` would show it), and the TLS options ``c4p serve`` is configured with: ``--ca-file`` for
the server's CA, ``--cert-file``/``--key-file`` for mTLS. Output is a table, or JSON with
``--json FILE`` (``-``: standard output only). A refusal from the controller (bad link name,
wrong credential) is one line and exit 2; a controller that cannot be reached is exit 1.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer
from rich.table import Table

from c4p.cli.common import JsonOption, console, emit, fail, guarded
from c4p.cli.tables import WideOption, fitted
from c4p.errors import C4pError

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from c4p.client import AdminClient, ClientTls

admin_app = typer.Typer(
    help="Operate a running controller: jobs, plan, decisions, drain, restore, replan, watch.",
    no_args_is_help=True,
)

TOKEN_ENV = "C4P_ADMIN_TOKEN"

Address = Annotated[
    str,
    typer.Option(envvar="C4P_ADDRESS", help="The controller's host:port."),
]
TokenFile = Annotated[
    Path | None,
    typer.Option(help=f"File holding the admin credential (default: ${TOKEN_ENV})."),
]
CaFile = Annotated[Path | None, typer.Option(help="CA of the controller's certificate (TLS).")]
CertFile = Annotated[Path | None, typer.Option(help="Our client certificate (mTLS).")]
KeyFile = Annotated[Path | None, typer.Option(help="Our client key (mTLS).")]
ServerName = Annotated[
    str | None, typer.Option(help="Name in the server's certificate, if not the host dialled.")
]


def admin_token(token_file: Path | None) -> str:
    """The admin credential: ``--token-file``, else ``$C4P_ADMIN_TOKEN``."""
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise C4pError(f"--token-file {token_file}: {exc.strerror or exc}") from None
    else:
        text = os.environ.get(TOKEN_ENV, "").strip()
    if not text:
        raise C4pError(
            f"no admin credential: set {TOKEN_ENV} (the value the controller's auth.admin "
            "names) or give --token-file"
        )
    return text


def client_tls(
    ca_file: Path | None, cert_file: Path | None, key_file: Path | None, server_name: str | None
) -> ClientTls | None:
    """The TLS options every command that dials the controller takes (``None``: plaintext);
    an incomplete set is one line and exit 2."""
    from c4p.client import ClientTls

    if (cert_file is None) != (key_file is None):
        fail("--cert-file and --key-file go together (mTLS)")
    if cert_file is not None and ca_file is None:
        fail("mTLS needs --ca-file too")
    if ca_file is None:
        return None
    return ClientTls(ca_file, cert_file, key_file, server_name)


@contextmanager
def connected(
    address: str,
    token_file: Path | None,
    ca_file: Path | None,
    cert_file: Path | None,
    key_file: Path | None,
    server_name: str | None,
) -> Iterator[AdminClient]:
    """An admin client; refusals become one line and exit 2, an unreachable controller 1."""
    import grpc

    from c4p.client import AdminClient, ApiError

    tls = client_tls(ca_file, cert_file, key_file, server_name)
    token = guarded(lambda: admin_token(token_file))
    client = AdminClient(address, token, tls=tls, timeout=30.0, wait_for_ready=False)
    try:
        yield client
    except ApiError as exc:
        if exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            console.print(f"[bold red]error:[/] {address}: {exc.details}", highlight=False)
            raise typer.Exit(code=1) from None
        fail(f"{address}: {exc}")
    except C4pError as exc:
        fail(str(exc))
    finally:
        client.close()


CONNECTION = tuple(
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
    for name, kind, default in (
        ("address", Address, "127.0.0.1:50051"),
        ("token_file", TokenFile, None),
        ("ca_file", CaFile, None),
        ("cert_file", CertFile, None),
        ("key_file", KeyFile, None),
        ("server_name", ServerName, None),
    )
)
"""The options every ``c4p admin`` command dials the controller with, in the order its help
lists them (where the command's ``client`` parameter stands)."""


def dialling(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` as typer sees it: its ``client`` parameter replaced by the connection
    options (:data:`CONNECTION`), and called with a client :func:`connected` by them.

    Why: the eight commands took the same six options and opened the same connection, each
    spelling them out; the options a user sees (names, help, order, defaults) stay as they
    were, written once."""
    hints = get_type_hints(command, localns={"AdminClient": Any}, include_extras=True)
    shown: list[inspect.Parameter] = []
    for parameter in inspect.signature(command).parameters.values():
        if parameter.name == "client":
            shown += CONNECTION
        else:
            shown.append(parameter.replace(annotation=hints[parameter.name]))

    @functools.wraps(command)
    def dialled(**options: Any) -> None:
        dial = {p.name: options.pop(p.name) for p in CONNECTION}
        with connected(**dial) as client:
            command(client=client, **options)

    dialled.__signature__ = inspect.Signature(shown, return_annotation=None)  # type: ignore[attr-defined]
    dialled.__annotations__ = {p.name: p.annotation for p in shown}
    return dialled


def as_dict(message: Message) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    data: dict[str, Any] = MessageToDict(message, preserving_proto_field_name=True)
    return data


def _state(value: int) -> str:
    from c4p.api.v1 import intents_pb2 as pb

    return str(pb.IntentState.Name(value)).removeprefix("INTENT_STATE_").lower()


def job_state_text(job: Any) -> str:
    """A job's state as ``c4p admin jobs`` prints it: ``installed (predicted)`` when the
    operator chose the hash model's word, so an installed job never hides how it got there."""
    text = _state(job.state)
    if job.predicted and text == "installed":
        return f"{text} (predicted)"
    return text


def _decision_row(d: Any) -> list[str]:
    from c4p.api.v1 import intents_pb2 as pb

    result = str(pb.Decision.Result.Name(d.result)).removeprefix("RESULT_").lower()
    return [
        str(d.sequence),
        str(d.epoch),
        d.at.ToDatetime().strftime("%H:%M:%S"),
        result,
        d.reason,
        str(d.flows),
        str(d.moved),
        f"{d.max_utilization:.2f}",
        str(d.bindings_added + d.bindings_changed),
        d.error,
    ]


def _table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


@admin_app.command("jobs")
@dialling
def admin_jobs(
    job: Annotated[str, typer.Argument(help="Only this job.")] = "",
    *,
    client: AdminClient,
    json_path: JsonOption = None,
) -> None:
    """Every job (or one): state, flows, bindings, revisions, predicted bus bandwidth."""
    reply = client.jobs(job)
    rows = [
        [
            j.job_id,
            j.tenant,
            job_state_text(j),
            str(j.ranks),
            str(j.flows),
            str(j.bound),
            f"{j.verified}/{j.verified + j.unverified}",
            str(j.issues),
            f"{j.planned_revision}/{j.intent_revision}",
            f"{j.prediction.busbw_fraction:.0%}" if j.HasField("prediction") else "",
        ]
        for j in reply.jobs
    ]
    columns = ["job", "tenant", "state", "ranks", "flows", "bound", "verified", "issues",
               "planned/rev", "busbw"]  # fmt: skip
    emit(
        json_path,
        as_dict(reply),
        lambda: console.print(_table(f"jobs at epoch {reply.epoch}", columns, rows)),
    )


@admin_app.command("plan")
@dialling
def admin_plan(
    *,
    client: AdminClient,
    json_path: JsonOption = None,
) -> None:
    """The plan in force: its decision, bounds and hottest links."""

    p = client.plan()
    d = p.decision

    def render() -> None:
        console.print(f"epoch {p.epoch}: {d.reason or 'no plan yet'}")
        console.print(
            f"flows {d.flows}, max utilization {d.max_utilization:.2f} "
            f"(bound {d.bound:.2f}, gap {d.gap:.1%}), unreachable {p.unreachable}"
        )
        for link in p.hottest_links:
            console.print(f"  {link}")

    emit(json_path, as_dict(p), render)


@admin_app.command("decisions")
@dialling
def admin_decisions(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first.")] = 20,
    before: Annotated[int, typer.Option(min=0, help="Only those before this sequence.")] = 0,
    *,
    client: AdminClient,
    json_path: JsonOption = None,
    wide: WideOption = False,
) -> None:
    """The decision log: why each plan was made and what it changed."""
    found = client.decisions(limit, before)
    columns = ["seq", "epoch", "at", "result", "reason", "flows", "moved", "max util",
               "rewrites", "error"]  # fmt: skip
    rows = [_decision_row(d) for d in found]
    emit(
        json_path,
        {"decisions": [as_dict(d) for d in found]},
        lambda: fitted(console, "decisions", columns, rows, wide=wide),
    )


@admin_app.command("drain")
@dialling
def admin_drain(
    link: Annotated[str, typer.Argument(help="'a--b', or one end 'device:interface'.")],
    reason: Annotated[str, typer.Option(help="Why (kept with the drain; shown to everyone).")],
    wait: Annotated[bool, typer.Option(help="Answer once a plan without it is in force.")] = True,
    *,
    client: AdminClient,
    json_path: JsonOption = None,
) -> None:
    """Take a link out of every plan (operator override, kept across restarts)."""

    reply = client.drain(link, reason, wait=wait)
    text = f"{reply.link_id}: {reply.effective}" + ("" if reply.changed else " (already)")
    emit(json_path, as_dict(reply), lambda: console.print(text, highlight=False))


@admin_app.command("restore")
@dialling
def admin_restore(
    link: Annotated[str, typer.Argument(help="'a--b', or one end 'device:interface'.")],
    wait: Annotated[bool, typer.Option(help="Answer once the next plan is in force.")] = True,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also end its hold-down or flap suppression now (logged in the decisions).",
        ),
    ] = False,
    *,
    client: AdminClient,
    json_path: JsonOption = None,
) -> None:
    """Give a drained link back (in use after the hold-down, like any returning link; a link
    that flapped is held longer: ``--force`` ends the hold)."""
    reply = client.restore(link, wait=wait, force=force)
    text = f"{reply.link_id}: {reply.effective}" + ("" if reply.changed else " (already)")
    emit(json_path, as_dict(reply), lambda: console.print(text, highlight=False))


@admin_app.command("replan")
@dialling
def admin_replan(
    reason: Annotated[str, typer.Option(help="Why (in the decision log).")] = "operator",
    wait: Annotated[bool, typer.Option(help="Answer with the decision it made.")] = True,
    *,
    client: AdminClient,
    json_path: JsonOption = None,
) -> None:
    """Plan again now, even if nothing changed."""

    reply = client.replan(reason, wait=wait)
    d = reply.decision
    text = f"epoch {d.epoch}: {d.reason}, moved {d.moved}" if reply.HasField("decision") else (
        "asked"
    )  # fmt: skip
    emit(json_path, as_dict(reply), lambda: console.print(text, highlight=False))


@admin_app.command("watch")
@dialling
def admin_watch(
    job: Annotated[str, typer.Argument(help="The job to follow.")],
    interval: Annotated[
        float, typer.Option(min=0.1, max=3600, help="Seconds between looks.")
    ] = 1.0,
    seconds: Annotated[
        float, typer.Option("--for", min=0, help="Stop after this long (0: until Ctrl-C).")
    ] = 0.0,
    *,
    client: AdminClient,
    json_path: JsonOption = None,
) -> None:
    """Print a job's state each time it changes (state, revisions, bindings, epoch)."""
    end = time.monotonic() + seconds if seconds else None
    last: tuple[Any, ...] | None = None
    seen: list[dict[str, Any]] = []
    try:
        while end is None or time.monotonic() < end:
            reply = client.jobs(job)
            if not reply.jobs:
                raise C4pError(f"job {job!r} is not registered")
            j = reply.jobs[0]
            now = (_state(j.state), j.intent_revision, j.planned_revision, j.bound,
                   j.issues, j.last_change_epoch)  # fmt: skip
            if now != last:
                last = now
                seen.append(as_dict(j))
                if json_path is None or str(json_path) != "-":
                    console.print(
                        f"{time.strftime('%H:%M:%S')} {job}: {now[0]}, revision "
                        f"{now[2]}/{now[1]}, {now[3]} bound, {now[4]} issues, "
                        f"epoch {now[5]}",
                        highlight=False,
                    )
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    if json_path is not None:
        emit(json_path, {"changes": seen}, lambda: None)


@admin_app.command("events")
@dialling
def admin_events(
    job: Annotated[str, typer.Argument(help="Only this job's events.")] = "",
    after: Annotated[int, typer.Option(min=0, help="Only events after this number.")] = 0,
    follow: Annotated[bool, typer.Option(help="Keep printing new events.")] = False,
    seconds: Annotated[
        float, typer.Option("--for", min=0, help="With --follow: stop after this long (0: never).")
    ] = 0.0,
    *,
    client: AdminClient,
    json_path: JsonOption = None,
) -> None:
    """The detector's events: findings (class, element, confidence, evidence), the action
    taken or, in shadow mode, the one that would be; per-job stats."""
    seen: list[dict[str, Any]] = []
    quiet = json_path is not None and str(json_path) == "-"
    try:
        for e in client.events(after, follow, job, timeout=seconds or None):
            seen.append(as_dict(e))
            if not quiet:
                console.print(_event_line(e), highlight=False)
    except KeyboardInterrupt:
        pass
    if json_path is not None:
        emit(json_path, {"events": seen}, lambda: None)


def _event_line(e: Any) -> str:
    when = e.at.ToDatetime().strftime("%H:%M:%S")
    if e.kind == "stats":
        return (f"#{e.sequence} {when} {e.job_id} [{e.mode}] stats: {e.steps} steps, wait "
                f"{e.wait_s:.1f} s, busbw {e.busbw_gbps:.1f} Gbit/s")  # fmt: skip
    text = (f"#{e.sequence} {when} {e.job_id} [{e.mode}] {e.kind} {e.finding_class} "
            f"{e.element_kind} {e.element} ({e.confidence:.2f}): {e.detail}")  # fmt: skip
    if e.candidates:
        text += "; candidates " + ", ".join(c.element for c in e.candidates)
    return text + "".join(f"\n    {line}" for line in e.evidence)
