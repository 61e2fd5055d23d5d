"""``c4p serve``: the controller service's configuration and its entry point, :func:`run`.

Why validate everything before starting: a controller that starts, binds a port and then fails
on a missing certificate or an unset admin token leaves a half-working service that load
balancers may already route to. :func:`load_config` reads the YAML/JSON file into frozen models
that refuse unknown keys, resolves relative paths against the config file's directory, checks
that every file exists and every secret resolves, and raises one
:class:`~topology.errors.FabricFileError` naming the file, each field and the reason.

Security rules enforced here: plaintext gRPC only on a loopback address (development); ``tls``
needs a certificate and key; ``mtls`` also a client CA; the admin credential comes from an
environment variable or a file (a literal ``admin_token`` is accepted for tests and demos).

The fabric comes from a file (``fabric.source: file``) or from discovery (``gnmi`` / ``snmp``:
the switches of a targets file are asked at start-up, then their streams' link events feed
:meth:`c4p.controller.loop.ControllerLoop.observe_link`; see :mod:`c4p.service.runtime`). The
targets file is read and checked here too, so a bad one stops ``c4p serve`` before it binds.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Literal, Self, TypeVar

from pydantic import Field, ValidationError, model_validator

from c4p.controller.deviation import DeviationSettings
from c4p.controller.intake import IntakeLimits
from c4p.controller.learning import PortMode, PortsSettings
from c4p.controller.loop import LoopSettings
from c4p.controller.modes import RolloutSettings
from c4p.controller.reconcile import PlannerSettings
from c4p.controller.triggers import FlapSettings
from c4p.detector.respond import DetectorConfig
from c4p.endpoints import Secret as Secret  # re-exported: the controller config uses it
from c4p.endpoints import split_address as split_address
from c4p.files import load_model, read_text
from c4p.service.access import RateSettings
from c4p.store.sqlite import Synchronous
from southbound.targets import DriverName, FabricSource, TargetsFile, with_default_driver
from topology.base import Frozen
from topology.errors import FabricFileError
from topology.formats import TextFormat, parse_data, problems_of

LOOPBACK_NAMES = ("localhost",)


class Strict(Frozen):
    """Every config section: unknown keys refused, immutable, finite numbers (topology.base)."""


def is_unix(address: str) -> bool:
    """``unix:/path``: a Unix socket (local only, like loopback)."""
    return address.startswith("unix:")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


FabricConfig = FabricSource
"""``fabric:``: ``source: file`` with ``path``, or ``source: gnmi | snmp`` with ``targets``."""


def load_targets(fabric: FabricSource) -> TargetsFile:
    """The targets file of a discovery source; ``fabric.source`` is the driver of the targets
    that name none (``defaults.driver`` and a target's own ``driver`` win), and certificate
    paths are relative to the file."""
    assert fabric.targets is not None
    name = str(fabric.targets)
    data = parse_data(read_text(fabric.targets), TextFormat.for_name(fabric.targets), name)
    data = with_default_driver(data, fabric.source)  # a gnmic file as discover reads it
    try:
        targets = TargetsFile.model_validate(data)
    except ValidationError as exc:
        raise FabricFileError(name, problems_of(exc)) from None
    return targets.anchored(fabric.targets.parent)


def _targets_problems(fabric: FabricSource) -> list[tuple[str, str]]:
    """A discovery source's targets file: readable, valid, its TLS files there."""
    try:
        targets = load_targets(fabric)
    except FabricFileError as exc:
        return [("fabric.targets", line) for line in str(exc).splitlines()]
    found: list[tuple[str, str]] = []
    for i, target in enumerate(targets.targets):
        tls = target.gnmi.tls if target.driver is DriverName.GNMI else None
        for key in ("ca_file", "cert_file", "key_file"):
            path = getattr(tls, key, None)
            if path is not None and not Path(path).is_file():
                where = f"fabric.targets: targets[{i}] ({target.name}).gnmi.tls.{key}"
                found.append((where, f"no such file: {path}"))
    return found


class ListenConfig(Strict):
    address: str = Field(
        default="127.0.0.1:50051", description="host:port (port 0: any free) or unix:/path."
    )
    max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    grace_s: float = Field(default=5.0, ge=0, description="Shutdown: time given to calls.")

    @model_validator(mode="after")
    def _address(self) -> Self:
        if is_unix(self.address):
            if not self.address.removeprefix("unix:").startswith("/"):
                raise ValueError(f"{self.address!r}: write unix:/absolute/path")
        else:
            split_address(self.address)
        return self


class TlsConfig(Strict):
    mode: Literal["plaintext", "tls", "mtls"] = "plaintext"
    cert_file: Path | None = Field(default=None, description="Server certificate (PEM).")
    key_file: Path | None = Field(default=None, description="Server private key (PEM).")
    client_ca_file: Path | None = Field(default=None, description="CA of client certs (mtls).")

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.mode != "plaintext" and (self.cert_file is None or self.key_file is None):
            raise ValueError(f"mode {self.mode!r} needs cert_file and key_file")
        if self.mode == "mtls" and self.client_ca_file is None:
            raise ValueError("mode 'mtls' needs client_ca_file")
        return self


class RegistrationSecret(Secret):
    """A launcher's credential for RegisterJob and the hosts it may place ranks on."""

    hosts: tuple[str, ...] = Field(
        default=("*",),
        min_length=1,
        description="Glob patterns of the hosts this credential may register ranks on.",
    )


class AuthConfig(Strict):
    admin: list[Secret] = Field(default_factory=list, description="Admin credentials.")
    registration: list[RegistrationSecret] = Field(
        default_factory=list,
        description="Credentials for RegisterJob, each with its hosts (none: open, which is "
        "allowed on a loopback listener or behind mtls only).",
    )
    admin_client_names: tuple[str, ...] = Field(
        default=(), description="With mtls: admin calls also need one of these certificate CNs."
    )


class AgentCredential(Strict):
    """The credential of the agents of some hosts (one per host is best)."""

    hosts: tuple[str, ...] = Field(min_length=1, description="Hosts this credential acts for.")
    token: Secret


class AgentsConfig(Strict):
    """``agents:``: who may connect as a host agent, and the controller's probing ceiling."""

    credentials: list[AgentCredential] = Field(default_factory=list)
    require_client_name: bool = Field(
        default=False, description="With mtls: the agent's certificate CN must be its host."
    )
    max_probes_per_s: float = Field(default=800.0, gt=0, le=100_000)
    batch_timeout_s: float = Field(default=30.0, gt=0, le=600)

    def tokens(self) -> dict[str, list[str]]:
        """Host -> the tokens that may act for it."""
        out: dict[str, list[str]] = {}
        for credential in self.credentials:
            token = credential.token.resolve()
            for host in credential.hosts:
                out.setdefault(host, []).append(token)
        return out


class EtcdTlsConfig(Strict):
    ca_file: Path = Field(description="CA of the etcd members' certificates (PEM).")
    cert_file: Path | None = Field(default=None, description="Client certificate (etcd mTLS).")
    key_file: Path | None = Field(default=None, description="Client key (etcd mTLS).")

    @model_validator(mode="after")
    def _pair(self) -> Self:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give both cert_file and key_file, or neither")
        return self


class StoreConfig(Strict):
    """``store:``: ``kind: sqlite`` (one controller, the default) or ``kind: etcd`` (replicas)."""

    kind: Literal["sqlite", "etcd"] = "sqlite"
    path: Path = Field(default=Path("c4p-controller.db"), description="SQLite file.")
    synchronous: Synchronous = Synchronous.FULL
    tombstone_horizon: int = Field(default=1000, ge=1, description="Epochs a resume may span.")
    check_s: float = Field(
        default=5.0,
        gt=0,
        le=86_400,
        description="How often the SQLite file's identity is checked besides before each commit.",
    )
    endpoints: tuple[str, ...] = Field(default=(), description="etcd members, host:port.")
    prefix: str = Field(default="/c4p/", min_length=1, max_length=128, pattern=r"^/[\x21-\x7e]*$")
    tls: EtcdTlsConfig | None = Field(default=None, description="TLS toward etcd (none: plain).")
    lease_ttl_s: int = Field(default=3, ge=2, le=60, description="Leader lease; failover bound.")
    timeout_s: float = Field(default=2.0, gt=0, le=60, description="Deadline of one etcd call.")

    @model_validator(mode="after")
    def _etcd(self) -> Self:
        if self.kind == "etcd":
            if not self.endpoints:
                raise ValueError("kind 'etcd' needs endpoints (host:port of each member)")
            for endpoint in self.endpoints:
                host, _ = split_address(endpoint)
                if self.tls is None and not is_loopback(host):
                    raise ValueError(
                        f"endpoints: plaintext etcd is allowed on loopback only, not {host!r}; "
                        "set tls"
                    )
        return self


class ReplicaConfig(Strict):
    """``replica:`` (with ``store.kind: etcd``): this replica's identity in the election."""

    name: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        min_length=1,
        max_length=128,
    )
    advertise: str | None = Field(
        default=None, description="host:port clients dial (default: the bound listen address)."
    )
    poll_s: float = Field(default=0.2, gt=0, le=10, description="How often a follower campaigns.")

    @model_validator(mode="after")
    def _address(self) -> Self:
        if self.advertise:
            split_address(self.advertise)
        return self


