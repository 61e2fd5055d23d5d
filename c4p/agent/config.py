"""The agent's config file (``c4p agent --config FILE``) and its check against the OS.

Why the agent has its own limits and checks the OS itself: the agent is the last line of safety
before packets leave a GPU host. The controller decides what to probe, but an agent must never
become a packet cannon for a confused or compromised controller, so it holds its own ceiling on
probes per second, its own TTL and batch limits, and sends only from the addresses this file
gives it, and only once the OS confirms that each address is really configured on the named
interface (``ip -j addr``; a typo would otherwise send probes from an address the host does not
own, which the kernel refuses anyway, or worse, from someone else's).

One agent, one config, two sides: ``ports`` (the probe side, a session with the controller's
``AgentService``) and an optional ``bindings`` section (the binding side: one ``WatchBindings``
stream per job of this host, served to the host's ranks on a Unix socket). Both sides use the
same ``host``, ``controllers`` (tried in order) and ``tls``. Either side may be left out, not
both: a host whose agent may not send raw packets (no CAP_NET_RAW, or a site that does not
probe) lists no ``ports`` and needs no agent ``token``; it then only serves bindings (the ranks'
job tokens authenticate its streams).

The file is YAML or JSON, validated into frozen models that refuse unknown keys; relative paths
(TLS files, token file, socket, state directory) are read from the file's directory. Example::

    host: h0003
    controllers: ["unix:/run/c4p/controller.sock"]   # or host:port, tried in order
    token: {env: C4P_AGENT_TOKEN}   # needed with ports
    tls: {mode: plaintext}          # tls (ca_file) | mtls (ca_file, cert_file, key_file)
    ports:
      - {port: "h0003:nic0p0", interface: eth0, address: 198.18.3.10}
    probing: {max_probes_per_s: 800, burst: 200, max_wait_s: 2, max_batch: 20000, max_ttl: 16}
    reconnect: {initial_s: 0.2, max_s: 10}
    bindings:
      socket: {path: /run/c4p/agent.sock, group: training, mode: "0660", allowed_gids: [2000]}
      state_dir: /var/lib/c4p/agent
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from c4p.agent.local_config import BindingsSection
from c4p.endpoints import Secret, split_address
from c4p.files import load_model
from topology.errors import FabricFileError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_WIRE_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_endpoint(address: str) -> str:
    """``unix:/path`` or ``host:port``; ``ValueError`` naming the problem."""
    if address.startswith("unix:"):
        if not address.removeprefix("unix:").lstrip("/"):
            raise ValueError(f"{address!r}: a unix address needs a path (unix:/run/c4p.sock)")
        return address
    split_address(address)
    return address


class AgentPortConfig(_Strict):
    """One NIC port the agent probes from."""

    port: str = Field(description='The fabric\'s name of the NIC port, "<host>:<port>".')
    interface: str = Field(min_length=1, max_length=15, description="The OS interface.")
    address: IPAddress = Field(description="The port's address, configured on the interface.")


class AgentTls(_Strict):
    mode: Literal["plaintext", "tls", "mtls"] = "plaintext"
    ca_file: Path | None = Field(default=None, description="CA of the controller's certificate.")
    cert_file: Path | None = Field(default=None, description="The agent's certificate (mtls).")
    key_file: Path | None = Field(default=None, description="The agent's private key (mtls).")
    server_name: str | None = Field(default=None, description="Expected name in the server cert.")

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.mode != "plaintext" and self.ca_file is None:
            raise ValueError(f"mode {self.mode!r} needs ca_file")
        if self.mode == "mtls" and (self.cert_file is None or self.key_file is None):
            raise ValueError("mode 'mtls' needs cert_file and key_file")
        return self


class ProbingLimits(_Strict):
    """The agent's own ceiling; the controller's may only lower it."""

    max_probes_per_s: float = Field(default=800.0, gt=0, le=100_000, description="Packets/s.")
    burst: int = Field(default=200, ge=1, le=100_000, description="Packets sent back to back.")
    max_wait_s: float = Field(
        default=2.0, ge=0, le=60, description="Pacing wait a batch may take before it is refused."
    )
    max_batch: int = Field(default=20_000, ge=1, le=1_000_000, description="Probes per batch.")
    max_ttl: int = Field(default=16, ge=1, le=255, description="Highest TTL the agent sends.")


class ReconnectSettings(_Strict):
    initial_s: float = Field(default=0.2, gt=0, le=60)
    max_s: float = Field(default=10.0, gt=0, le=600)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max_s < self.initial_s:
            raise ValueError("max_s must be at least initial_s")
        return self


class AgentConfig(_Strict):
    """Everything ``c4p agent`` needs (see the module docstring)."""

    host: str = Field(min_length=1, description="The fabric's name of this host.")
    controllers: tuple[str, ...] = Field(min_length=1, description="Endpoints, tried in order.")
    token: Secret | None = Field(
        default=None, description="The agent credential the controller gives this host (probing)."
    )
    tls: AgentTls = AgentTls()
    ports: tuple[AgentPortConfig, ...] = Field(
        default=(), description="NIC ports to probe from; none: a bindings-only agent."
    )
    probing: ProbingLimits = ProbingLimits()
    reconnect: ReconnectSettings = ReconnectSettings()
    check_os: bool = Field(default=True, description="Check each port's address on the OS.")
    bindings: BindingsSection | None = Field(
        default=None, description="Serve this host's ranks their bindings (libc4p)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.ports and self.bindings is None:
            raise ValueError("nothing to do: give ports (probing), a bindings section, or both")
        if self.ports and self.token is None:
            raise ValueError("token: needed to probe (ports are given)")
        if self.bindings is not None and not _WIRE_HOST.match(self.host):
            raise ValueError(
                f"host: {self.host!r} cannot be served to ranks (letters, digits, '.', '_', '-';"
                " at most 128)"
            )
        for i, endpoint in enumerate(self.controllers):
            try:
                check_endpoint(endpoint)
            except ValueError as exc:
                raise ValueError(f"controllers[{i}]: {exc}") from None
        seen: set[str] = set()
        for i, port in enumerate(self.ports):
            host, sep, _ = port.port.partition(":")
            if not sep or host != self.host:
                raise ValueError(
                    f"ports[{i}].port: {port.port!r} is not a port of host {self.host!r} "
                    f"(write '{self.host}:<port>')"
                )
            if str(port.address) in seen:
                raise ValueError(f"ports[{i}].address: {port.address} is given twice")
            seen.add(str(port.address))
        for i, endpoint in enumerate(self.controllers):
            if self.tls.mode == "plaintext" and not _local(endpoint):
                raise ValueError(
                    f"controllers[{i}]: plaintext only to loopback or unix: addresses, "
                    f"not {endpoint!r}; set tls.mode"
                )
        return self

    def relative_to(self, base: Path) -> AgentConfig:
        def fix(p: Path | None) -> Path | None:
            return p if p is None or p.is_absolute() else base / p

        tls = self.tls.model_copy(
            update={k: fix(getattr(self.tls, k)) for k in ("ca_file", "cert_file", "key_file")}
        )
        token = (
            None
            if self.token is None
            else self.token.model_copy(update={"file": fix(self.token.file)})
        )
        bindings = None if self.bindings is None else self.bindings.relative_to(base)
        return self.model_copy(update={"tls": tls, "token": token, "bindings": bindings})

    def problems(self) -> list[tuple[str, str]]:
        """Missing files and an unusable token (all at once)."""
        found = [
            (f"tls.{k}", f"no such file: {getattr(self.tls, k)}")
            for k in ("ca_file", "cert_file", "key_file")
            if getattr(self.tls, k) is not None and not Path(getattr(self.tls, k)).is_file()
        ]
        if self.token is not None:
            try:
                self.token.resolve()
            except (OSError, ValueError) as exc:
                found.append(("token", str(exc)))
        if self.bindings is not None:
            found.extend(self.bindings.socket.problems())
        return found


def _local(endpoint: str) -> bool:
    if endpoint.startswith("unix:"):
        return True
    host, _ = split_address(endpoint)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def os_addresses() -> dict[str, set[str]]:
    """Interface name -> addresses configured on it, as the kernel reports (``ip -j addr``).

    Why ``ip``: Python's standard library has ``socket.if_nameindex`` (names) but no
    ``getifaddrs``; iproute2's JSON output is the kernel's own netlink answer. Interfaces without
    addresses are listed with an empty set (from ``if_nameindex``) so that the error can say
    "no such address" rather than "no such interface".
    """
    found: dict[str, set[str]] = {name: set() for _, name in socket.if_nameindex()}
    try:
        out = subprocess.run(
            ["ip", "-j", "addr", "show"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise FabricFileError("ip -j addr", [("", f"cannot list addresses: {exc}")]) from None
    for link in json.loads(out or "[]"):
        name = str(link.get("ifname", ""))
        for info in link.get("addr_info", []):
            found.setdefault(name, set()).add(str(info.get("local", "")))
    return found


def check_os(config: AgentConfig, present: dict[str, set[str]] | None = None) -> None:
    """Refuse ports whose interface is missing or does not hold the address (all at once)."""
    present = os_addresses() if present is None else present
    found: list[tuple[str, str]] = []
    for i, port in enumerate(config.ports):
        where = f"ports[{i}]"
        if port.interface not in present:
            found.append((f"{where}.interface", f"no interface {port.interface!r} on this host"))
        elif str(port.address) not in present[port.interface]:
            held = ", ".join(sorted(present[port.interface])) or "none"
            found.append(
                (
                    f"{where}.address",
                    f"{port.address} is not configured on {port.interface} (it has: {held})",
                )
            )
    if found:
        raise FabricFileError("agent ports vs the OS", found)


def load_agent_config(path: Path, *, os_check: bool | None = None) -> AgentConfig:
    """Read, validate and check an agent config (files, token, and the OS unless told not)."""
    config = load_model(AgentConfig, path).relative_to(path.resolve().parent)
    found = config.problems()
    if found:
        raise FabricFileError(str(path), found)
    if config.check_os if os_check is None else os_check:
        check_os(config)
    return config
