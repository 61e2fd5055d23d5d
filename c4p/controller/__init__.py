"""The controller: intake of requests, the level-triggered reconcile loop, live state.

The C4P loop as code: :class:`Intake` accepts jobs, intents and drains (validated, durable);
each change enqueues a :class:`Key`; :class:`ControllerLoop` batches keys and runs
:meth:`Reconciler.step`, which plans incrementally, derives bindings, diffs them per job and
commits a new epoch to :class:`ControllerState` and the store. Streams read
:meth:`ControllerState.update_since`.

The names below are loaded on first use (PEP 562): :mod:`c4p.errors` imports
:mod:`c4p.controller.errors`, and the host agent (which reports errors through it) must not
load the planner that :mod:`c4p.controller.reconcile` brings (OR-Tools, pandas).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from c4p.controller.errors import (
        AlreadyExists,
        InvalidRequest,
        LimitExceeded,
        NotFound,
        PermissionDenied,
        PreconditionFailed,
        RequestError,
        Unauthenticated,
        Unavailable,
    )
    from c4p.controller.intake import Intake, IntakeLimits, Outcome
    from c4p.controller.loop import ControllerLoop, LinkEventLike, LoopSettings
    from c4p.controller.reconcile import PlannerSettings, Reconciler, StepOutcome
    from c4p.controller.state import ControllerState, IntentState, JobUpdate
    from c4p.controller.triggers import Debouncer, FlapSettings, Key, KeyKind, LinkTracker

_MODULES = ("errors", "triggers", "state", "intake", "loop", "reconcile")
"""Where the names of ``__all__`` live, searched in this order on first use."""


def __getattr__(name: str) -> object:
    if name in __all__:
        for module in _MODULES:
            found = importlib.import_module(f"c4p.controller.{module}")
            if hasattr(found, name):
                value = getattr(found, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module 'c4p.controller' has no attribute {name!r}")


__all__ = [
    "AlreadyExists",
    "ControllerLoop",
    "ControllerState",
    "Debouncer",
    "FlapSettings",
    "Intake",
    "IntakeLimits",
    "IntentState",
    "InvalidRequest",
    "JobUpdate",
    "Key",
    "KeyKind",
    "LimitExceeded",
    "LinkEventLike",
    "LinkTracker",
    "LoopSettings",
    "NotFound",
    "Outcome",
    "PermissionDenied",
    "PlannerSettings",
    "PreconditionFailed",
    "Reconciler",
    "RequestError",
    "StepOutcome",
    "Unauthenticated",
    "Unavailable",
]
