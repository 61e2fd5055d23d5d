"""What a process needs to reach the controller: an endpoint's address and a credential.

Why apart from :mod:`c4p.service.serve`: the host agent (``c4p agent``, on every GPU host) reads
the same ``{env | file | value}`` credentials and ``host:port`` endpoints as the controller's
config, but must not import the controller (its planner loads OR-Tools and pandas, most of a
process's memory); :mod:`c4p.service.serve` re-exports both names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Self

from pydantic import SecretStr, model_validator

from topology.base import Frozen


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); ``ValueError`` naming the problem."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not 'host:port' with a port 0..65535")
    return host.strip("[]"), int(port)


class Secret(Frozen):
    """A credential from exactly one of: an environment variable, a file, a literal."""

    env: str | None = None
    file: Path | None = None
    value: SecretStr | None = None

    @model_validator(mode="after")
    def _one(self) -> Self:
        if sum(x is not None for x in (self.env, self.file, self.value)) != 1:
            raise ValueError("give exactly one of env, file, value")
        return self

    def resolve(self) -> str:
        if self.env is not None:
            text = os.environ.get(self.env, "")
            if not text:
                raise ValueError(
                    f"environment variable {self.env!r} is not set; make a credential with: "
                    f"export {self.env}=$(python3 -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))')"
                )
        elif self.file is not None:
            text = self.file.read_text(encoding="utf-8").strip()
        else:
            assert self.value is not None
            text = self.value.get_secret_value()
        if len(text) < 16:
            raise ValueError("a credential must be at least 16 characters")
        return text
