"""libc4p end to end: a real ``c4p serve``, a real agent process on a Unix socket, and ranks
that are C programs linking the library (under valgrind: no invalid access, no leak).

What is checked against something we did not write: the kernel's credentials of a Unix socket
peer (``SO_PEERCRED``, uids switched with util-linux ``setpriv``), the kernel's file permission
check on ``connect``, glibc's dynamic loader (SONAME, exported symbols) and valgrind's memcheck.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from contextlib import suppress
from pathlib import Path

import pytest
from libc4p_cases import (
    BUILD,
    Key,
    Rank,
    Unreachable,
    agent,
    agent_config,
    as_user,
    build_libc4p,
    controller,
    controller_config,
    free_port,
    interpreter_for,
    key_of,
    kill,
    ranks,
    staged_for,
)
from service_cases import ADMIN_TOKEN, busy_fabric, hosts, wait_until

from c4p.agent import wire
from c4p.agent.static import HostFile, StaticBinding
from c4p.agent.wire import BindingSet, Kind, LocalBinding, QpKey
from c4p.client import AdminClient, FlowIntentClient, communicator
from c4p.client.mirror import AppliedBinding
from topology.roce import rdma_flow_label_to_udp_sport

FABRIC = busy_fabric()
HOSTS = hosts(FABRIC)


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    reason = build_libc4p()
    if reason is not None:
        pytest.skip(reason)


def _mine(bindings: dict[object, AppliedBinding], host: str) -> dict[Key, tuple[int, int]]:
    return {
        key_of(b): (b.udp_sport, b.flow_label)
        for b in bindings.values()
        if b.src_port.split(":")[0] == host
    }


def _static_file(path: Path, job: str, host: str, ports: dict[Key, tuple[int, int]]) -> Path:
    rows = tuple(sorted(StaticBinding(*k, *v) for k, v in ports.items()))
    path.write_text(HostFile(FABRIC.name, job, host, 1, rows).render())
    return path


def test_library_exports_only_its_api_and_needs_only_libc() -> None:
    lib = BUILD / "libc4p.so.1.0.0"
    dynamic = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert "[libc4p.so.1]" in dynamic  # SONAME
    needed = [line for line in dynamic.splitlines() if "NEEDED" in line]
    assert needed and all("libc.so" in line for line in needed), needed
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True
    ).stdout
    exported = {line.split()[-1] for line in symbols.splitlines() if " T " in line}
    header = (BUILD.parent / "include" / "c4p.h").read_text()
    assert exported and all(name.startswith("c4p_") and name in header for name in exported)
    assert (BUILD / "libc4p.a").exists()


def test_ranks_get_follow_and_keep_every_binding(tmp_path: Path) -> None:
    host, peer = HOSTS[0], HOSTS[8]  # different leaves: every QP crosses a spine
    ctl_config, address = controller_config(FABRIC, tmp_path / "controller")
    agent_cfg, sock = agent_config(tmp_path / "agent", host, address)
    with controller(ctl_config) as ctl, FlowIntentClient(address) as flow:
        job = flow.register_job("train", hosts=[host, peer])
        reply = job.submit([communicator("dp", qps_per_connection=2, channels=2)])
        watch = job.watch()
        try:
            assert watch.wait_revision(reply.revision, 30)
            everything = watch.mirror.snapshot()
            mine = _mine(everything, host)
            theirs = {key_of(b) for b in everything.values()} - set(mine)
            assert mine and theirs
            for sport, label in mine.values():
                assert rdma_flow_label_to_udp_sport(label) == sport
            session = ("--socket", str(sock), "--job", "train", "--token", job.token)
            with (
                agent(agent_cfg) as first_agent,
                ranks(Rank(*session), Rank(*session)) as (r0, r1),
            ):
                assert r0.open_code == 0 and r1.open_code == 0
                assert sock.stat().st_mode & 0o777 == 0o660  # the default mode
                for r in (r0, r1):  # every binding of this host, at once
                    assert {k: r.lookup(k) for k in mine} == mine
                    assert all(r.lookup(k) is None for k in theirs)  # other host's QPs
                # -- a drain moves some of this host's QPs: exactly those are called back
                before = dict(mine)
                link = _a_spine_link_of(everything, host)
                admin = AdminClient(address, ADMIN_TOKEN)
                try:
                    admin.drain(link, "test", wait=True)
                finally:
                    admin.close()
                assert watch.wait(lambda m: _mine(m.bindings, host) != before, 30)
                after = _mine(watch.mirror.snapshot(), host)
                moved = {k: v for k, v in after.items() if before.get(k) != v}
                assert moved
                for r in (r0, r1):
                    assert wait_until(lambda r=r: len(r.replanned()) >= len(moved), 30)
                    got = {k: (s, lbl) for k, s, lbl in r.replanned()}
                    assert got == moved  # exactly the affected QPs, with their new ports
                    assert {k: r.lookup(k) for k in after} == after
                # -- the agent dies: the ranks keep every port; it comes back: no change
                kill(first_agent)
                assert wait_until(lambda: r0.status()[2] == 0, 10)
                assert {k: r0.lookup(k) for k in after} == after
                with agent(agent_cfg):
                    assert wait_until(lambda: r0.status()[2] == 1, 30)  # reconnected
                    assert {k: r0.lookup(k) for k in after} == after
                    assert len(r0.replanned()) == len(moved)  # nothing called back again
                    # -- the controller dies: a new rank is still served from the agent
                    kill(ctl)
                    with ranks(Rank(*session)) as (late,):
                        assert {k: late.lookup(k) for k in after} == after
                # -- agent restart while the controller is away: served from its disk
                with agent(agent_cfg), ranks(Rank(*session)) as (fresh,):
                    assert fresh.open_code == 0
                    assert {k: fresh.lookup(k) for k in after} == after
                    # -- static mode, same ports as the agent
                    path = _static_file(tmp_path / f"{host}.c4pb", "train", host, after)
                    static = ("--file", str(path), "--job", "train", "--fabric", FABRIC.name)
                    with ranks(Rank(*static, "--host", host)) as (offline,):
                        assert offline.open_code == 0
                        assert {k: offline.lookup(k) for k in after} == {
                            k: fresh.lookup(k) for k in after
                        }
        finally:
            watch.stop()


def _a_spine_link_of(bindings: dict[object, AppliedBinding], host: str) -> str:
    """A leaf--spine link that some QP of ``host`` crosses."""
    for b in sorted(bindings.values(), key=key_of):
        if b.src_port.split(":")[0] == host:
            return f"{b.path[1]}--{b.path[2]}"  # NIC port, leaf, spine, ...
    raise AssertionError("no QP from the host")


def test_refusals_give_clear_codes_and_no_crash(tmp_path: Path) -> None:
    host, peer = HOSTS[1], HOSTS[9]
    ctl_config, address = controller_config(FABRIC, tmp_path / "controller")
    agent_cfg, sock = agent_config(tmp_path / "agent", host, address, mode="0666")
    with controller(ctl_config), FlowIntentClient(address) as flow, agent(agent_cfg):
        job = flow.register_job("other", hosts=[host, peer])
        job.submit([communicator("dp")])
        base = ("--socket", str(sock), "--job", "other")
        wrong = Rank(*base, "--token", "not-the-token-of-this-job-0123456789")
        stale = Rank(*base, "--token", job.token, "--wire-version", "2")
        absent = Rank("--socket", str(tmp_path / "nowhere.sock"), "--job", "x", "--token", "t")
        with ranks(wrong, stale, absent):
            assert wrong.open_code == 5  # C4P_EAUTH
            assert stale.open_code == 8  # C4P_EVERSION
            assert absent.open_code == 4  # C4P_ECONNECT
        # the agent still serves after all that
        with ranks(Rank(*base, "--token", job.token)) as (good,):
            assert good.open_code == 0


def test_static_file_for_another_job_or_fabric_is_refused(tmp_path: Path) -> None:
    ports = {("dp", 0, 1, 0, 0): (0xC001, 1)}
    path = _static_file(tmp_path / "h.c4pb", "train", "h0000", ports)
    cases = {
        ("--job", "train", "--fabric", FABRIC.name): 0,
        ("--job", "other", "--fabric", FABRIC.name): 10,  # C4P_EMISMATCH
        ("--job", "train", "--fabric", "elsewhere"): 10,
        ("--job", "train", "--fabric", FABRIC.name, "--host", "h0001"): 10,
    }
    for args, code in cases.items():
        with ranks(Rank("--file", str(path), *args, "--log")) as (r,):
            assert r.open_code == code, args
        if code == 10:  # with a log callback, the library says which of the three differs
            assert " is for " in r.stderr_text and "h.c4pb" in r.stderr_text, r.stderr_text
    broken = tmp_path / "broken.c4pb"
    broken.write_text(path.read_text().replace("49153 1", "49154 1"))  # port != label's port
    truncated = tmp_path / "short.c4pb"
    truncated.write_text(path.read_text().rsplit("\nb ", 1)[0] + "\n")
    for bad in (broken, truncated, tmp_path / "missing.c4pb"):
        with ranks(Rank("--file", str(bad), "--job", "train", "--fabric", FABRIC.name)) as (r,):
            assert r.open_code == 11  # C4P_EFILE


def test_static_file_with_a_repeated_qp_or_a_late_header_is_refused(tmp_path: Path) -> None:
    """docs/api.md: one line per QP, the header before the bindings. A second line for the same
    QP (which would silently win) and an ``epoch`` (or any header) after a ``b`` line (the
    bindings would carry the epoch seen so far while ``c4p_status`` reports the later one) are
    both ``C4P_EFILE``, with the line number and the reason in the log."""
    ports = {("dp", 0, 1, 0, 0): (0xC001, 1), ("dp", 0, 1, 0, 1): (0xC002, 2)}
    good = _static_file(tmp_path / "good.c4pb", "train", "h0000", ports).read_text()
    lines = good.splitlines()
    first_b = next(i for i, line in enumerate(lines) if line.startswith("b "))
    repeated = [*lines, "b dp 0 1 0 0 49154 2"]  # qp 0 again, with qp 1's port
    repeated[lines.index("count 2")] = "count 3"
    late = [line for line in lines if not line.startswith("epoch ")] + ["epoch 7"]
    twice = [*lines[:first_b], "epoch 9", *lines[first_b:]]  # two epochs: which one?
    cases = {
        "repeated.c4pb": (repeated, "repeats the binding of line"),
        "late.c4pb": (late, "header line 'epoch' after the bindings"),
        "twice.c4pb": (twice, "repeats the header line 'epoch'"),
    }
    for name, (text, why) in cases.items():
        path = tmp_path / name
        path.write_text("\n".join(text) + "\n")
        args = ("--file", str(path), "--job", "train", "--fabric", FABRIC.name, "--log")
        with ranks(Rank(*args)) as (r,):
            assert r.open_code == 11, name  # C4P_EFILE
        assert why in r.stderr_text and f"{name}:" in r.stderr_text, r.stderr_text
    with ranks(
        Rank("--file", str(tmp_path / "good.c4pb"), "--job", "train", "--fabric", FABRIC.name)
    ) as (r,):
        assert r.open_code == 0 and r.status()[:2] == (1, 2)
    twice = (StaticBinding("dp", 0, 1, 0, 0, 0xC001, 1), StaticBinding("dp", 0, 1, 0, 0, 0xC002, 2))
    with pytest.raises(ValueError, match="two bindings"):  # the writer agrees with the reader
        HostFile(FABRIC.name, "train", "h0000", 1, twice).render()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root")
def test_a_rank_of_another_uid_runs_from_a_checkout_it_cannot_reach(tmp_path: Path) -> None:
    """A clone under a 0700 directory (``/root``, ``mktemp -d``): uid 65534 cannot reach the
    built driver there, so a rank run as that uid is staged where it can (and an unreachable
    staging place is a fast, explained failure, not a 60 s wait)."""
    hidden = tmp_path / "clone"
    hidden.mkdir()
    os.chmod(tmp_path, 0o700)
    for f in BUILD.glob("libc4p.so*"):
        shutil.copy(f, hidden / f.name, follow_symlinks=False)
    shutil.copy(BUILD / "c4p_check", hidden / "c4p_check")
    args = ("--socket", str(tmp_path / "none.sock"), "--job", "j", "--token", "t" * 20)
    with ranks(Rank(*args, user=65534, binary=hidden / "c4p_check")) as (r,):
        assert r.open_code == 4  # C4P_ECONNECT: it ran, as 65534, and found no agent
    inside = staged_for(65534, under=tmp_path)  # inside the 0700 directory: no way in
    with pytest.raises(Unreachable, match=r"cannot reach .* is in the way"), inside:
        pass
    assert not list(tmp_path.glob("c4p-uid-*"))  # and the failed stage was removed


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root")
def test_sockets_of_other_users_are_refused(tmp_path: Path) -> None:
    """A rank of another user is refused by the agent's SO_PEERCRED policy (socket mode
    0666, so the kernel lets it connect); a socket served by another user is refused by the
    library. Both uids are switched for real with setpriv."""
    ctl_config, address = controller_config(FABRIC, tmp_path / "controller")
    with staged_for(65534) as shared:  # pytest's own tmp is 0700: not for uid 65534
        agent_cfg, sock = agent_config(
            shared / "agent", HOSTS[2], address, mode="0666", group="65534"
        )
        os.chmod(sock.parent, 0o755)
        with controller(ctl_config), agent(agent_cfg):
            info = sock.stat()  # the agent set the configured group and mode
            assert (info.st_gid, info.st_mode & 0o777) == (65534, 0o666)
            args = ("--socket", str(sock), "--job", "j", "--token", "t" * 20)
            with ranks(Rank(*args, user=65534)) as (stranger,):
                assert stranger.open_code == 6  # C4P_EPERM
            os.chmod(sock, 0o660)  # its group (65534) may connect: the policy still refuses
            with ranks(Rank(*args, user=65534)) as (stranger,):
                assert stranger.open_code == 6  # C4P_EPERM
            os.chmod(sock, 0o600)  # now the kernel itself refuses the connect
            with ranks(Rank(*args, user=65534)) as (stranger,):
                assert stranger.open_code == 4  # C4P_ECONNECT
        (shared / "rogue").mkdir()
        os.chown(shared / "rogue", 65534, 65534)
        rogue_sock = shared / "rogue" / "agent.sock"
        python = interpreter_for(65534)  # the venv's may sit in a 0700 directory
        server = subprocess.Popen([*as_user(65534), python, "-c", _ROGUE, str(rogue_sock)])
        try:
            assert wait_until(lambda: rogue_sock.exists() or server.poll() is not None, 20)
            assert server.poll() is None, f"the rogue server exited with {server.returncode}"
            with ranks(Rank("--socket", str(rogue_sock), "--job", "j", "--token", "t")) as (r,):
                assert r.open_code == 14  # C4P_EPEER
        finally:
            server.kill()
            server.wait(10)


_ROGUE = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666)
s.listen(4); s.settimeout(60)
while True:
    c, _ = s.accept(); c.recv(4096); c.close()
"""


