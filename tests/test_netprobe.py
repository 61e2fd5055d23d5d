"""The real prober's parts that need no namespaces: ICMP parsing from an 8-byte quote, both
privilege levels against the loopback kernel, pacing, and black holes in the planner."""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from collections.abc import Sequence

import pytest

from southbound.netprobe import (
    Privilege,
    SocketProber,
    choose_privilege,
    icmp4_terms,
    parse_icmp,
    parse_icmp6,
    raw_allowed,
)
from southbound.pacing import Pacer, TokenBucket, candidates_from_fabric
from southbound.pathtable import PathTable
from southbound.probeplan import ProbePlanner
from southbound.probing import HopReply, ModeledProber, Probe, Trace
from topology.generators import LeafSpineParams, leaf_spine

LOCAL = ipaddress.IPv4Address("127.0.0.1")


def _icmp(answerer: str, icmp_type: int, code: int, quoted: bytes) -> bytes:
    """An IPv4 datagram carrying an ICMP error that quotes ``quoted`` (IP header + bytes)."""
    outer = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 0, 0, 0, 64, 1, 0,
        socket.inet_aton(answerer), socket.inet_aton("198.18.0.1"),
    )  # fmt: skip
    return outer + bytes([icmp_type, code, 0, 0, 0, 0, 0, 0]) + quoted


def _quoted(src: str, dst: str, sport: int, ttl: int) -> bytes:
    """The original datagram's IP header and *only* its 8-byte UDP header (RFC 792's minimum)."""
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 28 + ttl, 0, 0, 1, 17, 0,
        socket.inet_aton(src), socket.inet_aton(dst),
    )  # fmt: skip
    return ip + struct.pack("!HHHH", sport, 4791, 8 + ttl, 0)


def test_an_eight_byte_quote_names_the_probe_and_its_ttl() -> None:
    datagram = _icmp("198.18.0.7", 11, 0, _quoted("198.19.0.1", "198.19.0.9", 50123, 3))
    parsed = parse_icmp(datagram)
    assert parsed == ("198.18.0.7", 11, 0, (("198.19.0.1", 50123, "198.19.0.9", 4791), 3))
    assert parse_icmp(datagram[:40]) is None  # cut inside the UDP header: not ours to read
    tcp = bytearray(datagram)
    tcp[28 + 9] = 6
    assert parse_icmp(bytes(tcp)) is None


@pytest.mark.parametrize("privilege", ["recverr", "raw"])
def test_both_privilege_levels_read_the_kernels_answers(privilege: str) -> None:
    if privilege == "raw" and not raw_allowed():
        pytest.skip("raw ICMP sockets need CAP_NET_RAW")
    prober = SocketProber(privilege=privilege, timeout=0.5)
    probes = [Probe(LOCAL, LOCAL, 41000 + k, 1, 3) for k in range(20)]
    traces = prober.trace_many(probes)
    assert prober.privilege == Privilege(privilege)
    # The loopback host itself answers every TTL: port unreachable (type 3 code 3), no hole.
    for trace in traces:
        assert [h.ttl for h in trace.hops] == [1, 2, 3]
        assert all(h.address == LOCAL and (h.icmp_type, h.icmp_code) == (3, 3) for h in trace.hops)
        assert trace.black_hole is None
    assert prober.stats.answered == 60 and prober.stats.lost == 0


@pytest.mark.parametrize("privilege", ["recverr", "raw"])
def test_probes_leave_unconnected_sockets_and_one_socket_serves_two_destinations(
    privilege: str,
) -> None:
    """Never ``connect``: a connected socket's random hash would pick the path under Linux's
    hash policy 1 (docs/lab.md). One (source, port) socket sends to both destinations, and
    each answer is matched to its own 4-tuple (the error queue by the quoted destination)."""
    if privilege == "raw" and not raw_allowed():
        pytest.skip("raw ICMP sockets need CAP_NET_RAW")
    other = ipaddress.IPv4Address("127.0.0.2")
    peers: list[object] = []

    class Watching(SocketProber):
        def _send(self, sock: socket.socket, four: tuple[str, int, str, int], ttl: int) -> bool:
            try:
                peers.append(sock.getpeername())
            except OSError as exc:  # ENOTCONN: not connected, as it must be
                peers.append(exc.errno)
            return super()._send(sock, four, ttl)

    prober = Watching(privilege=privilege, timeout=0.5)
    probes = [Probe(LOCAL, LOCAL, 43000, 1, 2), Probe(LOCAL, other, 43000, 1, 2)]
    traces = prober.trace_many(probes)
    assert peers and all(p == errno.ENOTCONN for p in peers)
    assert [h.address for h in traces[0].hops] == [LOCAL, LOCAL]
    assert [h.address for h in traces[1].hops] == [other, other]
    assert prober.stats.answered == 4 and prober.stats.lost == 0


@pytest.mark.parametrize("privilege", ["recverr", "raw"])
def test_ipv6_probes_read_icmpv6_answers_in_icmpv4_terms(privilege: str) -> None:
    if privilege == "raw" and not raw_allowed():
        pytest.skip("raw ICMPv6 sockets need CAP_NET_RAW")
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as check:
            check.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    local6 = ipaddress.IPv6Address("::1")
    prober = SocketProber(privilege=privilege, timeout=0.5)
    traces = prober.trace_many([Probe(local6, local6, 42000 + k, 1, 2) for k in range(10)])
    for trace in traces:  # ICMPv6 port unreachable (1/4) from the host itself: 3/3
        assert all(h.address == local6 and (h.icmp_type, h.icmp_code) == (3, 3) for h in trace.hops)
    assert prober.stats.answered == 20


