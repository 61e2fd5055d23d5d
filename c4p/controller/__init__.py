"""The controller: intake of requests, the level-triggered reconcile loop, live state.

The C4P loop as code: :class:`Intake` accepts jobs, intents and drains (validated, durable);
each change enqueues a :class:`Key`; :class:`ControllerLoop` batches keys and runs
:meth:`Reconciler.step`, which plans incrementally, derives bindings, diffs them per job and
commits a new epoch to :class:`ControllerState` and the store. Streams read
:meth:`ControllerState.update_since`.
"""

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
