"""What triggers a reconcile step, and when: work keys, the debouncer, link hysteresis.

Why keys and not events: the controller is level-triggered (controller-runtime). An API call, a
link event or a timer only says *something about X may have changed*; the reconcile step reads
the whole current state and plans from it, so two events about one job are one key, and a
burst of keys is one step. Keys also make the decision log readable: a step's reason is the
set of keys that triggered it ("job job-a, job-b; link leaf-00--spine-01 down").

:class:`Debouncer` is the batching rule: a step starts ``quiet_s`` after the last key of a
burst, but never later than ``max_delay_s`` after the first, so a steady trickle of intents
cannot starve planning.

Why hysteresis (:class:`LinkTracker`): a link that goes down must be left at once (traffic on
it is lost), but a link that comes back may go down again a second later. Using it immediately
would move flows onto it and off it again, each move a new source port on live QPs. So a
returning link is *held* out of use until it has stayed up for ``hold_up_s``; and a link that
keeps flapping is *suppressed* the way BGP damps routes (RFC 2439): each fall adds ``penalty``,
the penalty halves every ``half_life_s``, the link is suppressed once the penalty reaches
``suppress`` and usable again when it decays below ``reuse``.

Both are pure state machines with time passed in (``now``), so tests drive them with a fake
clock; the asyncio loop (:mod:`c4p.controller.loop`) asks them when to act.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field, model_validator

from topology.base import Frozen
from topology.model import LinkStatus


class KeyKind(StrEnum):
    STARTUP = "startup"
    JOB = "job"  # registered, intents changed, released
    LINK = "link"  # a link's observed status changed (fabric source)
    DRAIN = "drain"  # an operator drained or restored a link
    TIMER = "timer"  # a held link may be usable now; a periodic re-plan
    REPLAN = "replan"  # an operator asked for a plan now
    RETRY = "retry"  # the last plan failed
    PROBE = "probe"  # a probe round finished: the learned table knows more
    AGENT = "agent"  # a host agent connected or went away
    MODE = "mode"  # a job's control mode was set, or the rollback engaged or cleared
    WIRING = "wiring"  # re-discovery found links gone, new or re-speeded (the reason says which)
    COUNTERS = "counters"  # switch counters disagree with the plan, or agree again


@dataclass(frozen=True, order=True)
class Key:
    """One thing to look at; ``force`` plans even when the inputs did not change."""

    kind: KeyKind
    name: str = ""
    detail: str = ""
    force: bool = False

    def __str__(self) -> str:
        text = self.kind.value
        if self.name:
            text += f" {self.name}"
        if self.detail:
            text += f" {self.detail}"
        return text


def describe(keys: Iterable[Key]) -> str:
    """A step's reason from its keys: grouped by kind, names listed once each."""
    groups: dict[str, list[str]] = {}
    for key in sorted(set(keys)):
        label = key.kind.value
        item = " ".join(p for p in (key.name, key.detail) if p)
        names = groups.setdefault(label, [])
        if item and item not in names:
            names.append(item)
    parts = []
    for label, names in groups.items():
        shown = ", ".join(names[:8]) + (f" (+{len(names) - 8})" if len(names) > 8 else "")
        parts.append(f"{label} {shown}" if shown else label)
    return "; ".join(parts)


class Debouncer:
    """Collects keys and says when the batch is due (see the module docstring)."""

    def __init__(self, quiet_s: float, max_delay_s: float) -> None:
        if quiet_s < 0 or max_delay_s < quiet_s:
            raise ValueError("need 0 <= quiet_s <= max_delay_s")
        self.quiet_s = quiet_s
        self.max_delay_s = max_delay_s
        self._keys: set[Key] = set()
        self._first: float | None = None
        self._last: float = 0.0

    def add(self, key: Key, now: float) -> None:
        if self._first is None:
            self._first = now
        self._last = now
        self._keys.add(key)

    @property
    def pending(self) -> bool:
        return self._first is not None

    def due_at(self) -> float | None:
        """When the batch should run (``None`` when there is nothing to run)."""
        if self._first is None:
            return None
        return min(self._last + self.quiet_s, self._first + self.max_delay_s)

    def take(self, now: float) -> list[Key] | None:
        """The batch if it is due at ``now`` (and start a new one), else ``None``."""
        due = self.due_at()
        if due is None or now < due:
            return None
        keys = sorted(self._keys)
        self._keys.clear()
        self._first = None
        return keys


