"""The fabric as data: switches, hosts with NICs and NIC ports, and the links between ports.

Why a model of its own: every other part of c4p (the planner, the ECMP baseline, source-port
synthesis, discovery) must agree on what a port, a link and a path are. The model is immutable
(``frozen``) so that a fabric behaves like a *snapshot*: a link going down produces a new
``Fabric`` (see :meth:`Fabric.with_link_status`), and whoever planned on the old snapshot still
holds a consistent picture.

Naming, used everywhere (files, paths, plans):

* a switch is a node named by its ``name``;
* a NIC port is a node named ``"<host>:<port>"`` (e.g. ``"h0003:nic2p0"``);
* a link end is ``"<device>:<interface>"``; for a host the interface is the NIC port name, so a
  host link end *is* the NIC port's node name. Switch interfaces are declared by the links that
  use them.

Every link is two directed resources (``a -> b`` and ``b -> a``) with the link's speed each.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, field_validator, model_validator

from topology.addresses import IPv4, IPv6
from topology.base import Frozen

if TYPE_CHECKING:
    from topology.index import FabricIndex

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""Device and NIC names: no ':' (it separates device from interface) and no '/'."""

INTERFACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
"""Switch interface names may contain '/' (``Ethernet1/1``) but never ':'."""

_NAME_RE = re.compile(NAME_PATTERN)
_INTERFACE_RE = re.compile(INTERFACE_PATTERN)

END_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*:[A-Za-z0-9][A-Za-z0-9._/-]*$"
"""A link end, ``"<device>:<interface>"``: a name, then an interface name.

Checked as a pattern, by pydantic's own (compiled) validator, not by a Python function called
per end: a 16,384-GPU fabric's 49,152 links validated in 0.081 s instead of 0.114-0.117 s
(fastest of 15, side by side; the whole fabric's validation, index included, varies more
than that from run to run here). What is wrong with an end that fails it is said by
:func:`end_problem`, which the error reports use (:func:`topology.formats.problems_of`)."""

Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=128)]


# ``Frozen`` (topology.base) is the base of every model of the fabric and is re-exported here.


class LinkStatus(StrEnum):
    """Operational state of a link.

    ``drained`` means up but costed out of routing by an operator: it is in no ECMP group and a
    plan must not use it, exactly like ``down``; the difference is only why.
    """

    UP = "up"
    DOWN = "down"
    DRAINED = "drained"


class SwitchRole(StrEnum):
    """Tier of a switch in a Clos: leaf/ToR (1), spine/aggregation (2), core (3)."""

    LEAF = "leaf"
    SPINE = "spine"
    CORE = "core"

    @property
    def tier(self) -> int:
        return {"leaf": 1, "spine": 2, "core": 3}[self.value]


class HashAlgorithm(StrEnum):
    """ECMP hash functions seen in SAI and vendor documentation (see ``topology.hashing``)."""

    CRC16_BISYNC = "crc16-bisync"
    CRC16_CCITT = "crc16-ccitt"
    CRC32_LO = "crc32-lo"
    CRC32_HI = "crc32-hi"
    XOR_FOLD = "xor-fold"


class HashField(StrEnum):
    """Header fields a switch may feed into its ECMP hash key, in key order."""

    SRC_IP = "src-ip"
    DST_IP = "dst-ip"
    PROTOCOL = "protocol"
    SRC_PORT = "src-port"
    DST_PORT = "dst-port"


ALL_HASH_FIELDS: tuple[HashField, ...] = tuple(HashField)


