"""An array-based, read-only view of a :class:`~topology.model.Fabric`.

Why: planning and evaluation touch every link of every flow, tens of thousands of times. Names
and pydantic objects are right for files and APIs, integers and numpy arrays are right for that
inner work. The index numbers every node (switches first, then NIC ports) and every *directed
resource*: link ``i`` gives resource ``2*i`` (``a -> b``) and ``2*i + 1`` (``b -> a``).
"""

from __future__ import annotations

import ipaddress
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from topology.arrays import BoolArray as BoolArray  # re-exported: imported from here
from topology.arrays import FloatArray as FloatArray
from topology.arrays import IntArray as IntArray
from topology.arrays import distinct
from topology.errors import PathError, UnknownNameError
from topology.parts import Host, Link, LinkStatus, Nic, NicPort, Switch

if TYPE_CHECKING:
    from topology.routing import Routing


class Wiring(Protocol):
    """What the index reads of a fabric; every :class:`~topology.model.Fabric` is one.

    Why a protocol and not ``Fabric``: the model validates a fabric through this index
    (:func:`sound_index`) and keeps it as ``Fabric.index``, so the index may not import the
    model back (they imported each other)."""

    @property
    def switches(self) -> tuple[Switch, ...]: ...

    @property
    def hosts(self) -> tuple[Host, ...]: ...

    @property
    def links(self) -> tuple[Link, ...]: ...

    @property
    def index(self) -> FabricIndex: ...


_LINK_ENDS = operator.attrgetter("a", "b")
_SPEED = operator.attrgetter("speed_gbps")
_STATUS = operator.attrgetter("status")
_DEVICE, _INTERFACE = operator.itemgetter(0), operator.itemgetter(2)
"""Columns of the links and of their ends split at ':', read by ``map``."""


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts ``Ethernet2`` before ``Ethernet10`` (the ECMP member order)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part
    )


@dataclass(frozen=True)
class PortInfo:
    """Where a NIC port sits: its host, NIC, rail (NIC position) and port position."""

    host: Host
    nic: Nic
    port: NicPort
    rail: int
    port_number: int
    node: int


def _port_info(host: Host, nic: Nic, port: NicPort, rail: int, number: int, node: int) -> PortInfo:
    """``PortInfo(host, nic, port, rail, number, node)`` as its constructor makes it: the
    fields in the instance's ``__dict__`` in field order (no ``__post_init__``; the tests hold
    the two to each other). Why: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, 1.6 us for these six, and the index makes one per NIC port
    (16,384 at 16k GPUs) on every fabric load. The price: the instance holds a dict of its own
    (some 180 bytes more than the constructor's inline values; attribute reads ~10% slower)."""
    info: PortInfo = object.__new__(PortInfo)
    info.__dict__.update(host=host, nic=nic, port=port, rail=rail, port_number=number, node=node)
    return info


