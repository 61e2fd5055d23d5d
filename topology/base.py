"""The one base of every c4p data model: strict about keys, immutable, finite.

Why one base: every file, request and config c4p reads becomes a pydantic model, and the rules
that keep bad input out must be the same everywhere: an unknown key is refused (a typo must not
pass silently as a default), an instance never changes after validation (shared snapshots are
read by several threads), and a number is finite (``inf`` and ``NaN`` are valid floats to
Python but meaningless as a rate, a capacity or a time, and they once reached the planner and
the decision log). It lives in ``topology`` because every other package imports ``topology``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Unknown keys refused, instances immutable, ``inf``/``NaN`` refused in every float.

    Note that ``model_copy(update=...)`` does *not* validate: build a changed model with
    ``model_validate`` where the new values come from outside.

    ``defer_build``: a model's validator is built when it is first used, not when its class
    is defined. A model nested in another (a ``Link`` in a ``Fabric``) is validated through
    its parent's schema and never needs a validator of its own: ``c4p plan`` uses four of the
    eighteen models it imports, and building the others at import was some 50 ms of its
    start. What is accepted and every error message are the same (the same schemas).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
