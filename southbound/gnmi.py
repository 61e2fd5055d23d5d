"""The gNMI driver: one session per switch, Capabilities first, JSON_IETF where offered.

Why this shape: a :class:`GnmiSession` is gnmic's ``Target``, one gRPC channel to one switch
with its own credentials, TLS and deadlines. :meth:`GnmiSession.observe` asks for interfaces,
LLDP neighbors and the hostname (one Get per subtree, so a target without ``/qos`` still
answers the rest) and :meth:`GnmiSession.watch` keeps Subscribe streams open: ON_CHANGE for
oper-status (a link going down arrives in milliseconds) and SAMPLE for counters and ECN marks,
and, where the target offers it, ON_CHANGE on the LLDP neighbour tables (a recabling is re-read
at once). Request conventions of real switch OSes are options of the targets file: a prefix
target (SONiC), a path origin (NX-OS), JSON where JSON_IETF is not offered; ``/system`` and
``/qos`` are optional, ``/lldp`` missing is a named problem (see docs/discovery.md).

It is built on pygnmi's generated gNMI stub, messages and path codec, not on its
``gNMIclient``, because a controller needs what that class does not give: a deadline on every
unary RPC (its Capabilities and Get block for ever on a slow target), TLS only with a CA we
were given (it fetches and trusts the target's own certificate when none is given), JSON_IETF
even when the target lists JSON first, no process-wide environment changes (it sets
``GRPC_SSL_CIPHER_SUITES`` on a TLS timeout), and a subscription whose failures come back to
the caller instead of dying in a background thread. Answers are decoded here and parsed by
:mod:`southbound.openconfig`; a malformed leaf becomes a ``Problem``, never an exception.

**Where.** The subtrees asked for and the decoding of answers are :mod:`southbound.gnmicodec`
(re-exported here); the streams of :meth:`GnmiSession.watch` are :mod:`southbound.gnmistreams`,
a mixin the session inherits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from pygnmi.create_gnmi_path import gnmi_path_generator
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from southbound.driver_errors import (
    CapabilityError,
    SouthboundError,
    TargetAuthError,
    TargetConfigError,
    TargetTlsError,
)
from southbound.gnmi_errors import rpc_error
from southbound.gnmicodec import COUNTERS_PATH as COUNTERS_PATH
from southbound.gnmicodec import ECN_PATH as ECN_PATH
from southbound.gnmicodec import EXPECTED_MODELS as EXPECTED_MODELS
from southbound.gnmicodec import INTERFACES_PATH as INTERFACES_PATH
from southbound.gnmicodec import LLDP_NEIGHBORS_PATH as LLDP_NEIGHBORS_PATH
from southbound.gnmicodec import LLDP_PATH as LLDP_PATH
from southbound.gnmicodec import OPER_STATUS_PATH as OPER_STATUS_PATH
from southbound.gnmicodec import QOS_PATH as QOS_PATH
from southbound.gnmicodec import SYSTEM_PATH as SYSTEM_PATH
from southbound.gnmicodec import Capabilities as Capabilities
from southbound.gnmicodec import decode_value as decode_value
from southbound.gnmicodec import elems_of as elems_of
from southbound.gnmistreams import GnmiStreams
from southbound.observed import (
    InterfaceCounters,
    Problem,
    Protocol,
    SwitchObservation,
)
from southbound.oc_tree import OcTree, PathElem, TreeError, path_text
from southbound.openconfig import (
    ecn_marks_of,
    hostname_of,
    interfaces_of,
    lldp_chassis_of,
    neighbors_of,
)
from southbound.targets import TargetConfig, TlsConfig, TlsMode


def _read(path: Path | None, target: str, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TargetConfigError(
            f"cannot read {what} {path}: {exc.strerror}", target=target
        ) from None


def _channel_credentials(tls: TlsConfig, target: str) -> Any:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file, target, "ca_file"),
        private_key=_read(tls.key_file, target, "key_file"),
        certificate_chain=_read(tls.cert_file, target, "cert_file"),
    )


class GnmiSession(GnmiStreams):
    """One gNMI session to one target. Thread-safe for ``cancel``; otherwise one user."""

    def __init__(self, config: TargetConfig, *, wall: Callable[[], float] = time.time) -> None:
        self.config = config
        self.name = config.name
        self._wall = wall
        self._channel: Any = None
        self._stub: Any = None
        self._metadata: tuple[tuple[str, str], ...] = ()
        self.capabilities: Capabilities | None = None
        self.encoding = "JSON_IETF"
        self._calls: list[Any] = []
        self._lock = threading.Lock()
        self._release = threading.Event()  # ends our half of a Subscribe stream
        self._cancelled = threading.Event()
        self.last_message_at: float | None = None

    # -- connection -------------------------------------------------------------------------

    def open(self) -> Capabilities:
        """Open the channel and ask for Capabilities; refuses a target without JSON_IETF."""
        cfg = self.config
        tls = cfg.gnmi.tls or TlsConfig(mode=TlsMode.INSECURE)
        host = f"[{cfg.address}]" if ":" in cfg.address else cfg.address
        where = f"{host}:{cfg.gnmi.port}"
        options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 64 << 20)]
        if tls.mode is TlsMode.INSECURE:
            self._channel = grpc.insecure_channel(where, options=options)
        else:
            if tls.server_name:
                options.append(("grpc.ssl_target_name_override", tls.server_name))
            creds = _channel_credentials(tls, self.name)
            self._channel = grpc.secure_channel(where, creds, options=options)
        if cfg.gnmi.credentials is not None:
            user, password = cfg.gnmi.credentials.resolve(self.name)
            self._metadata = (("username", user), ("password", password))
        self._stub = gnmi_pb2_grpc.gNMIStub(self._channel)
        reply = self._unary(
            "Capabilities",
            gnmi_pb2.CapabilityRequest(),
            cfg.timeouts.connect_s + cfg.timeouts.rpc_s,
        )
        encodings = tuple(gnmi_pb2.Encoding.Name(e) for e in reply.supported_encodings)
        caps = Capabilities(
            encodings=encodings,
            models=tuple(m.name for m in reply.supported_models),
            version=reply.gNMI_version,
        )
        self.encoding = self._choose_encoding(encodings)
        self.capabilities = caps
        return caps

    def _choose_encoding(self, offered: tuple[str, ...]) -> str:
        """JSON_IETF where offered, else JSON (NX-OS and older Junos releases list JSON and
        PROTO only), unless the targets file forces one; a target offering neither is refused
        with what it does offer. A target that lists no encodings at all (allowed by older gNMI
        servers) is asked in JSON_IETF, the encoding every OpenConfig target must serve."""
        wanted = self.config.gnmi.encoding
        usable = [e for e in ("JSON_IETF", "JSON") if not offered or e in offered]
        if wanted != "auto":
            choice = wanted.upper()
            if offered and choice not in offered:
                raise CapabilityError(
                    f"gnmi.encoding {wanted} is not offered (offers {', '.join(offered)})",
                    target=self.name,
                )
            return choice
        if not usable:
            raise CapabilityError(
                f"offers no JSON encoding c4p can read (offers {', '.join(offered)}; c4p reads "
                "JSON_IETF or JSON)",
                target=self.name,
            )
        return usable[0]

    def _unary(self, method: str, request: Any, timeout: float) -> Any:
        try:
            return getattr(self._stub, method)(
                request, timeout=timeout, metadata=self._metadata, wait_for_ready=False
            )
        except grpc.RpcError as exc:
            raise self._error(method, exc, timeout) from None

    def _error(self, method: str, exc: Any, timeout: float) -> Exception:
        return rpc_error(self.config, method, exc, timeout)

    def close(self) -> None:
        self.cancel()
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def cancel(self) -> None:
        """Stop a running :meth:`watch` (from any thread); a later ``watch`` returns at once."""
        self._cancelled.set()
        self._release.set()
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            call.cancel()

    # -- one round of questions -------------------------------------------------------------

    def _prefix(self) -> Any:
        """The request prefix: empty, or the target name a platform routes by (SONiC)."""
        name = self.config.gnmi.prefix_target
        return gnmi_pb2.Path(target=name) if name else None

    def _path(self, text: str) -> Any:
        path = gnmi_path_generator(text)
        if self.config.gnmi.origin:
            path.origin = self.config.gnmi.origin
        return path

    def get(self, path: str) -> tuple[list[tuple[list[PathElem], Any]], list[Problem]]:
        """Get one subtree as ``[(path elems, JSON value)]``; undecodable values are problems."""
        request = gnmi_pb2.GetRequest(
            prefix=self._prefix(),
            path=[self._path(path)],
            encoding=gnmi_pb2.Encoding.Value(self.encoding),
            type=gnmi_pb2.GetRequest.DataType.Value("ALL"),
        )
        reply = self._unary("Get", request, self.config.timeouts.rpc_s)
        values: list[tuple[list[PathElem], Any]] = []
        problems: list[Problem] = []
        for note in reply.notification:
            prefix = elems_of(note.prefix)
            for update in note.update:
                elems = prefix + elems_of(update.path)
                try:
                    values.append((elems, decode_value(update.val)))
                except ValueError as exc:
                    problems.append(
                        Problem(target=self.name, path=path_text(elems), reason=str(exc))
                    )
        return values, problems

    def _get_into(
        self, tree: OcTree, path: str, problems: list[Problem], *, required: bool
    ) -> bool:
        """Get ``path`` into ``tree``; an optional subtree the target does not serve is skipped
        (``/system`` may be absent), a required one raises, anything else a target sends back
        is a problem of that subtree. Returns whether the subtree was answered."""
        try:
            values, bad = self.get(path)
        except (TargetAuthError, TargetTlsError):
            raise
        except SouthboundError as exc:
            if required:
                raise
            if path == LLDP_PATH:
                problems.append(Problem(target=self.name, path=path, reason=f"no LLDP tree: {exc}"))
            return False
        problems.extend(bad)
        for elems, value in values:
            try:
                tree.add(elems, value)
            except TreeError as exc:
                problems.append(Problem(target=self.name, path=path_text(elems), reason=str(exc)))
        return bool(values)

    def observe(self) -> SwitchObservation:
        """Interfaces, LLDP, hostname and (if offered) ECN marks, as one observation.

        ``/interfaces`` must answer; ``/lldp`` missing is a named problem (the fabric cannot
        be built without it, but interfaces still tell the controller about link state);
        ``/system/state`` and ``/qos`` are optional."""
        if self.capabilities is None:
            self.open()
        assert self.capabilities is not None
        tree = OcTree()
        problems = [
            Problem(target=self.name, path="capabilities", reason=f"model {m} is not listed")
            for m in EXPECTED_MODELS
            if self.capabilities.models and m not in self.capabilities.models
        ]
        self._get_into(tree, INTERFACES_PATH, problems, required=True)
        if self._get_into(tree, LLDP_PATH, problems, required=False) and tree.get("lldp") in (
            None,
            {},
        ):
            problems.append(Problem(target=self.name, path=LLDP_PATH, reason="no LLDP tree"))
        self._get_into(tree, SYSTEM_PATH, problems, required=False)
        if self.capabilities.has_qos:
            self._get_into(tree, QOS_PATH, problems, required=False)
        states, counters, bad_ifaces = interfaces_of(tree, self.name)
        neighbors, bad_lldp = neighbors_of(tree, self.name)
        marks, bad_ecn = ecn_marks_of(tree, self.name)
        for name, value in marks.items():
            base = counters.get(name, InterfaceCounters())
            counters[name] = base.model_copy(update={"ecn_marked": value})
        return SwitchObservation(
            target=self.name,
            protocol=Protocol.GNMI,
            at=self._wall(),
            hostname=hostname_of(tree),
            chassis_id=lldp_chassis_of(tree),
            interfaces=tuple(states),
            neighbors=tuple(neighbors),
            counters=counters,
            problems=tuple(problems + bad_ifaces + bad_lldp + bad_ecn),
        )

    # -- staying current --------------------------------------------------------------------


class GnmiDriver:
    """The ``gnmi`` driver: sessions share nothing, each has its own channel."""

    def session(self, config: TargetConfig) -> GnmiSession:
        return GnmiSession(config)

    def close(self) -> None:
        return None