def _fake_agent(path: Path, answers: list[bytes]) -> threading.Thread:
    """A Unix socket server that takes a HELLO and answers with raw bytes, once per answer."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(len(answers))
    server.settimeout(60)

    def serve() -> None:
        try:
            for answer in answers:
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(10)
                    conn.recv(4096)
                    conn.sendall(answer)
                    conn.settimeout(2)
                    with suppress(OSError):
                        conn.recv(1)  # the rank closes first (or we time out)
        finally:
            server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_malformed_or_truncated_agent_messages_are_protocol_errors(tmp_path: Path) -> None:
    one = LocalBinding(QpKey("dp", 0, 1, 0, 0), 0xC001, 1, 3)
    welcome = wire.encode(wire.Welcome("h", True, BindingSet(3, Kind.FULL, (one,))))
    header = welcome[: wire.HEADER.size]
    cases = {
        b"XXXX" + welcome[4:]: 7,  # bad magic
        welcome[:-5]: 7,  # truncated payload, then close
        header[:7]: 7,  # truncated header
        header[:8] + (99).to_bytes(4, "big") + b"\x01\x00\x01h" + b"\xff" * 95: 7,  # bad body
        wire.encode(wire.Welcome("h", True, BindingSet(3, Kind.FULL, (one,))), version=2): 8,
        wire.encode(wire.Error(wire.Code.AUTH, "no")): 5,
    }
    sock = tmp_path / "fake.sock"
    thread = _fake_agent(sock, list(cases))
    args = ("--socket", str(sock), "--job", "j", "--token", "t", "--timeout-ms", "3000")
    for expected in cases.values():
        with ranks(Rank(*args)) as (r,):
            assert r.open_code == expected
        assert r.stderr_text == ""  # the library prints nothing unless given a log callback
    thread.join(30)
    # A live session that receives garbage keeps every port and only drops the connection.
    sock.unlink(missing_ok=True)
    thread = _fake_agent(sock, [welcome + b"C4PL\x00\x01\x00\x03\x00\x00\x00\x04abcd"])
    with ranks(Rank(*args)) as (r,):
        assert r.open_code == 0
        assert wait_until(lambda: r.status()[2] == 0, 10)
        assert r.lookup(("dp", 0, 1, 0, 0)) == (0xC001, 1)
    thread.join(30)


def test_plan_bindings_dir_files_give_the_planned_ports(tmp_path: Path) -> None:
    """``c4p plan --bindings --bindings-dir``: every host file opens in libc4p and gives, for
    every QP leaving that host, the port of the bindings file."""
    from test_cli import _small_fabric_and_jobs, run_json

    from c4p.files import load_fabric, load_model
    from solver.workload.jobs import JobsFile
    from solver.workload.patterns import derive_workload
    from southbound.bindings import BindingSet as PlannedBindings

    fabric_path, jobs_path = _small_fabric_and_jobs(tmp_path)
    out_dir, bindings_path = tmp_path / "hosts", tmp_path / "bindings.json"
    report = run_json("plan", "--fabric", str(fabric_path), "--jobs", str(jobs_path),
                      "-o", str(tmp_path / "plan.json"), "--bindings", str(bindings_path),
                      "--bindings-dir", str(out_dir))  # fmt: skip
    fabric = load_fabric(fabric_path)
    workload = derive_workload(fabric, load_model(JobsFile, jobs_path), str(jobs_path))
    conns = {(c.job, c.communicator, c.index): c for c in workload.connections}
    planned = load_model(PlannedBindings, bindings_path)
    files = sorted(out_dir.glob("*/*.c4pb"))
    assert sorted(report["bindings_dir"]) == sorted(str(p) for p in files)
    seen = 0
    for path in files:
        job, host = path.parent.name, path.stem
        want: dict[Key, tuple[int, int]] = {}
        for b in planned.bindings:
            if b.job == job and b.src.split(":")[0] == host:
                c = conns[(b.job, b.communicator, b.connection)]
                want[(b.communicator, c.src_rank, c.dst_rank, c.channel, b.qp)] = (
                    b.sport,
                    b.flow_label,
                )
        args = ("--file", str(path), "--job", job, "--fabric", fabric.name, "--host", host)
        with ranks(Rank(*args, valgrind=False)) as (r,):
            assert r.open_code == 0
            assert {k: r.lookup(k) for k in want} == want
            assert r.status()[1] == len(want)
        seen += len(want)
    assert seen == len(planned.bindings) > 0


def test_the_rdma_example_runs_where_a_device_exists() -> None:
    example = BUILD / "c4p_pingpong"
    if not example.exists():
        pytest.skip("libibverbs-dev (<infiniband/verbs.h>) is not installed: example not built")
    done = subprocess.run(
        [str(example), "--iters", "10"], capture_output=True, text=True, timeout=60
    )
    if done.returncode == 77:
        pytest.skip("no RDMA device on this machine: the example compiled but was not run")
    assert done.returncode == 0, done.stdout + done.stderr


def _streaming_agent(path: Path, frames: list[bytes], gap_s: float) -> threading.Thread:
    """A Unix socket server that takes one HELLO and sends ``frames``, ``gap_s`` apart, then
    waits for the rank to close."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(60)

    def serve() -> None:
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(60)
                conn.recv(4096)
                for frame in frames:
                    conn.sendall(frame)
                    time.sleep(gap_s)
                with suppress(OSError):
                    conn.recv(1)
        finally:
            server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("sanitizer", ["tsan", "asan"])
