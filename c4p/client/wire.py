"""The wire: channels and credentials, typed method paths, errors, and intent builders shared by
the sync and asyncio clients.

Why hand-built method stubs: the generated ``*_pb2_grpc`` stubs are untyped; the clients wrap
``channel.unary_unary`` / ``unary_stream`` with the message types of the ``.pyi`` stubs, so a
caller's mistakes show in ``mypy --strict``. The client package imports nothing of the server
(no solver, no OR-Tools): a collective library pays only for grpc and protobuf.

Errors: every failed call raises :class:`ApiError` with the gRPC status code, the server's
message and the ``problems`` (field, reason) from the ``c4p-problems`` trailing metadata.
``retryable`` says whether the client should back off and try again (the server was unreachable
or busy) or stop (the request or the credential is wrong).

Intent builders (:func:`communicator`, :func:`connection`, and :func:`register_request` for the
clients): ``c4p.v1`` uses proto3 presence (``optional``) to tell "default" from an explicit value,
and enums with ``*_UNSPECIFIED``; these take Python values, leave out what is not given, and spell
enums as the YAML files do (``"all-to-all"``). They do not validate: the controller does, and names
the field of any mistake.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from c4p.api.v1 import flow_intent_pb2 as fi
from c4p.api.v1 import intents_pb2 as pb
from topology.errors import C4pError

RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)
"""Codes after which the same call may succeed later (the server restarts, a limit refills)."""

FLOW = "/c4p.v1.FlowIntentService/"
ADMIN = "/c4p.v1.AdminService/"


@dataclass(frozen=True)
class ClientTls:
    """TLS toward the controller: its CA, and (mTLS) our certificate and key."""

    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None
    """The name to check in the server's certificate when it is not the dialled host."""

    def credentials(self) -> grpc.ChannelCredentials:
        cert = self.cert_file.read_bytes() if self.cert_file else None
        key = self.key_file.read_bytes() if self.key_file else None
        return grpc.ssl_channel_credentials(self.ca_file.read_bytes(), key, cert)


def channel_options(tls: ClientTls | None, max_message_bytes: int) -> list[tuple[str, Any]]:
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        # gRPC's reconnect back-off grows to 120 s: a controller replica that was down for a
        # while and then becomes the leader would stay unreachable from here for that long
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 2_000),
    ]
    if tls is not None and tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return options


def secure_channel(
    target: str, tls: ClientTls | None, max_message_bytes: int = 16 * 1024 * 1024
) -> grpc.Channel:
    options = channel_options(tls, max_message_bytes)
    if tls is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, tls.credentials(), options=options)


def secure_aio_channel(
    target: str, tls: ClientTls | None, max_message_bytes: int = 16 * 1024 * 1024
) -> grpc.aio.Channel:
    options = channel_options(tls, max_message_bytes)
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, tls.credentials(), options=options)


def auth(token: str | None) -> tuple[tuple[str, str], ...]:
    return () if not token else (("authorization", f"Bearer {token}"),)


class ApiError(C4pError):
    """A call the controller refused or could not answer (see the module docstring)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        problems: list[tuple[str, str]],
        leader: str = "",
    ):
        self.code = code
        self.details = details
        self.problems = problems
        self.retryable = code in RETRYABLE
        self.leader = leader
        """A follower's refusal names the leader (``c4p-leader`` trailing metadata)."""
        super().__init__(f"{code.name}: {details}")

    @classmethod
    def from_rpc(cls, exc: grpc.RpcError) -> ApiError:
        code: grpc.StatusCode = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        details = str(exc.details() if hasattr(exc, "details") else exc) or code.name
        problems: list[tuple[str, str]] = []
        leader = ""
        trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
        for key, value in trailing or ():
            if key == "c4p-leader":
                leader = value.decode() if isinstance(value, bytes) else str(value)
            if key == "c4p-problems":
                try:
                    text = value.decode() if isinstance(value, bytes) else value
                    problems = [(p["field"], p["reason"]) for p in json.loads(text)]
                except (ValueError, KeyError, TypeError):
                    problems = []
        return cls(code, details, problems, leader)


# -- intents ---------------------------------------------------------------------------------------


def _enum(prefix: str, text: str | None) -> str | None:
    """``"all-to-all"`` -> ``"PATTERN_ALL_TO_ALL"`` (protobuf takes enum names); ``None``: unset."""
    return None if text is None else prefix + text.upper().replace("-", "_")


def control_mode(text: str | None) -> str:
    """``"shadow"`` -> ``"CONTROL_MODE_SHADOW"``; ``None``: UNSPECIFIED (follow the policy).
    An unknown name is a ``ValueError`` naming the choices."""
    if text is None:
        return "CONTROL_MODE_UNSPECIFIED"
    if text not in ("off", "shadow", "active"):
        raise ValueError(f"control mode {text!r}: one of off, shadow, active")
    return "CONTROL_MODE_" + text.upper()


def connection(
    src: int | str, dst: int | str, *, qps: int | None = None, rate: float | None = None
) -> pb.ConnectionIntent:
    """One connection; an end is a rank number or a NIC ``"host:nic"``."""
    c = pb.ConnectionIntent()
    if isinstance(src, str):
        c.src_nic = src
    else:
        c.src_rank = src
    if isinstance(dst, str):
        c.dst_nic = dst
    else:
        c.dst_rank = dst
    if qps is not None:
        c.qps = qps
    if rate is not None:
        c.rate = rate
    return c


def communicator(
    id: str,
    *,
    version: int = 1,
    pattern: str | None = None,
    collective: str | None = None,
    ranks: Sequence[int] = (),
    ring: str | None = None,
    trees: int | None = None,
    rail_only: bool | None = None,
    channels: int | None = None,
    qps_per_connection: int | None = None,
    rate: float | None = None,
    connections: Sequence[pb.ConnectionIntent] = (),
) -> pb.CommunicatorIntent:
    """A communicator intent (``pattern``: ring, all-to-all, tree, explicit)."""
    c = pb.CommunicatorIntent(
        id=id,
        version=version,
        pattern=_enum("PATTERN_", pattern),
        collective=_enum("COLLECTIVE_", collective),
        ranks=list(ranks),
        ring=_enum("LAYOUT_", ring),
        connections=list(connections),
    )
    if trees is not None:
        c.trees = trees
    if rail_only is not None:
        c.rail_only = rail_only
    if channels is not None:
        c.channels = channels
    if qps_per_connection is not None:
        c.qps_per_connection = qps_per_connection
    if rate is not None:
        c.rate = rate
    return c


def register_request(
    job_id: str,
    hosts: Sequence[str],
    ranks: Sequence[tuple[int, str, str]],
    tenant: str,
    priority: int,
    request_id: str | None,
    control_mode_text: str | None,
) -> fi.RegisterJobRequest:
    """RegisterJob's request, the same for the sync and asyncio clients; ``request_id`` is
    generated once here when not given, and reused by the call's retries (see
    :mod:`c4p.client.sync`: a lost answer then gives the same token)."""
    return fi.RegisterJobRequest(
        job_id=job_id,
        tenant=tenant,
        priority=priority,
        hosts=list(hosts),
        ranks=[pb.RankPlacement(rank=r, host=h, nic=n) for r, h, n in ranks],
        request_id=request_id or uuid.uuid4().hex,
        control_mode=control_mode(control_mode_text),
    )
