"""The lab's per-host helper: runs inside a host namespace, probes and sends QP traffic there.

Why a helper process: probes and QP traffic must leave from the host NIC whose 5-tuple they
carry, so they run in that host's namespace (``ip netns exec NS python -m c4p.lab.helper``).
One long-lived helper per host takes requests as JSON lines on standard input and answers one
JSON line each, so a batch costs no process start. It is the stand-in for the host agent of
``c4p agent`` until that lands: the same :class:`southbound.netprobe.SocketProber` runs inside.

Requests::

    {"op": "trace", "probes": [[src, dst, sport, first_ttl, max_ttl], ...],
     "rate": 200.0 | null, "burst": 20, "timeout": 0.5, "rounds": 3}
    -> {"traces": [[[ttl, address | null, type, code], ...], ...], "stats": {...}}
    {"op": "send", "src": A, "sport": P, "dst": B, "count": N, "connected": false}
    -> {"sent": N}
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from c4p.files import load_fabric
from southbound.netprobe import SocketProber
from southbound.pacing import Pacer, candidates_from_fabric
from southbound.probing import Probe
from topology.model import Fabric
from topology.roce import ROCE_UDP_DPORT

_PACERS: dict[tuple[float | None, float], Pacer] = {}
"""One pacer per (rate, burst) for the helper's life: a back-off after losses carries over to
the planner's next batch instead of starting afresh at full rate."""


def _trace(request: dict[str, Any], fabric: Fabric | None, privilege: str) -> dict[str, Any]:
    rate = request.get("rate")
    key = (None if rate is None else float(rate), float(request.get("burst", 20.0)))
    pacer = _PACERS.get(key)
    if pacer is None:
        pacer = _PACERS[key] = Pacer(
            candidates_from_fabric(fabric) if fabric is not None else None,
            rate=key[0],
            burst=key[1],
        )
    prober = SocketProber(
        privilege=privilege,
        pacer=pacer,
        timeout=float(request.get("timeout", 0.5)),
        rounds=int(request.get("rounds", 3)),
    )
    probes = [
        Probe(ipaddress.ip_address(s), ipaddress.ip_address(d), int(p), int(f), int(m))
        for s, d, p, f, m in request["probes"]
    ]
    traces = prober.trace_many(probes)
    return {
        "privilege": str(prober.privilege),
        "traces": [
            [
                [h.ttl, None if h.address is None else str(h.address), h.icmp_type, h.icmp_code]
                for h in t.hops
            ]
            for t in traces
        ],
        "stats": dataclasses.asdict(prober.stats),
    }


def _send(request: dict[str, Any]) -> dict[str, Any]:
    """``count`` datagrams of the QP's 5-tuple (destination port 4791), as a QP would send:
    from an unconnected socket (``sendto``), so no socket hash rides on the packets and every
    router hashes the 5-tuple, as a switch hashes a NIC's RoCE packets (``connected: true``
    sends from a connected socket instead, to show what that does; see ``c4p.lab.build``)."""
    count = int(request["count"])
    if not 1 <= count <= 100_000:
        raise ValueError(f"count: {count} is not within 1..100000")
    src, sport = str(request["src"]), int(request["sport"])
    to = (str(request["dst"]), int(request.get("dport", ROCE_UDP_DPORT)))
    family = socket.AF_INET6 if ":" in src else socket.AF_INET
    sent = 0
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((src, sport))
        connected = bool(request.get("connected", False))
        if connected:
            sock.connect(to)
        for _ in range(count):
            for _attempt in range(3):  # a failed send reports an earlier port unreachable
                try:
                    if connected:
                        sock.send(b"\x00" * 64)
                    else:
                        sock.sendto(b"\x00" * 64, to)
                except ConnectionRefusedError:
                    continue
                sent += 1
                break
    return {"sent": sent}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m c4p.lab.helper")
    parser.add_argument("--fabric", help="the lab's fabric (JSON/YAML): pacing per switch")
    parser.add_argument("--privilege", default="auto", choices=["auto", "raw", "recverr"])
    args = parser.parse_args(argv)
    fabric = load_fabric(Path(args.fabric)) if args.fabric else None
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            answer: dict[str, Any]
            if request.get("op") == "ping":
                answer = {"pong": True}
            elif request.get("op") == "trace":
                answer = _trace(request, fabric, args.privilege)
            elif request.get("op") == "send":
                answer = _send(request)
            else:
                answer = {"error": f"op: {request.get('op')!r} is not trace or send"}
        except (ValueError, KeyError, TypeError, OSError) as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    # Ctrl-C on a terminal reaches the whole process group: the lab tears the helpers down,
    # so a helper interrupted in its read loop just ends (no traceback on the user's screen).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    raise SystemExit(main())