def test_icmpv6_is_parsed_from_its_quote_and_named_in_icmpv4_terms() -> None:
    src, dst = ipaddress.IPv6Address("2001:2:0:19::"), ipaddress.IPv6Address("2001:2:0:19::e")
    inner = struct.pack("!IHBB", 0x60000000, 8 + 3, 17, 3) + src.packed + dst.packed
    message = bytes([3, 0, 0, 0, 0, 0, 0, 0]) + inner + struct.pack("!HHHH", 50000, 4791, 11, 0)
    parsed = parse_icmp6(message, "2001:2:0:18::3")
    assert parsed == ("2001:2:0:18::3", 11, 0, ((str(src), 50000, str(dst), 4791), 3))
    assert parse_icmp6(message[:50], "2001:2:0:18::3") is None  # cut inside the quote
    assert icmp4_terms(1, 4) == (3, 3)  # port unreachable
    assert icmp4_terms(1, 0) == (3, 0)  # no route: a black hole
    assert icmp4_terms(1, 3) == (3, 1)  # address unreachable: a black hole
    assert icmp4_terms(128, 0)[0] > 255  # an echo request means nothing here


def test_raw_is_refused_clearly_without_the_capability() -> None:
    if raw_allowed():
        assert choose_privilege("raw") is Privilege.RAW
        assert choose_privilege("auto") is Privilege.RAW
    else:
        with pytest.raises(PermissionError, match="CAP_NET_RAW"):
            choose_privilege("raw")
        assert choose_privilege("auto") is Privilege.RECVERR
    with pytest.raises(ValueError):
        choose_privilege("sudo")


def test_token_bucket_and_back_off() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=100.0, burst=2.0)
    bucket.refill(now[0])
    assert bucket.wait(0.0) == 0
    bucket.take()
    bucket.take()
    assert bucket.wait(0.0) == pytest.approx(0.01)
    assert bucket.wait(0.01) == 0
    bucket.back_off()
    assert bucket.rate == 50.0 and bucket.wait(0.01) > 0  # halved, and the bucket emptied
    for _ in range(3):
        bucket.back_off()
    assert bucket.rate == 10.0  # never below MIN_RATE
    for _ in range(10):
        bucket.recover()
    assert bucket.rate == 100.0  # back to nominal, never above
    with pytest.raises(ValueError, match="rate > 0"):
        TokenBucket(rate=0, burst=1)
    pacer = Pacer(rate=10.0, burst=1.0, clock=lambda: now[0])
    probe = Probe(LOCAL, LOCAL, 1000, 2, 2)
    assert pacer.wait(probe, 2) == 0
    pacer.take(probe, 2)
    assert pacer.wait(probe, 2) > 0
    now[0] += 0.1
    assert pacer.wait(probe, 2) == 0
    assert not Pacer(rate=None).wait(probe, 2)


def test_every_possible_answerer_is_charged() -> None:
    fabric = leaf_spine(LeafSpineParams(leaves=2, spines=3, hosts_per_leaf=1))
    ports = [p for _, _, p in fabric.nic_ports()]
    where = candidates_from_fabric(fabric)
    probe = Probe(ports[0].address, ports[1].address, 50000, 1, 4)
    assert where(probe, 1) == ("leaf-00",)
    assert where(probe, 2) == ("spine-00", "spine-01", "spine-02")
    assert where(probe, 3) == ("leaf-01",)
    assert where(probe, 4) == (
        fabric.index.node_names[fabric.index.node_of_address[ports[1].address]],
    )
    pacer = Pacer(where, rate=100.0, burst=1.0, clock=lambda: 5.0)
    pacer.take(probe, 2)
    # One packet that may reach any spine takes a token from every spine.
    other = Probe(ports[1].address, ports[0].address, 50001, 2, 2)
    assert pacer.wait(other, 2) > 0


class _HoleAt:
    """ModeledProber whose answers from one switch become "net unreachable" (a route gone)."""

    def __init__(self, inner: ModeledProber, address: ipaddress.IPv4Address) -> None:
        self.inner, self.address = inner, address

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        return [
            Trace(
                t.probe,
                tuple(
                    HopReply(h.ttl, h.address, 3, 0) if h.address == self.address else h
                    for h in t.hops
                ),
            )
            for t in self.inner.trace_many(probes)
        ]


def test_the_planner_reports_black_holes_and_does_not_retry_them() -> None:
    fabric = leaf_spine(LeafSpineParams(leaves=2, spines=4, hosts_per_leaf=1))
    spine = fabric.switch("spine-02").mgmt_address
    assert spine is not None
    table = PathTable(fabric)
    src, dst = fabric.index.node("h0000:nic0p0"), fabric.index.node("h0001:nic0p0")
    report = ProbePlanner(table, _HoleAt(ModeledProber(fabric), spine)).cover([(src, dst)])
    assert report.black_holes and {b.address for b in report.black_holes} == {str(spine)}
    key = table.key_of(src, dst)
    assert len(report.uncovered[key]) == 1  # only the path through spine-02 stays unknown
    assert report.outcomes["incomplete"] == 0
