"""Drivers by name: what a session to a switch can do, and the registry that makes them.

Why a registry (as gnmic does): the targets file names a driver per switch (``gnmi``, ``snmp``)
and the collector must not care which one it is. A driver makes sessions; a session opens,
observes (one round of questions), watches (streams or polls until cancelled) and closes. A
new protocol is one class and one ``register_driver`` call. Drivers are imported lazily, so a
process that only speaks gNMI never loads pysnmp.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol

from southbound.observed import SwitchObservation, WatchUpdate
from southbound.targets import TargetConfig


class Session(Protocol):
    """One session to one switch (gnmic's ``Target``)."""

    name: str
    last_message_at: float | None

    def open(self) -> object:
        """Connect and check the target can serve us; raises ``SouthboundError``."""
        ...

    def observe(self) -> SwitchObservation:
        """One round: interfaces, LLDP neighbors, counters; bad leaves become problems."""
        ...

    def watch(self, on_update: Callable[[WatchUpdate], None]) -> None:
        """Deliver updates until :meth:`cancel`; raises ``TargetUnreachable`` if it breaks."""
        ...

    def cancel(self) -> None:
        """Make a running or later :meth:`watch` return (thread-safe)."""
        ...

    def close(self) -> None: ...


class Driver(Protocol):
    """Makes sessions for targets; may hold shared resources (an event loop, an engine)."""

    def session(self, config: TargetConfig) -> Session: ...

    def close(self) -> None: ...


DriverFactory = Callable[[], Driver]

_LAZY: dict[str, tuple[str, str]] = {
    "gnmi": ("southbound.gnmi", "GnmiDriver"),
    "snmp": ("southbound.snmp", "SnmpDriver"),
}
_REGISTERED: dict[str, DriverFactory] = {}


def register_driver(name: str, factory: DriverFactory) -> None:
    """Make ``factory`` the driver for targets that say ``driver: <name>``."""
    _REGISTERED[name] = factory


def driver_factory(name: str) -> DriverFactory:
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in _LAZY:
        module, attr = _LAZY[name]
        factory: DriverFactory = getattr(importlib.import_module(module), attr)
        _REGISTERED[name] = factory
        return factory
    known = ", ".join(sorted({*_LAZY, *_REGISTERED}))
    raise KeyError(f"no driver named {name!r} (known: {known})")


def driver_names() -> tuple[str, ...]:
    return tuple(sorted({*_LAZY, *_REGISTERED}))