class LimitsConfig(Strict):
    rate: RateSettings = RateSettings()
    intake: IntakeLimits = IntakeLimits()
    max_streams_per_job: int = Field(default=64, ge=1)
    max_streams: int = Field(default=20_000, ge=1)


class MetricsConfig(Strict):
    address: str | None = Field(
        default="127.0.0.1:9464", description="host:port of /metrics (null: off)."
    )
    allow_remote: bool = Field(
        default=False,
        description="Serve /metrics (plain HTTP, no authentication) on a non-loopback address.",
    )

    @model_validator(mode="after")
    def _address(self) -> Self:
        if self.address:
            split_address(self.address)
        return self


class LoggingConfig(Strict):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "text"] = "json"


class ServeConfig(Strict):
    """Everything ``c4p serve`` needs (see ``configs/controller.yaml``)."""

    fabric: FabricConfig
    listen: ListenConfig = ListenConfig()
    tls: TlsConfig = TlsConfig()
    auth: AuthConfig = AuthConfig()
    store: StoreConfig = StoreConfig()
    replica: ReplicaConfig = Field(default_factory=ReplicaConfig)
    planner: PlannerSettings = PlannerSettings()
    controller: LoopSettings = LoopSettings()
    flap: FlapSettings = FlapSettings()
    rollout: RolloutSettings = RolloutSettings()
    limits: LimitsConfig = LimitsConfig()
    metrics: MetricsConfig = MetricsConfig()
    logging: LoggingConfig = LoggingConfig()
    stream_check_s: float = Field(default=5.0, gt=0, le=300)
    agents: AgentsConfig = AgentsConfig()
    ports: PortsSettings = PortsSettings()
    deviation: DeviationSettings = DeviationSettings()
    detector: DetectorConfig = DetectorConfig()

    @property
    def port_mode(self) -> PortMode:
        """``ports.mode``, or learned when agents are configured, else predicted."""
        if self.ports.mode is not None:
            return self.ports.mode
        return PortMode.LEARNED if self.agents.credentials else PortMode.PREDICTED

    @model_validator(mode="after")
    def _secure(self) -> Self:
        if self.ports.mode in (PortMode.LEARNED, PortMode.VERIFIED) and not self.agents.credentials:
            raise ValueError(
                f"ports.mode: {self.ports.mode.value!r} needs host agents; give "
                "agents.credentials (or use mode 'predicted')"
            )
        if self.agents.require_client_name and self.tls.mode != "mtls":
            raise ValueError("agents.require_client_name needs tls.mode mtls")
        if is_unix(self.listen.address):
            return self
        host, _ = split_address(self.listen.address)
        if self.tls.mode == "plaintext" and not is_loopback(host):
            raise ValueError(
                f"listen.address: plaintext is allowed on loopback only, not {host!r}; "
                "set tls.mode to tls or mtls"
            )
        if self.auth.admin_client_names and self.tls.mode != "mtls":
            raise ValueError("auth.admin_client_names needs tls.mode mtls")
        if not is_loopback(host) and self.tls.mode != "mtls" and not self.auth.registration:
            raise ValueError(
                f"listen.address {host!r} is not loopback: RegisterJob would be open to anyone "
                "who reaches it (and could claim every free NIC); give auth.registration "
                "credentials (with the hosts each may register) or use tls.mode mtls"
            )
        if self.metrics.address and not self.metrics.allow_remote:
            m_host, _ = split_address(self.metrics.address)
            if not is_loopback(m_host):
                raise ValueError(
                    f"metrics.address {self.metrics.address!r} is not loopback: /metrics is "
                    "plain HTTP without authentication; bind it to loopback (and scrape "
                    "through a proxy) or set metrics.allow_remote: true"
                )
        return self

    def relative_to(self, base: Path) -> ServeConfig:
        """Relative paths resolved against ``base`` (the config file's directory)."""

        def fix(p: Path | None) -> Path | None:
            """Absolute and absent paths stay as they are (an absolute ``store.path`` was
            once turned into ``None``, a file named "None" in the working directory)."""
            return p if p is None or p.is_absolute() else base / p

        def secrets(items: list[S]) -> list[S]:
            return [s.model_copy(update={"file": fix(s.file)}) for s in items]

        tls = self.tls
        return self.model_copy(
            update={
                "fabric": self.fabric.model_copy(
                    update={
                        k: fix(getattr(self.fabric, k)) for k in ("path", "targets", "declared")
                    }
                ),
                "store": self.store.model_copy(
                    update={
                        "path": fix(self.store.path),
                        "tls": None
                        if self.store.tls is None
                        else self.store.tls.model_copy(
                            update={
                                k: fix(getattr(self.store.tls, k)) or getattr(self.store.tls, k)
                                for k in ("ca_file", "cert_file", "key_file")
                            }
                        ),
                    }
                ),
                "tls": tls.model_copy(
                    update={
                        k: fix(getattr(tls, k)) for k in ("cert_file", "key_file", "client_ca_file")
                    }
                ),
                "auth": self.auth.model_copy(
                    update={
                        "admin": secrets(self.auth.admin),
                        "registration": secrets(self.auth.registration),
                    }
                ),
                "agents": self.agents.model_copy(
                    update={
                        "credentials": [
                            c.model_copy(update={"token": secrets([c.token])[0]})
                            for c in self.agents.credentials
                        ]
                    }
                ),
            }
        )

    def problems(self) -> list[tuple[str, str]]:
        """What cannot be used as configured: missing files, unresolvable secrets."""
        found: list[tuple[str, str]] = []
        files = [(f"fabric.{k}", getattr(self.fabric, k)) for k in ("path", "targets", "declared")]
        files += [
            (f"tls.{k}", getattr(self.tls, k)) for k in ("cert_file", "key_file", "client_ca_file")
        ]
        if self.store.tls is not None:
            files += [
                (f"store.tls.{k}", getattr(self.store.tls, k))
                for k in ("ca_file", "cert_file", "key_file")
            ]
        for where, path in files:
            if path is not None and not Path(path).is_file():
                found.append((where, f"no such file: {path}"))
        if self.fabric.discovered and self.fabric.targets and Path(self.fabric.targets).is_file():
            found += _targets_problems(self.fabric)
        for group in ("admin", "registration"):
            for i, secret in enumerate(getattr(self.auth, group)):
                try:
                    secret.resolve()
                except (OSError, ValueError) as exc:
                    found.append((f"auth.{group}[{i}]", str(exc)))
        for i, credential in enumerate(self.agents.credentials):
            try:
                credential.token.resolve()
            except (OSError, ValueError) as exc:
                found.append((f"agents.credentials[{i}].token", str(exc)))
        return found

    def admin_tokens(self) -> list[str]:
        return [s.resolve() for s in self.auth.admin]

    def register_tokens(self) -> list[tuple[str, tuple[str, ...]]]:
        """Each registration credential with the host patterns it may register on."""
        return [(s.resolve(), s.hosts) for s in self.auth.registration]


S = TypeVar("S", bound=Secret)


def check(config: ServeConfig, source: str = "<config>") -> ServeConfig:
    """Refuse a config whose files or secrets cannot be used (all problems at once)."""
    found = config.problems()
    if found:
        raise FabricFileError(source, found)
    return config


def load_config(path: Path) -> ServeConfig:
    """Read, validate and check a config file (see the module docstring)."""
    config = load_model(ServeConfig, path).relative_to(path.resolve().parent)
    return check(config, str(path))
