"""How fast the host agent folds its ranks' REPORT frames (decode + fold, then close the steps).

One host: 8 ranks on a ring, 4 channels each, 125 network steps per connection per collective
call (one REPORT frame of ~208 KB per call, as libc4p sends them), 50 calls. Prints samples per
second through ``c4p.agent.wire.decode`` and ``TelemetryBook.take`` on one core, and the time to
close the 50 steps (busy-time unions, summaries).
"""

from __future__ import annotations

import time

from c4p.agent import wire
from c4p.agent.telemetry import TelemetryBook

RANKS, CHANNELS, STEPS_PER_CONNECTION, CALLS = 8, 4, 125, 50


def frame(call: int) -> bytes:
    base = call * 10**7
    transfers = tuple(
        wire.Transfer(
            "dp", r, (r + 1) % RANKS, ch, 0, call, 65536, base + k * 1000, base + k * 1000 + 900
        )
        for k in range(STEPS_PER_CONNECTION)
        for r in range(RANKS)
        for ch in range(CHANNELS)
    )
    arrivals = tuple(wire.Arrive("dp", r, call, "AllReduce", 1 << 26, base) for r in range(RANKS))
    done = tuple(wire.Complete("dp", r, call, base + 10**6) for r in range(RANKS))
    return wire.encode(wire.Report(0, transfers, arrivals, done))


def main() -> None:
    frames = [frame(c) for c in range(CALLS)]
    book = TelemetryBook("h0")
    samples = 0
    t0 = time.perf_counter()
    for raw in frames:
        report = wire.decode(wire.parse_header(raw[: wire.HEADER.size]), raw[wire.HEADER.size :])
        assert isinstance(report, wire.Report)
        samples += len(report.transfers) + len(report.arrivals) + len(report.completions)
        book.take("job", 1, 1, report)
    t1 = time.perf_counter()
    book.close_steps(10**18)
    t2 = time.perf_counter()
    print(
        f"{samples:,} samples in {CALLS} frames of {len(frames[0]):,} bytes: decode + fold "
        f"{samples / (t1 - t0):,.0f} samples/s; closing {CALLS} steps "
        f"({RANKS * CHANNELS} connections each) {1e3 * (t2 - t1):.0f} ms"
    )


if __name__ == "__main__":
    main()
