"""Generators by name: ``FabricKind``, the ``GENERATORS`` registry, ``generate`` and friends.

Why: the CLI, the benchmarks and fabric files name a kind as a string (``"fat-tree"``) with its
parameters as plain keys; the registry turns that into a validated parameter model and a call,
so every entry point refuses unknown kinds and unknown or bad parameters the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from topology.generators.common import FabricParams
from topology.generators.fat_tree import FatTreeParams, fat_tree
from topology.generators.leaf_spine import LeafSpineParams, leaf_spine
from topology.generators.rail_optimized import (
    DualPlaneParams,
    RailOptimizedParams,
    dual_plane,
    rail_optimized,
)
from topology.generators.sizing import (
    dual_plane_for_gpus,
    fat_tree_for_gpus,
    leaf_spine_for_gpus,
    rail_optimized_for_gpus,
)
from topology.model import Fabric

P = TypeVar("P", bound=FabricParams)


class FabricKind(StrEnum):
    """The fabric shapes c4p can generate."""

    LEAF_SPINE = "leaf-spine"
    RAIL_OPTIMIZED = "rail-optimized"
    FAT_TREE = "fat-tree"
    DUAL_PLANE = "dual-plane"


@dataclass(frozen=True)
class Generator(Generic[P]):
    """One kind: its parameter model and the function that builds it."""

    kind: FabricKind
    params: type[P]
    build: Callable[[P], Fabric]

    def __call__(self, **params: Any) -> Fabric:
        """Validate ``params`` (raises pydantic ``ValidationError``) and build the fabric."""
        return self.build(self.params.model_validate(params))


GENERATORS: Mapping[str, Generator[Any]] = MappingProxyType(
    {
        FabricKind.LEAF_SPINE: Generator(FabricKind.LEAF_SPINE, LeafSpineParams, leaf_spine),
        FabricKind.RAIL_OPTIMIZED: Generator(
            FabricKind.RAIL_OPTIMIZED, RailOptimizedParams, rail_optimized
        ),
        FabricKind.FAT_TREE: Generator(FabricKind.FAT_TREE, FatTreeParams, fat_tree),
        FabricKind.DUAL_PLANE: Generator(FabricKind.DUAL_PLANE, DualPlaneParams, dual_plane),
    }
)
"""Every generator, keyed by its kind (a ``FabricKind`` or the same plain string)."""


def generate(kind: str, /, **params: Any) -> Fabric:
    """Build a fabric of ``kind`` (e.g. ``"fat-tree"``) from keyword parameters.

    ``generate("fat-tree", k=4)``, ``generate("rail-optimized", units=2, hosts_per_unit=4,
    rails=4, spines=4)``. Raises ``ValueError`` for an unknown kind and pydantic's
    ``ValidationError`` (also a ``ValueError``) naming the field for bad parameters.
    """
    generator = GENERATORS.get(kind)
    if generator is None:
        known = ", ".join(GENERATORS)
        raise ValueError(f"unknown fabric kind {kind!r}; known kinds: {known}")
    return generator(**params)


_SIZERS: Mapping[str, Callable[..., FabricParams]] = MappingProxyType(
    {
        FabricKind.LEAF_SPINE: leaf_spine_for_gpus,
        FabricKind.RAIL_OPTIMIZED: rail_optimized_for_gpus,
        FabricKind.FAT_TREE: fat_tree_for_gpus,
        FabricKind.DUAL_PLANE: dual_plane_for_gpus,
    }
)


def sized_for_gpus(kind: str, gpus: int, /, **params: Any) -> Fabric:
    """Build a fabric of ``kind`` with (at least) ``gpus`` GPUs, via the kind's ``*_for_gpus``.

    Sizing knobs (the named arguments of the kind's helper: ``hosts_per_unit``, ``rails``,
    ``hosts_per_leaf``, ``nics_per_host``, ``radix``) steer the sizing; every other keyword
    overrides a field of the resulting parameters. Values may be strings, as from a command line.
    """
    sizer = _SIZERS.get(kind)
    if sizer is None:
        known = ", ".join(GENERATORS)
        raise ValueError(f"unknown fabric kind {kind!r}; known kinds: {known}")
    named = inspect.signature(sizer).parameters
    knobs: dict[str, int] = {}
    overrides: dict[str, Any] = {}
    for name, value in params.items():
        if (
            name != "gpus"
            and name in named
            and named[name].kind is not inspect.Parameter.VAR_KEYWORD
        ):
            try:
                knobs[name] = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be an integer, got {value!r}") from None
        else:
            overrides[name] = value
    return GENERATORS[kind].build(sizer(int(gpus), **knobs, **overrides))
