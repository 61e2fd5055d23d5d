"""Which switches c4p talks to and how: the targets file, validated into frozen models.

Why a file of its own: a session to a switch needs an address, a driver (gNMI or SNMP),
credentials, TLS material and timeouts, and an operator edits that for hundreds of switches.
So the file has ``defaults`` that every target inherits and a short entry per switch; nested
sections merge key by key, except ``credentials`` and ``tls``, which a target replaces whole
(mixing a default SNMPv3 user with a target's v2c community would be nonsense). Unknown keys
are refused, and every error names the field (``targets[3].gnmi.tls.ca_file``).

Secure by default: gNMI uses TLS unless a target says ``mode: insecure``; TLS needs a CA file
(c4p never trusts a certificate fetched from the target itself); secrets may be given inline
or, better, as the name of an environment variable (``password_env``), read when the session
opens. :func:`diff_targets` is the pure "what changed" function a running collector uses to
decide which sessions to open, close or reopen (as gnmic does).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, SecretStr, model_validator

from southbound.driver_errors import TargetConfigError
from southbound.gnmic import from_gnmic, is_gnmic
from topology.base import Frozen
from topology.model import Name, SwitchRole


class Strict(Frozen):
    """Base of every config model: unknown keys refused, instances immutable (topology.base)."""


class DriverName(StrEnum):
    """Drivers by name (see :mod:`southbound.drivers`)."""

    GNMI = "gnmi"
    SNMP = "snmp"


def _secret(target: str, field: str, value: SecretStr | None, env: str | None) -> str:
    """The secret's text, from the file or from the named environment variable."""
    if value is not None:
        return value.get_secret_value()
    if env is not None:
        text = os.environ.get(env)
        if text is None:
            raise TargetConfigError(
                f"{field}_env: environment variable {env!r} is not set", target=target
            )
        return text
    return ""


def _one_of(value: object, env: object, field: str) -> None:
    if value is not None and env is not None:
        raise ValueError(f"give {field} or {field}_env, not both")


class TlsMode(StrEnum):
    INSECURE = "insecure"
    TLS = "tls"
    MTLS = "mtls"


class TlsConfig(Strict):
    """TLS for a gNMI session: server-authenticated (``tls``), mutual (``mtls``) or none."""

    mode: TlsMode = TlsMode.TLS
    ca_file: Path | None = Field(default=None, description="CA bundle that signs the target.")
    cert_file: Path | None = Field(default=None, description="Our client certificate (mtls).")
    key_file: Path | None = Field(default=None, description="Our client key (mtls).")
    server_name: str | None = Field(
        default=None, description="Name to check in the target's certificate, if not its address."
    )

    @model_validator(mode="after")
    def _files_for_mode(self) -> Self:
        if self.mode is TlsMode.INSECURE:
            if self.ca_file or self.cert_file or self.key_file:
                raise ValueError("mode insecure takes no ca_file, cert_file or key_file")
            return self
        if self.ca_file is None:
            raise ValueError(
                f"mode {self.mode.value} needs ca_file (c4p does not trust a certificate the "
                "target presents without a CA)"
            )
        if self.mode is TlsMode.MTLS and (self.cert_file is None or self.key_file is None):
            raise ValueError("mode mtls needs cert_file and key_file")
        if self.mode is TlsMode.TLS and (self.cert_file or self.key_file):
            raise ValueError("cert_file and key_file are for mode mtls")
        return self

    def anchored(self, base: Path) -> TlsConfig:
        """The same config with relative file names taken from ``base``."""

        def fix(p: Path | None) -> Path | None:
            return p if p is None or p.is_absolute() else base / p

        return self.model_copy(
            update={
                "ca_file": fix(self.ca_file),
                "cert_file": fix(self.cert_file),
                "key_file": fix(self.key_file),
            }
        )


class GnmiCredentials(Strict):
    """Username and password sent as gRPC metadata (the gNMI convention)."""

    username: str = ""
    password: SecretStr | None = None
    password_env: str | None = None

    @model_validator(mode="after")
    def _one(self) -> Self:
        _one_of(self.password, self.password_env, "password")
        return self

    def resolve(self, target: str) -> tuple[str, str]:
        return self.username, _secret(target, "password", self.password, self.password_env)


