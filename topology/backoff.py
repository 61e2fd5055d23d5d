"""One retry backoff for every layer: exponential, capped, with jitter.

Why here: the switch sessions (``southbound``) and the controller's clients (``c4p.client``)
both retry, and two policies drifted apart once (one jittered by +-20 %, the other fully).
``topology`` is the package both import; a backoff is pure arithmetic on an injected random
source, so it fits the "no I/O" rule of this package.

The delay for attempt ``n`` (0-based) is drawn uniformly from ``[base / 2, min(cap, base * 2**n)]``
(the lower end is never above the upper): retries of many clients spread out instead of
arriving together, and the first retry comes quickly.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays for successive attempts; :meth:`next` counts them, :meth:`delay` is stateless."""

    def __init__(
        self,
        base: float = 0.1,
        cap: float = 5.0,
        seed: int | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.base, self.cap = base, cap
        self.attempt = 0
        self._random = rng if rng is not None else random.Random(seed)

    def delay(self, attempt: int) -> float:
        """The delay before retry number ``attempt`` (0: the first retry)."""
        high = min(self.cap, self.base * 2.0 ** min(attempt, 60))
        return self._random.uniform(min(self.base / 2, high), high)

    def next(self) -> float:
        """The delay before the next retry (then counts it)."""
        value = self.delay(self.attempt)
        self.attempt += 1
        return value

    def reset(self) -> None:
        """After a success: the next retry is a first retry again."""
        self.attempt = 0
