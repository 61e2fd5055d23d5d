"""Fabric generators: build a :class:`~topology.model.Fabric` of a well-known shape from a few
parameters.

Why: planning, benchmarks and tests need fabrics from a handful of GPUs to 16,384 GPUs that are
correct by construction and named, numbered and addressed the same way every time, so that a
plan, a file or a failure report can be compared across runs. Four shapes:

* ``leaf-spine``      2-tier, any oversubscription (:func:`leaf_spine`);
* ``rail-optimized``  scalable units, NIC *r* on the rail-*r* leaf (:func:`rail_optimized`);
* ``fat-tree``        3-tier with pods, or the classic ``k``-ary tree (:func:`fat_tree`);
* ``dual-plane``      rail-optimized twice, NIC port *p* in plane *p* (:func:`dual_plane`).

Each takes a validated, immutable parameter model; :func:`generate` takes a kind name and plain
keywords. ``*_for_gpus`` helpers pick conventional 1:1 parameters for a GPU count, and
:func:`sized_for_gpus` builds from a kind name and a GPU count. The naming,
interface, address and hash rules shared by all kinds are in :mod:`topology.generators.common`.
Nothing is random: the same parameters always give the same fabric.
"""

from topology.generators.common import AddressPlan, FabricParams, HashProfiles, gid_of
from topology.generators.fat_tree import FatTreeParams, fat_tree
from topology.generators.leaf_spine import LeafSpineParams, leaf_spine
from topology.generators.rail_optimized import (
    PLANES,
    DualPlaneParams,
    RailOptimizedParams,
    dual_plane,
    rail_optimized,
)
from topology.generators.registry import (
    GENERATORS,
    FabricKind,
    Generator,
    generate,
    sized_for_gpus,
)
from topology.generators.sizing import (
    dual_plane_for_gpus,
    fat_tree_for_gpus,
    leaf_spine_for_gpus,
    rail_optimized_for_gpus,
)

__all__ = [
    "GENERATORS",
    "PLANES",
    "AddressPlan",
    "DualPlaneParams",
    "FabricKind",
    "FabricParams",
    "FatTreeParams",
    "Generator",
    "HashProfiles",
    "LeafSpineParams",
    "RailOptimizedParams",
    "dual_plane",
    "dual_plane_for_gpus",
    "fat_tree",
    "fat_tree_for_gpus",
    "generate",
    "gid_of",
    "leaf_spine",
    "leaf_spine_for_gpus",
    "rail_optimized",
    "rail_optimized_for_gpus",
    "sized_for_gpus",
]
