"""Test-wide settings.

Hypothesis runs derandomized by default so that `make test` (and CI) explores the same examples
every time: a property that fails, fails for everyone, and a green run is reproducible. Set
``HYPOTHESIS_PROFILE=explore`` to search with fresh random examples (and more of them).

No per-example deadline: Hypothesis' default 200 ms deadline is a wall-clock assertion, and a
loaded machine (CI, parallel work) turned it into failures that said nothing about correctness.
Speed is measured by ``c4p bench``, not asserted here.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Health checks that measure time (generation too slow) fail on a loaded machine, not on a bug.
SLOW = [HealthCheck.too_slow]

settings.register_profile(
    "repeatable", derandomize=True, print_blob=True, deadline=None, suppress_health_check=SLOW
)
settings.register_profile(
    "explore", max_examples=500, print_blob=True, deadline=None, suppress_health_check=SLOW
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
