"""``c4p jobs submit``: register every job of a jobs file with a running controller, submit its
intents and, with ``--wait``, wait until its QPs are bound.

Why a command: until it existed a user had to write Python against the client library to put a
jobs file in front of a controller (issue 30), and ``SubmitIntents`` answers when the intents
are *accepted*, not when they are bound: in the learned port mode the bindings follow once the
agents' probes have seen the planned paths, which can take seconds. ``--wait`` follows each
job's ``WatchBindings`` stream (the same stream a transport plugin reads) and says when every
QP is bound, and verified where an agent could probe it.

When a job counts as done: its stream has reached the submitted revision, it holds a binding
for every QP the controller derived from the intents (``SubmitIntentsResponse.flows``), and it
has no binding issue other than ``predicted`` (a host without an agent: nothing can verify
that port, which the issue says). A ``shadow`` or ``off`` job is done once planned (it gets no
bindings). ``FAILED`` is a finding at once; anything else still open at ``--timeout`` is a
finding too (exit 1), listed one line per job.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from c4p.cli.common import fail
from c4p.errors import C4pError

if TYPE_CHECKING:
    from c4p.api.v1 import intents_pb2 as pb
    from c4p.client import BindingWatch, ClientTls, FlowIntentClient, JobSession
    from solver.workload.jobs import CommunicatorSpec, JobsFile

REGISTER_TOKEN_ENV = "C4P_REGISTER_TOKEN"
POLL_S = 0.2


def register_token(token_file: Path | None) -> str | None:
    """The registration credential: ``--token-file``, else ``$C4P_REGISTER_TOKEN``, else none
    (a loopback controller without ``auth.registration`` needs none)."""
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise C4pError(f"--token-file {token_file}: {exc.strerror or exc}") from None
        if not text:
            raise C4pError(f"--token-file {token_file}: empty")
        return text
    return os.environ.get(REGISTER_TOKEN_ENV, "").strip() or None


def communicator_intent(spec: CommunicatorSpec) -> pb.CommunicatorIntent:
    """A jobs-file communicator as the API's intent (every field the file may set)."""
    from c4p.client import communicator, connection

    return communicator(
        spec.id,
        pattern=spec.pattern.value,
        collective=spec.collective.value,
        ranks=spec.ranks or (),
        ring=spec.ring.value,
        trees=spec.trees,
        rail_only=spec.rail_only,
        channels=spec.channels,
        qps_per_connection=spec.qps_per_connection,
        rate=spec.rate,
        connections=[
            connection(c.src_rank, c.dst_rank, qps=c.qps, rate=c.rate) for c in spec.connections
        ],
    )


@dataclass
class Submitted:
    """One job as submitted, and what its stream has shown since."""

    job_id: str
    session: JobSession
    revision: int
    flows: int
    watch: BindingWatch | None = None
    last: tuple[Any, ...] = ()
    outcome: str = ""
    done: bool = False
    finding: bool = False
    issues: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        m = self.watch.mirror if self.watch is not None else None
        bound = len(m.bindings) if m else 0
        verified = sum(b.verified for b in m.bindings.values()) if m else 0
        return {
            "job_id": self.job_id,
            "revision": self.revision,
            "flows": self.flows,
            "bound": bound,
            "verified": verified,
            "state": state_name(m.state) if m else "",
            "control_mode": m.control_mode if m else "",
            "issues": len(m.issues) if m else 0,
            "done": self.done,
            "outcome": self.outcome,
        }


def state_name(value: int) -> str:
    from c4p.api.v1 import intents_pb2 as pb

    return str(pb.IntentState.Name(value)).removeprefix("INTENT_STATE_").lower()


def judge(job: Submitted) -> None:
    """Set ``done``/``finding``/``outcome`` from what the job's stream shows now."""
    from c4p.api.v1 import intents_pb2 as pb

    m = job.watch.mirror if job.watch is not None else None
    if m is None or m.intent_revision < job.revision:
        return
    job.issues = [
        f"{pb.BindingIssue.Kind.Name(i.kind).removeprefix('KIND_').lower()}: {i.reason}"
        for i in m.issues
    ]
    if m.state == pb.INTENT_STATE_FAILED:
        job.done = job.finding = True
        job.outcome = "failed: " + (job.issues[0] if job.issues else "the plan failed")
        return
    if m.control_mode != "active":
        job.done = True
        job.outcome = f"{m.control_mode}: planned, no bindings pushed"
        return
    open_issues = [i for i in m.issues if i.kind != pb.BindingIssue.KIND_PREDICTED]
    if len(m.bindings) >= job.flows and not open_issues:
        job.done = True
        verified = sum(b.verified for b in m.bindings.values())
        unseen = len(m.bindings) - verified
        job.outcome = f"{state_name(m.state)}: {len(m.bindings)} QPs bound, {verified} verified"
        if unseen:
            job.outcome += f" ({unseen} not seen by probes)"


