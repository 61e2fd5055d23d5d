"""A gNMI answer's (path, JSON value) pairs merged into one normalized tree.

Why apart from the models (:mod:`southbound.openconfig`): the shape of an answer is the part
real targets vary most. A Get for ``/interfaces`` may come back as one update holding the
container, one update per interface, one per leaf, several notifications, the node wrapped in
its module-qualified name (SONiC) or not, with module prefixes on any member. Every pair is
placed in one tree here (prefixes stripped, keyed lists turned into mappings by their key,
wrappers removed), so that the models validate one shape only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PathElem = tuple[str, Mapping[str, str]]
"""One element of a gNMI path: its name (module prefix stripped) and its keys."""

LIST_KEYS: Mapping[str, tuple[str, ...]] = {
    "interface": ("name", "interface-id"),
    "neighbor": ("id",),
    "queue": ("name",),
    "capability": ("name",),
    "subinterface": ("index",),
    "address": ("ip",),
}
"""Keyed lists c4p reads, and the key leaf of their entries."""


def strip_module(name: str) -> str:
    """``openconfig-interfaces:interface`` -> ``interface``."""
    return name.rsplit(":", 1)[-1] if ":" in name else name


def path_text(elems: Iterable[PathElem]) -> str:
    """``/interfaces/interface[name=Ethernet1]/state`` for messages and problems."""
    out = ""
    for name, keys in elems:
        out += "/" + name + "".join(f"[{k}={v}]" for k, v in sorted(keys.items()))
    return out or "/"


# -- the normalized tree --------------------------------------------------------------------


class TreeError(ValueError):
    """A value that cannot be placed in the tree (e.g. a list entry without its key)."""


def normalize(value: Any, *, member: str = "") -> Any:
    """Strip module prefixes from members; keyed lists become ``{key value: entry}``."""
    if isinstance(value, Mapping):
        return {
            strip_module(str(k)): normalize(v, member=strip_module(str(k)))
            for k, v in value.items()
        }
    if isinstance(value, list) and member in LIST_KEYS:
        out: dict[str, Any] = {}
        for position, entry in enumerate(value):
            entry = normalize(entry)
            if not isinstance(entry, dict):
                raise TreeError(f"{member}[{position}] is not an object")
            key = next((entry[k] for k in LIST_KEYS[member] if k in entry), None)
            if key is None:
                raise TreeError(f"{member}[{position}] has no key {'/'.join(LIST_KEYS[member])}")
            out[str(key)] = entry
        return out
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def unwrap(last: tuple[str, Mapping[str, str]], value: Any) -> Any:
    """The value of the node a path names, whether or not the target wrapped it.

    RFC 7951 and the gNMI specification (section 2.3.1) put the *children* of the node a path
    names in a JSON_IETF value, but SONiC's gNMI server (sonic-gnmi / sonic-mgmt-framework
    translib, see its ``gNMI_usage_examples.md``) answers ``/interfaces`` with
    ``{"openconfig-interfaces:interfaces": {...}}``: the node itself, module-qualified. A value
    that is one member named like the path's last element is that wrapper; for a keyed element
    the wrapper holds a one-entry list, whose entry is taken.
    """
    name, keys = last
    if not isinstance(value, Mapping) or len(value) != 1:
        return value
    ((member, inner),) = value.items()
    if strip_module(str(member)) != name:
        return value
    if keys:
        if isinstance(inner, list) and len(inner) == 1 and isinstance(inner[0], Mapping):
            return inner[0]
        return value
    if isinstance(inner, Mapping) or (isinstance(inner, list) and name in LIST_KEYS):
        return inner
    return value


def _merge_into(node: dict[str, Any], key: str, value: Any) -> None:
    if isinstance(value, dict) and isinstance(node.get(key), dict):
        for k, v in value.items():
            _merge_into(node[key], k, v)
    else:
        node[key] = value


class OcTree:
    """A normalized tree assembled from the (path, JSON value) pairs of one answer."""

    def __init__(self) -> None:
        self.root: dict[str, Any] = {}

    def add(self, elems: list[PathElem], value: Any) -> None:
        """Place ``value`` at ``elems``; raises :class:`TreeError` if the shapes clash."""
        node = self.root
        steps = [(strip_module(name), dict(keys)) for name, keys in elems]
        if steps:
            value = unwrap(steps[-1], value)
        if not steps:
            if not isinstance(value, Mapping):
                raise TreeError("a value at the root must be an object")
            for k, v in normalize(value).items():
                _merge_into(self.root, k, v)
            return
        for position, (name, keys) in enumerate(steps):
            last = position == len(steps) - 1
            if keys:
                table = node.setdefault(name, {})
                if not isinstance(table, dict):
                    raise TreeError(f"{name} is not a list here")
                key_value = next(iter(keys.values())) if len(keys) == 1 else "|".join(keys.values())
                entry = table.setdefault(key_value, dict(keys))
                if not isinstance(entry, dict):
                    raise TreeError(f"{name}[{key_value}] is not an object")
                if last:
                    if not isinstance(value, Mapping):
                        raise TreeError(f"{name}[{key_value}] must be an object")
                    for k, v in normalize(value).items():
                        _merge_into(entry, k, v)
                node = entry
            elif last:
                _merge_into(node, name, normalize(value, member=name))
            else:
                child = node.setdefault(name, {})
                if not isinstance(child, dict):
                    raise TreeError(f"{name} is a leaf, not a container")
                node = child

    def get(self, *names: str) -> Any:
        node: Any = self.root
        for name in names:
            if not isinstance(node, dict) or name not in node:
                return None
            node = node[name]
        return node