class GnmiOptions(Strict):
    port: int = Field(default=9339, ge=1, le=65535, description="gNMI port (IANA 9339).")
    tls: TlsConfig | None = Field(
        default=None, description="Required for driver gnmi: say insecure, tls or mtls."
    )
    credentials: GnmiCredentials | None = None
    sample_interval_s: float = Field(
        default=10.0, ge=0.05, le=3600, description="SAMPLE interval for counters."
    )
    counters: bool = Field(default=True, description="Subscribe to counters (SAMPLE).")
    ecn: bool = Field(default=True, description="Also sample ECN marks where the target has them.")
    lldp_on_change: bool = Field(
        default=True,
        description="Also subscribe ON_CHANGE to LLDP neighbours where openconfig-lldp is "
        "listed (a refused subscription costs only itself).",
    )
    prefix_target: str | None = Field(
        default=None,
        min_length=1,
        description="Sent as the request prefix's target. SONiC's gNMI server refuses requests "
        "without one and serves OpenConfig under 'OC-YANG' (sonic-gnmi gNMI_usage_examples).",
    )
    origin: str | None = Field(
        default=None,
        min_length=1,
        description="Path origin, e.g. 'openconfig' where a platform needs it to pick the "
        "OpenConfig tree over its native models (NX-OS: 'openconfig' vs 'device').",
    )
    encoding: Literal["auto", "json_ietf", "json"] = Field(
        default="auto",
        description="auto: JSON_IETF if the target offers it, else JSON; either may be forced.",
    )


class SnmpV2c(Strict):
    version: Literal["2c"]
    community: SecretStr | None = None
    community_env: str | None = None

    @model_validator(mode="after")
    def _one(self) -> Self:
        _one_of(self.community, self.community_env, "community")
        if self.community is None and self.community_env is None:
            raise ValueError("give community or community_env")
        return self


class AuthProtocol(StrEnum):
    MD5 = "md5"
    SHA = "sha"
    SHA224 = "sha224"
    SHA256 = "sha256"
    SHA384 = "sha384"
    SHA512 = "sha512"


class PrivProtocol(StrEnum):
    DES = "des"
    TRIPLE_DES = "3des"
    AES128 = "aes128"
    AES192 = "aes192"
    AES256 = "aes256"


class SnmpV3(Strict):
    """SNMPv3 USM user with authentication and privacy (authPriv); nothing weaker is offered."""

    version: Literal["3"]
    user: str = Field(min_length=1)
    auth_protocol: AuthProtocol = AuthProtocol.SHA256
    auth_key: SecretStr | None = None
    auth_key_env: str | None = None
    priv_protocol: PrivProtocol = PrivProtocol.AES128
    priv_key: SecretStr | None = None
    priv_key_env: str | None = None
    context: str = Field(default="", description="SNMPv3 context name (selects a virtual agent).")

    @model_validator(mode="after")
    def _keys(self) -> Self:
        for field in ("auth_key", "priv_key"):
            value, env = getattr(self, field), getattr(self, f"{field}_env")
            _one_of(value, env, field)
            if value is None and env is None:
                raise ValueError(f"authPriv needs {field} or {field}_env")
            if value is not None and len(value.get_secret_value()) < 8:
                raise ValueError(f"{field} must be at least 8 characters (RFC 3414)")
        return self

    def keys(self, target: str) -> tuple[str, str]:
        auth = _secret(target, "auth_key", self.auth_key, self.auth_key_env)
        priv = _secret(target, "priv_key", self.priv_key, self.priv_key_env)
        return auth, priv


SnmpCredentials = Annotated[SnmpV2c | SnmpV3, Field(discriminator="version")]


class SnmpOptions(Strict):
    port: int = Field(default=161, ge=1, le=65535)
    credentials: SnmpCredentials | None = None
    poll_interval_s: float = Field(default=30.0, ge=0.05, le=3600)
    retries: int = Field(default=1, ge=0, le=10)
    max_repetitions: int = Field(default=25, ge=1, le=200)
    source_address: ipaddress.IPv4Address | None = Field(
        default=None, description="Local address to send from (default: any)."
    )


