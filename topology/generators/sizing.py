"""Parameters for a fabric of a given GPU count, for the CLI and the benchmarks.

Why: "plan 16,384 GPUs on a rail-optimized fabric" is how people ask; the generators want a
shape. These helpers pick a conventional, non-blocking (1:1) shape with uniform link speed and
return the *parameters*, so a caller can show or adjust them before building (``generate`` or
the kind's function). Each fabric has at least ``gpus`` GPUs: exactly that many when ``gpus``
fills whole units (pods, leaves), otherwise rounded up to the next whole one.
"""

from __future__ import annotations

import math
from typing import Any

from topology.generators.fat_tree import FatTreeParams
from topology.generators.leaf_spine import LeafSpineParams
from topology.generators.rail_optimized import DualPlaneParams, RailOptimizedParams


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _rail_shape(gpus: int, hosts_per_unit: int, rails: int) -> dict[str, int]:
    _positive("gpus", gpus)
    _positive("hosts_per_unit", hosts_per_unit)
    _positive("rails", rails)
    hosts = math.ceil(gpus / rails)
    per_unit = min(hosts_per_unit, hosts)
    return {
        "units": math.ceil(hosts / per_unit),
        "hosts_per_unit": per_unit,
        "rails": rails,
        "spines": per_unit,
    }


def leaf_spine_for_gpus(
    gpus: int, *, hosts_per_leaf: int = 32, **overrides: Any
) -> LeafSpineParams:
    """A 1:1 leaf-spine of single-NIC hosts: ``hosts_per_leaf`` per leaf, as many spines."""
    _positive("gpus", gpus)
    _positive("hosts_per_leaf", hosts_per_leaf)
    per_leaf = min(hosts_per_leaf, gpus)
    shape = {"leaves": math.ceil(gpus / per_leaf), "hosts_per_leaf": per_leaf, "spines": per_leaf}
    return LeafSpineParams.model_validate({**shape, **overrides})


def rail_optimized_for_gpus(
    gpus: int, hosts_per_unit: int = 32, rails: int = 8, **overrides: Any
) -> RailOptimizedParams:
    """A 1:1 rail-optimized fabric: units of ``hosts_per_unit`` hosts, as many spines.

    16,384 GPUs gives 64 units x 32 hosts x 8 rails: 512 leaves and 32 spines. Fewer GPUs than
    one unit give one unit of just enough hosts. ``overrides`` sets any other field (speeds,
    ``spines`` for oversubscription, ``name``, ...).
    """
    shape = _rail_shape(gpus, hosts_per_unit, rails)
    return RailOptimizedParams.model_validate({**shape, **overrides})


def dual_plane_for_gpus(
    gpus: int, hosts_per_unit: int = 32, rails: int = 8, **overrides: Any
) -> DualPlaneParams:
    """A 1:1 dual-plane fabric: as :func:`rail_optimized_for_gpus`, built once per plane."""
    shape = _rail_shape(gpus, hosts_per_unit, rails)
    return DualPlaneParams.model_validate({**shape, **overrides})


RADICES = (64, 128, 256, 512)
"""Switch radices :func:`fat_tree_for_gpus` tries, smallest first, when none is given: 64 ports
(51.2 Tb/s at 800G), 128 (the same chip at 400G), and beyond for what a 3-tier tree of those
cannot hold."""


def _fat_tree_pods(gpus: int, nics_per_host: int, radix: int) -> int:
    """How many pods of ``radix``-port switches ``gpus`` GPUs need (more than ``radix``: too
    many for a core of that radix)."""
    half = radix // 2
    hosts = math.ceil(gpus / nics_per_host)
    groups = max(math.ceil(hosts / half), min(2, hosts))  # rail groups of nics_per_host leaves
    groups_per_pod_limit = half // nics_per_host
    return max(math.ceil(groups / groups_per_pod_limit), min(2, groups))


def fat_tree_for_gpus(
    gpus: int, *, nics_per_host: int = 8, radix: int | None = None, **overrides: Any
) -> FatTreeParams:
    """A 1:1 three-tier fat-tree of ``radix``-port switches, rail-optimized within each pod.

    Each leaf has ``radix/2`` host ports and as many aggregation uplinks; a pod has up to
    ``radix/2`` leaves (in rail groups of ``nics_per_host``); each aggregation switch has as many
    core uplinks as the pod has leaves, so every tier is non-blocking at uniform link speed.
    Uses the fewest pods, but at least two when there are two hosts or more, so paths cross the
    cores. 16,384 GPUs of 8 NICs and radix 64: 16 pods x (32 leaves, 32 aggs), 1,024 cores.

    Without ``radix``, the smallest of :data:`RADICES` whose tree holds ``gpus`` (radix 64 up to
    65,536 GPUs of 8 NICs; 131,072 GPUs take radix 128: 32 pods x (64 leaves, 64 aggs), 4,096
    cores). A given ``radix`` that cannot hold them is refused, naming the radix that can.
    """
    _positive("gpus", gpus)
    _positive("nics_per_host", nics_per_host)
    chosen = radix
    if chosen is None:
        fits = [r for r in RADICES if r // 2 >= nics_per_host]
        fits = [r for r in fits if _fat_tree_pods(gpus, nics_per_host, r) <= r] or fits[-1:]
        chosen = fits[0] if fits else RADICES[0]
    if chosen < 2 or chosen % 2:
        raise ValueError(f"radix must be an even number >= 2, got {chosen}")
    half = chosen // 2
    if nics_per_host > half:
        raise ValueError(
            f"nics_per_host ({nics_per_host}) must be at most radix/2 ({half}): a pod's leaves "
            f"come in rail groups of nics_per_host and a pod has at most radix/2 leaves"
        )
    hosts = math.ceil(gpus / nics_per_host)
    groups = max(math.ceil(hosts / half), min(2, hosts))  # rail groups of nics_per_host leaves
    pods = _fat_tree_pods(gpus, nics_per_host, chosen)
    if pods > chosen:
        capacity = chosen * (half // nics_per_host) * half * nics_per_host
        larger = next(
            (r for r in RADICES if r > chosen and _fat_tree_pods(gpus, nics_per_host, r) <= r),
            None,
        )
        hint = f"; radix={larger} reaches it (--set radix={larger})" if larger else ""
        raise ValueError(
            f"{gpus} GPUs need {pods} pods but a core of radix {chosen} reaches {chosen} pods "
            f"(at most {capacity} GPUs of {nics_per_host} NICs){hint}"
        )
    groups_per_pod = math.ceil(groups / pods)
    hosts_per_leaf = math.ceil(hosts / (pods * groups_per_pod))
    leaves_per_pod = groups_per_pod * nics_per_host
    shape = {
        "pods": pods,
        "leaves_per_pod": leaves_per_pod,
        "aggs_per_pod": hosts_per_leaf,
        "cores": hosts_per_leaf * leaves_per_pod,
        "hosts_per_leaf": hosts_per_leaf,
        "nics_per_host": nics_per_host,
    }
    return FatTreeParams.model_validate({**shape, **overrides})
