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

The parts (switches, hosts, NICs, links, their names and patterns) are :mod:`topology.parts`,
re-exported here; this module is the whole :class:`Fabric` and what can be wrong with one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import model_validator

from topology.base import Frozen

# The parts, re-exported: users import them from here.
from topology.parts import ALL_HASH_FIELDS as ALL_HASH_FIELDS
from topology.parts import END_PATTERN as END_PATTERN
from topology.parts import INTERFACE_PATTERN as INTERFACE_PATTERN
from topology.parts import NAME_PATTERN as NAME_PATTERN
from topology.parts import FabricProblem as FabricProblem
from topology.parts import HashAlgorithm as HashAlgorithm
from topology.parts import HashField as HashField
from topology.parts import HashProfile as HashProfile
from topology.parts import Host as Host
from topology.parts import IPAddress as IPAddress
from topology.parts import Link as Link
from topology.parts import LinkStatus as LinkStatus
from topology.parts import Name as Name
from topology.parts import Nic as Nic
from topology.parts import NicPort as NicPort
from topology.parts import Switch as Switch
from topology.parts import SwitchAddress as SwitchAddress
from topology.parts import SwitchRole as SwitchRole
from topology.parts import end_problem as end_problem
from topology.parts import split_end as split_end

if TYPE_CHECKING:
    from topology.index import FabricIndex


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