def submit_jobs(
    client: FlowIntentClient, jobs: JobsFile, tenant: str, out: Console
) -> list[Submitted]:
    """Register each job and submit its intents (in file order)."""
    found: list[Submitted] = []
    for spec in jobs.jobs:
        session = client.register_job(
            spec.id,
            hosts=spec.hosts or (),
            ranks=[(r.rank, r.host, r.nic) for r in spec.ranks or ()],
            tenant=tenant,
            priority=spec.priority,
        )
        reply = session.submit([communicator_intent(c) for c in spec.communicators])
        found.append(Submitted(spec.id, session, int(reply.revision), int(reply.flows)))
        out.print(
            f"{spec.id}: registered, {len(spec.communicators)} communicator(s) submitted at "
            f"revision {reply.revision}, {reply.flows} QPs",
            highlight=False,
        )
    return found


def wait_bound(jobs: list[Submitted], timeout: float, out: Console) -> None:
    """Follow every job's stream until each is done or ``timeout`` passes (bounded polling);
    prints a progress line whenever a job's figures change."""
    for job in jobs:
        job.watch = job.session.watch()
    deadline = time.monotonic() + timeout
    try:
        while True:
            for job in jobs:
                if job.done:
                    continue
                judge(job)
                f = job.figures()
                now = (f["bound"], f["verified"], f["state"], f["issues"], job.done)
                if now != job.last:
                    job.last = now
                    out.print(
                        f"{job.job_id}: {f['bound']}/{job.flows} QPs bound, {f['verified']} "
                        f"verified, state {f['state'] or 'waiting'}, {f['issues']} issues",
                        highlight=False,
                    )
            if all(j.done for j in jobs) or time.monotonic() >= deadline:
                return
            time.sleep(POLL_S)
    finally:
        for job in jobs:
            if job.watch is not None:
                job.watch.stop()


def write_tokens(path: Path, jobs: list[Submitted]) -> None:
    """Each job's token (``ReleaseJob`` and ``WatchBindings`` need it), owner-only."""
    data = {j.job_id: j.session.token for j in jobs}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=2)
        out.write("\n")


def run(
    address: str,
    jobs: JobsFile,
    tls: ClientTls | None,
    token: str | None,
    tenant: str,
    wait: bool,
    timeout: float,
    tokens: Path | None,
    out: Console,
) -> tuple[list[Submitted], int]:
    """Submit and (with ``wait``) wait; returns the jobs and the exit code (0, or 1: a finding
    or the timeout). A refusal is one line and exit 2, an unreachable controller exit 1."""
    import grpc

    from c4p.client import ApiError, FlowIntentClient

    client = FlowIntentClient(
        address, tls=tls, register_token=token, timeout=30.0, wait_for_ready=False
    )
    try:
        submitted = submit_jobs(client, jobs, tenant, out)
        if tokens is not None:
            write_tokens(tokens, submitted)
        if not wait:
            return submitted, 0
        wait_bound(submitted, timeout, out)
    except ApiError as exc:
        if exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            err = Console(stderr=True)
            err.print(f"[bold red]error:[/] {address}: {exc.details}", highlight=False)
            raise typer.Exit(code=1) from None
        fail(f"{address}: {exc}")
    finally:
        client.close()
    code = 0
    for job in submitted:
        if job.done and not job.finding:
            out.print(f"{job.job_id}: done, {job.outcome}", highlight=False)
            continue
        code = 1
        why = job.outcome or "; ".join(job.issues[:3]) or "not bound yet"
        verdict = "finding" if job.finding else f"not done after {timeout:g} s"
        out.print(f"[bold red]{job.job_id}:[/] {verdict}: {why}", highlight=False)
    return submitted, code
