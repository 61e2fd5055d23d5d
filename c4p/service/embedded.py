"""The service in this process, on an event loop of its own thread: for tests, the demo and the
benchmark.

Why a thread of its own: the callers are ordinary synchronous code (pytest, the demo script) that
use the blocking client over a real gRPC channel; running the service's asyncio loop beside them
lets both sides be what they are in production, on loopback. Start and stop are synchronous and
bounded; :meth:`EmbeddedService.stop` always joins the thread, so no test leaks a server.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from c4p.files import save_fabric
from c4p.service.runtime import ServiceRuntime
from c4p.service.serve import ServeConfig, check
from topology.model import Fabric

T = TypeVar("T")


def embedded_config(
    fabric: Fabric, directory: Path, *, admin_token: str | None = None, **overrides: Any
) -> ServeConfig:
    """A loopback, ephemeral-port config with its fabric file and store in ``directory``.

    ``overrides`` replace top-level sections (``planner={"budget_s": 1}``, ``tls={...}``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    fabric_path = directory / "fabric.json"
    if not fabric_path.exists():
        save_fabric(fabric, fabric_path)
    data: dict[str, Any] = {
        "fabric": {"path": str(fabric_path)},
        "listen": {"address": "127.0.0.1:0", "grace_s": 0.5},
        "store": {"path": str(directory / "c4p.db"), "synchronous": "normal"},
        "auth": {"admin": [{"value": admin_token or secrets.token_urlsafe(24)}]},
        "metrics": {"address": None},
        "logging": {"level": "warning"},
        "controller": {"debounce_s": 0.02, "max_delay_s": 0.2},
        "planner": {"budget_s": 1.0},
    }
    data.update(overrides)
    return check(ServeConfig.model_validate(data))


class EmbeddedService:
    """Start with :meth:`start` (or ``with``); the bound address is :attr:`address`."""

    def __init__(self, config: ServeConfig, *, fabric: Fabric | None = None) -> None:
        self.config = config
        self._fabric = fabric
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.runtime: ServiceRuntime | None = None
        self.address = ""

    @property
    def admin_token(self) -> str:
        return self.config.admin_tokens()[0]

    def start(self, timeout: float = 30.0) -> str:
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self.runtime = ServiceRuntime(self.config, fabric=self._fabric)
                self.address = loop.run_until_complete(self.runtime.start())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=main, name="c4p-embedded", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"the service did not start within {timeout} s")
        if failure:
            self._thread.join(timeout)
            raise failure[0]
        return self.address

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run a coroutine on the service's loop (e.g. to inspect state consistently)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        loop, thread, runtime = self._loop, self._thread, self.runtime
        if loop is None or thread is None or not thread.is_alive():
            return
        if runtime is not None:
            asyncio.run_coroutine_threadsafe(runtime.stop(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
