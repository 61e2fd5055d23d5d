"""Discovering the fabric the service will serve from its switches (``fabric.source: gnmi | snmp``).

Why apart from the runtime: discovery happens once, before the store is opened and the state is
built on what it found; the runtime only needs the fabric and the fleet (not yet watching) it
starts at :meth:`~c4p.service.runtime.ServiceRuntime.start`. Refusals are about the targets, so
they are one :class:`~topology.errors.FabricFileError` naming the targets file: no target
answered, or they answered with no links (an empty fabric is never served).
"""

from __future__ import annotations

import logging

from c4p.files import load_fabric
from c4p.service.serve import load_targets
from southbound.events import EventQueue, TargetHealth
from southbound.fleet import Fleet
from southbound.targets import FabricSource
from topology.errors import FabricFileError
from topology.generators.common import AddressPlan
from topology.model import Fabric

log = logging.getLogger("c4p.service")


def discover(source: FabricSource, events: EventQueue) -> tuple[Fabric, Fleet]:
    """Ask every target once; return the fabric and the fleet (sending to ``events``, not yet
    watching: the caller starts it once it serves)."""
    assert source.targets is not None
    declared = load_fabric(source.declared) if source.declared is not None else None
    plan = None
    if source.nic_network is not None:
        plan = AddressPlan.model_validate({"nic_network": source.nic_network})
    fleet = Fleet(
        load_targets(source),
        sink=events,
        declared=declared,
        address_plan=plan,
        name=source.name,
    )
    result = fleet.discover(attempts=source.attempts)
    status = fleet.status()
    live = [n for n, s in status.items() if s.health is TargetHealth.LIVE]
    if not live:
        raise FabricFileError(
            str(source.targets),
            [(f"targets {n}", s.last_error or s.health.value) for n, s in status.items()],
        )
    if not result.fabric.links:  # never serve an empty fabric
        raise FabricFileError(
            str(source.targets),
            [("discovery", f"found no links ({len(result.fabric.switches)} switches)")]
            + [(f"{p.target} {p.path}", p.reason) for p in result.problems[:20]],
        )
    for finding in result.findings:
        log.warning(
            "discovery finding: %s",
            finding,
            extra={"event": "discovery-finding", "target": finding.target},
        )
    events.drain()  # the snapshot already holds what discovery saw
    log.info(
        "discovered",
        extra={
            "event": "discovered",
            "source": source.source,
            "targets": len(status),
            "unreached": sorted(set(status) - set(live)),
            "switches": len(result.fabric.switches),
            "links": len(result.fabric.links),
            "problems": len(result.problems),
        },
    )
    return result.fabric, fleet
