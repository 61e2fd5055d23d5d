"""What routing reads of a fabric snapshot's numbering: the switches, their tiers, and the
directed resources between nodes, as arrays.

Why a protocol: :class:`~topology.index.FabricIndex` builds a snapshot's
:class:`~topology.routing.Routing` (its ``routing`` view), so routing may not import the index
back (an import circle). It names what it reads here instead; every ``FabricIndex`` has it.
"""

from __future__ import annotations

from typing import Protocol

from topology.arrays import BoolArray, IntArray


class SwitchGraph(Protocol):
    """The numbering routing needs (switches first, ``0 .. num_switches - 1``; resource ``r``
    runs from ``res_src[r]`` to ``res_dst[r]``, its reverse is ``r ^ 1``)."""

    @property
    def num_switches(self) -> int: ...

    @property
    def node_names(self) -> tuple[str, ...]: ...

    @property
    def tier(self) -> IntArray: ...

    @property
    def res_src(self) -> IntArray: ...

    @property
    def res_dst(self) -> IntArray: ...

    @property
    def res_usable(self) -> BoolArray: ...

    @property
    def out_resources(self) -> tuple[tuple[int, ...], ...]: ...

    def resource_name(self, res: int) -> str: ...

    def uplink(self, port_node: int) -> int: ...

    def downlink(self, port_node: int) -> int: ...
