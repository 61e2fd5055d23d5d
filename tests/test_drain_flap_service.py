"""A 10 Hz DrainLink/RestoreLink flap for 10 s against the real service (gRPC over loopback):
the decision log counts the re-plans and port rewrites it caused. Before one damping policy
for every source this was 38 re-plans and 1,922 port rewrites; the figure is printed (``-s``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from service_cases import busy_fabric, clients, hosts, serving

from c4p.client import communicator

FABRIC = busy_fabric()
HOSTS = hosts(FABRIC)


@pytest.mark.slow
def test_an_admin_flap_at_10_hz_is_damped(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, admin):
        for k in range(8):
            job = flow.register_job(f"j{k}", hosts=[HOSTS[k], HOSTS[k + 8]])
            job.submit([communicator("dp", qps_per_connection=4)])
        admin.replan("settle", wait=True)
        crossing = next(x for x in admin.fabric().links if x.flows and "spine" in x.id)
        start = admin.decisions(1)[0].sequence
        for k in range(100):  # 10 Hz for 10 s (bounded: 100 calls)
            if k % 2 == 0:
                admin.drain(crossing.id, "detector", wait=False)
            else:
                admin.restore(crossing.id, wait=False)
            time.sleep(0.1)
        admin.replan("count", wait=True)
        log = [d for d in admin.decisions(500) if d.sequence > start]
        flapped = [d for d in log if d.reason != "replan count"]
        plans = len(flapped)
        rewrites = sum(d.bindings_changed + d.bindings_added for d in flapped)
        print(f"10 Hz admin flap over 10 s: {plans} re-plans, {rewrites} port rewrites")
        assert plans <= 4, [d.reason for d in flapped]
