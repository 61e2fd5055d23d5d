"""Rail-optimized scalable units, the common GPU cluster shape, and its dual-plane variant.

Why: ring collectives are rail-aligned (NIC *r* of one host talks to NIC *r* of the next), so
putting NIC *r* of every host of a scalable unit (SU) on one "rail-*r*" leaf keeps most traffic
one hop from its destination, and only inter-unit or cross-rail traffic climbs to the spines.

Shape: one leaf per (unit, rail); NIC ``r`` of every host of unit ``u`` on leaf ``(u, r)``;
every leaf cabled once to every spine. Leaf oversubscription is
``hosts_per_unit * host_speed / (spines * uplink_speed)``.

The dual-plane variant (Alibaba HPN) gives every NIC two ports and builds the whole rail fabric
twice, once per plane: port ``p`` of each NIC goes to the plane-``p`` leaf of its (unit, rail),
and plane-``p`` leaves only reach plane-``p`` spines, so the traffic of port 0 and port 1 never
meets. Switches carry ``plane`` and a ``-pl<p>`` name suffix.
"""

from __future__ import annotations

from pydantic import Field

from topology.generators.common import FabricBuilder, FabricParams, format_ratio, padded
from topology.model import Fabric, SwitchRole


class _RailShape(FabricParams):
    """Fields of both rail fabrics: scalable units of hosts, one leaf per (unit, rail)."""

    units: int = Field(ge=1, le=1024, description="Scalable units (SUs).")
    hosts_per_unit: int = Field(ge=1, le=1024, description="Hosts in each unit.")
    rails: int = Field(default=8, ge=1, le=64, description="NICs per host = rail leaves per unit.")
    spines: int = Field(ge=1, le=1024, description="Spines; every leaf has one link to each.")
    uplink_speed_gbps: float = Field(
        default=400.0, gt=0, description="Speed of each leaf-spine link (a bundle's summed speed)."
    )

    @property
    def host_count(self) -> int:
        return self.units * self.hosts_per_unit

    @property
    def host_nic_count(self) -> int:
        return self.rails

    @property
    def switch_count(self) -> int:
        return self.units * self.rails + self.spines

    @property
    def oversubscription(self) -> float:
        """Leaf downlink capacity over leaf uplink capacity (1.0 is non-blocking)."""
        down = self.hosts_per_unit * self.host_speed_gbps
        return down / (self.spines * self.uplink_speed_gbps)


class RailOptimizedParams(_RailShape):
    """Shape of a rail-optimized fabric of scalable units joined by spines."""


PLANES = 2
"""Planes of a dual-plane fabric = ports per NIC."""


class DualPlaneParams(_RailShape):
    """Shape of a dual-plane rail fabric: the rail fabric once per plane, two ports per NIC.

    ``spines`` and the leaves are counted *per plane*; ``oversubscription`` is per leaf.
    """

    @property
    def ports_per_nic(self) -> int:
        return PLANES

    @property
    def switch_count(self) -> int:
        return PLANES * (self.units * self.rails + self.spines)


def _build(params: _RailShape) -> FabricBuilder:
    p = params
    planes = p.ports_per_nic
    fabric = FabricBuilder(p)

    def suffix(plane: int) -> str:
        return f"-pl{plane}" if planes > 1 else ""

    def su(unit: int) -> str:
        return padded(unit, p.units, 2)

    def rail(r: int) -> str:
        return padded(r, p.rails, 1)

    # leaves[plane][unit][rail], spines[plane][spine]
    leaves = [
        [
            [
                fabric.add_switch(
                    f"leaf-su{su(u)}-r{rail(r)}{suffix(pl)}", SwitchRole.LEAF, plane=pl
                )
                for r in range(p.rails)
            ]
            for u in range(p.units)
        ]
        for pl in range(planes)
    ]
    spines = [
        [
            fabric.add_switch(
                f"spine-{padded(s, p.spines, 2)}{suffix(pl)}", SwitchRole.SPINE, plane=pl
            )
            for s in range(p.spines)
        ]
        for pl in range(planes)
    ]
    for u in range(p.units):
        for _ in range(p.hosts_per_unit):
            for r, nic_ports in enumerate(fabric.add_host()):
                for pl, port in enumerate(nic_ports):
                    fabric.cable_port(port, leaves[pl][u][r], p.host_speed_gbps)
    for pl in range(planes):
        for unit_leaves in leaves[pl]:
            for leaf in unit_leaves:
                for spine in spines[pl]:
                    fabric.cable(leaf, spine, p.uplink_speed_gbps)
    return fabric


def _sizes(p: _RailShape) -> str:
    return (
        f"{p.units} units x {p.hosts_per_unit} hosts x {p.rails} rails = {p.gpus} GPUs, "
        f"{p.units * p.rails} leaves and {p.spines} spines"
    )


def _speeds(p: _RailShape) -> str:
    return (
        f"{p.host_speed_gbps:g}G hosts, {p.uplink_speed_gbps:g}G uplinks, "
        f"oversubscription {format_ratio(p.oversubscription)}"
    )


def rail_optimized(params: RailOptimizedParams) -> Fabric:
    """Build a rail-optimized fabric.

    Leaves ``leaf-su<u>-r<r>`` (unit-major), spines ``spine-<s>``; host ``i`` is in unit
    ``i // hosts_per_unit``. Leaf ports: ``Ethernet1``.. to the unit's hosts in host order, then
    one to each spine in spine order. Spine ports: one to each leaf in leaf order.
    """
    fabric = _build(params)
    description = f"rail-optimized: {_sizes(params)}; {_speeds(params)}"
    return fabric.build(f"rail-optimized-{params.gpus}gpu", description)


def dual_plane(params: DualPlaneParams) -> Fabric:
    """Build a dual-plane rail-optimized fabric (two ports per NIC, one per plane).

    Names as :func:`rail_optimized` with a ``-pl0`` / ``-pl1`` suffix; all plane-0 leaves come
    first, then plane-1 leaves, then the spines of each plane. A leaf's host ports are in host
    order; NIC ports are ``nic<r>p0`` (plane 0) and ``nic<r>p1`` (plane 1).
    """
    fabric = _build(params)
    description = f"dual-plane: {_sizes(params)} per plane, {PLANES} planes; {_speeds(params)}"
    return fabric.build(f"dual-plane-{params.gpus}gpu", description)
