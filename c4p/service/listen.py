"""The service's listening socket: TLS credentials, a port check, the bind with clear errors.

Why apart from the runtime: the single controller (:mod:`c4p.service.runtime`) and an HA
replica's follower face (:mod:`c4p.service.replica`) listen the same way (same credentials from
the same ``tls`` section), and the rules for a refused bind are about sockets, not about running
a controller. A TCP port another process holds is refused with our own words before gRPC tries
(gRPC's ``SO_REUSEPORT`` is off, so a second controller on the same address fails instead of
splitting the clients with the first); gRPC's own bind stays the final judge.
"""

from __future__ import annotations

import socket

import grpc

from c4p.service.serve import ServeConfig, is_unix, split_address
from topology.errors import C4pError


def server_credentials(config: ServeConfig) -> grpc.ServerCredentials | None:
    tls = config.tls
    if tls.mode == "plaintext":
        return None
    assert tls.cert_file is not None and tls.key_file is not None
    pair = (tls.key_file.read_bytes(), tls.cert_file.read_bytes())
    if tls.mode == "tls":
        return grpc.ssl_server_credentials([pair])
    assert tls.client_ca_file is not None
    return grpc.ssl_server_credentials(
        [pair], root_certificates=tls.client_ca_file.read_bytes(), require_client_auth=True
    )


def check_free(host: str, port: int, key: str, address: str) -> None:
    """Refuse a TCP port another process holds, with our own words (gRPC would log a C-core
    error line first); gRPC's own bind below stays the final judge."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise C4pError(f"{key} {address}: cannot listen: {exc.strerror or exc}") from None


def bind(server: grpc.aio.Server, cfg: ServeConfig) -> str:
    """Add ``listen.address`` (TCP or ``unix:``) to ``server`` with the configured credentials
    and return the address clients reach once it is started (the bound port for port 0);
    raises :class:`C4pError` naming ``listen.address`` when it cannot listen."""
    credentials = server_credentials(cfg)
    unix = is_unix(cfg.listen.address)  # agents in host namespaces reach us through a socket
    host, port = ("", 0) if unix else split_address(cfg.listen.address)
    if unix:
        target = cfg.listen.address
    else:
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if port:
            check_free(host, port, "listen.address", cfg.listen.address)
    try:
        if credentials is None:
            bound = server.add_insecure_port(target)
        else:
            bound = server.add_secure_port(target, credentials)
    except RuntimeError as exc:  # grpc: "Failed to bind to address ..."
        raise C4pError(
            f"listen.address {cfg.listen.address}: cannot listen (in use by another "
            f"process?): {exc}"
        ) from None
    if not bound and (port or unix):
        raise C4pError(f"listen.address {cfg.listen.address}: cannot listen (in use?)")
    if unix:
        return cfg.listen.address
    return f"{host}:{bound}" if ":" not in host else f"[{host}]:{bound}"
