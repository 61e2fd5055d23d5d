"""What switches cannot tell: switch roles, planes and addresses, NIC addresses and order.

Why apart from :mod:`southbound.discovery`: links are facts LLDP reports; these are
*decisions*, taken from hints (the targets file), a declared fabric, or inference, and each is
counted by source so that a report can say where it came from. The rules are listed in the
docstring of :mod:`southbound.discovery`.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from southbound.observed import Problem, SwitchObservation
from southbound.targets import TargetConfig
from topology.generators.common import AddressPlan, gid_of
from topology.index import PortInfo, natural_key
from topology.model import (
    Fabric,
    HashProfile,
    Host,
    Nic,
    NicPort,
    Switch,
    SwitchAddress,
    SwitchRole,
    split_end,
)


@dataclass
class HostPort:
    """A host NIC port seen by LLDP (or kept from a known fabric) and where it is cabled."""

    host: str
    port: str
    nic: str
    address: ipaddress.IPv4Address | None
    switch_end: str


def assign_roles(
    links: Iterable[tuple[str, str]],
    switches: set[str],
    targets: Mapping[str, TargetConfig],
    declared: Fabric | None,
) -> tuple[dict[str, SwitchRole], dict[str, int]]:
    """Each switch's role: the target's hint, else the declared one, else inferred from the
    links (hosts below: leaf; above a leaf: spine; above a spine: core); with counts by source."""
    adjacent: dict[str, set[str]] = defaultdict(set)
    with_hosts: set[str] = set()
    for a, b in links:
        da, db = split_end(a)[0], split_end(b)[0]
        if da in switches and db in switches:
            adjacent[da].add(db)
            adjacent[db].add(da)
        else:
            with_hosts.add(da if da in switches else db)
    inferred: dict[str, SwitchRole] = {s: SwitchRole.LEAF for s in with_hosts}
    for tier_role in (SwitchRole.SPINE, SwitchRole.CORE):
        below = [s for s, r in inferred.items() if r.tier == tier_role.tier - 1]
        for s in below:
            for n in adjacent[s]:
                inferred.setdefault(n, tier_role)
    declared_roles = {s.name: s.role for s in declared.switches} if declared else {}
    roles: dict[str, SwitchRole] = {}
    sources: dict[str, int] = defaultdict(int)
    for s in switches:
        hint = targets[s].role if s in targets else None
        if hint is not None:
            roles[s], source = hint, "targets"
        elif s in declared_roles:
            roles[s], source = declared_roles[s], "declared"
        else:
            roles[s], source = inferred.get(s, SwitchRole.SPINE), "inferred"
        sources[source] += 1
    return roles, dict(sources)


def infer_planes(switches: set[str], links: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Connected groups of switches (by switch-switch links), numbered in name order."""
    parent = {s: s for s in switches}

    def find(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for a, b in links:
        da, db = split_end(a)[0], split_end(b)[0]
        if da in switches and db in switches:
            parent[find(da)] = find(db)
    groups: dict[str, list[str]] = defaultdict(list)
    for s in switches:
        groups[find(s)].append(s)
    ordered = sorted(groups.values(), key=lambda g: min(natural_key(x) for x in g))
    return {s: plane for plane, group in enumerate(ordered) for s in group}


def assign_switches(
    switches: set[str],
    roles: Mapping[str, SwitchRole],
    targets: Mapping[str, TargetConfig],
    declared: Fabric | None,
    observations: Mapping[str, SwitchObservation],
    links: Iterable[tuple[str, str]] = (),
    hosts: Iterable[Host] = (),
    problems: list[Problem] | None = None,
) -> tuple[Switch, ...]:
    """The switches with plane, pod, management address (hint, declared, inferred) and
    loopback/interface addresses (observed, else declared), in declared order, then by tier,
    plane and name. An observed address another switch or a NIC port already has is left out
    with a problem (anycast and unnumbered addresses are real; the fabric refuses clashes)."""
    declared_by = {s.name: (i, s) for i, s in enumerate(declared.switches)} if declared else {}
    planes = infer_planes(switches, links)
    used: set[object] = {p.address for h in hosts for n in h.nics for p in n.ports}
    addresses = [t.address for t in targets.values()]
    out: list[tuple[tuple[object, ...], Switch]] = []
    for s in switches:
        hint = targets.get(s)
        order, old = declared_by.get(s, (None, None))
        mgmt = hint.mgmt_address if hint else None
        if mgmt is None and old is not None:
            mgmt = old.mgmt_address
        if mgmt is None and hint is not None:
            try:
                ip = ipaddress.ip_address(hint.address)
            except ValueError:
                ip = None
            if (
                isinstance(ip, ipaddress.IPv4Address)
                and not ip.is_loopback
                and addresses.count(hint.address) == 1
            ):
                mgmt = ip
        plane = (
            hint.plane
            if hint and hint.plane is not None
            else (old.plane if old else planes.get(s, 0))
        )
        pod = hint.pod if hint and hint.pod is not None else (old.pod if old else None)
        if mgmt is not None:
            used.add(mgmt)
        owned = _owned_addresses(s, observations.get(s), old, used, problems)
        switch = Switch(
            name=s,
            role=roles[s],
            plane=plane,
            pod=pod,
            mgmt_address=mgmt,
            addresses=owned,
            hash=old.hash if old else HashProfile(),
        )
        key = (0, order) if order is not None else (1, roles[s].tier, plane, natural_key(s))
        out.append((key, switch))
    out.sort(key=lambda item: item[0])
    return tuple(s for _, s in out)


def _owned_addresses(
    switch: str,
    obs: SwitchObservation | None,
    old: Switch | None,
    used: set[object],
    problems: list[Problem] | None,
) -> tuple[SwitchAddress, ...]:
    if obs is None:
        found = list(old.addresses) if old is not None else []
    else:
        found = [
            SwitchAddress(address=a, interface=i.name) for i in obs.interfaces for a in i.addresses
        ]
        found.sort(key=lambda e: not str(e.interface).lower().startswith("lo"))  # loopback first
        if old is not None and {e.address for e in old.addresses} == {e.address for e in found}:
            found = list(old.addresses)  # the declared file's spelling and order win
    out: list[SwitchAddress] = []
    for entry in found:
        if entry.address in used:
            if problems is not None:
                problems.append(
                    Problem(
                        target=switch,
                        path=f"/interfaces/interface[name={entry.interface}]/subinterfaces",
                        reason=f"address {entry.address} is also another device's; left out",
                    )
                )
            continue
        used.add(entry.address)
        out.append(entry)
    return tuple(out)


def assign_hosts(
    host_ports: Mapping[str, HostPort],
    declared: Fabric | None,
    previous: Fabric | None,
    plan: AddressPlan | None,
    problems: list[Problem],
) -> tuple[tuple[Host, ...], dict[str, int]]:
    """Hosts with NICs and ports; each port's address from LLDP, else a known fabric, else the
    plan (never one already used); with counts by source."""
    known: dict[str, PortInfo] = {}
    for fabric in (previous, declared):
        for p in fabric.index.ports if fabric else ():
            known.setdefault(f"{p.host.name}:{p.port.name}", p)
    declared_order = {h.name: i for i, h in enumerate(declared.hosts)} if declared else {}
    by_host: dict[str, list[HostPort]] = defaultdict(list)
    for hp in host_ports.values():
        by_host[hp.host].append(hp)
    host_names = sorted(by_host, key=lambda h: (declared_order.get(h, 10**9), natural_key(h)))
    used: set[ipaddress.IPv4Address] = set()
    chosen: dict[str, tuple[ipaddress.IPv4Address | None, str]] = {}
    for end, hp in sorted(host_ports.items()):
        address, source = hp.address, "lldp"
        if address is not None and address in used:
            problems.append(
                Problem(
                    target=split_end(hp.switch_end)[0],
                    path=end,
                    reason=f"LLDP address {address} is used by another port; ignored",
                )
            )
            address = None
        if address is None and end in known and known[end].port.address not in used:
            address, source = known[end].port.address, "declared"
        if address is not None:
            used.add(address)
        chosen[end] = (address, source)
    plan = plan or AddressPlan()
    sources: dict[str, int] = defaultdict(int)
    hosts: list[Host] = []
    for number, host in enumerate(host_names):
        ports = sorted(by_host[host], key=lambda hp: _port_order(hp, known))
        nics: dict[str, list[NicPort]] = {}
        for slot, hp in enumerate(ports):
            end = f"{host}:{hp.port}"
            address, source = chosen[end]
            if address is None:
                candidate = plan.nic_address(number, slot)
                while candidate in used:
                    candidate += 1
                address, source = candidate, "plan"
                used.add(address)
            sources[source] += 1
            gid = (
                known[end].port.gid
                if end in known and known[end].port.address == address
                else gid_of(address)
            )
            nics.setdefault(hp.nic, []).append(NicPort(name=hp.port, address=address, gid=gid))
        hosts.append(
            Host(name=host, nics=tuple(Nic(name=n, ports=tuple(p)) for n, p in nics.items()))
        )
    return tuple(hosts), dict(sources)


def _port_order(hp: HostPort, known: Mapping[str, PortInfo]) -> tuple[object, ...]:
    info = known.get(f"{hp.host}:{hp.port}")
    if info is not None:
        return (0, info.rail, info.port_number)
    return (1, natural_key(hp.nic), natural_key(hp.port))
