"""libc4p and the agent's local API: the figures of issue 12, on loopback with real processes
(a ``c4p serve``, one ``c4p agent`` process serving bindings on a Unix socket, ranks that are C
programs linking libc4p).

* lookup latency in the library (c4p_lookup of every binding of the host, many rounds; ns)
* bindings per second through one agent to 8 local ranks (8 rank processes, each opening
  sessions again and again; each open receives the host's full set)
* time from a drain (AdminService.DrainLink called) to the re-plan callback in a rank
* the agent's resident memory with 8 jobs on its host (VmRSS)
* the size of the shared library

Run: .venv/bin/python scripts/measure/measure_libc4p.py  (make libc4p first; no valgrind here)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from libc4p_cases import (  # noqa: E402
    BUILD,
    Rank,
    agent,
    agent_config,
    build_libc4p,
    controller,
    controller_config,
    key_of,
    ranks,
)
from service_cases import ADMIN_TOKEN, wait_until  # noqa: E402

from c4p.client import AdminClient, FlowIntentClient, communicator  # noqa: E402
from c4p.client.mirror import QpId  # noqa: E402
from topology.generators import generate  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main() -> None:
    build_libc4p()
    fabric = generate("leaf-spine", leaves=4, spines=4, hosts_per_leaf=2, nics_per_host=8)
    names = [h.name for h in fabric.hosts]
    host = names[0]
    with tempfile.TemporaryDirectory(prefix="c4p-measure-") as tmp:
        base = Path(tmp)
        ctl_cfg, address = controller_config(fabric, base / "controller")
        agent_cfg, sock = agent_config(base / "agent", host, address)
        with controller(ctl_cfg), FlowIntentClient(address) as flow, agent(agent_cfg) as ag:
            # one big job over 4 hosts (32 ranks), then 7 small ones... no: a NIC holds one
            # job's rank, so the 8 jobs are measured in a second agent run below.
            big = flow.register_job("big", hosts=names[::2][:4])  # one host per leaf
            reply = big.submit([communicator("dp", channels=16, qps_per_connection=4)])
            direct: list[
                float
            ] = []  # when the Python client (straight from the controller) saw a change
            watch = big.watch(on_change=lambda change: direct.append(time.monotonic()))
            assert watch.wait_revision(reply.revision, 60)
            mine = {
                k: b for k, b in watch.mirror.snapshot().items() if b.src_port.split(":")[0] == host
            }
            session = ("--socket", str(sock), "--job", "big", "--token", big.token)
            with ranks(*(Rank(*session, valgrind=False) for _ in range(8))) as rs:
                for k in mine.values():
                    assert rs[0].lookup(key_of(k)) is not None
                rs[0].send("bench 200")
                bench = rs[0].expect("bench", 300)
                print(
                    f"lookup latency: p50 {int(bench[1]) / 1000:.3f} us, "
                    f"p99 {int(bench[2]) / 1000:.3f} us over {bench[3]} lookups "
                    f"({len(mine)} bindings on the host)"
                )
                rounds = 50
                t0 = time.perf_counter()
                for r in rs:
                    r.send(f"reopen {rounds}")
                answers = [r.expect("reopen", 300) for r in rs]
                elapsed = time.perf_counter() - t0
                total = sum(int(a[1]) * int(a[3]) for a in answers)
                print(
                    f"bindings through one agent to 8 ranks: {total} in {elapsed:.2f} s = "
                    f"{total / elapsed:,.0f} bindings/s ({rounds} opens per rank, "
                    f"{answers[0][3]} bindings per open)"
                )
                # drain -> callback, 5 times on different spine links
                delays, hops = [], []
                admin = AdminClient(address, ADMIN_TOKEN)
                try:
                    links = sorted(
                        {f"{b.path[1]}--{b.path[2]}" for b in mine.values() if len(b.path) >= 5}
                    )
                    for link in links[:5]:
                        before = len(rs[0].replanned())
                        snapshot = _ports(watch.mirror.snapshot())
                        seen = len(direct)
                        t0 = time.monotonic()
                        admin.drain(link, "measure", wait=False)
                        if not wait_until(lambda b=before: len(rs[0].replanned()) > b, 30, 0.001):
                            continue
                        delays.append(rs[0].replan_times[before] - t0)
                        if wait_until(lambda n=seen: len(direct) > n, 10, 0.001):
                            hops.append(rs[0].replan_times[before] - direct[seen])
                        watch.wait(lambda m, s=snapshot: _ports(m.bindings) != s, 30)
                        admin.restore(link, wait=True)
                finally:
                    admin.close()
                print(
                    "drain -> callback in a rank: "
                    + ", ".join(f"{d * 1000:.0f}" for d in delays)
                    + f" ms (median {statistics.median(delays) * 1000:.0f} ms; controller "
                    "debounce 20 ms, plan budget 1 s)"
                )
                print(
                    "of which the agent hop (rank callback minus a direct gRPC client's "
                    "change, same epoch): " + ", ".join(f"{h * 1000:.1f}" for h in hops) + " ms"
                )
            watch.stop()
            print(f"agent RSS with 1 job: {rss_kib(ag.pid) / 1024:.1f} MiB")
        # 8 jobs on the host: each job one NIC of the host and one NIC of another host
        ctl_cfg, address = controller_config(fabric, base / "controller8")
        agent_cfg, sock = agent_config(base / "agent8", host, address)
        with controller(ctl_cfg), FlowIntentClient(address) as flow, agent(agent_cfg) as ag:
            sessions = []
            for j in range(8):
                placement = [(0, host, f"nic{j}"), (1, names[2], f"nic{j}")]
                job = flow.register_job(f"job{j}", ranks=placement)
                job.submit([communicator("dp", channels=4, qps_per_connection=4)])
                sessions.append(job)
            rs8 = [
                Rank("--socket", str(sock), "--job", f"job{j}", "--token", s.token, valgrind=False)
                for j, s in enumerate(sessions)
            ]
            with ranks(*rs8):
                assert wait_until(lambda: all(r.status()[1] > 0 for r in rs8), 60, 0.1)
                time.sleep(1)
                counts = [r.status()[1] for r in rs8]
                print(
                    f"agent RSS with 8 jobs ({sum(counts)} bindings held): "
                    f"{rss_kib(ag.pid) / 1024:.1f} MiB"
                )
    so = BUILD / "libc4p.so.1.0.0"
    print(f"libc4p.so.1.0.0: {so.stat().st_size} bytes (with -g); stripped: {_stripped(so)} bytes")


def _ports(bindings: dict[QpId, object]) -> dict[QpId, int]:
    return {k: b.udp_sport for k, b in bindings.items()}  # type: ignore[attr-defined]


def _stripped(path: Path) -> int:
    import shutil
    import subprocess

    out = path.parent / "libc4p.stripped.so"
    shutil.copy(path, out)
    subprocess.run(["strip", "--strip-unneeded", str(out)], check=True)
    size = out.stat().st_size
    out.unlink()
    return size


if __name__ == "__main__":
    main()
