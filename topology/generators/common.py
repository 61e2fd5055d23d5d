"""What every fabric generator shares: parameter base, hash profiles, address plan, naming, cabling.

Why one place: the four generators differ only in *which* device is cabled to which. Names,
addresses, ECMP hash profiles and interface numbering must follow the same rules in all of them,
so that a path, a plan or a probe result reads the same whatever fabric it came from.

Rules (every generator follows them):

* **Names** are stable, zero-padded and sortable: hosts ``h0000``, NICs ``nic3``, NIC ports
  ``nic3p0``; switch names start with their role (``leaf-``, ``spine-``, ``core-``). Indices
  start at 0 and are padded to the width of the largest index (with a per-kind minimum).
* **Interfaces** are ``Ethernet1``, ``Ethernet2``, ... numbered per switch in the order the
  links are cabled. Generators cable tier by tier, bottom up, so every switch numbers its
  downlinks first (in host / lower-switch order) and then its uplinks (in upper-switch order).
  Natural sort of the interface names is the ECMP member order, so ``hash mod n`` picks among
  the uplinks in spine order.
* **Addresses** (:class:`AddressPlan`): NIC ports get ``nic_network + 256*host + 1 + slot``,
  with ``slot = nic * ports_per_nic + port``; for ``10.0.0.0/8`` that is
  ``10.<host // 256>.<host % 256>.<1 + slot>`` (65,536 hosts of up to 254 ports: far beyond
  16,384 GPUs x 2 ports). Each port's GID is its IPv4-mapped IPv6 address
  (``::ffff:a.b.c.d``), the RoCEv2 convention. Switches get management addresses
  ``mgmt_network + 256*(n // 254) + 1 + n % 254`` in fabric order (``192.168.0.1`` onward,
  never ``.0`` or ``.255``). The two networks must not overlap.
* **Hashing** (:class:`HashProfiles`): one profile per tier, different algorithm *and* seed per
  tier by default, so consecutive hops do not make correlated choices (hash polarization).
"""

from __future__ import annotations

import ipaddress
from typing import Self

from pydantic import Field, field_validator, model_validator

from topology.base import Frozen
from topology.model import (
    Fabric,
    HashAlgorithm,
    HashProfile,
    Host,
    Link,
    Name,
    Nic,
    NicPort,
    Switch,
    SwitchRole,
)

PORTS_PER_HOST_LIMIT = 254
"""NIC ports one host may have under the address plan (one /24 per host, no .0 or .255)."""


class Params(Frozen):
    """Base of every generator parameter model: unknown keys refused, instances immutable."""


class HashProfiles(Params):
    """The ECMP hash profile of each tier.

    Defaults differ per tier in algorithm and seed (the seed is the tier number), so that a
    leaf's choice of spine and a spine's choice of core are not correlated (polarization).
    """

    leaf: HashProfile = Field(
        default=HashProfile(algorithm=HashAlgorithm.CRC16_BISYNC, seed=1),
        description="Profile of every leaf (ToR).",
    )
    spine: HashProfile = Field(
        default=HashProfile(algorithm=HashAlgorithm.CRC32_LO, seed=2),
        description="Profile of every spine (the aggregation tier of a 3-tier fabric).",
    )
    core: HashProfile = Field(
        default=HashProfile(algorithm=HashAlgorithm.CRC16_CCITT, seed=3),
        description="Profile of every core switch (3-tier fabrics only).",
    )

    def for_role(self, role: SwitchRole) -> HashProfile:
        """The profile a switch of ``role`` gets."""
        return {
            SwitchRole.LEAF: self.leaf,
            SwitchRole.SPINE: self.spine,
            SwitchRole.CORE: self.core,
        }[role]


