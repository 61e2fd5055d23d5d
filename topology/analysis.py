"""What a fabric is, in numbers: counts, oversubscription per tier, bisection bandwidth.

Why: before planning on a fabric an operator wants to know it is the fabric they meant. These
are the figures a network architect quotes (``c4p fabric show``), computed from the model.

* Oversubscription of a switch = capacity toward lower tiers and hosts / capacity toward higher
  tiers, over usable links; reported per role as min and max (1.0 is non-blocking).
* Bisection bandwidth = the max flow from the first half of the NIC ports (in fabric order: the
  first units, pods or leaves) to the second half, in one direction, over usable links. For the
  symmetric Clos fabrics c4p generates, that split is the worst balanced cut; for arbitrary
  fabrics it is an upper bound on the true bisection.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import networkx as nx

from topology.model import Fabric, SwitchRole


@dataclass(frozen=True)
class TierFigures:
    role: str
    switches: int
    oversubscription_min: float
    oversubscription_max: float


@dataclass(frozen=True)
class FabricSummary:
    name: str
    switches_by_role: dict[str, int]
    hosts: int
    nics: int
    nic_ports: int
    links: int
    links_by_status: dict[str, int]
    planes: int
    nic_speeds_gbps: dict[float, int]
    tiers: list[TierFigures]
    host_bandwidth_gbps: float
    bisection_gbps: float

    @property
    def bisection_ratio(self) -> float:
        """Bisection over half the host bandwidth: 1.0 is full bisection."""
        half = self.host_bandwidth_gbps / 2
        return self.bisection_gbps / half if half else 0.0


def summarize(fabric: Fabric) -> FabricSummary:
    index = fabric.index
    tiers: list[TierFigures] = []
    down_cap: dict[int, float] = defaultdict(float)
    up_cap: dict[int, float] = defaultdict(float)
    for res in range(index.num_resources):
        if not index.res_usable[res]:
            continue
        u, v = int(index.res_src[res]), int(index.res_dst[res])
        if not index.is_switch(u):
            continue
        if index.tier[v] < index.tier[u]:
            down_cap[u] += float(index.res_capacity[res])
        elif index.tier[v] > index.tier[u]:
            up_cap[u] += float(index.res_capacity[res])
    for role in SwitchRole:
        members = [i for i, s in enumerate(fabric.switches) if s.role is role]
        if not members:
            continue
        ratios = [down_cap[i] / up_cap[i] for i in members if up_cap[i] > 0]
        tiers.append(
            TierFigures(
                role=role.value,
                switches=len(members),
                oversubscription_min=min(ratios) if ratios else 0.0,
                oversubscription_max=max(ratios) if ratios else 0.0,
            )
        )
    speeds: Counter[float] = Counter()
    host_bw = 0.0
    for p in index.ports:
        out = index.out_resources[p.node]
        if out:
            speed = float(index.res_capacity[out[0]])
            speeds[speed] += 1
            if index.res_usable[out[0]]:
                host_bw += speed
    return FabricSummary(
        name=fabric.name,
        switches_by_role=dict(Counter(s.role.value for s in fabric.switches)),
        hosts=len(fabric.hosts),
        nics=sum(len(h.nics) for h in fabric.hosts),
        nic_ports=len(index.ports),
        links=len(fabric.links),
        links_by_status=dict(Counter(link.status.value for link in fabric.links)),
        planes=len({s.plane for s in fabric.switches}),
        nic_speeds_gbps=dict(speeds),
        tiers=tiers,
        host_bandwidth_gbps=host_bw,
        bisection_gbps=bisection_bandwidth(fabric),
    )


def bisection_bandwidth(fabric: Fabric) -> float:
    """Max flow (Gb/s) from the first half of the NIC ports to the second half.

    NIC ports are folded into their switches (a super source feeds each switch with the usable
    capacity of its first-half ports, a super sink drains the second half), so the graph that
    max-flow sees has only switches: a few hundred nodes even at 16k GPUs.
    """
    index = fabric.index
    cabled = [p for p in index.ports if index.out_resources[p.node]]
    if len(cabled) < 2:
        return 0.0
    half = len(cabled) // 2
    graph = nx.DiGraph()
    source, sink = -1, -2
    for i, p in enumerate(cabled):
        up = index.uplink(p.node)
        if not index.res_usable[up]:
            continue
        switch = int(index.res_dst[up])
        cap = float(index.res_capacity[up])
        edge = (source, switch) if i < half else (switch, sink)
        prev = graph.get_edge_data(*edge, default={"capacity": 0.0})["capacity"]
        graph.add_edge(*edge, capacity=prev + cap)
    for res in range(index.num_resources):
        u, v = int(index.res_src[res]), int(index.res_dst[res])
        if index.res_usable[res] and index.is_switch(u) and index.is_switch(v):
            graph.add_edge(u, v, capacity=float(index.res_capacity[res]))
    if source not in graph or sink not in graph:
        return 0.0
    value, _ = nx.maximum_flow(graph, source, sink)
    return float(value)
