"""Why a gNMI RPC failed, in words an operator can act on (used by :mod:`southbound.gnmi`).

Why its own module: gRPC reports a TLS mismatch as a bare ``UNAVAILABLE: Socket closed`` or a
handshake string, which a controller would retry for ever as a stale target. These failures
cannot fix themselves, so they are :class:`~southbound.driver_errors.TargetTlsError` (terminal)
with the reason in words: the target's certificate was refused; a TLS client met a plaintext
server; a plaintext client met a TLS server; the server wants a client certificate (mTLS).
The last two need a look at the target: :func:`tls_probe` opens one TCP connection and tries a
TLS handshake without trusting or sending anything.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import grpc

from southbound.driver_errors import (
    CapabilityError,
    TargetAuthError,
    TargetTlsError,
    TargetUnreachable,
)
from southbound.targets import TargetConfig, TlsMode

PREFIX_TARGETS = {"SONiC": "OC-YANG"}
"""The prefix target a switch OS serves OpenConfig under, where it needs one (sonic-gnmi's
gNMI_usage_examples: OpenConfig paths are asked with target ``OC-YANG``)."""


def _wants_prefix_target(details: str) -> bool:
    """sonic-gnmi's refusal of a request whose prefix names no target."""
    text = details.lower()
    return "target" in text and "prefix" in text


def _prefix_target_advice(config: TargetConfig) -> str:
    values = ", ".join(f"{os_}: {value}" for os_, value in PREFIX_TARGETS.items())
    value = next(iter(PREFIX_TARGETS.values()))
    said = config.gnmi.prefix_target
    head = f"prefix target {said!r} refused" if said else "the target wants a prefix target"
    return (
        f"{head} ({values}): set gnmi.prefix_target: {value} "
        f"(in a gnmic file: subscriptions.<name>.target: {value})"
    )


def rpc_error(config: TargetConfig, method: str, exc: Any, timeout: float) -> Exception:
    """The southbound error for a failed gNMI RPC, with TLS mismatches said in words."""
    name = config.name
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return TargetAuthError(f"{method} refused: {details}", target=name)
    if code in (
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INVALID_ARGUMENT,
    ) and _wants_prefix_target(str(details)):
        return CapabilityError(
            f"{method} refused: {details}; {_prefix_target_advice(config)}", target=name
        )
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return CapabilityError(
            f"{method} is not implemented: {details} (a switch OS may need gnmi.prefix_target, "
            "origin or encoding: see docs/discovery.md)",
            target=name,
        )
    if code is grpc.StatusCode.INVALID_ARGUMENT:  # our request, not the target's state: final
        return CapabilityError(
            f"{method} refused as invalid: {details} (check gnmi.prefix_target, origin and "
            "encoding for this switch OS)",
            target=name,
        )
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return TargetUnreachable(f"no answer to {method} within {timeout:g} s", target=name)
    tls = config.gnmi.tls
    text = str(details)
    if "WRONG_VERSION_NUMBER" in text or "packet length too long" in text:
        return TargetTlsError(
            f"TLS client meeting a plaintext server: {method} failed in the TLS handshake "
            f"({text}); set gnmi.tls mode insecure if the target serves plaintext",
            target=name,
        )
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text.lower():
        return TargetTlsError(
            f"the target's certificate was refused ({text}); check gnmi.tls.ca_file and "
            "server_name",
            target=name,
        )
    if "handshake" in text.lower() and "ssl" in text.lower():
        return TargetTlsError(f"TLS handshake failed: {text}", target=name)
    if (
        code is grpc.StatusCode.UNAVAILABLE
        and tls is not None
        and tls.mode is TlsMode.TLS
        and tls_probe(config) == "wants a client certificate"
    ):
        return TargetTlsError(
            "the target closed the connection right after the TLS handshake, as a server "
            "requiring a client certificate does (mutual TLS): give gnmi.tls mode mtls "
            "with cert_file and key_file",
            target=name,
        )
    if (
        code is grpc.StatusCode.UNAVAILABLE
        and (tls is None or tls.mode is TlsMode.INSECURE)
        and tls_probe(config) != "plaintext"
    ):
        return TargetTlsError(
            "plaintext client meeting a TLS server: the target answers with TLS, but "
            "gnmi.tls says mode insecure; give mode tls and its ca_file",
            target=name,
        )
    status = code.name if code is not None else "error"
    return TargetUnreachable(f"{method} failed ({status}): {details}", target=name)


def tls_probe(config: TargetConfig) -> str:
    """What the target does with a TLS client that shows no certificate: ``plaintext``
    (no TLS handshake), ``wants a client certificate`` or ``tls``. A diagnosis only:
    nothing is sent over it and its certificate is not trusted for anything."""
    cfg = config
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection(
            (cfg.address, cfg.gnmi.port), timeout=min(2.0, cfg.timeouts.connect_s)
        ) as raw:
            try:
                tls = context.wrap_socket(raw)
            except (OSError, ValueError) as exc:
                return (
                    "wants a client certificate"
                    if "CERTIFICATE_REQUIRED" in str(exc)
                    else "plaintext"
                )
            with tls:
                try:  # TLS 1.3 asks for the client certificate after the handshake
                    first = tls.recv(1)
                except ssl.SSLError as exc:
                    text = str(exc)
                    if "CERTIFICATE_REQUIRED" in text or "certificate required" in text:
                        return "wants a client certificate"
                    return "tls"
                except OSError:
                    return "tls"
                # A gRPC server speaks first (HTTP/2 SETTINGS); one that closes right
                # after the handshake refused us: what a server requiring mTLS does.
                return "wants a client certificate" if first == b"" else "tls"
    except (OSError, ValueError):
        return "plaintext"