class AddressPlan(Params):
    """Where NIC port and switch management addresses come from (see the module docstring)."""

    nic_network: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("10.0.0.0/8"),
        description="NIC port addresses; one /24 per host, so at most /24 itself.",
    )
    mgmt_network: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("192.168.0.0/16"),
        description="Switch management addresses; 254 per /24. Must not overlap nic_network.",
    )
    gids: bool = Field(
        default=True, description="Give every NIC port its IPv4-mapped GID (::ffff:a.b.c.d)."
    )

    @field_validator("nic_network", "mgmt_network")
    @classmethod
    def _at_least_a_slash_24(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if value.prefixlen > 24:
            raise ValueError(f"{value} is smaller than a /24; the plan allocates whole /24s")
        return value

    @model_validator(mode="after")
    def _disjoint(self) -> Self:
        if self.nic_network.overlaps(self.mgmt_network):
            raise ValueError(
                f"nic_network {self.nic_network} overlaps mgmt_network {self.mgmt_network}"
            )
        return self

    @property
    def host_capacity(self) -> int:
        """How many hosts the NIC network has room for (one /24 each)."""
        return self.nic_network.num_addresses // 256

    @property
    def switch_capacity(self) -> int:
        """How many switches the management network has room for."""
        return self.mgmt_network.num_addresses // 256 * 254

    def nic_address(self, host: int, slot: int) -> ipaddress.IPv4Address:
        """Address of NIC port number ``slot`` (``nic * ports_per_nic + port``) of ``host``."""
        return ipaddress.IPv4Address(int(self.nic_network.network_address) + 256 * host + 1 + slot)

    def mgmt_address(self, switch: int) -> ipaddress.IPv4Address:
        """Management address of the ``switch``-th switch of the fabric."""
        base = int(self.mgmt_network.network_address)
        return ipaddress.IPv4Address(base + 256 * (switch // 254) + 1 + switch % 254)


def gid_of(address: ipaddress.IPv4Address) -> ipaddress.IPv6Address:
    """The IPv4-mapped GID RoCEv2 uses for an IPv4 address: ``::ffff:a.b.c.d``."""
    return ipaddress.IPv6Address(0xFFFF_0000_0000 | int(address))


class FabricParams(Params):
    """Parameters every kind has. Subclasses add the shape and report their sizes."""

    name: Name | None = Field(default=None, description="Fabric name; default '<kind>-<gpus>gpu'.")
    host_speed_gbps: float = Field(
        default=400.0, gt=0, description="Speed of every NIC port and its cable to the leaf."
    )
    hash_profiles: HashProfiles = Field(default=HashProfiles(), description="ECMP hash per tier.")
    addresses: AddressPlan = Field(default=AddressPlan(), description="NIC and switch addresses.")

    # Sizes, given by every subclass; used to check the address plan before building anything.

    @property
    def host_count(self) -> int:
        raise NotImplementedError

    @property
    def host_nic_count(self) -> int:
        raise NotImplementedError

    @property
    def ports_per_nic(self) -> int:
        return 1

    @property
    def switch_count(self) -> int:
        raise NotImplementedError

    @property
    def gpus(self) -> int:
        """GPUs in the fabric, one per NIC."""
        return self.host_count * self.host_nic_count

    @model_validator(mode="after")
    def _fits_address_plan(self) -> Self:
        plan = self.addresses
        if self.host_count > plan.host_capacity:
            raise ValueError(
                f"{self.host_count} hosts do not fit addresses.nic_network {plan.nic_network} "
                f"(room for {plan.host_capacity}, one /24 per host)"
            )
        ports = self.host_nic_count * self.ports_per_nic
        if ports > PORTS_PER_HOST_LIMIT:
            raise ValueError(
                f"{ports} NIC ports per host; the address plan gives a host at most "
                f"{PORTS_PER_HOST_LIMIT}"
            )
        if self.switch_count > plan.switch_capacity:
            raise ValueError(
                f"{self.switch_count} switches do not fit addresses.mgmt_network "
                f"{plan.mgmt_network} (room for {plan.switch_capacity})"
            )
        return self


def padded(index: int, count: int, minimum: int) -> str:
    """``index`` zero-padded to the width of ``count - 1`` (at least ``minimum`` digits)."""
    return str(index).zfill(max(minimum, len(str(max(count - 1, 0)))))


def format_ratio(ratio: float) -> str:
    """``2.0`` -> ``"2:1"``, ``1.5`` -> ``"1.5:1"``."""
    return f"{ratio:.4g}:1"


class FabricBuilder:
    """Accumulates switches, hosts and links, numbering interfaces and addresses as it goes.

    Cable bottom up (hosts first, then leaf-spine, then spine-core) and every switch numbers its
    downlinks before its uplinks. ``build`` constructs the validated :class:`Fabric` once.
    """

    def __init__(self, params: FabricParams) -> None:
        self._params = params
        self._switches: list[Switch] = []
        self._hosts: list[Host] = []
        self._links: list[Link] = []
        self._next_interface: dict[str, int] = {}
        self._host_width = max(4, len(str(max(params.host_count - 1, 0))))
        nics = params.host_nic_count
        ports = params.ports_per_nic
        self._nic_names = [f"nic{padded(r, nics, 1)}" for r in range(nics)]
        self._port_names = [
            [f"{nic}p{padded(p, ports, 1)}" for p in range(ports)] for nic in self._nic_names
        ]

    def add_switch(
        self, name: str, role: SwitchRole, *, plane: int = 0, pod: int | None = None
    ) -> str:
        """Add a switch (next management address, the tier's hash profile); returns its name."""
        self._switches.append(
            Switch(
                name=name,
                role=role,
                plane=plane,
                pod=pod,
                mgmt_address=self._params.addresses.mgmt_address(len(self._switches)),
                hash=self._params.hash_profiles.for_role(role),
            )
        )
        self._next_interface[name] = 1
        return name

    def add_host(self) -> list[list[str]]:
        """Add the next host; returns its NIC port nodes as ``[nic][port] -> "<host>:<port>"``."""
        number = len(self._hosts)
        name = f"h{str(number).zfill(self._host_width)}"
        plan = self._params.addresses
        per_nic = self._params.ports_per_nic
        nics: list[Nic] = []
        for r, nic_name in enumerate(self._nic_names):
            ports: list[NicPort] = []
            for p, port_name in enumerate(self._port_names[r]):
                address = plan.nic_address(number, r * per_nic + p)
                ports.append(
                    NicPort(
                        name=port_name,
                        address=address,
                        gid=gid_of(address) if plan.gids else None,
                    )
                )
            nics.append(Nic(name=nic_name, ports=tuple(ports)))
        self._hosts.append(Host(name=name, nics=tuple(nics)))
        return [[f"{name}:{port}" for port in row] for row in self._port_names]

    def _interface(self, switch: str) -> str:
        n = self._next_interface[switch]
        self._next_interface[switch] = n + 1
        return f"{switch}:Ethernet{n}"

    def cable_port(self, port_node: str, switch: str, speed_gbps: float) -> None:
        """Cable a NIC port (``"<host>:<port>"``) to the next free interface of ``switch``."""
        self._links.append(Link(a=port_node, b=self._interface(switch), speed_gbps=speed_gbps))

    def cable(self, lower: str, upper: str, speed_gbps: float) -> None:
        """Cable the next free interfaces of two switches, the lower tier as end ``a``."""
        self._links.append(
            Link(a=self._interface(lower), b=self._interface(upper), speed_gbps=speed_gbps)
        )

    def build(self, default_name: str, description: str) -> Fabric:
        return Fabric(
            name=self._params.name or default_name,
            description=description,
            switches=tuple(self._switches),
            hosts=tuple(self._hosts),
            links=tuple(self._links),
        )
