"""Configuration of the agent's binding side: the local socket, the state directory, the
controller it watches.

Why its own model: the host agent (``c4p agent``) composes several components, each with its own
section; this is the ``bindings`` section, validated on its own so the local API can run (and
be tested) as a process of its own: ``python -m c4p.agent.local --config FILE``. Unknown keys
are refused; relative paths are read from the config file's directory.
"""

from __future__ import annotations

import grp
import os
import pwd
from enum import StrEnum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from c4p.client.wire import ClientTls


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsMode(StrEnum):
    PLAINTEXT = "plaintext"
    TLS = "tls"
    MTLS = "mtls"


class ControllerEndpoint(_Frozen):
    """The controller (``c4p serve``) the agent holds its job streams with."""

    address: str = Field(min_length=3, examples=["127.0.0.1:50051"])
    tls: TlsMode = TlsMode.PLAINTEXT
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None

    def client_tls(self) -> ClientTls | None:
        if self.tls == TlsMode.PLAINTEXT:
            return None
        if self.ca_file is None:
            raise ValueError("controller.ca_file: needed with tls or mtls")
        if self.tls == TlsMode.MTLS and (self.cert_file is None or self.key_file is None):
            raise ValueError("controller.cert_file/key_file: needed with mtls")
        return ClientTls(self.ca_file, self.cert_file, self.key_file, self.server_name)


class SocketConfig(_Frozen):
    """The Unix socket the ranks connect to, and who may.

    Two gates: the file's owner, group and mode (the kernel refuses ``connect`` without write
    permission), then the peer's credentials as the kernel reports them (``SO_PEERCRED``): a
    peer whose uid is not in ``allowed_uids`` and whose gid is not in ``allowed_gids`` is refused
    with ``PERMISSION``. Both lists empty: root and the agent's own uid only.
    """

    path: Path = Path("/run/c4p/agent.sock")
    owner: str | None = None  # user name or uid; None: the agent's
    group: str | None = None  # group name or gid; None: the agent's
    mode: str = Field(default="0660", pattern=r"^0?[0-7]{3}$")
    allowed_uids: tuple[int, ...] = ()
    allowed_gids: tuple[int, ...] = ()

    @field_validator("path")
    @classmethod
    def _short(cls, value: Path) -> Path:
        if len(os.fsencode(value)) > 107:  # sun_path is 108 bytes with its NUL
            raise ValueError(f"{value}: a Unix socket path has at most 107 bytes")
        return value

    def uid(self) -> int:
        if self.owner is None:
            return os.geteuid()
        return int(self.owner) if self.owner.isdigit() else pwd.getpwnam(self.owner).pw_uid

    def gid(self) -> int:
        if self.group is None:
            return os.getegid()
        return int(self.group) if self.group.isdigit() else grp.getgrnam(self.group).gr_gid

    def admits(self, uid: int, gid: int) -> bool:
        if not self.allowed_uids and not self.allowed_gids:
            return uid in (0, os.geteuid())
        return uid in self.allowed_uids or gid in self.allowed_gids


class BindingsAgentConfig(_Frozen):
    """The ``bindings`` part of the host agent's configuration."""

    host: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    controller: ControllerEndpoint
    socket: SocketConfig = SocketConfig()
    state_dir: Path = Path("/var/lib/c4p/agent")
    verify_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """How long a rank's first HELLO for an unknown token may wait for the controller's word."""
    max_sessions: int = Field(default=1024, ge=1)


def load_bindings_config(path: Path) -> BindingsAgentConfig:
    """The config file (YAML or JSON), with relative paths taken from its directory.

    Read with PyYAML and pydantic only: the agent runs on every GPU host and must not pull in
    the planner's dependencies (OR-Tools, numpy) through the shared file helpers."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("expected a mapping at the top")
    config = BindingsAgentConfig.model_validate(data)
    base = path.resolve().parent

    def rel(p: Path | None) -> Path | None:
        return None if p is None or p.is_absolute() else base / p

    updates_socket = {"path": rel(config.socket.path) or config.socket.path}
    ctl = config.controller
    ctl_files = {
        name: rel(getattr(ctl, name)) or getattr(ctl, name)
        for name in ("ca_file", "cert_file", "key_file")
    }
    return config.model_copy(
        update={
            "socket": config.socket.model_copy(update=updates_socket),
            "controller": ctl.model_copy(update=ctl_files),
            "state_dir": rel(config.state_dir) or config.state_dir,
        }
    )
