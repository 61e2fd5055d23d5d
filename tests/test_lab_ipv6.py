"""The lab on an IPv6-only fabric (2001:2::/48 inside namespaces): the real prober's ICMPv6
answers (raw ICMPv6 socket and the IPV6_RECVERR error queue), learned ports, and the kernel's
counters showing QPs on their planned spine under ``net.ipv6.fib_multipath_hash_policy``.

Needs root (network namespaces); skipped with the reason otherwise.
"""

from __future__ import annotations

import ipaddress

import pytest

from c4p.lab.addressing import LAB_RANGE6, as_ipv6
from c4p.lab.build import Lab
from c4p.lab.demo import planned_routes, small_fabric, two_jobs
from c4p.lab.hosts import Helpers, NamespaceProber, TwinProber
from c4p.lab.netns import ip_json, namespaces_possible
from c4p.lab.traffic import measure
from southbound.bindings import bindings_for_paths
from southbound.netprobe import raw_allowed
from southbound.pathtable import Outcome, PathTable
from southbound.probeplan import ProbePlanner
from southbound.probing import Probe

_reason = namespaces_possible()
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(_reason is not None, reason=f"lab: {_reason}"),
]


def _addresses(lab: Lab, device: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    found = []
    for link in ip_json(["address", "show"], lab.ns(device)):
        for info in link.get("addr_info", []):
            address = ipaddress.ip_address(info["local"])
            if not address.is_loopback and not address.is_link_local:
                found.append(address)
    return found


@pytest.mark.parametrize(("privilege", "policy"), [("recverr", 1), ("raw", 1), ("raw", 3)])
def test_an_ipv6_fabric_is_probed_learned_and_realized(privilege: str, policy: int) -> None:
    if privilege == "raw" and not raw_allowed():
        pytest.skip("raw ICMPv6 sockets need CAP_NET_RAW")
    lab = Lab(small_fabric(), family=6, hash_policy=policy)
    with lab, Helpers(lab, privilege=privilege) as helpers:
        view = lab.fabric
        for device in (view.hosts[0].name, "leaf-00", "spine-00"):
            addresses = _addresses(lab, device)
            assert addresses and all(a in LAB_RANGE6 for a in addresses), addresses
        # One full trace: ICMPv6 time exceeded from leaf, spine, leaf, then the destination's
        # port unreachable, reported in ICMPv4's terms (11/0, then 3/3).
        prober = NamespaceProber(helpers)
        src = as_ipv6(view.hosts[0].nics[0].ports[0].address)
        dst = as_ipv6(view.hosts[-1].nics[0].ports[0].address)
        (trace,) = prober.trace_many([Probe(src, dst, 0xC4C4, 1, 4)])
        assert prober.privilege == privilege
        assert [(h.icmp_type, h.icmp_code) for h in trace.hops] == [(11, 0)] * 3 + [(3, 3)]
        assert all(isinstance(h.address, ipaddress.IPv6Address) for h in trace.hops)
        assert trace.hops[-1].address == dst
        spines = {as_ipv6(lab.plan.loopbacks[s]) for s in lab.plan.switches if "spine" in s}
        assert trace.hops[1].address in spines
        # Learn the planned paths over IPv6, bind, send every QP's traffic, read the counters.
        routes = planned_routes(view, two_jobs(view))
        table = PathTable(view)
        report = ProbePlanner(table, TwinProber(prober)).cover_routes(routes)
        assert report.complete and not report.inconsistent
        assert report.outcomes[Outcome.UNSTABLE] == 0
        entries, probes = table.confirmation()
        assert entries > 0 and probes >= 2 * entries
        bindings = bindings_for_paths(view, routes, 1, mode="learned", table=table)
        assert not bindings.unbound and not bindings.fallbacks
        measured = measure(lab, helpers, bindings, routes)
    assert len(measured.qps) == len(routes)
    assert measured.on_plan == len(routes), [q for q in measured.qps if not q.on_plan]
