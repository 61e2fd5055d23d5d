"""What changed between two discovered fabrics, and whether to believe the newer one (pure).

Why: while ``c4p serve`` runs, cables are moved and added, and periodic re-discovery (plus
LLDP refreshes) yields a new fabric snapshot. The controller must act on a real wiring change:
re-plan the flows on links that went away, and record the change in its decision log. It must
*not* act on a collector outage or a half-answered round that makes most of the fabric vanish:
such a snapshot is held as *suspect* and reported, and the fabric in force stays (fail-static,
as for a dead switch). :func:`wiring_change` is the diff (links by their two ends, so a link's
orientation does not matter), :func:`judge` the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from southbound.observed import Observed
from topology.model import Fabric, Link

SUSPECT_FRACTION = 0.5
"""A snapshot keeping less than this share of the links or switches in force is suspect."""


class WiringChange(Observed):
    """Links and switches added or gone, and links whose speed changed (by link id)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    respeeded: tuple[str, ...] = ()
    switches_added: tuple[str, ...] = ()
    switches_removed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.added
            or self.removed
            or self.respeeded
            or self.switches_added
            or self.switches_removed
        )

    def summary(self) -> str:
        """``-2 links, +1 link, 1 speed`` for logs and the decision log."""
        parts = []
        for label, items in (
            ("link(s) gone", self.removed),
            ("link(s) new", self.added),
            ("speed change(s)", self.respeeded),
            ("switch(es) new", self.switches_added),
            ("switch(es) gone", self.switches_removed),
        ):
            if items:
                shown = ", ".join(items[:4]) + (f" (+{len(items) - 4})" if len(items) > 4 else "")
                parts.append(f"{len(items)} {label}: {shown}")
        return "; ".join(parts) or "no change"


def _by_ends(fabric: Fabric) -> dict[frozenset[str], Link]:
    return {frozenset(link.ends): link for link in fabric.links}


def wiring_change(old: Fabric, new: Fabric) -> WiringChange:
    """How ``new`` is wired differently from ``old`` (link status changes are not wiring)."""
    before, after = _by_ends(old), _by_ends(new)
    old_switches = {s.name for s in old.switches}
    new_switches = {s.name for s in new.switches}
    return WiringChange(
        added=tuple(sorted(after[k].id for k in after.keys() - before.keys())),
        removed=tuple(sorted(before[k].id for k in before.keys() - after.keys())),
        respeeded=tuple(
            sorted(
                before[k].id
                for k in before.keys() & after.keys()
                if before[k].speed_gbps != after[k].speed_gbps
            )
        ),
        switches_added=tuple(sorted(new_switches - old_switches)),
        switches_removed=tuple(sorted(old_switches - new_switches)),
    )


@dataclass(frozen=True)
class Verdict:
    """Whether to act on a new snapshot; ``reason`` says why not."""

    accepted: bool
    reason: str = ""


def _links_per_switch(fabric: Fabric) -> dict[str, int]:
    switches = {s.name for s in fabric.switches}
    count = dict.fromkeys(switches, 0)
    for link in fabric.links:
        for end in link.ends:
            node = end.split(":", 1)[0]
            if node in switches:
                count[node] += 1
    return count


def judge(
    old: Fabric,
    new: Fabric,
    *,
    fraction: float = SUSPECT_FRACTION,
    fell_silent: Sequence[str] = (),
) -> Verdict:
    """Accept ``new`` unless it lost most of ``old`` (fewer than ``fraction`` of its links or
    switches remain), or a switch still in it lost every one of its links, or a switch that
    listed LLDP neighbours in the accepted round lists none now (``fell_silent``): that is
    what a collector outage looks like, not a recabling.

    The per-switch rules are for the *partial* outage: a round in which a few agents answer
    with empty trees (restarting, or caught half-way while a collector breaks) keeps most of
    the fabric, yet would drop every link that only those switches report (host links) or
    that both ends report (two of them silent at once). Technicians move cables; they do not
    unplug all of a switch between two rounds, and a switch that is really gone stops
    answering (its links go down through the neighbours' status). A switch that never
    listed neighbours (LLDP off) is not in ``fell_silent``, so it holds nothing up."""
    if fell_silent:
        shown = ", ".join(fell_silent[:4]) + (
            f" (+{len(fell_silent) - 4})" if len(fell_silent) > 4 else ""
        )
        return Verdict(
            False,
            f"{len(fell_silent)} switch(es) list no LLDP neighbours since the accepted round "
            f"({shown}): held as suspect (agent restarting or collector outage?)",
        )
    before, after = _links_per_switch(old), _links_per_switch(new)
    stripped = sorted(name for name, n in before.items() if n and after.get(name) == 0)
    if stripped:
        shown = ", ".join(stripped[:4]) + (f" (+{len(stripped) - 4})" if len(stripped) > 4 else "")
        return Verdict(
            False,
            f"{len(stripped)} switch(es) answered with none of their links ({shown}): "
            "held as suspect (agent restarting or collector outage?)",
        )
    kept_links = len(_by_ends(old).keys() & _by_ends(new).keys())
    kept_switches = len({s.name for s in old.switches} & {s.name for s in new.switches})
    if old.links and kept_links < fraction * len(old.links):
        return Verdict(
            False,
            f"only {kept_links} of {len(old.links)} links in force are in the new snapshot "
            f"({len(new.links)} links): held as suspect (collector outage?)",
        )
    if old.switches and kept_switches < fraction * len(old.switches):
        return Verdict(
            False,
            f"only {kept_switches} of {len(old.switches)} switches are in the new snapshot: "
            "held as suspect",
        )
    return Verdict(True)
