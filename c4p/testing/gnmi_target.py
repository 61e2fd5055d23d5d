"""Emulated gNMI targets: one real gRPC server per switch of a fabric, on 127.0.0.1.

Why real servers: the gNMI driver must be tested against the protocol, not against a fake of
its own making. Each switch gets its own ``grpc.server`` on an ephemeral loopback port (so one
switch can be killed and revived without touching the others), all sharing one thread pool,
and answers with pygnmi's generated servicer interface:

* ``Capabilities``: JSON_IETF (and JSON), the OpenConfig models it serves;
* ``Get``: ``/interfaces``, ``/lldp/interfaces``, ``/system/state``, ``/qos/interfaces`` or
  ``/`` (see :mod:`c4p.testing.oc_payloads`);
* ``Subscribe``: STREAM (ON_CHANGE oper-status with optional heartbeat, SAMPLE counters and
  ECN marks), ONCE and POLL. A link failed through :class:`FabricEmulator` wakes the streams
  of both its switches at once; every notification carries a non-zero timestamp.

Optional TLS/mTLS (:class:`~c4p.testing.certs.Pki`) and username/password metadata checks
behave as a switch's would. Everything binds 127.0.0.1 only; :meth:`GnmiFabric.stop` (or the
context manager) stops every server and the pool. What one server answers is
:mod:`c4p.testing.gnmi_servicer` (:class:`EmulatedTarget`, re-exported here); this module runs
the fabric of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Self

import grpc
from pygnmi.spec.v080 import gnmi_pb2_grpc

from c4p.testing.certs import Pki
from c4p.testing.dataplane import FabricEmulator
from c4p.testing.gnmi_servicer import EmulatedTarget as EmulatedTarget
from southbound.targets import (
    GnmiCredentials,
    GnmiOptions,
    TargetConfig,
    TargetsFile,
    Timeouts,
    TlsConfig,
    TlsMode,
)


class GnmiFabric:
    """One emulated gNMI target per switch, on 127.0.0.1; a context manager."""

    def __init__(
        self,
        emu: FabricEmulator,
        *,
        pki: Pki | None = None,
        mutual_tls: bool = False,
        credentials: tuple[str, str] | None = None,
        switches: Iterable[str] | None = None,
        numbers_from: Iterable[str] = (),
        lldp_stream: bool = True,
        lldp_gate: threading.Event | None = None,
    ) -> None:
        self.emu = emu
        self.lldp_gate = lldp_gate  # see EmulatedTarget.lldp_gate
        self.pki = pki
        self.mutual_tls = mutual_tls
        self.credentials = credentials
        self.switches = tuple(switches) if switches is not None else emu.switches
        self.numbers_from = frozenset(numbers_from)
        self.lldp_stream = lldp_stream  # False: refuse LLDP ON_CHANGE (as many targets do)
        self.ports: dict[str, int] = {}
        self._servers: dict[str, Any] = {}
        self._executor: ThreadPoolExecutor | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        workers = 3 * len(self.switches) + 16  # two streams per switch, and unary calls
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gnmi-target")
        try:
            for switch in self.switches:
                self._serve(switch, 0)
        except BaseException:
            self.stop()
            raise
        return self

    def _serve(self, switch: str, port: int) -> None:
        server = grpc.server(self._executor, options=[("grpc.so_reuseport", 0)])
        target = EmulatedTarget(
            self.emu,
            switch,
            credentials=self.credentials,
            as_numbers=switch in self.numbers_from,
            lldp_stream=self.lldp_stream,
            lldp_gate=self.lldp_gate,
        )
        gnmi_pb2_grpc.add_gNMIServicer_to_server(target, server)
        address = f"127.0.0.1:{port}"
        if self.pki is not None:
            bound = server.add_secure_port(
                address, self.pki.server_credentials(mutual=self.mutual_tls)
            )
        else:
            bound = server.add_insecure_port(address)
        if not bound:
            raise RuntimeError(f"cannot bind {address} for emulated target {switch}")
        server.start()
        self._servers[switch] = server
        self.ports[switch] = bound

    def kill(self, switch: str) -> None:
        """Stop one target abruptly (its streams break); its port is kept for :meth:`revive`."""
        server = self._servers.pop(switch)
        server.stop(grace=None).wait(5)
        self.emu.poke()

    def revive(self, switch: str) -> None:
        self._serve(switch, self.ports[switch])

    def stop(self) -> None:
        for switch in list(self._servers):
            self._servers.pop(switch).stop(grace=None)
        self.emu.poke()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def targets_file(
        self,
        *,
        tls: TlsConfig | None = None,
        credentials: tuple[str, str] | None = None,
        sample_interval_s: float = 0.2,
        timeouts: Timeouts | None = None,
    ) -> TargetsFile:
        """A targets file for the driver: every served switch at 127.0.0.1:<its port>."""
        if tls is None:
            tls = (
                self.pki.client_tls(TlsMode.MTLS if self.mutual_tls else TlsMode.TLS)
                if self.pki
                else TlsConfig(mode=TlsMode.INSECURE)
            )
        creds = None
        if credentials is not None:
            creds = GnmiCredentials.model_validate(
                {"username": credentials[0], "password": credentials[1]}
            )
        options = GnmiOptions(tls=tls, credentials=creds, sample_interval_s=sample_interval_s)
        return TargetsFile(
            targets=tuple(
                TargetConfig(
                    name=s,
                    address="127.0.0.1",
                    gnmi=options.model_copy(
                        update={"port": self.ports[s], **self.emu.flavour_of(s).client_options()}
                    ),
                    timeouts=timeouts
                    or Timeouts(connect_s=2.0, rpc_s=5.0, retry_initial_s=0.1, retry_max_s=1.0),
                )
                for s in self.switches
            )
        )
