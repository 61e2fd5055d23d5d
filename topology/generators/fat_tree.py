"""Three-tier fat-tree / Clos with pods: leaves and aggregation spines per pod, cores above.

Why: this is C4's testbed shape (3-tier, 1:1) and the shape of large clusters, where paths
between pods cross a core and the number of equal-cost paths grows to ``aggs * cores_per_group``.

Wiring:

* every leaf of a pod is cabled once to every aggregation switch (role ``spine``) of its pod;
* the cores are split into ``aggs_per_pod`` groups of ``cores / aggs_per_pod`` consecutive cores,
  and aggregation switch ``j`` of every pod is cabled once to every core of group ``j``;
* with one NIC per host, host ``i`` of a pod sits on leaf ``i // hosts_per_leaf``. With
  ``nics_per_host > 1`` the pod is rail-optimized: its leaves form groups of ``nics_per_host``
  consecutive leaves, each group serves ``hosts_per_leaf`` hosts, and NIC ``r`` of a host goes
  to leaf ``r`` of its group. Either way every leaf has ``hosts_per_leaf`` NIC ports.

Equal-cost paths between NIC ports: 1 on the same leaf, ``aggs_per_pod`` between leaves of a
pod, ``aggs_per_pod * cores / aggs_per_pod = cores`` between pods; for the ``k``-ary fat-tree
that is ``k/2`` and ``k**2/4``.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, model_validator

from topology.generators.common import FabricBuilder, FabricParams, format_ratio, padded
from topology.model import Fabric, SwitchRole


class FatTreeParams(FabricParams):
    """Shape of a 3-tier fat-tree. Give the fields, or ``k`` for the classic ``k``-ary tree.

    ``k`` (even, >= 2) sets ``pods=k``, ``leaves_per_pod=aggs_per_pod=k/2``, ``cores=(k/2)**2``
    and ``hosts_per_leaf=k/2``; it may be combined with the other fields (``nics_per_host``,
    speeds, ...) but not with those five.
    """

    pods: int = Field(ge=1, le=1024, description="Pods.")
    leaves_per_pod: int = Field(ge=1, le=1024, description="Leaves (ToRs) in each pod.")
    aggs_per_pod: int = Field(
        ge=1, le=1024, description="Aggregation switches (role spine) in each pod."
    )
    cores: int = Field(
        ge=1, le=16384, description="Core switches; a multiple of aggs_per_pod (one group per agg)."
    )
    hosts_per_leaf: int = Field(
        ge=1,
        le=1024,
        description="NIC ports under each leaf = hosts per leaf group when nics_per_host > 1.",
    )
    nics_per_host: int = Field(
        default=1,
        ge=1,
        le=64,
        description="NICs per host; > 1 rail-optimizes each pod (leaves_per_pod a multiple).",
    )
    leaf_uplink_speed_gbps: float = Field(
        default=400.0, gt=0, description="Speed of each leaf-aggregation link."
    )
    spine_uplink_speed_gbps: float = Field(
        default=400.0, gt=0, description="Speed of each aggregation-core link."
    )

    @model_validator(mode="before")
    @classmethod
    def _expand_k(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "k" not in data:
            return data
        data = dict(data)
        raw = data.pop("k")
        # Plain strings are accepted like every other field (``--set k=4`` on the command line).
        k = int(raw) if isinstance(raw, str) and raw.strip().isdigit() else raw
        if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k % 2:
            raise ValueError(f"k must be an even integer >= 2, got {raw!r}")
        half = k // 2
        derived = {
            "pods": k,
            "leaves_per_pod": half,
            "aggs_per_pod": half,
            "cores": half * half,
            "hosts_per_leaf": half,
        }
        clash = [name for name in derived if name in data]
        if clash:
            raise ValueError(
                f"k={k} sets {', '.join(derived)}; do not also give {', '.join(clash)}"
            )
        return {**data, **derived}

    @model_validator(mode="after")
    def _divisible(self) -> Self:
        if self.cores % self.aggs_per_pod:
            raise ValueError(
                f"cores ({self.cores}) must be a multiple of aggs_per_pod ({self.aggs_per_pod}): "
                f"aggregation switch j of every pod connects to the cores of group j, and there "
                f"are aggs_per_pod groups of equal size"
            )
        if self.leaves_per_pod % self.nics_per_host:
            raise ValueError(
                f"leaves_per_pod ({self.leaves_per_pod}) must be a multiple of nics_per_host "
                f"({self.nics_per_host}): a pod's leaves form rail groups of nics_per_host leaves"
            )
        return self

    @classmethod
    def k_ary(cls, k: int, **overrides: Any) -> FatTreeParams:
        """The classic ``k``-ary fat-tree (``k**3/4`` hosts), with optional other fields."""
        return cls.model_validate({"k": k, **overrides})

    @property
    def cores_per_group(self) -> int:
        """Cores each aggregation switch connects to."""
        return self.cores // self.aggs_per_pod

    @property
    def hosts_per_pod(self) -> int:
        return self.leaves_per_pod // self.nics_per_host * self.hosts_per_leaf

    @property
    def host_count(self) -> int:
        return self.pods * self.hosts_per_pod

    @property
    def host_nic_count(self) -> int:
        return self.nics_per_host

    @property
    def switch_count(self) -> int:
        return self.pods * (self.leaves_per_pod + self.aggs_per_pod) + self.cores

    @property
    def leaf_oversubscription(self) -> float:
        """Leaf host capacity over leaf uplink capacity (1.0 is non-blocking)."""
        down = self.hosts_per_leaf * self.host_speed_gbps
        return down / (self.aggs_per_pod * self.leaf_uplink_speed_gbps)

    @property
    def spine_oversubscription(self) -> float:
        """Aggregation downlink capacity over its core uplink capacity (1.0 is non-blocking)."""
        down = self.leaves_per_pod * self.leaf_uplink_speed_gbps
        return down / (self.cores_per_group * self.spine_uplink_speed_gbps)


def fat_tree(params: FatTreeParams) -> Fabric:
    """Build a 3-tier fat-tree.

    Names: leaves ``leaf-p<pod>-<i>``, aggregation switches ``spine-p<pod>-<j>`` (role spine),
    cores ``core-<c>``; every switch of a pod has ``pod`` set. Switch order: all leaves, all
    aggregation switches, all cores. Ports, downlinks first: leaf to its NIC ports (host order),
    then to the pod's aggs; agg to the pod's leaves, then to its core group; core to one agg
    per pod, in pod order.
    """
    p = params
    fabric = FabricBuilder(p)

    def pod_name(pod: int) -> str:
        return padded(pod, p.pods, 2)

    leaves = [
        [
            fabric.add_switch(
                f"leaf-p{pod_name(pod)}-{padded(i, p.leaves_per_pod, 2)}", SwitchRole.LEAF, pod=pod
            )
            for i in range(p.leaves_per_pod)
        ]
        for pod in range(p.pods)
    ]
    aggs = [
        [
            fabric.add_switch(
                f"spine-p{pod_name(pod)}-{padded(j, p.aggs_per_pod, 2)}", SwitchRole.SPINE, pod=pod
            )
            for j in range(p.aggs_per_pod)
        ]
        for pod in range(p.pods)
    ]
    cores = [
        fabric.add_switch(f"core-{padded(c, p.cores, 3)}", SwitchRole.CORE) for c in range(p.cores)
    ]
    nics = p.nics_per_host
    for pod in range(p.pods):
        for group in range(p.leaves_per_pod // nics):
            group_leaves = leaves[pod][group * nics : (group + 1) * nics]
            for _ in range(p.hosts_per_leaf):
                for leaf, nic_ports in zip(group_leaves, fabric.add_host(), strict=True):
                    fabric.cable_port(nic_ports[0], leaf, p.host_speed_gbps)
    for pod in range(p.pods):
        for leaf in leaves[pod]:
            for agg in aggs[pod]:
                fabric.cable(leaf, agg, p.leaf_uplink_speed_gbps)
    group_size = p.cores_per_group
    for pod in range(p.pods):
        for j, agg in enumerate(aggs[pod]):
            for core in cores[j * group_size : (j + 1) * group_size]:
                fabric.cable(agg, core, p.spine_uplink_speed_gbps)
    description = (
        f"fat-tree: {p.pods} pods x ({p.leaves_per_pod} leaves, {p.aggs_per_pod} aggs), "
        f"{p.cores} cores in {p.aggs_per_pod} groups; {p.host_count} hosts x {nics} NICs = "
        f"{p.gpus} GPUs; {p.host_speed_gbps:g}G hosts, {p.leaf_uplink_speed_gbps:g}G "
        f"leaf-agg, {p.spine_uplink_speed_gbps:g}G agg-core; oversubscription "
        f"{format_ratio(p.leaf_oversubscription)} at leaves, "
        f"{format_ratio(p.spine_oversubscription)} at aggs"
    )
    return fabric.build(f"fat-tree-{p.gpus}gpu", description)
