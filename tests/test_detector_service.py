"""The detector inside a real controller over loopback gRPC: telemetry handed to the sink of a
running service, events on ``WatchEvents``, a suspect link drained through the same damped
drain as an operator's (active), only recorded (shadow), ignored (off); a webhook on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from service_cases import ADMIN_TOKEN, busy_fabric, clients, hosts, serving, wait_until
from typer.testing import CliRunner

from c4p.cli import app
from c4p.client import communicator
from c4p.detector.findings import ElementKind, Finding, FindingClass
from c4p.detector.respond import Action
from c4p.detector.summary import (
    ConnectionKey,
    ConnectionStep,
    RankStep,
    StepSummary,
    TelemetryReport,
)
from c4p.service.embedded import EmbeddedService
from c4p.store.base import HeldBinding

FABRIC = busy_fabric()
runner = CliRunner()
HOSTS = hosts(FABRIC)


def _inner_links(path: tuple[str, ...]) -> list[str]:
    """Switch-to-switch links of a path, as link ids."""
    index = FABRIC.index
    out = []
    for u, v in zip(path, path[1:], strict=False):
        a, b = index.node_of[u], index.node_of[v]
        if index.is_switch(a) and index.is_switch(b):
            out.append(FABRIC.links[index.resource_between[(a, b)] // 2].id)
    return out


def _suspect(held: list[HeldBinding]) -> str:
    """A link whose set of QPs no other link has (so tomography can tell it apart)."""
    crossing: dict[str, frozenset[int]] = {}
    for i, h in enumerate(held):
        for link in _inner_links(h.binding.path):
            crossing[link] = crossing.get(link, frozenset()) | {i}
    counts: dict[frozenset[int], int] = {}
    for qps in crossing.values():
        counts[qps] = counts.get(qps, 0) + 1
    unique = [link for link, qps in sorted(crossing.items()) if counts[qps] == 1 and len(qps) > 1]
    assert unique, "no link tomography can single out in this plan"
    return unique[0]


def _reports(
    job_id: str, held: list[HeldBinding], slow: str, steps: int
) -> Iterator[TelemetryReport]:
    """Steps in which the QPs crossing ``slow`` move at 40% of the others' rate."""
    host_of_rank: dict[int, str] = {}
    for h in held:
        host_of_rank[h.src_rank] = h.binding.src.split(":")[0]
        host_of_rank[h.dst_rank] = h.binding.dst.split(":")[0]
    for step in range(steps):
        by_host: dict[str, list[ConnectionStep]] = {}
        for h in held:
            key = ConnectionKey(
                h.binding.communicator, h.src_rank, h.dst_rank, h.channel, h.binding.qp
            )
            busy = (
                2500
                if slow in _inner_links(h.binding.path)
                else 1000 + 10 * (h.binding.qp + step % 3)
            )
            by_host.setdefault(host_of_rank[h.src_rank], []).append(
                ConnectionStep(key, 12_500, busy, 1)
            )
        summaries = []
        for host in sorted(set(host_of_rank.values())):
            ranks = tuple(
                RankStep(r, 1_000_000, 200_000)
                for r, h in sorted(host_of_rank.items())
                if h == host
            )
            summaries.append(StepSummary(job_id, host, "dp", step, 1, "allreduce", 1 << 20, ranks,
                                         tuple(by_host.get(host, ()))))  # fmt: skip
        yield TelemetryReport("test", steps=tuple(summaries))


class _Hook(BaseHTTPRequestHandler):
    got: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.got.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _webhook() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/c4p"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _run_job(
    service: EmbeddedService, flow: Any, job_id: str, mode: str
) -> tuple[str, list[HeldBinding]]:
    job = flow.register_job(job_id, hosts=HOSTS[:8], control_mode=mode)
    watch = job.watch()
    reply = job.submit([communicator("dp", qps_per_connection=2)])
    assert watch.wait_revision(reply.revision, 30)
    watch.stop()
    assert service.runtime is not None
    state = service.runtime.state
    with state.lock:
        held = list((state.held.get(job_id) or state.shadow.get(job_id) or {}).values())
    assert len(held) >= 16
    slow = _suspect(held)
    detection = service.runtime.detection
    assert detection is not None
    _steps_apart(detection, 0.5)
    for report in _reports(job_id, held, slow, steps=6):
        detection.accept(report)
    return slow, held


def _steps_apart(detection: Any, seconds: float) -> None:
    """The detection service's clock advanced ``seconds`` per report: the steps fed here come
    at the pace of a real job's, so a slowdown lasts ``persist_s`` (1 s) within 6 steps."""
    import time

    start = time.time()
    calls = [0]

    def clock() -> float:
        calls[0] += 1
        return start + calls[0] * seconds

    detection.clock = clock


