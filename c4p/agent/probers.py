"""Which :class:`~southbound.probing.Prober` the agent runs its batches with.

Why a registry: the agent is the same process whatever sends the packets. ``socket`` is the
real prober on the host's sockets (``southbound.netprobe.SocketProber``: raw ICMP with
CAP_NET_RAW, else the ``IP_RECVERR`` error queue); ``modeled:FABRIC`` answers from the data-plane
model of a fabric file, for demos and tests of the service plumbing on machines without a lab.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from c4p.agent.executor import ProberFactory
from c4p.errors import C4pError
from c4p.files import load_fabric
from southbound.probing import ModeledProber, Prober


def prober_factory(spec: str) -> ProberFactory:
    """``socket`` or ``modeled:FABRIC``; a :class:`C4pError` naming the problem otherwise."""
    kind, _, argument = spec.partition(":")
    if kind == "socket":
        try:
            module: Any = importlib.import_module("southbound.netprobe")
        except ImportError:
            raise C4pError(
                "--prober socket: this build has no socket prober (southbound.netprobe)"
            ) from None

        def socket_prober() -> Prober:
            prober: Prober = module.SocketProber()
            return prober

        return socket_prober
    if kind == "modeled":
        if not argument:
            raise C4pError("--prober modeled:FABRIC: give the fabric file to answer from")
        fabric = load_fabric(Path(argument))
        return lambda: ModeledProber(fabric)
    raise C4pError(f"--prober {spec!r}: use 'socket' or 'modeled:FABRIC'")
