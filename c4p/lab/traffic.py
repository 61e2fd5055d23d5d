"""Traffic on bound 5-tuples, and which links it really crossed, read from kernel counters.

Why counters: "as planned" must mean *seen*. Each QP's datagrams are sent from its source host's
namespace on its bound 5-tuple (destination port 4791; on an IPv6 lab between the addresses'
IPv6 twins), one QP at a time, and every interface's
``tx_packets`` is read before and after from the kernel of each namespace (``ip -j -s link``).
A directed link (a resource of the fabric: a cable in one direction) was crossed by the QP when
its transmitting interface counted at least ``count`` more packets; attribution is exact because
nothing else sends that many packets in that window (routing keepalives and LLDP are a few per
second, and the destination host's port-unreachable answers go the other way and are
rate-limited by its kernel).

:func:`measure` returns, per QP, the resources it crossed and whether they are its planned path,
and per resource how many QPs crossed it, next to the plan's count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from c4p.lab import netns
from c4p.lab.build import Lab
from c4p.lab.hosts import Helpers
from southbound.bindings import BindingSet
from southbound.routes import QpRoute

PACKETS_PER_QP = 200
"""Datagrams per QP: far above any background traffic in the measuring window."""


def read_counters(lab: Lab) -> dict[tuple[str, str], int]:
    """``(namespace, interface) -> tx_packets`` for every interface of every lab namespace."""

    def one(ns: str) -> dict[tuple[str, str], int]:
        out = {}
        for link in netns.ip_json(["-s", "link", "show"], ns):
            stats = link.get("stats64") or link.get("stats") or {}
            out[(ns, link["ifname"])] = int(stats.get("tx", {}).get("packets", 0))
        return out

    namespaces = sorted(lab.plan.namespaces.values())
    merged: dict[tuple[str, str], int] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for part in pool.map(one, namespaces):
            merged.update(part)
    return merged


def resource_interfaces(lab: Lab) -> dict[int, tuple[str, str]]:
    """Fabric resource (directed link) -> the ``(namespace, interface)`` that transmits it."""
    index = lab.fabric.index
    names = index.node_names
    out: dict[int, tuple[str, str]] = {}
    for cable in lab.plan.cables:
        for res in (2 * cable.number, 2 * cable.number + 1):
            if res >= len(index.res_src):
                continue
            src = names[int(index.res_src[res])].split(":")[0]
            end = cable.a if cable.a.device == src else cable.b
            out[res] = (end.namespace, end.interface)
    return out


@dataclass
class QpMeasure:
    id: str
    src: str
    dst: str
    sport: int
    planned: tuple[int, ...]
    measured: tuple[int, ...]

    @property
    def on_plan(self) -> bool:
        return bool(self.planned) and set(self.planned) == set(self.measured)


@dataclass
class Measurement:
    """What the counters showed for a set of QPs."""

    qps: list[QpMeasure] = field(default_factory=list)
    planned_per_link: Counter[int] = field(default_factory=Counter)
    measured_per_link: Counter[int] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def on_plan(self) -> int:
        return sum(q.on_plan for q in self.qps)

    @property
    def max_planned(self) -> int:
        return max(self.planned_per_link.values(), default=0)

    @property
    def max_measured(self) -> int:
        return max(self.measured_per_link.values(), default=0)

    def switch_links(self, lab: Lab) -> dict[str, tuple[int, int]]:
        """Per switch-to-switch resource name: (QPs planned, QPs measured)."""
        index = lab.fabric.index
        out = {}
        for res in sorted(set(self.planned_per_link) | set(self.measured_per_link)):
            if int(index.res_src[res]) < index.num_switches > int(index.res_dst[res]):
                out[index.resource_name(res)] = (
                    self.planned_per_link[res],
                    self.measured_per_link[res],
                )
        return out


def measure(
    lab: Lab,
    helpers: Helpers,
    bindings: BindingSet,
    routes: Sequence[QpRoute],
    *,
    count: int = PACKETS_PER_QP,
) -> Measurement:
    """Send each bound QP's traffic alone and read which resources carried it (see above)."""
    import time

    started = time.monotonic()
    interfaces = resource_interfaces(lab)
    planned = {r.key: r.path for r in routes}
    by_key = bindings.by_key()
    result = Measurement()
    before = read_counters(lab)
    for route in routes:
        binding = by_key.get(route.key)
        if binding is None:
            continue
        src = lab.address(lab.fabric.index.port(route.src).port.address)
        dst = lab.address(lab.fabric.index.port(route.dst).port.address)
        helpers.send(src, binding.sport, dst, count)
        after = read_counters(lab)
        crossed = tuple(
            sorted(
                res
                for res, where in interfaces.items()
                if after.get(where, 0) - before.get(where, 0) >= count
            )
        )
        before = after
        path = planned.get(route.key, ())
        result.qps.append(QpMeasure(route.id, route.src, route.dst, binding.sport, path, crossed))
        result.planned_per_link.update(path)
        result.measured_per_link.update(crossed)
    result.seconds = time.monotonic() - started
    return result
