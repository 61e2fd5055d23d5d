"""The lab's plan: namespace and interface names, addresses, and the lab's own fabric.

Why re-address: a fabric file's addresses are the user's (often 10.x or 192.168.x); the lab
builds its fabric only in 198.18.0.0/15 (RFC 2544's benchmarking range, routed nowhere), so
nothing it sends can leave the machine, whatever the file says. Switch loopbacks are
198.18.0.0/16 (``198.18.0.1`` for switch 0, ...), every cable is a /31 of 198.19.0.0/16 (its end
``a`` the even address), and a NIC port's address is its end of its cable. The lab's fabric is
the input fabric with those addresses: NIC ports re-addressed and every switch given its
loopback and interface addresses (``Switch.addresses``), which is what the probe address book
needs to turn an answering address back into a switch.

**IPv6.** A lab built with ``family=6`` (:class:`c4p.lab.build.Lab`) carries only IPv6 in its
namespaces: every address is the IPv6 twin of the IPv4 one above (:func:`as_ipv6`), in
2001:2::/48 (RFC 5180's benchmarking range, routed nowhere): a loopback ``198.18.a.b`` is
``2001:2:0:18::a:b``, a cable end ``198.19.a.b`` is ``2001:2:0:19::a:b`` (a /127, ``a`` end even).
The lab's fabric keeps the IPv4 addresses as the *names* of the same interfaces (the fabric model
addresses NIC ports in IPv4), so a probe answered from an IPv6 address is read by mapping it back
(:func:`as_ipv4`).

Names carry a per-run token (``c4p-<token>-<device>`` namespaces) so that labs built at the same
time on one machine never collide; interface names live inside namespaces, so they only need to
be unique per device (and at most 15 characters, the kernel's limit).
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from c4p.errors import C4pError
from topology.model import Fabric, Host, Nic, NicPort, Switch, SwitchAddress, split_end

LOOPBACKS = ipaddress.IPv4Network("198.18.0.0/16")
LINKS = ipaddress.IPv4Network("198.19.0.0/16")
LAB_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
LAB_RANGE6 = ipaddress.IPv6Network("2001:2::/48")
_V6_LOOPBACKS = ipaddress.IPv6Network("2001:2:0:18::/64")
_V6_LINKS = ipaddress.IPv6Network("2001:2:0:19::/64")
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


class LabError(C4pError):
    """The lab cannot be built as asked (bad fabric for a lab, missing tools or rights)."""


def as_ipv6(address: ipaddress.IPv4Address) -> ipaddress.IPv6Address:
    """The IPv6 twin of a lab address (see the module docstring)."""
    if address in LOOPBACKS:
        base = _V6_LOOPBACKS
    elif address in LINKS:
        base = _V6_LINKS
    else:
        raise LabError(f"address: {address} is not a lab address ({LAB_RANGE})")
    return base[int(address) & 0xFFFF]


def as_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    """The lab's IPv4 name of an IPv6 twin (the inverse of :func:`as_ipv6`)."""
    for base, net in ((_V6_LOOPBACKS, LOOPBACKS), (_V6_LINKS, LINKS)):
        if address in base and int(address) - int(base[0]) <= 0xFFFF:
            return net[int(address) - int(base[0])]
    raise LabError(f"address: {address} is not a lab IPv6 address ({LAB_RANGE6})")


def runtime_dir(token: str) -> Path:
    """Where a lab's daemons keep sockets, pid files and configs: ``<tmp>/c4p-run-<token>``,
    world-traversable (mode 755) because FRR and lldpd drop privileges to their own users,
    which may not reach a caller's private work directory."""
    path = Path(tempfile.gettempdir()) / f"c4p-run-{token}"
    path.mkdir(mode=0o755, exist_ok=True)
    path.chmod(0o755)
    return path


def new_token() -> str:
    """A short random token for one lab's names (6 hex digits)."""
    return secrets.token_hex(3)


@dataclass(frozen=True)
class End:
    """One end of a cable in the lab: the device's namespace, interface and address."""

    device: str
    namespace: str
    interface: str
    address: ipaddress.IPv4Address
    peer: ipaddress.IPv4Address
    is_host: bool


@dataclass(frozen=True)
class Cable:
    """Link ``number`` of the fabric as two lab ends (``a``, ``b`` as in the fabric file)."""

    number: int
    a: End
    b: End


