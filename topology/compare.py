"""Declared fabric vs discovered fabric: what differs, in the words an operator uses.

Why: before a fabric carries jobs, someone must know that it is cabled as designed. A
swapped pair of cables does not break connectivity, so nothing else notices it, but it
moves hosts between leaves and every plan made on the declared fabric is then wrong. This is
a pure function of two :class:`~topology.model.Fabric` values; discovery, the CLI and the
controller all use it.

How links are matched: by their two ends (``"device:interface"``), in either order. A
declared link that is not found is

* **miswired** if one of its ends *is* cabled, but to another port (each such end is reported
  with the peer it should have and the peer it has; a swap of two cables gives four ends), or
* **missing** if neither end is cabled to anything.

A found link that is not declared and touches no declared end is **extra**. On top of that, a
NIC port that is cabled to a different *switch* than declared is a **host on the wrong leaf**
(the error that matters to planning), and links present in both are checked for speed and
status. Switches, roles, NIC ports and addresses are compared by name.
"""

from __future__ import annotations

from collections.abc import Iterable

from topology.base import Frozen
from topology.index import natural_key
from topology.model import Fabric, Link, LinkStatus, split_end


class Miswire(Frozen):
    """A port cabled to ``found`` where ``expected`` was declared."""

    end: str
    expected: str
    found: str


class WrongLeaf(Frozen):
    """A NIC port cabled to ``found_switch`` where ``declared_switch`` was declared."""

    port: str
    declared_switch: str
    found_switch: str


class SpeedMismatch(Frozen):
    link: str
    declared_gbps: float
    found_gbps: float


class StatusMismatch(Frozen):
    link: str
    declared: LinkStatus
    found: LinkStatus


class RoleMismatch(Frozen):
    switch: str
    declared: str
    found: str


class AddressMismatch(Frozen):
    port: str
    declared: str
    found: str


class FabricComparison(Frozen):
    """Every difference between a declared and a discovered fabric (empty tuples: none)."""

    missing_switches: tuple[str, ...] = ()
    extra_switches: tuple[str, ...] = ()
    role_mismatches: tuple[RoleMismatch, ...] = ()
    missing_ports: tuple[str, ...] = ()
    extra_ports: tuple[str, ...] = ()
    address_mismatches: tuple[AddressMismatch, ...] = ()
    missing_links: tuple[str, ...] = ()
    extra_links: tuple[str, ...] = ()
    miswired: tuple[Miswire, ...] = ()
    hosts_on_wrong_leaf: tuple[WrongLeaf, ...] = ()
    speed_mismatches: tuple[SpeedMismatch, ...] = ()
    status_mismatches: tuple[StatusMismatch, ...] = ()

    @property
    def differences(self) -> int:
        return sum(len(getattr(self, name)) for name in type(self).model_fields)

    @property
    def clean(self) -> bool:
        return self.differences == 0

    def lines(self) -> list[str]:
        """One plain sentence per difference, most consequential first."""
        out = [f"missing switch {s} (declared, not found)" for s in self.missing_switches]
        out += [f"extra switch {s} (found, not declared)" for s in self.extra_switches]
        out += [
            f"wrong leaf: {w.port} is on {w.found_switch}, declared on {w.declared_switch}"
            for w in self.hosts_on_wrong_leaf
        ]
        out += [
            f"miswired: {m.end} is cabled to {m.found}, declared to {m.expected}"
            for m in self.miswired
        ]
        out += [f"missing link {link} (declared, not found)" for link in self.missing_links]
        out += [f"extra link {link} (found, not declared)" for link in self.extra_links]
        out += [
            f"speed: {s.link} is {s.found_gbps:g}G, declared {s.declared_gbps:g}G"
            for s in self.speed_mismatches
        ]
        out += [
            f"status: {s.link} is {s.found.value}, declared {s.declared.value}"
            for s in self.status_mismatches
        ]
        out += [
            f"role: {r.switch} is {r.found}, declared {r.declared}" for r in self.role_mismatches
        ]
        out += [f"missing NIC port {p} (declared, not found)" for p in self.missing_ports]
        out += [f"extra NIC port {p} (found, not declared)" for p in self.extra_ports]
        out += [
            f"address: {a.port} has {a.found}, declared {a.declared}"
            for a in self.address_mismatches
        ]
        return out