def test_active_drains_the_suspect_link_and_says_why(tmp_path: Path) -> None:
    _Hook.got = []
    with (
        _webhook() as url,
        serving(FABRIC, tmp_path, detector={"webhook_url": url, "stats_s": 0.001}) as service,
        clients(service.address) as (flow, admin),
    ):
        slow, _ = _run_job(service, flow, "a1", "active")
        events = list(admin.events())
        findings = [e for e in events if e.kind == "finding"]
        assert [(e.finding_class, e.element_kind, e.element) for e in findings] == [
            ("comm-slowdown", "link", slow)
        ]
        e = findings[0]
        assert (e.mode, e.action, e.acted) == ("active", "drain", True)
        assert e.confidence >= 0.5 and e.evidence and e.first_step < e.step
        links = {link.id: link for link in admin.fabric(only_changed=True).links}
        assert links[slow].drained
        assert links[slow].drain_reason.startswith(f"c4p detector event {e.sequence}:")
        assert wait_until(
            lambda: any(f"detector event {e.sequence}" in d.reason for d in admin.decisions(20))
        )
        assert wait_until(lambda: len(_Hook.got) == 1, timeout=10)
        assert _Hook.got[0]["finding"]["element"] == slow and _Hook.got[0]["acted"]
        # reversible: the operator's restore undoes it like any drain
        assert admin.restore(slow, wait=False).changed
        # a follower resumes after the last number it saw: nothing new
        assert list(admin.events(after=events[-1].sequence)) == []
        # c4p report: the detections, the collective wait and busbw from the stats events
        env = {"C4P_ADMIN_TOKEN": ADMIN_TOKEN}
        out = runner.invoke(
            app, ["report", "--controller", service.address, "--json", "-"], env=env
        )
        assert out.exit_code == 0, out.output
        rows = json.loads(out.output)["detections"]
        assert sum(r["detections"].get("comm-slowdown", 0) for r in rows) == 1
        assert all(r["false_positives"] is None for r in rows)  # a live controller cannot know
        stats = [r for r in rows if r["steps"]]
        assert stats and all(r["wait_s"] > 0 and r["busbw_gbps"] > 0 for r in stats)


def test_shadow_records_what_it_would_do_and_off_ignores(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        slow, held = _run_job(service, flow, "s1", "shadow")
        (e,) = [e for e in admin.events(job_id="s1") if e.kind == "finding"]
        assert (e.element, e.mode, e.action, e.acted) == (slow, "shadow", "drain", False)
        assert e.detail.startswith("would drain")
        assert not any(link.drained for link in admin.fabric(only_changed=True).links)
        # an off job is not even planned: feed it the shadow job's syndrome under its own id
        flow.register_job("o1", hosts=HOSTS[8:], control_mode="off")
        assert service.runtime is not None
        detection = service.runtime.detection
        assert detection is not None
        _steps_apart(detection, 0.5)
        for report in _reports("o1", held, slow, steps=6):
            detection.accept(report)
        assert [e for e in admin.events(job_id="o1")] == []
        # the operator's view: c4p admin events, as a table and as JSON
        env = {"C4P_ADMIN_TOKEN": ADMIN_TOKEN}
        args = ["admin", "events", "s1", "--address", service.address]
        shown = runner.invoke(app, args, env=env)
        assert shown.exit_code == 0, shown.output
        assert "would drain" in shown.output and "comm-slowdown" in shown.output
        as_json = runner.invoke(app, [*args, "--json", "-"], env=env)
        assert as_json.exit_code == 0, as_json.output
        (only,) = [e for e in json.loads(as_json.output)["events"] if e["kind"] == "finding"]
        assert (only["element"], only["mode"], only.get("acted", False)) == (slow, "shadow", False)


def test_a_suspect_host_link_is_reported_for_the_scheduler_never_drained(tmp_path: Path) -> None:
    """Draining a host's link can leave its ranks without a path (the job unplannable): the
    detector reports it, naming the host's NIC port, and drains nothing; a switch link under
    the same finding is drained (the control)."""
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        flow.register_job("h1", hosts=HOSTS[:8], control_mode="active")
        assert service.runtime is not None and service.runtime.detection is not None
        detection = service.runtime.detection
        hosts = {h.name for h in FABRIC.hosts}
        host_link = next(link for link in FABRIC.links if link.a.split(":")[0] in hosts)
        nic = host_link.a

        def finding(element: str) -> Finding:
            return Finding("h1", FindingClass.COMM_SLOWDOWN, ElementKind.LINK, element, 1.0,
                           "dp", 5, 2, evidence=("step 5: 4 of 64 connections slow",))  # fmt: skip

        event = detection._respond(finding(host_link.id), 1.0)
        assert event is not None
        assert (event.action, event.acted) == (Action.REPORT, True)
        host, port = nic.split(":")
        assert f"host {host}, NIC port {port}" in event.detail, event.detail
        assert "never drained" in event.detail
        assert event.finding is not None and event.finding.host == host
        assert not any(link.drained for link in admin.fabric(only_changed=True).links)
        inner = next(link for link in FABRIC.links
                     if not {link.a.split(":")[0], link.b.split(":")[0]} & hosts)  # fmt: skip
        control = detection._respond(finding(inner.id), 2.0)
        assert control is not None and (control.action, control.acted) == (Action.DRAIN, True)
        assert [link.id for link in admin.fabric(only_changed=True).links if link.drained] == [
            inner.id
        ]


def test_following_the_stream_sees_new_events(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        seen: list[Any] = []
        follower = threading.Thread(
            target=lambda: seen.extend(admin.events(follow=True, timeout=8)), daemon=True
        )
        follower.start()
        _run_job(service, flow, "f1", "shadow")
        assert wait_until(lambda: any(e.kind == "finding" for e in seen), timeout=20)
        follower.join(12)


def test_the_webhook_gives_up_after_its_retries() -> None:
    import socket

    from c4p.detector.respond import Event, EventKind
    from c4p.service.detection import Webhook

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hook = Webhook(f"http://127.0.0.1:{port}/", retries=2, timeout_s=0.5)
    hook.post(Event(1, 0.0, EventKind.FINDING, "j", acted=True))
    hook.close()
    assert (hook.sent, hook.failed, hook.dropped) == (0, 1, 0)
