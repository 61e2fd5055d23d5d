"""Observations of switches -> a :class:`~topology.model.Fabric` snapshot (pure, no I/O).

Why its own module: both drivers (gNMI, SNMP) feed it, the live collector calls it whenever
wiring may have changed, and the CLI calls it once; it must be deterministic and say where
every fact came from. The rules:

* **Links** come from LLDP: a neighbor that is a target (by system-name) gives a switch-switch
  link; any other neighbor is a host NIC port ``"<system-name>:<port-id>"`` (the convention of
  :mod:`southbound.observed`). Two cables between the same two switches become one link of
  the summed speed (the fabric model's bundle rule), with a note.
* **Fail-static**: an interface without an LLDP neighbor (a down link has none) keeps the link
  it had in the ``previous`` snapshot, or else the one the ``declared`` fabric gives it, with
  its status from the interface's oper-status. A stale target's last observation is used
  as it is. So a dead switch or a failed link never makes links vanish from the snapshot.
* **Speed** is the lower of the two ends' port speeds (a disagreement is reported); **status**
  is ``down`` unless every switch end is oper-up; ``drained`` is operator intent, which no
  switch reports, so it is taken from the previous or declared link.
* **Addresses** of NIC ports: the LLDP management address when the host advertises one, else
  the declared fabric's, else the address plan's (``AddressPlan``: host number in name order,
  slot = port position); the result counts how many came from each source. GIDs come from the
  declared fabric, else are the IPv4-mapped GID.
* **Switch attributes** (role, plane, pod, management address): the target's hints, else the
  declared fabric, else inferred: switches with hosts are leaves, their other neighbors
  spines, the rest cores; disconnected switch groups are planes in name order.
* **Order**: what the declared fabric has keeps its order, the rest follows in natural order,
  so discovering an unchanged declared fabric gives back an identical one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import ConfigDict, Field

from southbound.attributes import HostPort, assign_hosts, assign_roles, assign_switches
from southbound.driver_errors import SouthboundError
from southbound.identity import Identities, host_port, short_name
from southbound.observed import (
    InterfaceState,
    NeighborKind,
    Observed,
    Problem,
    SwitchObservation,
)
from southbound.targets import TargetConfig
from topology.generators.common import AddressPlan
from topology.index import natural_key
from topology.model import (
    INTERFACE_PATTERN,
    NAME_PATTERN,
    Fabric,
    Link,
    LinkStatus,
    SwitchRole,
    split_end,
)

_NAME = re.compile(NAME_PATTERN)
_IFACE = re.compile(INTERFACE_PATTERN)


class DiscoveryResult(Observed):
    """A discovered fabric and how it was obtained."""

    model_config = ConfigDict(arbitrary_types_allowed=True)  # the rest from Frozen

    fabric: Fabric
    problems: tuple[Problem, ...] = ()
    address_sources: dict[str, int] = Field(default_factory=dict)
    role_sources: dict[str, int] = Field(default_factory=dict)
    kept_links: int = Field(
        default=0, description="Links kept from previous/declared (fail-static)."
    )
    stale_targets: tuple[str, ...] = ()
    unreached_targets: tuple[str, ...] = ()
    findings: tuple[Problem, ...] = Field(
        default=(),
        description="Problems that make this fabric untrustworthy (also in problems): a "
        "target that answered with no interfaces or no neighbors, two target entries for one "
        "switch, one switch under two names, a link seen from one end only.",
    )


@dataclass
class _Draft:
    """Links being assembled: ends (as found), speed, status, provenance."""

    links: dict[frozenset[str], tuple[str, str]] = field(default_factory=dict)
    claimed: dict[str, frozenset[str]] = field(default_factory=dict)
    kept: set[frozenset[str]] = field(default_factory=set)

    def add(self, a: str, b: str) -> bool:
        key = frozenset((a, b))
        if key in self.links:
            return True
        if a in self.claimed or b in self.claimed:
            return False
        self.links[key] = (a, b)
        self.claimed[a] = key
        self.claimed[b] = key
        return True


def build_fabric(
    observations: Mapping[str, SwitchObservation],
    *,
    targets: Mapping[str, TargetConfig] | None = None,
    declared: Fabric | None = None,
    previous: Fabric | None = None,
    address_plan: AddressPlan | None = None,
    name: str | None = None,
    stale: Iterable[str] = (),
) -> DiscoveryResult:
    """Build the fabric the observations describe (see the module docstring for the rules)."""
    targets = targets or {}
    problems: list[Problem] = [p for obs in observations.values() for p in obs.problems]
    # A target that did not answer still exists if its neighbors see it (fail-static):
    # added below as its neighbors are matched to it.
    switches = set(observations)

    def note(target: str, path: str, reason: str) -> None:
        problems.append(Problem(target=target, path=path, reason=reason))

    ids = Identities(observations, targets)
    findings: list[Problem] = []

    def alarm(target: str, path: str, reason: str) -> None:
        findings.append(Problem(target=target, path=path, reason=reason))

    for first, second, evidence in ids.duplicates(observations, targets):
        alarm(second, "targets", f"is the same switch as target {first} ({evidence})")
    for t, obs in sorted(observations.items()):
        if obs.hostname and obs.hostname != t and short_name(obs.hostname) != t:
            alarm(
                t,
                "/system/state/hostname",
                f"reports hostname {obs.hostname!r}; the targets file calls it {t!r} "
                "(one switch under two names)",
            )
    oper = {(t, i.name): i for t, obs in observations.items() for i in obs.interfaces}
    draft = _Draft()
    host_ports: dict[str, HostPort] = {}
    seen_by: dict[str, str] = {}  # switch end -> the end its LLDP names
    renamed: set[tuple[str, str]] = set()
    for t, obs in sorted(observations.items()):
        for n in obs.neighbors:
            where = f"/lldp/interfaces/interface[name={n.local_interface}]"
            local = f"{t}:{n.local_interface}"
            if not _IFACE.match(n.local_interface):
                note(t, where, f"interface name {n.local_interface!r} cannot be a link end")
                continue
            match = ids.switch(n)
            if match is not None and match.switch not in switches:
                switches.add(match.switch)
            if match is None and n.kind is NeighborKind.SWITCH:
                note(t, where, f"neighbor switch {n.system_name!r} is not a target; link left out")
                continue
            if match is not None:
                if not match.by_name and (match.switch, n.system_name) not in renamed:
                    renamed.add((match.switch, n.system_name))
                    alarm(
                        match.switch,
                        where,
                        f"LLDP on {local} calls it {n.system_name!r} (matched by {match.how}); "
                        f"the targets file calls it {match.switch!r} (one switch under two names)",
                    )
                port, why = ids.port(match.switch, n)
                if port is None:
                    note(t, where, why)
                    continue
                peer = f"{match.switch}:{port}"
                seen_by[local] = peer
                if not draft.add(local, peer):
                    note(
                        t,
                        where,
                        f"{local} -> {peer} conflicts with another link on one of its ends",
                    )
                continue
            named = host_port(n)
            if named is None or not _NAME.match(n.system_name):
                note(
                    t,
                    where,
                    f"host neighbor {n.system_name!r} port {n.port_id!r}: not a valid NIC port",
                )
                continue
            port_name, nic_name = named
            end = f"{n.system_name}:{port_name}"
            if end in host_ports:
                note(
                    t,
                    where,
                    f"NIC port {end} is also seen on {host_ports[end].switch_end}; kept there",
                )
                continue
            if not draft.add(end, local):
                note(t, where, f"{end} -> {local} conflicts with another link")
                continue
            host_ports[end] = HostPort(n.system_name, port_name, nic_name, n.mgmt_address, local)
    fresh = set(observations) - set(stale)
    for local, peer in sorted(seen_by.items()):
        back = seen_by.get(peer)
        device, _ = split_end(local)
        peer_device, peer_port = split_end(peer)
        if back is not None and back != local:
            alarm(device, local, f"asymmetric LLDP: sees {peer}, but {peer} sees {back}")
        elif back is None and peer_device in fresh:
            state = oper.get((peer_device, peer_port))
            if state is not None and state.up:
                alarm(
                    device,
                    local,
                    f"link seen from one end only: {local} sees {peer}, but {peer_device} "
                    f"reports no LLDP neighbor on {peer_port}",
                )
    for t in sorted(fresh):
        obs = observations[t]
        if not obs.interfaces:
            alarm(t, "/interfaces", "answered with no interfaces")
        elif not obs.neighbors:
            alarm(t, "/lldp", "answered with no LLDP neighbors")

    _keep_unseen(draft, oper, previous, declared, host_ports, switches)
    problems.extend(findings)
    result = _assemble(
        switches,
        draft,
        oper,
        host_ports,
        observations,
        problems,
        targets,
        declared,
        previous,
        address_plan,
        name,
        stale,
    )
    return result.model_copy(update={"findings": tuple(findings)})


def _keep_unseen(
    draft: _Draft,
    oper: Mapping[tuple[str, str], InterfaceState],
    previous: Fabric | None,
    declared: Fabric | None,
    host_ports: dict[str, HostPort],
    switches: set[str],
) -> None:
    """Fail-static: interfaces without a neighbor keep the previous (else declared) link."""
    for source in (previous, declared):
        if source is None:
            continue
        hosts = {f"{p.host.name}:{p.port.name}": p for p in source.index.ports}
        for link in source.links:
            if any(end in draft.claimed for end in link.ends):
                continue  # LLDP says something about one of its ends: LLDP wins
            on_switch = [e for e in link.ends if split_end(e)[0] in switches]
            if not on_switch or any(split_end(e) not in oper for e in on_switch):
                continue  # no observed switch has this interface
            other = [e for e in link.ends if e not in on_switch]
            if other and other[0] not in hosts:
                continue  # the far end is a switch that is not a target
            if draft.add(link.a, link.b):
                draft.kept.add(frozenset(link.ends))
                for end in other:
                    info = hosts[end]
                    host_ports.setdefault(
                        end,
                        HostPort(info.host.name, info.port.name, info.nic.name, None, on_switch[0]),
                    )


def _oriented(
    a: str, b: str, switches: set[str], roles: Mapping[str, SwitchRole]
) -> tuple[str, str]:
    """A new link's ends in file order: the host end first, else the lower tier, else by name."""
    da, db = split_end(a)[0], split_end(b)[0]
    if da not in switches:
        return a, b
    if db not in switches:
        return b, a
    if (roles[da].tier, natural_key(a)) > (roles[db].tier, natural_key(b)):
        return b, a
    return a, b