class HashProfile(Frozen):
    """How one switch hashes a packet onto a member of an ECMP group.

    The key is the selected fields, always in :class:`HashField` order whatever order they are
    listed in, packed big-endian (addresses 4 bytes, protocol 1, ports 2). The seed is XORed into
    the CRC's initial register (or the fold's accumulator); ``seed: 0`` gives the textbook CRC.
    """

    algorithm: HashAlgorithm = HashAlgorithm.CRC16_BISYNC
    seed: int = Field(default=0, ge=0, le=0xFFFFFFFF)
    fields: tuple[HashField, ...] = ALL_HASH_FIELDS

    @field_validator("fields")
    @classmethod
    def _fields_valid(cls, value: tuple[HashField, ...]) -> tuple[HashField, ...]:
        if not value:
            raise ValueError("at least one hash field is required")
        if len(set(value)) != len(value):
            raise ValueError(f"hash fields repeat: {[f.value for f in value]}")
        return tuple(f for f in ALL_HASH_FIELDS if f in value)


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class SwitchAddress(Frozen):
    """One address a switch owns: a loopback (``interface`` None or ``lo*``) or an interface's.

    Why a switch has many: a switch answers a probe (ICMP time exceeded) from its loopback when
    its routes carry a source address, else from whichever interface faces the prober, so the
    prober's address book needs every address of every switch (from OpenConfig
    ``subinterfaces/.../ipv4/addresses``, SNMP's IP address table, or the fabric file).
    IPv6 addresses are accepted so the types are ready; probing uses IPv4 today.
    """

    address: IPAddress
    interface: str | None = None


class Switch(Frozen):
    """A switch: its tier, the plane it belongs to (dual-plane fabrics), and its ECMP hash.

    ``mgmt_address`` is where the controller reaches it (and where it may answer probes from);
    ``addresses`` are its loopback and interface addresses (see :class:`SwitchAddress`).
    """

    name: Name
    role: SwitchRole
    plane: int = Field(default=0, ge=0)
    pod: int | None = Field(default=None, ge=0)
    mgmt_address: IPv4 | None = None
    addresses: tuple[SwitchAddress, ...] = ()
    hash: HashProfile = HashProfile()

    def all_addresses(self) -> tuple[IPAddress, ...]:
        """``mgmt_address`` (when set) followed by every loopback and interface address."""
        head: tuple[IPAddress, ...] = (self.mgmt_address,) if self.mgmt_address is not None else ()
        return head + tuple(a.address for a in self.addresses)

    @property
    def tier(self) -> int:
        return self.role.tier


class NicPort(Frozen):
    """One physical port of a NIC: the RoCE endpoint a QP is bound to."""

    name: Name
    address: IPv4
    gid: IPv6 | None = None


class Nic(Frozen):
    """A NIC (one GPU's network interface, usually). Its position in the host is its rail."""

    name: Name
    ports: tuple[NicPort, ...] = Field(min_length=1)


class Host(Frozen):
    """A server with one or more NICs."""

    name: Name
    nics: tuple[Nic, ...] = Field(min_length=1)


class Link(Frozen):
    """A cable between two ports, ``a`` and ``b``, each written ``"<device>:<interface>"``."""

    a: Annotated[str, Field(pattern=END_PATTERN)]
    b: Annotated[str, Field(pattern=END_PATTERN)]
    speed_gbps: float = Field(gt=0)
    status: LinkStatus = LinkStatus.UP

    @property
    def ends(self) -> tuple[str, str]:
        return (self.a, self.b)

    @property
    def usable(self) -> bool:
        return self.status is LinkStatus.UP

    @property
    def id(self) -> str:
        """A stable name for the link: its two ends, ``a`` first, as written in the file."""
        return f"{self.a}--{self.b}"


def end_problem(value: str) -> str:
    """What is wrong with a link end that does not match :data:`END_PATTERN`."""
    device, sep, interface = value.partition(":")
    if not sep or not _NAME_RE.fullmatch(device) or not interface:
        return f"{value!r} is not '<device>:<interface>'"
    return f"{value!r}: interface {interface!r} has characters not allowed"


def split_end(end: str) -> tuple[str, str]:
    """``"leaf1:Ethernet3"`` -> ``("leaf1", "Ethernet3")``."""
    device, _, interface = end.partition(":")
    return device, interface


