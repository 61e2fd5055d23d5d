"""Shared pieces of the service tests: small fabrics, an embedded service, jobs, waits.

Every service a helper starts listens on 127.0.0.1 with an ephemeral port and is stopped by the
context manager that started it (in a ``finally``). Waits are bounded in time and count.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from c4p.client import AdminClient, FlowIntentClient
from c4p.service.embedded import EmbeddedService, embedded_config
from topology.generators import generate
from topology.model import Fabric

ADMIN_TOKEN = "test-admin-token-0123456789"


def spread_fabric() -> Fabric:
    """Six leaves with one 2-NIC host each and four spines: jobs on disjoint leaves share no
    link, and a leaf has twice the uplinks its NICs need (a drain never forces other moves)."""
    return generate("leaf-spine", leaves=6, spines=4, hosts_per_leaf=1, nics_per_host=2)


def busy_fabric() -> Fabric:
    """Sixteen 2-NIC hosts on eight leaves: room for eight two-host jobs."""
    return generate("leaf-spine", leaves=8, spines=4, hosts_per_leaf=2, nics_per_host=2)


def hosts(fabric: Fabric) -> list[str]:
    return [h.name for h in fabric.hosts]


@contextmanager
def serving(fabric: Fabric, directory: Path, **overrides: Any) -> Iterator[EmbeddedService]:
    """An embedded service on loopback, stopped on exit."""
    config = embedded_config(fabric, directory, admin_token=ADMIN_TOKEN, **overrides)
    service = EmbeddedService(config)
    service.start()
    try:
        yield service
    finally:
        service.stop()


@contextmanager
def clients(address: str, **options: Any) -> Iterator[tuple[FlowIntentClient, AdminClient]]:
    flow = FlowIntentClient(address, **options)
    admin = AdminClient(address, ADMIN_TOKEN, tls=options.get("tls"))
    try:
        yield flow, admin
    finally:
        flow.close()
        admin.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, step: float = 0.02) -> bool:
    """Poll ``predicate`` until true or ``timeout`` (bounded: at most timeout/step polls)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def links_of(path: tuple[str, ...]) -> set[frozenset[str]]:
    """The links (as node-name pairs) a binding's path crosses."""
    return {frozenset(p) for p in zip(path, path[1:], strict=False)}