def _sorted(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(names, key=natural_key))


def _peer(link: Link, end: str) -> str:
    return link.b if link.a == end else link.a


def _ends(fabric: Fabric) -> dict[str, Link]:
    return {end: link for link in fabric.links for end in link.ends}


def _hosts(fabric: Fabric) -> set[str]:
    return {h.name for h in fabric.hosts}


def compare_fabrics(
    declared: Fabric,
    found: Fabric,
    *,
    statuses: bool = True,
    addresses: bool = True,
) -> FabricComparison:
    """Differences between ``declared`` and ``found`` (see the module docstring).

    ``statuses=False`` ignores link status (an offline wiring check); ``addresses=False``
    ignores NIC port addresses (discovery without learned addresses).
    """
    d_links = {frozenset(link.ends): link for link in declared.links}
    f_links = {frozenset(link.ends): link for link in found.links}
    d_end, f_end = _ends(declared), _ends(found)
    involved_d: set[frozenset[str]] = set()
    involved_f: set[frozenset[str]] = set()
    miswired: list[Miswire] = []
    for key in d_links.keys() - f_links.keys():
        link = d_links[key]
        for end in link.ends:
            if end in f_end:
                other = f_end[end]
                miswired.append(
                    Miswire(end=end, expected=_peer(link, end), found=_peer(other, end))
                )
                involved_d.add(key)
                involved_f.add(frozenset(other.ends))
    missing = [d_links[k].id for k in d_links.keys() - f_links.keys() - involved_d]
    extra = [f_links[k].id for k in f_links.keys() - d_links.keys() - involved_f]

    speeds, states = [], []
    for key in d_links.keys() & f_links.keys():
        d, f = d_links[key], f_links[key]
        if abs(d.speed_gbps - f.speed_gbps) > 1e-9:
            speeds.append(
                SpeedMismatch(link=d.id, declared_gbps=d.speed_gbps, found_gbps=f.speed_gbps)
            )
        if statuses and d.status is not f.status:
            states.append(StatusMismatch(link=d.id, declared=d.status, found=f.status))

    hosts = _hosts(declared) | _hosts(found)
    wrong_leaf = []
    for end in sorted(d_end.keys() & f_end.keys(), key=natural_key):
        if split_end(end)[0] not in hosts:
            continue
        was = split_end(_peer(d_end[end], end))[0]
        now = split_end(_peer(f_end[end], end))[0]
        if was != now:
            wrong_leaf.append(WrongLeaf(port=end, declared_switch=was, found_switch=now))

    d_switches = {s.name: s for s in declared.switches}
    f_switches = {s.name: s for s in found.switches}
    roles = [
        RoleMismatch(switch=n, declared=d_switches[n].role.value, found=f_switches[n].role.value)
        for n in _sorted(d_switches.keys() & f_switches.keys())
        if d_switches[n].role is not f_switches[n].role
    ]
    d_ports = {f"{h.name}:{p.name}": p for h, _, p in declared.nic_ports()}
    f_ports = {f"{h.name}:{p.name}": p for h, _, p in found.nic_ports()}
    address_diffs = []
    if addresses:
        address_diffs = [
            AddressMismatch(port=n, declared=str(d_ports[n].address), found=str(f_ports[n].address))
            for n in _sorted(d_ports.keys() & f_ports.keys())
            if d_ports[n].address != f_ports[n].address
        ]

    return FabricComparison(
        missing_switches=_sorted(d_switches.keys() - f_switches.keys()),
        extra_switches=_sorted(f_switches.keys() - d_switches.keys()),
        role_mismatches=tuple(roles),
        missing_ports=_sorted(d_ports.keys() - f_ports.keys()),
        extra_ports=_sorted(f_ports.keys() - d_ports.keys()),
        address_mismatches=tuple(address_diffs),
        missing_links=_sorted(missing),
        extra_links=_sorted(extra),
        miswired=tuple(sorted(miswired, key=lambda m: natural_key(m.end))),
        hosts_on_wrong_leaf=tuple(wrong_leaf),
        speed_mismatches=tuple(sorted(speeds, key=lambda s: natural_key(s.link))),
        status_mismatches=tuple(sorted(states, key=lambda s: natural_key(s.link))),
    )