class FabricProblem(Frozen):
    """One thing wrong with a fabric description, located by a field path like ``links[3].b``."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class Fabric(Frozen):
    """A whole fabric. Construction checks cross-references, so a ``Fabric`` is always sound."""

    name: Name = "fabric"
    description: str = ""
    switches: tuple[Switch, ...] = ()
    hosts: tuple[Host, ...] = ()
    links: tuple[Link, ...] = ()

    @model_validator(mode="after")
    def _cross_references(self) -> Fabric:
        from topology.index import sound_index

        # The common case: the soundness questions asked while numbering nodes and links, and
        # the index kept (cached_property's slot), so nobody numbers them again; else find out
        # what is wrong.
        index = sound_index(self)
        if index is not None:
            self.__dict__["index"] = index
            return self
        problems = list(find_problems(self))
        if problems:
            shown = "; ".join(str(p) for p in problems[:20])
            more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
            raise ValueError(f"{len(problems)} problem(s): {shown}{more}")
        return self

    # -- lookups -----------------------------------------------------------------------------

    @cached_property
    def index(self) -> FabricIndex:
        """The compiled, array-based view used by routing, paths and evaluation (built once)."""
        from topology.index import FabricIndex

        return FabricIndex(self)

    def switch(self, name: str) -> Switch:
        return self.index.switch_by_name[name]

    def nic_ports(self) -> Iterator[tuple[Host, Nic, NicPort]]:
        for host in self.hosts:
            for nic in host.nics:
                for port in nic.ports:
                    yield host, nic, port

    def link_by_id(self, link_id: str) -> Link:
        """Find a link by its id ``a--b`` (either order) or by one of its ends ``dev:if``."""
        return self.links[self.index.link_number(link_id)]

    # -- snapshots ---------------------------------------------------------------------------

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Fabric:
        """A copy; with ``update``, a new snapshot built by the constructor.

        Why not pydantic's copy: it copies the instance dict, cached :attr:`index` included,
        so a copy with other switches or links would keep the old arrays (hash tables,
        routing) and skip the cross-reference checks. An update therefore goes through the
        constructor, like :meth:`with_link_status`.
        """
        if not update:
            return super().model_copy(deep=deep)
        data: dict[str, Any] = {name: getattr(self, name) for name in type(self).model_fields}
        data.update(update)
        return type(self)(**data)

    def with_link_status(self, changes: dict[int, LinkStatus]) -> Fabric:
        """A new snapshot where link number ``i`` has status ``changes[i]``.

        Why not the constructor: a status change leaves every name, address and link end as
        it was, and those are all the cross-reference checks look at, so checking them again
        (0.1 s at 16k GPUs) and numbering every node and resource again (0.15 s) would find
        and build what the old snapshot already has. The new snapshot is assembled from the
        already validated parts; its index, when the old one was built, shares the old
        index's structure with the new usable links (:meth:`FabricIndex.with_status`), and
        views that depend on status (routing) start afresh.
        """
        statuses: dict[int, LinkStatus] = {}
        for i, status in changes.items():
            if not 0 <= i < len(self.links):
                raise IndexError(f"link number {i} out of range 0..{len(self.links) - 1}")
            statuses[i] = LinkStatus(status)  # "down" as LinkStatus.DOWN, as validation did
        links = tuple(
            link.model_copy(update={"status": statuses[i]}) if i in statuses else link
            for i, link in enumerate(self.links)
        )
        snapshot = type(self).model_construct(
            name=self.name,
            description=self.description,
            switches=self.switches,
            hosts=self.hosts,
            links=links,
        )
        built = self.__dict__.get("index")
        if built is not None:  # cached_property's slot: the new snapshot's own index
            snapshot.__dict__["index"] = built.with_status(snapshot)
        return snapshot


def _duplicates(names: Iterable[tuple[str, str]]) -> Iterator[FabricProblem]:
    seen: dict[str, str] = {}
    for path, name in names:
        if name in seen:
            yield FabricProblem(
                path=path, reason=f"duplicate name {name!r} (first at {seen[name]})"
            )
        else:
            seen[name] = path


def find_problems(fabric: Fabric) -> Iterator[FabricProblem]:
    """Every cross-reference problem of a fabric, each located by its field path.

    Field-level problems (types, ranges, unknown keys) are caught by pydantic before this runs.
    """
    yield from _duplicates(
        [(f"switches[{i}].name", s.name) for i, s in enumerate(fabric.switches)]
        + [(f"hosts[{i}].name", h.name) for i, h in enumerate(fabric.hosts)]
    )
    port_names: dict[str, str] = {}
    addresses: dict[Any, str] = {}
    for hi, host in enumerate(fabric.hosts):
        yield from _duplicates(
            (f"hosts[{hi}].nics[{ni}].name", nic.name) for ni, nic in enumerate(host.nics)
        )
        seen_ports: list[tuple[str, str]] = []
        for ni, nic in enumerate(host.nics):
            for pi, port in enumerate(nic.ports):
                where = f"hosts[{hi}].nics[{ni}].ports[{pi}]"
                seen_ports.append((f"{where}.name", port.name))
                port_names[f"{host.name}:{port.name}"] = where
                if port.address in addresses:
                    yield FabricProblem(
                        path=f"{where}.address",
                        reason=f"address {port.address} already used at {addresses[port.address]}",
                    )
                else:
                    addresses[port.address] = f"{where}.address"
        yield from _duplicates(seen_ports)
    for si, switch in enumerate(fabric.switches):
        if switch.mgmt_address is not None:
            if switch.mgmt_address in addresses:
                yield FabricProblem(
                    path=f"switches[{si}].mgmt_address",
                    reason=f"address {switch.mgmt_address} already used at "
                    f"{addresses[switch.mgmt_address]}",
                )
            else:
                addresses[switch.mgmt_address] = f"switches[{si}].mgmt_address"
        for ai, owned in enumerate(switch.addresses):
            where = f"switches[{si}].addresses[{ai}].address"
            if owned.address in addresses:
                yield FabricProblem(
                    path=where,
                    reason=f"address {owned.address} already used at {addresses[owned.address]}",
                )
            else:
                addresses[owned.address] = where

    switch_names = {s.name for s in fabric.switches}
    host_names = {h.name for h in fabric.hosts}
    used_ends: dict[str, str] = {}
    device_pairs: dict[frozenset[str], int] = {}
    for li, link in enumerate(fabric.links):
        devices: list[str] = []
        for side in ("a", "b"):
            end = getattr(link, side)
            where = f"links[{li}].{side}"
            device, _ = split_end(end)
            devices.append(device)
            if device in host_names:
                if end not in port_names:
                    yield FabricProblem(path=where, reason=f"host port {end!r} does not exist")
            elif device not in switch_names:
                yield FabricProblem(path=where, reason=f"device {device!r} does not exist")
            if end in used_ends:
                yield FabricProblem(
                    path=where, reason=f"port {end!r} is already used by {used_ends[end]}"
                )
            else:
                used_ends[end] = f"links[{li}]"
        if devices[0] == devices[1]:
            yield FabricProblem(path=f"links[{li}]", reason=f"loops back to {devices[0]!r}")
            continue
        if devices[0] in host_names and devices[1] in host_names:
            yield FabricProblem(
                path=f"links[{li}]", reason="joins two hosts; hosts attach to switches"
            )
        # A host's NIC ports are separate nodes: two NICs of one host on the same leaf are
        # two distinct links, not a parallel pair.
        nodes = [end if d in host_names else d for d, end in zip(devices, link.ends, strict=True)]
        pair = frozenset(nodes)
        if pair in device_pairs:
            yield FabricProblem(
                path=f"links[{li}]",
                reason=f"parallel link between {devices[0]!r} and {devices[1]!r} (also "
                f"links[{device_pairs[pair]}]): model a bundle as one link of the summed speed",
            )
        else:
            device_pairs[pair] = li


def is_sound(fabric: Fabric) -> bool:
    """True only if :func:`find_problems` would find nothing; False if it may find something.

    Why a second check: :func:`find_problems` locates every problem by its field path, which
    means a path string and a few dictionary entries for every name, address and link end:
    0.3 s for a 16k-GPU fabric that has no problem at all. This asks the same questions of
    whole columns at once (are these names distinct, is every end a known port), and the
    validator runs :func:`find_problems` only when an answer is no, so errors read the same.
    The questions are asked while building the fabric's index (:func:`topology.index.
    sound_index`), which needs the same names and node lookups: validation keeps that index.
    """
    from topology.index import sound_index

    return sound_index(fabric) is not None
