"""The fabric loader's fast paths accept exactly what the thorough checks accept.

Why: loading a 16k-GPU fabric was dominated by per-item Python work (``ipaddress`` parsing,
locating every name by its field path). The fast paths answer the same questions in bulk and
hand anything unusual to the original checks; these tests hold them to that: a fast path never
accepts what the original refuses, never changes a value, and is taken for ordinary input.
The reference is Python's own ``ipaddress`` module (not written by c4p) and the original
:func:`~topology.model.find_problems`.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from topology.addresses import fast_ipv4, fast_ipv6
from topology.generators import generate
from topology.model import (
    Fabric,
    Host,
    Link,
    Nic,
    NicPort,
    Switch,
    SwitchAddress,
    find_problems,
    is_sound,
)


def reference(cls: type[ipaddress.IPv4Address] | type[ipaddress.IPv6Address], text: str) -> Any:
    try:
        return cls(text)
    except ValueError:
        return None


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789.", max_size=17),
        st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n))),
    )
)
def testfast_ipv4_agrees_with_ipaddress(text: str) -> None:
    fast = fast_ipv4(text)
    expected = reference(ipaddress.IPv4Address, text)
    if fast is text:  # handed on to pydantic's own validator
        return
    assert expected is not None, f"{text!r} accepted by the fast path, refused by ipaddress"
    assert fast == expected and type(fast) is ipaddress.IPv4Address


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789abcdefABCDEF:", max_size=41),
        st.integers(0, 2**128 - 1).map(lambda n: str(ipaddress.IPv6Address(n))),
        st.integers(0, 2**128 - 1).map(lambda n: ipaddress.IPv6Address(n).exploded),
    )
)
def testfast_ipv6_agrees_with_ipaddress(text: str) -> None:
    fast = fast_ipv6(text)
    expected = reference(ipaddress.IPv6Address, text)
    if fast is text:
        return
    assert expected is not None, f"{text!r} accepted by the fast path, refused by ipaddress"
    assert fast == expected and type(fast) is ipaddress.IPv6Address


def test_fast_paths_are_taken_for_ordinary_addresses() -> None:
    """Otherwise the speed-up silently disappears (the values are checked above)."""
    assert isinstance(fast_ipv4("10.1.2.3"), ipaddress.IPv4Address)
    assert isinstance(fast_ipv6("::ffff:a00:1"), ipaddress.IPv6Address)
    assert isinstance(fast_ipv6("fe80::1"), ipaddress.IPv6Address)
    for odd in ("010.1.2.3", "1.2.3", "256.1.1.1", " 1.2.3.4", "1.2.3.4\n", 5):
        assert fast_ipv4(odd) is odd
    for odd in ("fe80::1%eth0", "::ffff:1.2.3.4", "1:::2", "12345::", 7):
        assert fast_ipv6(odd) is odd


FABRICS = [
    generate("leaf-spine", leaves=3, spines=2, hosts_per_leaf=2, nics_per_host=2),
    generate("rail-optimized", units=2, hosts_per_unit=2, rails=2, spines=2),
    generate("dual-plane", units=2, hosts_per_unit=2, rails=2, spines=2),
    generate("fat-tree", pods=2, leaves_per_pod=2, aggs_per_pod=2, cores=2, hosts_per_leaf=2),
]


def unchecked(fabric: Fabric, **changes: Any) -> Fabric:
    """A fabric with ``changes`` applied, built without the cross-reference checks."""
    data = {name: getattr(fabric, name) for name in Fabric.model_fields} | changes
    return Fabric.model_construct(**data)


def test_generated_fabrics_take_the_fast_path() -> None:
    for fabric in FABRICS:
        assert is_sound(fabric), fabric.name
        assert not list(find_problems(fabric))


def _rename_host_port(fabric: Fabric, h: int, new: str) -> Fabric:
    host = fabric.hosts[h]
    nic = host.nics[0]
    port = nic.ports[0].model_copy(update={"name": new})
    nics = (nic.model_copy(update={"ports": (port, *nic.ports[1:])}), *host.nics[1:])
    hosts = list(fabric.hosts)
    hosts[h] = host.model_copy(update={"nics": nics})
    return unchecked(fabric, hosts=tuple(hosts))


def mutations(fabric: Fabric, k: int, j: int) -> list[Fabric]:
    """Fabrics with one thing possibly wrong (some changes happen to leave it sound)."""
    sw, hosts, links = list(fabric.switches), list(fabric.hosts), list(fabric.links)
    k_sw, k_host, k_link = k % len(sw), k % len(hosts), k % len(links)
    j_sw, j_host, j_link = j % len(sw), j % len(hosts), j % len(links)
    out = [
        unchecked(fabric, switches=(*sw, sw[k_sw])),
        unchecked(fabric, hosts=(*hosts, hosts[k_host])),
        unchecked(fabric, switches=(*sw, Switch(name=hosts[k_host].name, role="leaf"))),
        unchecked(fabric, links=(*links, links[k_link])),
        unchecked(fabric, links=(*links, Link(a=links[k_link].b, b=links[k_link].a, speed_gbps=1))),
        unchecked(fabric, links=(*links[:k_link], *links[k_link + 1 :])),
        _rename_host_port(fabric, k_host, "other"),
        _rename_host_port(fabric, k_host, hosts[k_host].nics[-1].ports[-1].name),
    ]
    a, b = links[k_link], links[j_link]
    for end_a, end_b in (
        (a.a, b.a), (a.a, b.b), (a.b, b.b), (a.a, "nowhere:Ethernet1"),
        (f"{hosts[k_host].name}:nothere", a.b), (a.a, f"{sw[j_sw].name}:Ethernet99"),
        (f"{sw[k_sw].name}:Ethernet97", f"{sw[k_sw].name}:Ethernet98"),
        (f"{sw[k_sw].name}:Ethernet97", f"{sw[j_sw].name}:Ethernet98"),
    ):  # fmt: skip
        out.append(unchecked(fabric, links=(*links, Link(a=end_a, b=end_b, speed_gbps=1))))
    taken = hosts[j_host].nics[0].ports[0].address
    port = NicPort(name="extra0", address=taken)
    extra = Host(name="hextra", nics=(Nic(name="nicx", ports=(port,)),))
    out.append(unchecked(fabric, hosts=(*hosts, extra)))
    owned = (SwitchAddress(address=taken),)
    out.append(
        unchecked(
            fabric,
            switches=(
                *sw[:k_sw],
                sw[k_sw].model_copy(update={"addresses": owned}),
                *sw[k_sw + 1 :],
            ),
        )
    )
    twin = Host(name="htwin", nics=(Nic(name="a", ports=(port,)), Nic(name="a", ports=(port,))))
    out.append(unchecked(fabric, hosts=(*hosts, twin)))
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3), st.integers(0, 1000), st.integers(0, 1000))
def test_is_sound_never_hides_a_problem(which: int, k: int, j: int) -> None:
    """``is_sound`` True must mean ``find_problems`` finds nothing (the other way round only
    costs time), on fabrics with one thing broken."""
    refused = 0
    for fabric in mutations(FABRICS[which], k, j):
        problems = list(find_problems(fabric))
        if is_sound(fabric):
            assert not problems, problems
        refused += bool(problems)
    assert refused >= 10  # the mutations do break things


def test_addresses_of_two_kinds_with_one_integer_value_are_distinct() -> None:
    """``is_sound`` compares addresses by kind and integer value, as ``ipaddress`` does: an
    IPv6 address whose value equals a port's IPv4 address is no duplicate (both checks agree),
    the same IPv4 address twice is."""
    fabric = FABRICS[0]
    taken = fabric.hosts[0].nics[0].ports[0].address
    sw = list(fabric.switches)
    for address, sound in ((ipaddress.IPv6Address(int(taken)), True), (taken, False)):
        owned = (SwitchAddress(address=address),)
        changed = unchecked(
            fabric, switches=(sw[0].model_copy(update={"addresses": owned}), *sw[1:])
        )
        assert is_sound(changed) is sound
        assert (not list(find_problems(changed))) is sound