@dataclass(frozen=True)
class LabPlan:
    """Everything the builder needs, decided before any namespace exists."""

    token: str
    fabric: Fabric
    """The lab's fabric: the input with lab addresses (see the module docstring)."""
    namespaces: dict[str, str]
    """Device (switch or host) name -> namespace name."""
    loopbacks: dict[str, ipaddress.IPv4Address]
    cables: tuple[Cable, ...]

    @property
    def switches(self) -> list[str]:
        return [s.name for s in self.fabric.switches]

    @property
    def hosts(self) -> list[str]:
        return [h.name for h in self.fabric.hosts]

    def ends_of(self, device: str) -> list[End]:
        return [e for c in self.cables for e in (c.a, c.b) if e.device == device]

    def end(self, device: str, interface: str) -> End:
        for e in self.ends_of(device):
            if e.interface == interface:
                return e
        raise LabError(f"link: no interface {device}:{interface} in the lab")


def plan_lab(fabric: Fabric, token: str | None = None) -> LabPlan:
    """The lab for ``fabric`` (see the module docstring). Raises :class:`LabError` naming the
    field when the fabric does not fit a lab (interface names, size)."""
    token = token or new_token()
    if not re.fullmatch(r"[0-9a-z]{1,8}", token):
        raise LabError(f"token: {token!r} must be 1-8 lowercase letters or digits")
    if len(fabric.switches) >= LOOPBACKS.num_addresses - 2:
        raise LabError(f"switches: {len(fabric.switches)} is too many for a lab")
    if 2 * len(fabric.links) > LINKS.num_addresses:
        raise LabError(f"links: {len(fabric.links)} is too many for a lab")
    hosts = {h.name for h in fabric.hosts}
    namespaces = {d: f"c4p-{token}-{d}" for d in [*(s.name for s in fabric.switches), *hosts]}
    loopbacks = {s.name: LOOPBACKS[1 + i] for i, s in enumerate(fabric.switches)}
    port_names = {f"{h.name}:{p.name}" for h, _, p in fabric.nic_ports()}
    cables = []
    for number, link in enumerate(fabric.links):
        base = LINKS[2 * number]
        ends = []
        for k, (end, peer) in enumerate(((link.a, link.b), (link.b, link.a))):
            device, interface = split_end(end)
            if not _IFNAME.match(interface):
                raise LabError(
                    f"links[{number}].{'ab'[k]}: interface {interface!r} is not a Linux "
                    "interface name (1-15 of letters, digits, '_', '.', '-')"
                )
            ends.append(
                End(
                    device=device,
                    namespace=namespaces[device],
                    interface=interface,
                    address=base + k,
                    peer=base + 1 - k,
                    is_host=end in port_names,
                )
            )
            del peer
        cables.append(Cable(number, ends[0], ends[1]))
    lab_fabric = _readdress(fabric, loopbacks, cables)
    return LabPlan(token, lab_fabric, namespaces, loopbacks, tuple(cables))


def _readdress(
    fabric: Fabric, loopbacks: dict[str, ipaddress.IPv4Address], cables: list[Cable]
) -> Fabric:
    by_end = {(e.device, e.interface): e for c in cables for e in (c.a, c.b)}
    switches = []
    for s in fabric.switches:
        owned = [SwitchAddress(address=loopbacks[s.name], interface="lo")]
        owned += [
            SwitchAddress(address=e.address, interface=e.interface)
            for (device, _), e in by_end.items()
            if device == s.name
        ]
        switches.append(
            Switch(
                name=s.name,
                role=s.role,
                plane=s.plane,
                pod=s.pod,
                mgmt_address=None,
                addresses=tuple(owned),
                hash=s.hash,
            )
        )
    hosts = []
    for h in fabric.hosts:
        nics = []
        for nic in h.nics:
            ports = []
            for p in nic.ports:
                end = by_end.get((h.name, p.name))
                if end is None:
                    raise LabError(f"hosts.{h.name}.{p.name}: the NIC port has no cable")
                gid = ipaddress.IPv6Address(f"::ffff:{end.address}")
                ports.append(NicPort(name=p.name, address=end.address, gid=gid))
            nics.append(Nic(name=nic.name, ports=tuple(ports)))
        hosts.append(Host(name=h.name, nics=tuple(nics)))
    return Fabric(
        name=fabric.name,
        description=f"{fabric.description} (lab addresses in {LAB_RANGE})".strip(),
        switches=tuple(switches),
        hosts=tuple(hosts),
        links=fabric.links,
    )
