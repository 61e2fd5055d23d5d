"""Channels from the agent to its controllers: one endpoint list, one TLS setting, both sides.

Why one place: the probe session (``AgentService.Connect``) and the binding streams
(``FlowIntentService.WatchBindings``, one per job) talk to the same controller with the same
credentials of the transport; building their channels in one function keeps the two halves of an
agent from drifting apart (another CA, other keepalives). Endpoints are tried in the configured
order by both: :func:`next_endpoint` is that order. The list and its channels, one per address,
are the client's :class:`~c4p.client.endpoints.Endpoints` (:func:`controller_endpoints`): one
home for how a controller list is parsed and its channels kept, agent and clients alike.
"""

from __future__ import annotations

from functools import partial

import grpc

from c4p.agent.config import AgentConfig
from c4p.client.endpoints import Endpoints


def channel_for(config: AgentConfig, endpoint: str) -> grpc.aio.Channel:
    """A channel to one endpoint (``unix:/path`` or ``host:port``) with the configured TLS."""
    options: list[tuple[str, str | int]] = [
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.max_receive_message_length", 16 << 20),  # a job's full binding set, in parts
    ]
    tls = config.tls
    if tls.mode == "plaintext":
        return grpc.aio.insecure_channel(endpoint, options=options)
    assert tls.ca_file is not None
    key = cert = None
    if tls.mode == "mtls":
        assert tls.key_file is not None and tls.cert_file is not None
        key, cert = tls.key_file.read_bytes(), tls.cert_file.read_bytes()
    credentials = grpc.ssl_channel_credentials(tls.ca_file.read_bytes(), key, cert)
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return grpc.aio.secure_channel(endpoint, credentials, options=options)


def next_endpoint(config: AgentConfig, attempt: int) -> str:
    """The endpoint of the ``attempt``-th try: the list in order, round and round."""
    return config.controllers[attempt % len(config.controllers)]


def controller_endpoints(config: AgentConfig) -> Endpoints[grpc.aio.Channel]:
    """The configured controllers, each dialled once with :func:`channel_for`."""
    return Endpoints(config.controllers, partial(channel_for, config))
