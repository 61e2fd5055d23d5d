"""The parts of a fabric: switches, hosts with NICs and NIC ports, links, and the names and
patterns they are written with (see :mod:`topology.model` for the naming used everywhere).

Why apart from :mod:`topology.model`: the whole :class:`~topology.model.Fabric` validates
itself through its array index (:mod:`topology.index`), and the index reads these parts; with
them here, below both, the index needs nothing of the model (they imported each other). Every
name is re-exported by :mod:`topology.model`, where users import them.
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator

from topology.addresses import IPv4, IPv6
from topology.base import Frozen

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


# ``Frozen`` (topology.base) is the base of every model of the fabric (re-exported by the model).


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
