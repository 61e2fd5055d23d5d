"""Measure: SNMP (v2c, v3 authPriv) discovery of a rail-optimized fabric served by one snmpsim
process.   .venv/bin/python scripts/measure/measure_snmp.py [--gpus 2048]"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from c4p.testing.dataplane import FabricEmulator  # noqa: E402
from c4p.testing.snmp_agent import SnmpAgent  # noqa: E402
from southbound.fleet import Fleet  # noqa: E402
from southbound.targets import Timeouts  # noqa: E402
from topology.compare import compare_fabrics  # noqa: E402
from topology.generators import sized_for_gpus  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--gpus", type=int, default=2048)
args = parser.parse_args()
fabric = sized_for_gpus("rail-optimized", args.gpus)
emu = FabricEmulator(fabric)
start = time.perf_counter()
with SnmpAgent(emu, Path(tempfile.mkdtemp(prefix="c4p-snmp-"))) as agent:
    print(f"{len(fabric.switches)} switches; snmpsim up in {time.perf_counter() - start:.1f} s")
    for version in ("2c", "3"):
        targets = agent.targets_file(version=version, timeouts=Timeouts(connect_s=5, rpc_s=10))
        start = time.perf_counter()
        result = Fleet(targets).discover()
        elapsed = time.perf_counter() - start
        clean = compare_fabrics(fabric, result.fabric).clean
        print(
            f"SNMPv{version}: discovery {elapsed:.1f} s, compare clean: {clean}, "
            f"unreached: {len(result.unreached_targets)}"
        )