class Timeouts(Strict):
    connect_s: float = Field(default=5.0, gt=0, le=300, description="Channel establishment.")
    rpc_s: float = Field(default=10.0, gt=0, le=600, description="Each Capabilities/Get/walk.")
    retry_initial_s: float = Field(default=1.0, gt=0, le=600, description="First retry delay.")
    retry_max_s: float = Field(default=60.0, gt=0, le=3600, description="Backoff ceiling.")
    stream_silence_s: float | None = Field(
        default=None,
        gt=0,
        description="A stream silent this long is broken (default: 3 sample intervals + rpc_s).",
    )


class TargetConfig(Strict):
    """One switch session. ``role``/``plane``/``pod``/``mgmt_address`` are hints for discovery."""

    name: Name = Field(description="The switch's name, as its LLDP neighbors know it.")
    address: str = Field(min_length=1, description="Host name or IP address of the target.")
    driver: DriverName = DriverName.GNMI
    gnmi: GnmiOptions = GnmiOptions()
    snmp: SnmpOptions = SnmpOptions()
    timeouts: Timeouts = Timeouts()
    role: SwitchRole | None = None
    plane: int | None = Field(default=None, ge=0)
    pod: int | None = Field(default=None, ge=0)
    mgmt_address: ipaddress.IPv4Address | None = None

    @model_validator(mode="after")
    def _driver_ready(self) -> Self:
        if self.driver is DriverName.SNMP and self.snmp.credentials is None:
            raise ValueError("driver snmp needs snmp.credentials (v2c community or v3 user)")
        if self.driver is DriverName.GNMI and self.gnmi.tls is None:
            raise ValueError(
                "driver gnmi needs gnmi.tls: mode insecure, tls (with ca_file) or mtls "
                "(there is no silent default)"
            )
        return self

    @property
    def stream_silence_s(self) -> float:
        if self.timeouts.stream_silence_s is not None:
            return self.timeouts.stream_silence_s
        interval = (
            self.gnmi.sample_interval_s
            if self.driver is DriverName.GNMI
            else self.snmp.poll_interval_s
        )
        return 3 * interval + self.timeouts.rpc_s


_REPLACED_WHOLE = frozenset({"credentials", "tls"})


def _merge(base: Any, over: Any) -> Any:
    """Deep-merge mappings (``over`` wins); ``credentials``/``tls`` are replaced whole."""
    if not isinstance(base, Mapping) or not isinstance(over, Mapping):
        return over
    out = dict(base)
    for key, value in over.items():
        if key in out and key not in _REPLACED_WHOLE:
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class TargetDefaults(Strict):
    """What every target inherits unless it says otherwise."""

    driver: DriverName | None = None
    gnmi: dict[str, Any] | None = None
    snmp: dict[str, Any] | None = None
    timeouts: dict[str, Any] | None = None


def with_default_driver(data: Any, driver: str) -> Any:
    """``data`` (a targets file, not yet validated) with ``driver`` for the targets that name
    none (``c4p serve``'s ``fabric.source``). A gnmic file is left as it is: its targets are
    gNMI ones, and it is read by the same code as ``c4p fabric discover`` reads it."""
    if is_gnmic(data) or not isinstance(data, Mapping):
        return data
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping) or defaults.get("driver") is not None:
        return data
    return {**data, "defaults": {**defaults, "driver": driver}}