class FabricIndex:
    """Numbered nodes and directed resources of one fabric snapshot (immutable)."""

    def __init__(self, fabric: Wiring, *, check: bool = False) -> None:
        """Number the fabric's nodes and resources.

        With ``check``, also ask :func:`~topology.model.is_sound`'s questions on the way (the
        numbering needs the same names, ends and node lookups the soundness check needs) and
        raise :class:`Unsound` at the first no, so that validating a fabric and indexing it
        do that work once (see :func:`sound_index`). Without it the fabric must already be
        sound (every ``Fabric`` is, once constructed)."""
        # Written for a 16k-GPU fabric (50k nodes and links): plain lists first, numpy arrays
        # from them at the end, and no per-item numpy element access.
        self.fabric = fabric
        self.switch_by_name: dict[str, Switch] = {s.name: s for s in fabric.switches}
        names: list[str] = [s.name for s in fabric.switches]
        self.num_switches = len(names)
        if check:
            host_names = {h.name for h in fabric.hosts}
            if len(self.switch_by_name) != len(names) or len(host_names) != len(fabric.hosts):
                raise Unsound("names repeat")
            if not host_names.isdisjoint(self.switch_by_name):
                raise Unsound("a switch and a host share a name")
        self.ports: list[PortInfo] = []
        ports = self.ports
        for host in fabric.hosts:
            prefix = host.name + ":"
            nics = host.nics
            if check and len(nics) > 1 and len({nic.name for nic in nics}) != len(nics):
                raise Unsound("NIC names repeat in a host")
            start = len(names)
            for rail, nic in enumerate(nics):
                for number, port in enumerate(nic.ports):
                    ports.append(_port_info(host, nic, port, rail, number, len(names)))
                    names.append(prefix + port.name)
            if check and len(names) - start > 1 and len(set(names[start:])) != len(names) - start:
                raise Unsound("port names repeat in a host")
        self.node_names: tuple[str, ...] = tuple(names)
        self.node_of: dict[str, int] = {n: i for i, n in enumerate(names)}
        self.num_nodes = len(names)
        self.port_by_node: dict[int, PortInfo] = {p.node: p for p in self.ports}
        if check:
            _check_addresses(fabric, ports)

        tier = np.zeros(self.num_nodes, dtype=np.int64)
        plane = np.full(self.num_nodes, -1, dtype=np.int64)
        tier[: self.num_switches] = [s.tier for s in fabric.switches]
        plane[: self.num_switches] = [s.plane for s in fabric.switches]
        self.tier: IntArray = tier

        num_links = len(fabric.links)
        node_of, links = self.node_of, fabric.links
        # Column by column, each column by ``map`` through a C function (no Python step per
        # end: 98,304 of them at 16k GPUs): a host's end is its NIC port's node name, a
        # switch's is not a node name (names have no ':'), so the device before the ':' is
        # the node.
        ends: list[str] = list(chain.from_iterable(map(_LINK_ENDS, links)))
        split = list(map(str.partition, ends, repeat(":", len(ends))))
        # Each column read into an array once (``np.where`` of the lists made three).
        count = len(ends)
        found = np.fromiter(map(node_of.get, ends, repeat(-1, count)), np.int64, count)
        devices = map(node_of.get, map(_DEVICE, split), repeat(-1, count))
        nodes = np.where(found >= 0, found, np.fromiter(devices, np.int64, count))
        if check:
            _check_nodes(ends, nodes, len(node_of), self.num_switches)
        elif ends and int(nodes.min()) < 0:  # an unsound fabric: the first unknown device
            raise KeyError(split[int(np.argmin(nodes))][0])
        interfaces: list[str] = list(map(_INTERFACE, split))
        self._ends = ends
        self.res_src: IntArray = nodes.reshape(2 * num_links)
        self.res_dst: IntArray = self.res_src.reshape(num_links, 2)[:, ::-1].reshape(-1).copy()
        speeds = np.fromiter(map(_SPEED, links), np.float64, num_links)
        self.res_capacity: FloatArray = np.repeat(speeds, 2)
        up_link = repeat(LinkStatus.UP, num_links)
        up = np.fromiter(map(operator.is_, map(_STATUS, links), up_link), np.bool_, num_links)
        self.res_usable: BoolArray = np.repeat(up, 2)
        self.res_interface: list[str] = interfaces
        self.num_resources = 2 * num_links

        # Interface names repeat on every switch (Ethernet1..64): the distinct ones are put
        # in natural order once, and each resource sorts by its name's place in that order
        # (names with equal keys share a place, so the stable sort keeps them as found, as
        # sorting by the key itself would).
        rank_of: dict[str, int] = {}
        previous: tuple[tuple[int, int | str], ...] | None = None
        for name, name_key in sorted(
            ((name, natural_key(name)) for name in set(interfaces)), key=lambda nk: nk[1]
        ):
            if name_key != previous:
                previous = name_key
                place = len(rank_of)
            rank_of[name] = place
        rank = np.fromiter(map(rank_of.__getitem__, interfaces), np.int64, len(interfaces))
        # Each node's outgoing resources by place, those of one place in resource order: one
        # stable sort of all resources by (source node, place), cut at each node's count.
        ordered: list[int] = np.lexsort((rank, self.res_src)).tolist()
        ends_at = np.cumsum(np.bincount(self.res_src, minlength=self.num_nodes)).tolist()
        self.out_resources: tuple[tuple[int, ...], ...] = tuple(
            map(tuple, map(ordered.__getitem__, map(slice, [0, *ends_at[:-1]], ends_at)))
        )
        # A NIC port is in its switch's plane (the far end of a port's link is a switch).
        out = self.out_resources
        cabled = [p.node for p in self.ports if out[p.node]]
        plane[cabled] = plane[self.res_dst[[out[node][0] for node in cabled]]]
        self.plane: IntArray = plane

    @cached_property
    def link_of_end(self) -> dict[str, int]:
        """Link number by either end (``device:interface``); built on first use (``--fail``,
        ``--drain``, discovery), not by every plan."""
        return {end: i >> 1 for i, end in enumerate(self._ends)}

    @cached_property
    def resource_between(self) -> dict[tuple[int, int], int]:
        """Resource by its (source node, destination node); built on first use."""
        pairs = zip(self.res_src.tolist(), self.res_dst.tolist(), strict=True)
        return dict(zip(pairs, range(self.num_resources), strict=True))

    _STATUS_VIEWS = ("routing",)
    """Cached views that depend on which links are usable (the rest are cabling only)."""

    def with_status(self, fabric: Wiring) -> FabricIndex:
        """This index for ``fabric``, a snapshot of the same cabling with other link statuses
        (:meth:`Fabric.with_link_status`): the numbering, names and member orders shared, the
        usable links read from ``fabric``, status-dependent views (routing) left to be built."""
        if len(fabric.links) != len(self.fabric.links):
            raise ValueError("with_status needs a snapshot of the same cabling")
        index = object.__new__(FabricIndex)
        index.__dict__.update(
            (k, v) for k, v in self.__dict__.items() if k not in self._STATUS_VIEWS
        )
        index.fabric = fabric
        up = [link.status is LinkStatus.UP for link in fabric.links]
        index.res_usable = np.repeat(np.array(up, dtype=np.bool_), 2)
        return index

    @cached_property
    def node_of_address(self) -> dict[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
        """NIC-port node by its address (built on first use: planning never asks). Typed for
        either family so that a probe's address (IPv4 or IPv6) can be looked up as it is."""
        return {p.port.address: p.node for p in self.ports}

    def _node_for_end(self, end: str, device: str) -> int:
        if device in self.switch_by_name:
            return self.node_of[device]
        return self.node_of[end]

    # -- names <-> numbers ------------------------------------------------------------------

    def node(self, name: str) -> int:
        try:
            return self.node_of[name]
        except KeyError:
            raise UnknownNameError(f"no switch or NIC port named {name!r}") from None

    def port(self, name: str) -> PortInfo:
        node = self.node(name)
        if node not in self.port_by_node:
            raise UnknownNameError(f"{name!r} is a switch, not a NIC port")
        return self.port_by_node[node]

    def port_by_address(self, address: ipaddress.IPv4Address | str) -> PortInfo:
        addr = ipaddress.IPv4Address(address)
        try:
            return self.port_by_node[self.node_of_address[addr]]
        except KeyError:
            raise UnknownNameError(f"no NIC port has address {addr}") from None

    def link_number(self, link_id: str) -> int:
        """Link number from ``a--b`` (ends ``device:interface`` or node names, either order)
        or from one end ``device:interface``."""
        if "--" in link_id:
            first, _, second = link_id.partition("--")
            if first in self.link_of_end and second in self.link_of_end:
                li = self.link_of_end[first]
                if self.link_of_end[second] == li:
                    return li
            # Node names (``leaf-00--spine-03``): unique, as parallel links are refused.
            u, v = self.node_of.get(first), self.node_of.get(second)
            if u is not None and v is not None and (u, v) in self.resource_between:
                return self.resource_between[(u, v)] // 2
            raise UnknownNameError(f"no link {link_id!r}")
        if link_id in self.link_of_end:
            return self.link_of_end[link_id]
        raise UnknownNameError(f"no link with end {link_id!r} (write 'device:interface' or 'a--b')")

    def resource_name(self, res: int) -> str:
        return f"{self.node_names[self.res_src[res]]}->{self.node_names[self.res_dst[res]]}"

    def is_switch(self, node: int) -> bool:
        return node < self.num_switches

    # -- NIC attachment ---------------------------------------------------------------------

    def uplink(self, port_node: int) -> int:
        """The resource a NIC port transmits on (NIC port -> its switch)."""
        out = self.out_resources[port_node]
        if len(out) != 1:
            raise PathError(f"NIC port {self.node_names[port_node]!r} is not cabled")
        return out[0]

    def downlink(self, port_node: int) -> int:
        """The resource a NIC port receives on (its switch -> NIC port)."""
        return self.uplink(port_node) ^ 1

    def leaf_of(self, port_node: int) -> int:
        """The switch a NIC port is cabled to."""
        return int(self.res_dst[self.uplink(port_node)])

    def line_rate(self, port_node: int) -> float:
        return float(self.res_capacity[self.uplink(port_node)])

    # -- paths as node names ----------------------------------------------------------------

    def path_nodes(self, resources: Sequence[int]) -> tuple[str, ...]:
        if not resources:
            return ()
        names = [self.node_names[self.res_src[resources[0]]]]
        names.extend(self.node_names[self.res_dst[r]] for r in resources)
        return tuple(names)

    def path_resources(self, nodes: Sequence[str]) -> tuple[int, ...]:
        """Turn a node-name path into resources, refusing hops that are not links."""
        if len(nodes) < 2:
            raise PathError(f"a path needs at least two nodes, got {list(nodes)}")
        ids = [self.node(n) for n in nodes]
        out: list[int] = []
        for u, v in zip(ids, ids[1:], strict=False):
            res = self.resource_between.get((u, v))
            if res is None:
                raise PathError(
                    f"{self.node_names[u]!r} -> {self.node_names[v]!r} is not a link of the fabric"
                )
            out.append(res)
        return tuple(out)

    @cached_property
    def port_addresses(self) -> npt.NDArray[np.uint64]:
        """IPv4 address (as an integer) of every NIC-port node; 0 for switches."""
        address = np.zeros(self.num_nodes, dtype=np.uint64)
        # One assignment of two lists (a numpy element per port was 10 ms at 16k GPUs).
        address[[p.node for p in self.ports]] = [int(p.port.address) for p in self.ports]
        return address

    @cached_property
    def port_uplinks(self) -> IntArray:
        """Per node, a NIC port's only outgoing resource; -1 for switches and uncabled ports."""
        uplink = np.full(self.num_nodes, -1, dtype=np.int64)
        out = self.out_resources
        cabled = [p.node for p in self.ports if len(out[p.node]) == 1]
        uplink[cabled] = [out[node][0] for node in cabled]  # as one assignment (see above)
        return uplink

    @cached_property
    def routing(self) -> Routing:
        """Next-hop groups and equal-cost paths over this snapshot's usable links."""
        from topology.routing import Routing

        return Routing(self)


class Unsound(Exception):  # noqa: N818 - a verdict, not an error: the caller diagnoses
    """Raised by ``FabricIndex(fabric, check=True)`` when :func:`~topology.model.find_problems`
    may find something; never leaves :func:`sound_index`."""


def sound_index(fabric: Wiring) -> FabricIndex | None:
    """The fabric's index, or None when :func:`~topology.model.find_problems` may find a
    problem (the validator then runs it to say what and where). True answers are exact: None
    is never returned for a fabric without problems, and an index never for one with."""
    try:
        return FabricIndex(fabric, check=True)
    except Unsound:
        return None


def _check_addresses(fabric: Wiring, ports: list[PortInfo]) -> None:
    """Every NIC port and switch address distinct, compared as (kind, integer value), which
    is how ``ipaddress`` compares them: hashing the address objects runs their Python
    ``__hash__`` (a hex string each), 20 ms at 16k GPUs."""
    addresses: list[Any] = [p.port.address for p in ports]
    for switch in fabric.switches:
        if switch.mgmt_address is not None:
            addresses.append(switch.mgmt_address)
        addresses.extend(owned.address for owned in switch.addresses)
    if len({(type(a), a._ip) for a in addresses}) != len(addresses):
        raise Unsound("addresses repeat")


def _check_nodes(ends: list[str], nodes: IntArray, num_names: int, num_switches: int) -> None:
    """Refuse what :func:`~topology.model.find_problems` refuses of link ends (``nodes``: each
    end's node, -1 when it is on no switch and no NIC port): an end used twice, an end on no
    switch and no NIC port, a link that loops or joins two hosts, two links between the same
    two nodes (the last four asked of integer columns)."""
    if len(set(ends)) != len(ends):
        raise Unsound("a port is used twice")
    pairs = nodes.reshape(-1, 2)
    a, b = pairs[:, 0], pairs[:, 1]
    if bool((pairs < 0).any()):
        raise Unsound("an end is on no switch and no NIC port")
    if bool(((a >= num_switches) & (b >= num_switches)).any()):
        raise Unsound("a link joins two hosts")
    if bool((a == b).any()):
        raise Unsound("a link loops")
    low, high = np.minimum(a, b), np.maximum(a, b)
    if len(distinct(low * num_names + high)) != len(low):
        raise Unsound("parallel links")