def test_lookups_from_many_threads_while_updates_arrive(tmp_path: Path, sanitizer: str) -> None:
    """Four threads look up 64 QPs over and over while the library's thread applies 100
    deltas that move all of them, under ThreadSanitizer (data races) and AddressSanitizer:
    no report, every lookup a valid binding, every change called back, the last one kept."""
    binary = BUILD / sanitizer / "c4p_check"
    qps = [QpKey("dp", r, r + 1, ch, q) for r in range(4) for ch in range(4) for q in range(4)]

    def body(epoch: int, kind: Kind) -> BindingSet:
        rows = []
        for i, k in enumerate(qps):
            label = (i + epoch) % 0x3FFF + 1
            rows.append(LocalBinding(k, 0xC000 | label, label, epoch))
        return BindingSet(epoch, kind, tuple(rows))

    frames = [wire.encode(wire.Welcome("h", True, body(1, Kind.FULL)))]
    frames += [wire.encode(body(e, Kind.DELTA)) for e in range(2, 102)]
    sock = tmp_path / "stream.sock"
    thread = _streaming_agent(sock, frames, 0.005)
    rank = Rank("--socket", str(sock), "--job", "j", "--token", "t", binary=binary)
    try:
        assert rank.open_code == 0
        for k in qps:
            rank.lookup((k.communicator, k.src_rank, k.dst_rank, k.channel, k.qp))
        rank.send("threads 4 400")
        words = rank.expect("threads", 120)
        assert int(words[1]) == 4 * 400 * len(qps) and int(words[2]) == 0
        assert wait_until(lambda: len(rank.replanned()) == 100 * len(qps), 60)
        last = body(101, Kind.DELTA).bindings
        for b in last:
            k = b.key
            assert rank.lookup((k.communicator, k.src_rank, k.dst_rank, k.channel, k.qp)) == (
                b.udp_sport,
                b.flow_label,
            )
    finally:
        code, err = rank.close()
        thread.join(30)
    assert code == 0 and "Sanitizer" not in err, err