class FlapSettings(Frozen):
    """Flap damping and hold-down; the defaults suppress a link at its third fall within about
    half a minute, and use it again about a minute after it stops flapping."""

    hold_up_s: float = Field(default=2.0, ge=0, description="Stay up this long before use.")
    penalty: float = Field(default=1000.0, gt=0, description="Added at every fall.")
    suppress: float = Field(default=2000.0, gt=0, description="Held out from this penalty.")
    reuse: float = Field(default=750.0, gt=0, description="Usable again below this penalty.")
    half_life_s: float = Field(default=30.0, gt=0, description="The penalty halves this often.")
    max_penalty: float = Field(default=16000.0, gt=0, description="Cap: bounds the hold time.")

    @model_validator(mode="after")
    def _ordered(self) -> FlapSettings:
        if not self.reuse < self.suppress <= self.max_penalty:
            raise ValueError("need reuse < suppress <= max_penalty")
        return self


@dataclass
class _History:
    observed: LinkStatus
    penalty: float = 0.0
    updated: float = 0.0
    up_since: float | None = None
    suppressed: bool = False


class LinkTracker:
    """Observed link states and their flap history; answers which links are held out."""

    def __init__(self, settings: FlapSettings) -> None:
        self.settings = settings
        self._links: dict[int, _History] = {}

    def _decayed(self, h: _History, now: float) -> float:
        elapsed = max(0.0, now - h.updated)
        return float(h.penalty * 0.5 ** (elapsed / self.settings.half_life_s))

    def seed(self, link: int, status: LinkStatus, now: float) -> None:
        """The status a link starts with (from the fabric file): no fall is charged."""
        self._links[link] = _History(status, updated=now)

    def observe(self, link: int, status: LinkStatus, now: float) -> bool:
        """Record a reported status; ``True`` if it differs from what was observed before."""
        h = self._links.get(link)
        if h is None:
            h = self._links[link] = _History(LinkStatus.UP, updated=now)
        if status is h.observed:
            return False
        s = self.settings
        if h.observed is LinkStatus.UP:  # a fall: charge it
            h.penalty = min(self._decayed(h, now) + s.penalty, s.max_penalty)
            h.updated = now
            h.suppressed = h.suppressed or h.penalty >= s.suppress
            h.up_since = None
        elif status is LinkStatus.UP:
            h.up_since = now
        h.observed = status
        return True

    def observed(self, link: int) -> LinkStatus:
        h = self._links.get(link)
        return LinkStatus.UP if h is None else h.observed

    def penalty(self, link: int, now: float) -> float:
        h = self._links.get(link)
        return 0.0 if h is None else self._decayed(h, now)

    def _usable_at(self, h: _History, now: float) -> float:
        """When an observed-up link may be used (``now`` or earlier: already)."""
        assert h.up_since is not None
        at = h.up_since + self.settings.hold_up_s
        if h.suppressed:
            current = self._decayed(h, now)
            if current >= self.settings.reuse:
                wait = self.settings.half_life_s * math.log2(current / self.settings.reuse)
                at = max(at, now + wait)
        return at

    def held(self, link: int, now: float) -> bool:
        """Observed up, but not yet usable (hold-down or suppressed)."""
        h = self._links.get(link)
        if h is None or h.observed is not LinkStatus.UP or h.up_since is None:
            return False
        if h.suppressed and self._decayed(h, now) < self.settings.reuse:
            h.suppressed = False
        return self._usable_at(h, now) > now

    def usable_at(self, link: int, now: float) -> float | None:
        """When a held link is back in use (``None``: not held)."""
        if not self.held(link, now):
            return None
        return self._usable_at(self._links[link], now)

    def release(self, link: int, now: float) -> bool:
        """End a hold at once (an operator's forced restore): the flap history is forgotten, as
        if the link had been up and quiet all along. ``True`` if it was held."""
        if not self.held(link, now):
            return False
        self._links[link] = _History(LinkStatus.UP, updated=now)
        return True

    def effective(self, now: float) -> dict[int, LinkStatus]:
        """Every link that is not plainly usable, with the status the planner must see."""
        out: dict[int, LinkStatus] = {}
        for link, h in self._links.items():
            if h.observed is not LinkStatus.UP:
                out[link] = h.observed
            elif self.held(link, now):
                out[link] = LinkStatus.DOWN
        return out

    def histories(self) -> dict[int, _History]:
        """Every link's history by link number (a wiring change carries them over)."""
        return dict(self._links)

    def adopt(self, link: int, history: _History) -> None:
        """Take a link's history under a new number (the same cable in a new snapshot)."""
        self._links[link] = history

    def next_change(self, now: float) -> float | None:
        """The earliest time a held link becomes usable (when to reconcile again)."""
        times = [
            self._usable_at(h, now)
            for link, h in self._links.items()
            if h.observed is LinkStatus.UP and h.up_since is not None and self.held(link, now)
        ]
        return min(times) if times else None