def _assemble(
    switches: set[str],
    draft: _Draft,
    oper: Mapping[tuple[str, str], InterfaceState],
    host_ports: dict[str, HostPort],
    observations: Mapping[str, SwitchObservation],
    problems: list[Problem],
    targets: Mapping[str, TargetConfig],
    declared: Fabric | None,
    previous: Fabric | None,
    address_plan: AddressPlan | None,
    name: str | None,
    stale: Iterable[str],
) -> DiscoveryResult:
    def note(target: str, path: str, reason: str) -> None:
        problems.append(Problem(target=target, path=path, reason=reason))

    known: dict[frozenset[str], tuple[int, Link]] = {}
    for source in (declared, previous):  # the declared order and orientation win
        for i, link in enumerate(source.links if source else ()):
            known.setdefault(frozenset(link.ends), (i if source is declared else 10**9 + i, link))
    roles, role_sources = assign_roles(draft.links.values(), switches, targets, declared)
    links: list[tuple[tuple[object, ...], Link]] = []
    by_pair: dict[frozenset[str], int] = {}
    for key, (a, b) in draft.links.items():
        speeds: list[float] = []
        up = True
        for end in (a, b):
            state = oper.get(split_end(end))
            if split_end(end)[0] in switches and state is not None:
                up = up and state.up
                if state.speed_gbps:
                    speeds.append(state.speed_gbps)
        order, old = known.get(key, (None, None))
        where = (split_end(a)[0] if split_end(a)[0] in switches else split_end(b)[0], f"{a}--{b}")
        if len(set(speeds)) > 1:
            note(
                *where,
                f"ends disagree on speed ({', '.join(f'{x:g}G' for x in speeds)}); using the lower",
            )
        speed = min(speeds) if speeds else (old.speed_gbps if old else None)
        if speed is None:
            note(*where, "no port speed known; link left out")
            continue
        status = LinkStatus.UP if up else LinkStatus.DOWN
        if up and old is not None and old.status is LinkStatus.DRAINED:
            status = LinkStatus.DRAINED
        a, b = (old.a, old.b) if old is not None else _oriented(a, b, switches, roles)
        link = Link(a=a, b=b, speed_gbps=speed, status=status)
        nodes = frozenset(e if split_end(e)[0] not in switches else split_end(e)[0] for e in (a, b))
        if nodes in by_pair:  # a second cable between the same two switches: bundle them
            i = by_pair[nodes]
            first = links[i][1]
            note(*where, f"parallel to {first.id}; bundled into one link of the summed speed")
            bundled = first.model_copy(update={"speed_gbps": first.speed_gbps + speed})
            links[i] = (links[i][0], bundled)
            continue
        by_pair[nodes] = len(links)
        sort_key = (0, order) if order is not None else (1, natural_key(a), natural_key(b))
        links.append((sort_key, link))
    links.sort(key=lambda item: item[0])
    hosts, address_sources = assign_hosts(host_ports, declared, previous, address_plan, problems)
    fabric_switches = assign_switches(
        switches, roles, targets, declared, observations, draft.links.values(), hosts, problems
    )
    try:
        fabric = Fabric(
            name=name or (declared.name if declared else "discovered"),
            description=declared.description if declared else "discovered from the switches",
            switches=fabric_switches,
            hosts=hosts,
            links=tuple(link for _, link in links),
        )
    except ValueError as exc:
        raise SouthboundError(f"the discovered fabric is not consistent: {exc}") from None
    stale_set = set(stale)
    return DiscoveryResult(
        fabric=fabric,
        problems=tuple(problems),
        address_sources=address_sources,
        role_sources=role_sources,
        kept_links=sum(1 for key in draft.kept if key in draft.links),
        stale_targets=tuple(sorted(stale_set & switches)),
        unreached_targets=tuple(sorted(set(targets) - set(observations))),
    )
