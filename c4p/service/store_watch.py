"""The periodic half of the store's file check: a store deleted or replaced while nothing is
written still turns health NOT_SERVING within ``store.check_s``.

Why periodic as well as before each commit (:mod:`c4p.store.lock`): a controller in a quiet
hour writes nothing, and a load balancer or operator must learn that the next write will be
refused before a client makes one. Why a task on the service's event loop: the health servicer
is asyncio's, so the verdict is set where it lives; the check itself (two ``stat`` calls) runs
in a worker thread because it takes the store's lock, which a long commit may hold.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class StoreWatch:
    """Calls ``verify`` every ``every_s``; once it names a reason, ``on_lost(reason)`` and ends
    (a lost store is lost for good: only a restart opens the file that is really there)."""

    def __init__(
        self, verify: Callable[[], str], every_s: float, on_lost: Callable[[str], None]
    ) -> None:
        self.verify = verify
        self.every_s = every_s
        self.on_lost = on_lost
        self.reason = ""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="c4p-store-watch")

    def lost(self) -> str:
        """Why the store takes no writes ("" while it does), checked now."""
        if not self.reason:
            self.reason = self.verify()
        return self.reason

    async def _run(self) -> None:
        while not self.reason:
            await asyncio.sleep(self.every_s)
            reason = await asyncio.to_thread(self.verify)
            if reason:
                self.reason = reason
                self.on_lost(reason)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