def _pushed(metrics: str) -> float:
    """The controller's ``c4p_bindings_pushed_total`` (Prometheus text format)."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith("c4p_bindings_pushed_total "):
            return float(line.split()[1])
    raise AssertionError("no c4p_bindings_pushed_total")


def test_a_restarted_agent_resumes_its_streams_from_their_epochs(tmp_path: Path) -> None:
    """After a restart the agent asks for what changed since the epoch on its disk: the
    controller pushes nothing when nothing changed. Without its disk state it gets the full set
    again (which shows the counter would see a resume from 0)."""
    host, peer = HOSTS[3], HOSTS[11]
    metrics = f"127.0.0.1:{free_port()}"
    ctl_config, address = controller_config(FABRIC, tmp_path / "controller", metrics)
    agent_cfg, sock = agent_config(tmp_path / "agent", host, address)
    with controller(ctl_config), FlowIntentClient(address) as flow:
        job = flow.register_job("resume", hosts=[host, peer])
        reply = job.submit([communicator("dp", qps_per_connection=2)])
        watch = job.watch()
        try:
            assert watch.wait_revision(reply.revision, 30)
            mine = _mine(watch.mirror.snapshot(), host)
        finally:
            watch.stop()
        session = ("--socket", str(sock), "--job", "resume", "--token", job.token)
        with agent(agent_cfg) as first, ranks(Rank(*session, valgrind=False)) as (r,):
            assert {k: r.lookup(k) for k in mine} == mine
            kill(first)
            before = _pushed(metrics)
            state = tmp_path / "agent" / "state" / "jobs" / "resume.json"
            saved = state.stat().st_ino
            with agent(agent_cfg):
                assert wait_until(lambda: r.status()[2] == 1, 30)
                # the agent rewrites its file after each update: the resumed stream's first
                assert wait_until(lambda: state.stat().st_ino != saved, 30)
                assert _pushed(metrics) == before  # resumed: nothing to send
            state.unlink()
            with agent(agent_cfg), ranks(Rank(*session, valgrind=False)) as (again,):
                assert {k: again.lookup(k) for k in mine} == mine
                assert _pushed(metrics) >= before + len(mine)  # a full set from epoch 0
