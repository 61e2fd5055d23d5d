"""Which parts of a fabric cannot reach the rest over its usable links.

Why: a NIC whose cable is down, or a leaf whose every uplink is down or drained, makes the
flows to and from it unroutable; the planner then plans the others and the run looked
successful (``c4p plan`` said "optimal"). ``c4p fabric show`` names such parts before anyone
plans on the fabric. "The rest" is the connected part holding the most NIC ports; every NIC
port and leaf outside it is cut off (a leaf with no uplinks still joins its own hosts, but no
one else); on a fabric of several planes, the largest part of each plane. Connectivity over
usable links (status ``up``) is what is checked: it is necessary
for any route, and on the Clos fabrics c4p plans (up to a top tier, then down) sufficient.

Computed on the index's arrays by label propagation (each node takes the smallest label among
its neighbours, with pointer jumping), a few passes for a Clos fabric, so 131,072 GPUs cost a
fraction of a second and no graph library.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topology.model import Fabric, SwitchRole


@dataclass(frozen=True)
class CutOff:
    """The NIC ports (``host:port``) and leaves outside the largest connected part."""

    nic_ports: tuple[str, ...]
    leaves: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.nic_ports or self.leaves)


def cut_off(fabric: Fabric) -> CutOff:
    """What cannot reach the rest of ``fabric`` over usable links (see the module)."""
    index = fabric.index
    if not index.ports:
        return CutOff((), ())
    usable = np.asarray(index.res_usable, dtype=bool)
    src = np.asarray(index.res_src, dtype=np.int64)[usable]
    dst = np.asarray(index.res_dst, dtype=np.int64)[usable]
    labels = np.arange(index.num_nodes, dtype=np.int64)
    for _ in range(index.num_nodes):  # each pass merges at least one pair, or it is done
        new = labels.copy()
        np.minimum.at(new, src, labels[dst])
        np.minimum.at(new, dst, labels[src])
        new = new[new]  # pointer jumping: follow the label's own label
        if np.array_equal(new, labels):
            break
        labels = new
    # Planes are apart by design (a dual-plane fabric's NIC port p is in plane p): "the rest"
    # is the largest part of each plane, a port's plane its leaf's (cabled, up or not).
    port_nodes = np.fromiter((p.node for p in index.ports), dtype=np.int64, count=len(index.ports))
    port_planes = np.array(
        [
            index.plane[int(index.res_dst[index.out_resources[p.node][0]])]
            if index.out_resources[p.node]
            else -1
            for p in index.ports
        ],
        dtype=np.int64,
    )
    port_labels = labels[port_nodes]
    main: dict[int, int] = {}
    for plane in np.unique(port_planes).tolist():
        values, counts = np.unique(port_labels[port_planes == plane], return_counts=True)
        main[int(plane)] = int(values[int(np.argmax(counts))])
    names = index.node_names
    ports = tuple(
        names[int(node)]
        for node, label, plane in zip(port_nodes, port_labels, port_planes, strict=True)
        if main.get(int(plane)) != int(label)
    )
    leaves = tuple(
        s.name
        for i, s in enumerate(fabric.switches)
        if s.role is SwitchRole.LEAF and main.get(int(index.plane[i])) != int(labels[i])
    )
    return CutOff(ports, leaves)
