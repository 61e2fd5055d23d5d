"""Two-tier leaf-spine: every leaf cabled once to every spine, hosts under the leaves.

Why: the simplest Clos, and the one where the planner's lower bound is exact (edge-colouring the
leaf multigraph), so it is the reference shape for the solver. Any oversubscription
is expressible: ``hosts_per_leaf * nics_per_host * host_speed / (spines * uplink_speed)``. A
bundle of cables between a leaf and a spine is one link of the summed speed (the model refuses
parallel links), so raise ``uplink_speed_gbps`` rather than adding spines to widen the uplinks.

A host with several NICs has all of them on its own leaf, on consecutive leaf ports.
"""

from __future__ import annotations

from pydantic import Field

from topology.generators.common import FabricBuilder, FabricParams, format_ratio, padded
from topology.model import Fabric, SwitchRole


class LeafSpineParams(FabricParams):
    """Shape of a 2-tier leaf-spine fabric."""

    leaves: int = Field(ge=1, le=8192, description="Leaf (ToR) switches.")
    spines: int = Field(
        ge=1, le=1024, description="Spine switches; each leaf has one link to each."
    )
    hosts_per_leaf: int = Field(ge=1, le=1024, description="Hosts under each leaf.")
    nics_per_host: int = Field(
        default=1, ge=1, le=64, description="NICs (GPUs) per host, all on the host's leaf."
    )
    uplink_speed_gbps: float = Field(
        default=400.0, gt=0, description="Speed of each leaf-spine link (a bundle's summed speed)."
    )

    @property
    def host_count(self) -> int:
        return self.leaves * self.hosts_per_leaf

    @property
    def host_nic_count(self) -> int:
        return self.nics_per_host

    @property
    def switch_count(self) -> int:
        return self.leaves + self.spines

    @property
    def oversubscription(self) -> float:
        """Leaf downlink capacity over leaf uplink capacity (1.0 is non-blocking)."""
        down = self.hosts_per_leaf * self.nics_per_host * self.host_speed_gbps
        return down / (self.spines * self.uplink_speed_gbps)


def leaf_spine(params: LeafSpineParams) -> Fabric:
    """Build a 2-tier leaf-spine fabric.

    Leaves ``leaf-00``.., spines ``spine-00``..; host ``i`` sits on leaf ``i // hosts_per_leaf``.
    Leaf ports: ``Ethernet1``.. to its hosts' NICs (host-major), then one to each spine in
    spine order. Spine ports: one to each leaf in leaf order.
    """
    p = params
    fabric = FabricBuilder(p)
    leaves = [
        fabric.add_switch(f"leaf-{padded(i, p.leaves, 2)}", SwitchRole.LEAF)
        for i in range(p.leaves)
    ]
    spines = [
        fabric.add_switch(f"spine-{padded(i, p.spines, 2)}", SwitchRole.SPINE)
        for i in range(p.spines)
    ]
    for leaf in leaves:
        for _ in range(p.hosts_per_leaf):
            for nic_ports in fabric.add_host():
                fabric.cable_port(nic_ports[0], leaf, p.host_speed_gbps)
    for leaf in leaves:
        for spine in spines:
            fabric.cable(leaf, spine, p.uplink_speed_gbps)
    description = (
        f"leaf-spine: {p.leaves} leaves x {p.hosts_per_leaf} hosts x {p.nics_per_host} NICs = "
        f"{p.gpus} GPUs, {p.spines} spines; {p.host_speed_gbps:g}G hosts, "
        f"{p.uplink_speed_gbps:g}G uplinks, oversubscription {format_ratio(p.oversubscription)}"
    )
    return fabric.build(f"leaf-spine-{p.gpus}gpu", description)
