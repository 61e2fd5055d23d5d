"""Control modes: who steers a job's QPs, and the rollout policy that decides it.

Why: a controller that rewrites every training job's paths has to earn trust step by step (C4's
own deployment went observe-only, then a subset of jobs, then the large runs). A job's *control*
mode (named so apart from the agent's port modes) is one of:

* ``off``: nothing planned, nothing pushed; the plugin keeps the kernel's default ports;
* ``shadow``: planned, bound and predicted exactly as if active, recorded in the decision log
  and shown to operators, but no binding reaches the job (it runs on its default ports);
* ``active``: the bindings are pushed and applied.

The mode of a job is resolved, most specific first: a rollback of everything (an operator's
kill switch, durable) -> the job's own pin (given at registration, or set by an operator) -> the
job's tenant in ``rollout.tenants`` -> the canary rule -> ``rollout.default``. Everything but the
pins and the rollback is a pure function of the configuration and the job's id and tenant, so a
restart resolves every job the same way; the canary fraction uses a hash of the job id (not a
random draw), so the same job lands in the same bucket on every replica and after every restart.
"""

from __future__ import annotations

import hashlib
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from c4p.store.base import ControlMode, ModeSource

__all__ = ["CanaryRule", "ControlMode", "ModeSource", "RolloutSettings", "canary_bucket", "resolve"]


class CanaryRule(BaseModel):
    """Jobs that get ``mode`` ahead of the default: by tenant, or a fraction of the jobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: ControlMode = Field(default=ControlMode.ACTIVE, description="The canaries' mode.")
    tenants: tuple[str, ...] = Field(default=(), description="Every job of these tenants.")
    fraction: float = Field(
        default=0.0, ge=0.0, le=1.0, description="This fraction of jobs, by a hash of the job id."
    )


class RolloutSettings(BaseModel):
    """``rollout:`` in the serve config: the controller-wide policy of control modes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: ControlMode = Field(
        default=ControlMode.ACTIVE, description="Mode of a job no other rule names."
    )
    tenants: dict[str, ControlMode] = Field(
        default_factory=dict, description="Mode per tenant (wins over the canary rule)."
    )
    canary: CanaryRule = CanaryRule()

    @model_validator(mode="after")
    def _names(self) -> Self:
        for tenant in (*self.tenants, *self.canary.tenants):
            if not tenant or len(tenant) > 64:
                raise ValueError(f"tenant {tenant!r}: 1 to 64 characters")
        return self


def canary_bucket(job_id: str) -> float:
    """A number in [0, 1) fixed by the job id alone (the first 8 bytes of its SHA-256)."""
    digest = hashlib.sha256(job_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def resolve(
    settings: RolloutSettings,
    job_id: str,
    tenant: str,
    pinned: ControlMode | None,
    pinned_by: ModeSource = ModeSource.JOB,
    rollback: bool = False,
) -> tuple[ControlMode, ModeSource]:
    """A job's control mode and why (see the module docstring for the order)."""
    if rollback:
        return ControlMode.OFF, ModeSource.ROLLBACK
    if pinned is not None:
        return pinned, pinned_by
    if tenant and tenant in settings.tenants:
        return settings.tenants[tenant], ModeSource.TENANT
    canary = settings.canary
    if (tenant and tenant in canary.tenants) or canary_bucket(job_id) < canary.fraction:
        return canary.mode, ModeSource.CANARY
    return settings.default, ModeSource.DEFAULT
