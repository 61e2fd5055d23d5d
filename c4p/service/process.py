"""One ``c4p serve`` process: a single controller or an HA replica, until SIGINT/SIGTERM.

Why apart from :mod:`c4p.service.runtime`: choosing between a single controller
(:class:`~c4p.service.runtime.ServiceRuntime`) and one replica of a highly available group
(:class:`~c4p.service.replica.Replica`, which itself runs a ``ServiceRuntime`` while it leads)
is the process's business, not the runtime's; kept in the runtime, it made the runtime and the
replica import each other. Signals are honoured from the moment the event loop runs.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from c4p.service.runtime import ServiceRuntime
from c4p.service.serve import ServeConfig

if TYPE_CHECKING:
    from c4p.service.replica import Replica


async def serve_forever(config: ServeConfig, ready: Callable[[str], None] | None = None) -> None:
    """Run until SIGINT or SIGTERM (``c4p serve``); a start-up failure raises (nothing left
    running). With ``store.kind: etcd``, as one replica of a highly available group
    (:mod:`c4p.service.replica`)."""
    runtime: ServiceRuntime | Replica
    if config.store.kind == "etcd":
        from c4p.service.replica import Replica  # etcd's client only where it is used

        runtime = Replica(config)
    else:
        runtime = ServiceRuntime(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    address = await runtime.start()
    if ready is not None:
        ready(address)
    try:
        await stop.wait()
    finally:
        await runtime.stop()


def run(config: ServeConfig, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; ``ready`` gets the bound address once serving."""
    asyncio.run(serve_forever(config, ready))