class TargetsFile(Strict):
    """The targets file: ``defaults`` and one entry per switch (names unique); or gnmic's
    target file (``targets`` a mapping, :mod:`southbound.gnmic`)."""

    defaults: TargetDefaults = TargetDefaults()
    targets: tuple[TargetConfig, ...] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _apply_defaults(cls, data: Any) -> Any:
        if is_gnmic(data):  # gnmic's target file (see southbound.gnmic)
            data = from_gnmic(data)
        if not isinstance(data, Mapping) or not isinstance(data.get("targets"), list):
            return data
        defaults = data.get("defaults") or {}
        if not isinstance(defaults, Mapping):
            return data
        inherited = {k: v for k, v in defaults.items() if v is not None}
        merged = [_merge(inherited, t) if isinstance(t, Mapping) else t for t in data["targets"]]
        return {**data, "targets": merged}

    @model_validator(mode="after")
    def _unique(self) -> Self:
        seen: dict[str, int] = {}
        for i, target in enumerate(self.targets):
            if target.name in seen:
                raise ValueError(
                    f"targets[{i}].name: duplicate target {target.name!r} "
                    f"(first at targets[{seen[target.name]}])"
                )
            seen[target.name] = i
        return self

    def anchored(self, base: Path) -> TargetsFile:
        """Relative certificate paths are relative to the targets file's directory."""
        targets = tuple(
            t
            if t.gnmi.tls is None
            else t.model_copy(
                update={"gnmi": t.gnmi.model_copy(update={"tls": t.gnmi.tls.anchored(base)})}
            )
            for t in self.targets
        )
        return self.model_copy(update={"targets": targets})

    def by_name(self) -> dict[str, TargetConfig]:
        return {t.name: t for t in self.targets}


@dataclass(frozen=True)
class TargetsDiff:
    """What to do to go from one set of sessions to another (pure, see :func:`diff_targets`)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def diff_targets(
    current: Mapping[str, TargetConfig] | Sequence[TargetConfig],
    new: Mapping[str, TargetConfig] | Sequence[TargetConfig],
) -> TargetsDiff:
    """Sessions to open (``added``), close (``removed``) and reopen (``changed``)."""

    def as_map(x: Mapping[str, TargetConfig] | Sequence[TargetConfig]) -> dict[str, TargetConfig]:
        return dict(x) if isinstance(x, Mapping) else {t.name: t for t in x}

    old, fresh = as_map(current), as_map(new)
    return TargetsDiff(
        added=tuple(sorted(fresh.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - fresh.keys())),
        changed=tuple(sorted(n for n in old.keys() & fresh.keys() if old[n] != fresh[n])),
        unchanged=tuple(sorted(n for n in old.keys() & fresh.keys() if old[n] == fresh[n])),
    )


class FabricSource(Strict):
    """Where the controller gets its fabric (``c4p serve`` config ``fabric:``).

    ``file``: a declared fabric file (``path``). ``gnmi`` / ``snmp``: discovered from the
    switches listed in ``targets`` (the source is the driver of targets that name none), then
    kept current from their streams; ``declared`` optionally fills what switches cannot tell
    (addresses, roles, drained links) and ``nic_network`` gives the rest of the NIC ports one.
    """

    source: Literal["file", "gnmi", "snmp"] = Field(
        default="file", description="Where the fabric comes from."
    )
    path: Path | None = Field(default=None, description="source file: the fabric file.")
    targets: Path | None = Field(default=None, description="source gnmi/snmp: the targets file.")
    declared: Path | None = Field(
        default=None, description="source gnmi/snmp: a fabric file for hints (optional)."
    )
    nic_network: ipaddress.IPv4Network | None = Field(
        default=None, description="source gnmi/snmp: addresses for NIC ports nobody gives one."
    )
    name: Name | None = Field(default=None, description="Name of the discovered fabric.")
    attempts: int = Field(default=2, ge=1, le=10, description="Discovery tries per target.")
    rediscover_s: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="source gnmi/snmp: compare a fresh snapshot with the fabric in force this "
        "often; wiring changes are re-planned and logged, a snapshot that lost most of the "
        "fabric is held as suspect (0: off).",
    )

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.source == "file":
            if self.path is None:
                raise ValueError("source file needs path (a fabric file)")
            extra = [k for k in ("targets", "declared", "nic_network") if getattr(self, k)]
            if extra:
                raise ValueError(f"{', '.join(extra)}: only for source gnmi or snmp")
        else:
            if self.targets is None:
                raise ValueError(f"source {self.source} needs targets (a targets file)")
            if self.path is not None:
                raise ValueError(
                    f"path: not for source {self.source} (give a declared fabric as declared)"
                )
        return self

    @property
    def discovered(self) -> bool:
        return self.source != "file"
