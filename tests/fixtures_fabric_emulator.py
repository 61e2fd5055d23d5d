"""Shared fixtures for the southbound tests: small fabrics, a PKI, emulated gNMI and SNMP.

Imported by test modules (``from fixtures_fabric_emulator import ...``); every server or
process started here is stopped by the fixture or context manager that started it, in a
``finally``. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from c4p.testing.certs import Pki, make_pki
from c4p.testing.dataplane import FabricEmulator
from c4p.testing.gnmi_target import GnmiFabric
from c4p.testing.snmp_agent import SnmpAgent
from southbound.events import EventQueue
from southbound.fleet import Fleet
from southbound.targets import TargetsFile, Timeouts
from topology.generators import generate
from topology.model import Fabric

SMALL: dict[str, dict[str, Any]] = {
    "leaf-spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2},
    "rail-optimized": {"units": 2, "hosts_per_unit": 2, "rails": 2, "spines": 2},
    "fat-tree": {"k": 4},
    "dual-plane": {"units": 1, "hosts_per_unit": 2, "rails": 2, "spines": 2},
}
"""One small fabric of each kind (6 to 20 switches)."""

FAST = Timeouts(connect_s=1.0, rpc_s=2.0, retry_initial_s=0.05, retry_max_s=0.5)
"""Deadlines for tests: a dead target is noticed in about a second."""


def small_fabric(kind: str) -> Fabric:
    return generate(kind, **SMALL[kind])


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@contextmanager
def serve_gnmi(fabric: Fabric, **options: Any) -> Iterator[tuple[FabricEmulator, GnmiFabric]]:
    """An emulator for ``fabric`` and one gNMI target per switch (stopped on exit)."""
    emulator_options = {
        k: options.pop(k) for k in ("advertise_addresses", "flavours") if k in options
    }
    emu = FabricEmulator(fabric, **emulator_options)
    servers = GnmiFabric(emu, **options)
    try:
        servers.start()
        yield emu, servers
    finally:
        servers.stop()


@contextmanager
def serve_snmp(fabric: Fabric, directory: Path) -> Iterator[tuple[FabricEmulator, SnmpAgent]]:
    """An emulator for ``fabric`` and one snmpsim process serving all its switches."""
    emu = FabricEmulator(fabric)
    agent = SnmpAgent(emu, directory)
    try:
        agent.start()
        yield emu, agent
    finally:
        agent.stop()


@contextmanager
def watching(targets: TargetsFile, **options: Any) -> Iterator[tuple[Fleet, EventQueue]]:
    """A running :class:`Fleet` with an event queue; waits until every target streams."""
    queue = EventQueue()
    fleet = Fleet(targets, sink=queue, **options)
    try:
        fleet.start()
        assert fleet.wait_streaming(30), fleet.status()
        yield fleet, queue
    finally:
        fleet.stop()


def link_ids(fabric: Fabric) -> set[frozenset[str]]:
    return {frozenset(link.ends) for link in fabric.links}
