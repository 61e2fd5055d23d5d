"""``libnccl-profiler-c4p.so`` loaded as NCCL loads it, fed a recorded event sequence.

The driver (``libc4p/tests/nccl_driver.c``) dlopen()s the plugin, looks up the versioned
symbol, and calls init / startEvent / recordEventState / stopEvent / finalize in the order NCCL's
proxy thread does for a ring all-reduce on one rank (under valgrind where installed). What the
plugin reports goes through libc4p to a socket served here and is decoded by the agent's wire
module: the arrivals, completions and transfers must be exactly those of the sequence.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from libc4p_cases import BUILD, VALGRIND, VALGRIND_ERROR, build_libc4p
from test_reports import Collector

from c4p.agent import wire

PLUGIN = BUILD / "libnccl-profiler-c4p.so"
DRIVER = BUILD / "nccl_driver"
SEND_WAIT, OP_IN_PROGRESS, SEND_GPU_WAIT, RECV_WAIT = 9, 19, 8, 10
RANK, PEER_NEXT, PEER_PREV = 1, 2, 0
STEPS, CHUNK, COUNT = 4, 65536, 1 << 18  # 4 network steps of 64 KiB per op; 1 MiB of floats


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    reason = build_libc4p()
    if reason is not None:
        pytest.skip(reason)


def ring_allreduce(calls: int, version: int) -> list[str]:
    """What NCCL does on rank 1 of a 4-rank ring for ``calls`` all-reduces over 2 channels:
    per call, a Coll event; per channel a send op (to rank 2) and a receive op (from rank 0),
    each going through its proxy steps (one at a time, except in the last call, where all are
    in flight at once); NCCL stops the Coll once enqueued (before its proxy operations end).
    Then one call whose proxy op comes from another process (PXN) and one call with no network
    at all (NVLink only)."""
    lines = [f"load {PLUGIN} {version}", "init 0 dp 0 2 4 1"]
    ids = iter(range(1, 60000))
    for seq in range(calls):
        coll = next(ids)
        lines.append(f"coll 0 {coll} {RANK} {seq} AllReduce {COUNT} ncclFloat32")
        ops = []
        for channel in (0, 1):
            send, recv = next(ids), next(ids)
            lines.append(f"op 0 {send} {coll} {RANK} {channel} {PEER_NEXT} {STEPS} {CHUNK} 1")
            lines.append(f"op 0 {recv} {coll} {RANK} {channel} {PEER_PREV} {STEPS} {CHUNK} 0")
            ops += [(send, True), (recv, False)]
        lines.append(f"stop {coll}")  # enqueued: the collective itself goes on
        for op, _ in ops:
            lines.append(f"state {op} {OP_IN_PROGRESS}")
        if seq == calls - 1:  # pipelined, as NCCL runs them: every step in flight at once
            steps = [(next(ids), op, is_send) for _ in range(STEPS) for op, is_send in ops]
            for k, (step, op, is_send) in enumerate(steps):
                lines.append(f"step 0 {step} {op} {RANK} {k}")
                state = SEND_WAIT if is_send else RECV_WAIT
                lines.append(f"state {step} {state} {CHUNK if is_send else 0}")
            lines.append("sleep 2000")
            lines.extend(f"stop {step}" for step, _, _ in steps)
        for k in range(STEPS if seq < calls - 1 else 0):  # one step at a time
            for op, is_send in ops:
                step = next(ids)
                lines.append(f"step 0 {step} {op} {RANK} {k}")
                if is_send:
                    lines += [
                        f"state {step} {SEND_GPU_WAIT} 0",
                        f"state {step} {SEND_WAIT} {CHUNK}",
                    ]
                else:
                    lines.append(f"state {step} {RECV_WAIT} 0")
                lines += ["sleep 200", f"stop {step}"]
        for op, _ in ops:
            lines.append(f"stop {op}")
    # PXN: a proxy op of another process names a parent the plugin must not dereference.
    pxn, step = next(ids), next(ids)
    lines += [
        f"op 0 {pxn} - {RANK} 3 {PEER_NEXT} 1 {CHUNK} 1 other",
        f"step 0 {step} {pxn} {RANK} 0",
        f"state {step} {SEND_WAIT} 4096",
        f"stop {step}",
        f"stop {pxn}",
    ]
    local = next(ids)  # a call with no proxy operation on this rank: nothing to report
    lines += [f"coll 0 {local} {RANK} {calls} AllGather 1024 ncclInt8", f"stop {local}"]
    lines.append("finalize 0")
    return lines


def drive(
    lines: list[str], env: dict[str, str], valgrind: bool
) -> subprocess.CompletedProcess[str]:
    argv = [str(DRIVER)]
    if valgrind and VALGRIND is not None:
        argv = [VALGRIND, "-q", f"--error-exitcode={VALGRIND_ERROR}", "--leak-check=full", *argv]
    return subprocess.run(
        argv,
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize("version", [4, 5])
def test_nccl_events_become_exact_reports(tmp_path: Path, version: int) -> None:
    sock = tmp_path / "agent.sock"
    agent = Collector(sock)
    calls = 3
    done = drive(
        ring_allreduce(calls, version),
        {"C4P_SOCKET": str(sock), "C4P_JOB": "j", "C4P_TOKEN": "t"},
        valgrind=version == 5,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "loaded c4p"
    assert out[1] == f"init 0 0 {2 | 8 | 16}"  # Coll, ProxyOp, ProxyStep
    assert all(line.endswith(" 0 1") for line in out if line.startswith("start "))  # tracked
    assert "finalize 0 0" in out and out[-1] == "done"
    agent.join()
    arrivals = [a for r in agent.reports for a in r.arrivals]
    completions = [c for r in agent.reports for c in r.completions]
    transfers = [t for r in agent.reports for t in r.transfers]
    assert [(a.communicator, a.rank, a.step, a.collective, a.bytes) for a in arrivals] == [
        ("dp", RANK, seq, "AllReduce", COUNT * 4) for seq in range(calls)
    ]
    assert [(c.communicator, c.rank, c.step) for c in completions] == [
        ("dp", RANK, seq) for seq in range(calls)
    ]
    for a, c in zip(arrivals[:-1], completions, strict=False):
        assert c.t_ns - a.t_ns >= STEPS * 4 * 200_000  # the steps' sleeps lie in between
    network = [t for t in transfers if t.step != wire.STEP_UNKNOWN]
    # One transfer per step while steps run one at a time.
    assert sorted((t.step, t.channel, t.bytes) for t in network if t.step < calls - 1) == sorted(
        [(seq, ch, CHUNK) for seq in range(calls - 1) for ch in (0, 1) for _ in range(STEPS)]
    )
    # The last call's overlapping steps are merged per send operation (the union of their
    # intervals): one transfer when the run stays under the plugin's 10 ms reporting cut, more
    # when a loaded machine (or valgrind) stretches it; either way whole steps, every byte once,
    # and the pieces of one channel never overlap in time.
    for ch in (0, 1):
        pieces = sorted(
            (t for t in network if t.step == calls - 1 and t.channel == ch),
            key=lambda t: t.start_ns,
        )
        assert 1 <= len(pieces) <= STEPS, pieces
        assert all(t.bytes % CHUNK == 0 for t in pieces)
        assert sum(t.bytes for t in pieces) == STEPS * CHUNK
        assert all(a.end_ns <= b.start_ns for a, b in zip(pieces, pieces[1:], strict=False))
    assert {(t.communicator, t.src_rank, t.dst_rank, t.qp) for t in network} == {
        ("dp", RANK, PEER_NEXT, 0)  # sends only: the receiver does not report
    }
    assert all(t.end_ns - t.start_ns >= 200_000 for t in network)
    for seq, a, c in zip(range(calls), arrivals, completions, strict=True):
        assert all(a.t_ns <= t.start_ns and t.end_ns <= c.t_ns for t in network if t.step == seq)
    (pxn,) = [t for t in transfers if t.step == wire.STEP_UNKNOWN]
    assert (pxn.channel, pxn.bytes, pxn.dst_rank) == (3, 4096, PEER_NEXT)


def test_a_run_cut_at_the_reporting_limit_is_never_counted_twice(tmp_path: Path) -> None:
    """Three steps in flight for longer than the plugin's 10 ms cut: the first two to stop make
    a run that is then reported at once; the third began inside that run, so its piece must
    start where the report ended (CI once saw such pieces overlap: busy time counted twice)."""
    sock = tmp_path / "agent.sock"
    agent = Collector(sock)
    lines = [f"load {PLUGIN} 5", "init 0 dp 0 2 4 1", f"coll 0 1 {RANK} 0 AllReduce 16 ncclFloat32"]
    lines += [f"op 0 2 1 {RANK} 0 {PEER_NEXT} 3 {CHUNK} 1", "stop 1", f"state 2 {OP_IN_PROGRESS}"]
    for k, step in enumerate((3, 4, 5)):
        lines += [f"step 0 {step} 2 {RANK} {k}", f"state {step} {SEND_WAIT} {CHUNK}", "sleep 1000"]
    lines += ["sleep 10000", "stop 3", "stop 4", "sleep 1000", "stop 5", "stop 2", "finalize 0"]
    done = drive(lines, {"C4P_SOCKET": str(sock), "C4P_JOB": "j", "C4P_TOKEN": "t"}, False)
    assert done.returncode == 0, done.stderr
    agent.join()
    first, second = sorted(
        (t for r in agent.reports for t in r.transfers), key=lambda t: t.start_ns
    )
    assert (first.bytes, second.bytes) == (2 * CHUNK, CHUNK)
    assert first.end_ns - first.start_ns >= 10_000_000  # cut and reported on its own
    assert second.start_ns == first.end_ns  # not at the step's own start, inside the first
    assert second.end_ns - second.start_ns >= 1_000_000


def test_without_a_job_or_an_agent_nccl_runs_unobserved(tmp_path: Path) -> None:
    for env in ({"C4P_JOB": ""}, {"C4P_JOB": "j", "C4P_SOCKET": str(tmp_path / "none.sock")}):
        done = drive(ring_allreduce(1, 5), env, valgrind=False)
        assert done.returncode == 0, done.stderr
        out = done.stdout.splitlines()
        assert out[1] == "init 0 0 0"  # success, no event activated
        assert all(line.endswith(" 0 0") for line in out if line.startswith("start "))
        assert "not reporting" in done.stderr


def test_the_plugin_exports_only_the_profiler_tables_and_needs_only_libc() -> None:
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(PLUGIN)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(s for s in symbols if s.startswith(("ncclProfiler", "c4p"))) == [
        "ncclProfiler_v4",
        "ncclProfiler_v5",
    ]
    needed = subprocess.run(
        ["readelf", "-d", str(PLUGIN)], capture_output=True, text=True, check=True
    ).stdout
    assert [line.split()[-1] for line in needed.splitlines() if "(NEEDED)" in line] == [
        "[libc.so.6]"
    ]
