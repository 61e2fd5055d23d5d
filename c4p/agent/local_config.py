"""The ``bindings:`` section of the agent's config: the local socket the ranks connect to, the
state directory, and the limits of the binding side.

Why only these: the binding side is a component of the one host agent (``c4p agent``), so it
reuses the agent's ``host``, its ``controllers`` endpoint list and its ``tls`` (see
:mod:`c4p.agent.config`); a second copy of the controller settings would let the two halves of
one agent talk to two different controllers. What is here is what only the binding side needs.
Unknown keys are refused; relative paths are read from the config file's directory.
"""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

from pydantic import Field, field_validator

from topology.base import Frozen as _Frozen


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

    def problems(self) -> list[tuple[str, str]]:
        """An owner or group this host does not know (found at load, not at the first rank)."""
        found: list[tuple[str, str]] = []
        try:
            self.uid()
        except KeyError:
            found.append(("bindings.socket.owner", f"no user {self.owner!r} on this host"))
        try:
            self.gid()
        except KeyError:
            found.append(("bindings.socket.group", f"no group {self.group!r} on this host"))
        return found

    def relative_to(self, base: Path) -> SocketConfig:
        return (
            self if self.path.is_absolute() else self.model_copy(update={"path": base / self.path})
        )


class BindingsSection(_Frozen):
    """The binding side of the host agent: serve the host's ranks their bindings.

    Present: ``c4p agent`` holds one ``WatchBindings`` stream per job of this host (trying the
    agent's ``controllers`` in order, with its ``tls``), keeps the last bindings in
    ``state_dir`` and serves them on ``socket``. Absent: the agent only probes.
    """

    socket: SocketConfig = SocketConfig()
    state_dir: Path = Path("/var/lib/c4p/agent")
    verify_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """How long a rank's first HELLO for an unknown token may wait for the controller's word."""
    max_sessions: int = Field(default=1024, ge=1)
    max_sessions_per_uid: int = Field(default=256, ge=1)
    """Sessions one peer uid may hold; past it (or past ``max_sessions``) the oldest session
    that has not said HELLO is closed to make room (see :mod:`c4p.agent.local_sessions`)."""

    def relative_to(self, base: Path) -> BindingsSection:
        state = self.state_dir if self.state_dir.is_absolute() else base / self.state_dir
        return self.model_copy(update={"socket": self.socket.relative_to(base), "state_dir": state})
