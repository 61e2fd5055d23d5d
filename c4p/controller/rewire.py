"""A new fabric snapshot swapped into a running controller: what it changes and whom it touches.

Why a module of pure functions apart from the state: re-discovery (``c4p.service.fabric_watch``)
may yield a snapshot whose *wiring* differs from the one in force (a cable moved or added, a
port re-speeded, a NIC moved to another leaf). The controller takes it at a reconcile step
(level-triggered: the watch offers the snapshot and enqueues a key; the step swaps it in), and
must then re-plan exactly the jobs the change touches and leave every other binding as it is.
Which jobs those are is a question about two fabrics and the bindings in force, answered here
without locks or I/O so it is tested on its own:

* a job whose bindings cross a link that went away or changed speed (by the two path nodes
  the link joins: a link's orientation, id or interface names do not matter), or a node the
  new fabric lacks;
* a job with a rank on a NIC whose cable moved (its host link is gone or new), or that is gone;
* a job whose flows *can* use a new link: the link lies on an equal-cost (shortest) path
  between a flow's two NIC ports in the new fabric (two breadth-first searches per new link).

A change of interfaces only (a cable moved to another port of the same two switches) touches no
path, so it re-plans nothing; the wiring digest still changes, so it is recorded.

The wiring digest (:func:`wiring_digest`) joins the plan fingerprint, so a restart on the same
wiring after a swap re-serves its bindings unchanged (zero churn), while a restart on another
wiring (changed while the controller was down) plans again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from topology.model import Fabric, Link

Ends = frozenset[str]


def _ends(link: Link) -> Ends:
    return frozenset((link.a, link.b))


def wiring_digest(fabric: Fabric) -> str:
    """A digest of the wiring (who is cabled to whom, at what speed), blind to link status,
    link order and link orientation: two discoveries of the same cabling agree."""
    links = sorted((sorted((link.a, link.b)), link.speed_gbps) for link in fabric.links)
    nodes = sorted(s.name for s in fabric.switches)
    hosts = sorted(
        f"{h.name}:{n.name}:{p.name}" for h in fabric.hosts for n in h.nics for p in n.ports
    )
    text = json.dumps({"links": links, "switches": nodes, "nic_ports": hosts})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Rewiring:
    """A snapshot swapped in: the link changes (ids as each fabric names them) and, per job
    touched, why; every other job keeps its bindings unchanged."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    respeeded: tuple[str, ...]
    touched: Mapping[str, str] = field(default_factory=dict)
    digest: str = ""

    def summary(self) -> str:
        parts = []
        for label, items in (
            ("added", self.added),
            ("removed", self.removed),
            ("speed changed", self.respeeded),
        ):
            if items:
                shown = ", ".join(items[:4]) + (f" (+{len(items) - 4})" if len(items) > 4 else "")
                parts.append(f"{len(items)} link(s) {label}: {shown}")
        jobs = sorted(self.touched)
        parts.append(f"re-plans {len(jobs)} job(s)" + (f": {', '.join(jobs[:8])}" if jobs else ""))
        return "; ".join(parts)


def link_changes(old: Fabric, new: Fabric) -> tuple[list[Link], list[Link], list[Link]]:
    """(links only in ``new``, links only in ``old``, links in both whose speed changed, as
    ``old`` has them), matched by their two ends."""
    before = {_ends(link): link for link in old.links}
    after = {_ends(link): link for link in new.links}
    added = [after[k] for k in sorted(after.keys() - before.keys(), key=sorted)]
    removed = [before[k] for k in sorted(before.keys() - after.keys(), key=sorted)]
    respeeded = [
        before[k]
        for k in sorted(before.keys() & after.keys(), key=sorted)
        if before[k].speed_gbps != after[k].speed_gbps
    ]
    return added, removed, respeeded


def link_number_map(old: Fabric, new: Fabric) -> dict[int, int]:
    """Old link number -> new link number, for links in both (by their two ends)."""
    after = {_ends(link): i for i, link in enumerate(new.links)}
    return {i: after[_ends(link)] for i, link in enumerate(old.links) if _ends(link) in after}


def node_pair(fabric: Fabric, link: Link) -> frozenset[str]:
    """The two path nodes a link joins: a switch by its name, a NIC port by ``host:port``
    (the fabric forbids parallel links, so the pair names the link)."""
    hosts = {h.name for h in fabric.hosts}
    return frozenset(e if e.split(":", 1)[0] in hosts else e.split(":", 1)[0] for e in link.ends)


def _distances(fabric: Fabric, start: str) -> dict[str, int]:
    """Hops from ``start`` to every path node (breadth first over the fabric's links)."""
    index = fabric.index
    adjacent: dict[int, list[int]] = {}
    for u, v in index.resource_between:
        adjacent.setdefault(u, []).append(v)
    first = index.node_of[start]
    seen = {first: 0}
    frontier = [first]
    while frontier:
        nxt = []
        for u in frontier:
            for v in adjacent.get(u, ()):
                if v not in seen:
                    seen[v] = seen[u] + 1
                    nxt.append(v)
        frontier = nxt
    return {index.node_names[n]: d for n, d in seen.items()}


def touched_jobs(
    old: Fabric,
    new: Fabric,
    paths: Mapping[str, Iterable[tuple[str, ...]]],
    nic_ports: Mapping[str, Iterable[str]],
) -> Rewiring:
    """Which jobs a change from ``old`` to ``new`` touches (module docstring), and why.

    ``paths``: per job, the node paths of its bindings in force (or planned, for shadow jobs);
    ``nic_ports``: per job, the NIC port nodes its ranks use (``host:port``)."""
    added, removed, respeeded = link_changes(old, new)
    # By path nodes: a cable re-plugged into another port of the same two switches changes
    # no path (unless its speed changed with it).
    before = {node_pair(old, link): link.speed_gbps for link in old.links}
    after = {node_pair(new, link): link.speed_gbps for link in new.links}
    gone_pairs = {p for p, speed in before.items() if after.get(p) != speed}
    new_pairs = [tuple(p) for p in sorted(after.keys() - before.keys(), key=sorted)]
    new_index = new.index
    reach = {n: _distances(new, n) for pair in new_pairs for n in pair}
    far = 1 << 30
    touched: dict[str, str] = {}
    for job, job_paths in paths.items():
        for path in job_paths:
            hops = list(zip(path, path[1:], strict=False))
            if any(frozenset(hop) in gone_pairs for hop in hops):
                touched[job] = "its paths crossed a link that went away or changed speed"
                break
            if any(n not in new_index.node_of for n in path):
                touched[job] = "its paths visit a node the new fabric lacks"
                break
            src, dst, length = path[0], path[-1], len(path) - 1
            if any(
                min(
                    reach[u].get(src, far) + 1 + reach[v].get(dst, far),
                    reach[v].get(src, far) + 1 + reach[u].get(dst, far),
                )
                <= length
                for u, v in new_pairs
            ):  # the new link lies on an equal-cost path of this flow
                touched[job] = "its flows can use a new link"
                break
    changed_ports = {n for pair in (*gone_pairs, *map(frozenset, new_pairs)) for n in pair}
    for job, ports in nic_ports.items():
        if job not in touched and changed_ports.intersection(ports):
            touched[job] = "a NIC of its hosts was re-cabled or is gone"
    return Rewiring(
        added=tuple(link.id for link in added),
        removed=tuple(link.id for link in removed),
        respeeded=tuple(link.id for link in respeeded),
        touched=touched,
        digest=wiring_digest(new),
    )
