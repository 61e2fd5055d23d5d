"""Fabrics for the re-wiring tests: a leaf-spine with one spare cable's worth of ports, and the
same fabric with a cable moved, added, pulled or re-speeded.

``START`` is a 4-leaf, 3-spine fabric (one 1-NIC host per leaf) *without* the cable
leaf-00--spine-02; its ports exist only in ``FULL``. Jobs on leaf-00/leaf-01 and on
leaf-02/leaf-03 share no switch-to-switch link a change on leaf-00 can reach.
"""

from __future__ import annotations

from topology.generators import generate
from topology.model import Fabric, Link

FULL = generate("leaf-spine", leaves=4, spines=3, hosts_per_leaf=1, nics_per_host=1)


def _devices(link: Link) -> set[str]:
    return {end.split(":", 1)[0] for end in link.ends}


def link_between(fabric: Fabric, a: str, b: str) -> Link:
    return next(link for link in fabric.links if _devices(link) == {a, b})


def with_links(fabric: Fabric, links: list[Link]) -> Fabric:
    return Fabric.model_validate({**fabric.model_dump(), "links": [k.model_dump() for k in links]})


SPARE = link_between(FULL, "leaf-00", "spine-02")
START = with_links(FULL, [k for k in FULL.links if k != SPARE])


def moved() -> Fabric:
    """START with leaf-00's cable to spine-00 moved, at the spine end, to spine-02's spare
    port: (leaf-00, spine-00) is gone, (leaf-00, spine-02) is new."""
    old = link_between(START, "leaf-00", "spine-00")
    leaf_end = next(e for e in old.ends if e.startswith("leaf-00:"))
    spine_end = next(e for e in SPARE.ends if e.startswith("spine-02:"))
    new = Link(a=leaf_end, b=spine_end, speed_gbps=old.speed_gbps)
    return with_links(START, [new if k == old else k for k in START.links])


def respeeded(speed: float = 100.0) -> Fabric:
    """START with leaf-00's cable to spine-01 running at ``speed``."""
    old = link_between(START, "leaf-00", "spine-01")
    new = old.model_copy(update={"speed_gbps": speed})
    return with_links(START, [new if k == old else k for k in START.links])


def without_nic_cable(host: str) -> Fabric:
    """START with ``host``'s NIC cable pulled (the host is still declared)."""
    return with_links(START, [k for k in START.links if host not in _devices(k)])


def nic_moved(host: str, leaf: str, port: str) -> Fabric:
    """START with ``host``'s NIC cable moved to ``leaf:port`` (a free port)."""
    old = next(k for k in START.links if host in _devices(k))
    nic = next(e for e in old.ends if e.startswith(f"{host}:"))
    new = Link(a=nic, b=f"{leaf}:{port}", speed_gbps=old.speed_gbps)
    return with_links(START, [new if k == old else k for k in START.links])
