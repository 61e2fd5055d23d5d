"""``c4p fabric emulate``: serve a fabric file as emulated gNMI switches of a chosen OS dialect.

Why a command: so that discovery can be tried from a fresh clone without a switch in sight,
the same way the tests do it: one real gRPC gNMI server per switch on 127.0.0.1 (ephemeral
ports), speaking the dialect of ``--flavour`` (``sonic``, ``eos``, ``nxos``, ``junos``,
``cumulus``, ``mixed`` for all five in turn, or ``openconfig``), and a targets file for
``c4p fabric discover --targets`` / ``c4p serve`` written next to it. Every switch also owns a
loopback and link addresses, so the discovered address book can be compared. Runs until
interrupted (or ``--duration`` seconds).

Registered by :mod:`c4p.cli` as ``fabric emulate``.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from c4p.cli.common import fail, guarded
from c4p.files import load_fabric, save_model
from c4p.testing.dataplane import FabricEmulator
from c4p.testing.flavours import FLAVOURS, mixed
from c4p.testing.gnmi_target import GnmiFabric
from c4p.testing.oc_payloads import with_switch_addresses

console = Console()


def fabric_emulate(
    fabric: Annotated[Path, typer.Argument(help="Fabric file to serve as gNMI switches.")],
    targets: Annotated[Path, typer.Option("--targets", help="Write the targets file here.")],
    flavour: Annotated[
        str, typer.Option(help="Switch OS dialect: sonic, eos, nxos, junos, cumulus, mixed.")
    ] = "mixed",
    duration: Annotated[
        float | None, typer.Option(min=0.1, help="Stop after this many seconds.")
    ] = None,
) -> None:
    """Serve FABRIC as emulated gNMI switches on 127.0.0.1 and write a targets file."""

    def body() -> None:
        if flavour != "mixed" and flavour not in FLAVOURS:
            fail(f"--flavour: {flavour!r} is not one of mixed, {', '.join(sorted(FLAVOURS))}")
        served = with_switch_addresses(load_fabric(fabric))
        names = [s.name for s in served.switches]
        chosen = mixed(names) if flavour == "mixed" else dict.fromkeys(names, flavour)
        stop = threading.Event()
        with GnmiFabric(FabricEmulator(served, flavours=chosen)) as servers:
            save_model(servers.targets_file(), targets)
            console.print(
                f"serving {len(names)} switches ({flavour}) on 127.0.0.1; targets in {targets}; "
                "Ctrl-C to stop",
                highlight=False,
            )
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait(duration)

    guarded(body)
