"""A host agent's config for a modelled fabric: what the agent tests and the agent bench both run.

Why apart: the port-mode bench (:mod:`c4p.agent.bench`) and the agent tests start the same
real daemons against the same kind of fabric; the config they give each (every NIC port the
fabric gives the host, on ``lo``, with the fabric's addresses, no OS check since those addresses
are not configured on this machine) is one rule, kept here so the bench measures what the tests
check.
"""

from __future__ import annotations

from typing import Any

from c4p.agent.config import AgentConfig
from topology.model import Fabric


def fabric_ports(fabric: Fabric, host: str) -> list[dict[str, Any]]:
    """The agent's ``ports:``: every NIC port of ``host`` in ``fabric``, on ``lo``."""
    return [
        {"port": f"{host}:{p.port.name}", "interface": "lo", "address": str(p.port.address)}
        for p in fabric.index.ports
        if p.host.name == host
    ]


def host_agent_config(
    fabric: Fabric,
    host: str,
    endpoint: str,
    token: str,
    *,
    probing: dict[str, Any] | None = None,
    ports: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> AgentConfig:
    """An agent of ``host`` talking to ``endpoint`` (``extra``: more top-level sections)."""
    return AgentConfig.model_validate(
        {
            "host": host,
            "controllers": [endpoint],
            "token": {"value": token},
            "ports": fabric_ports(fabric, host) if ports is None else ports,
            "probing": probing or {},
            "check_os": False,
            **extra,
        }
    )
