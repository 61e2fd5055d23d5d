"""Test-wide settings.

Hypothesis runs derandomized by default so that `make test` (and CI) explores the same examples
every time: a property that fails, fails for everyone, and a green run is reproducible. Set
``HYPOTHESIS_PROFILE=explore`` to search with fresh random examples (and more of them).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=500, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
