"""ICMP and ICMPv6 answers to probes: reading them from a raw socket's datagram or an error
queue's control message, and naming ICMPv6's in ICMPv4's terms.

Why a module of its own: these are wire formats (RFC 792's quote, RFC 4443's messages,
Linux's ``sock_extended_err``), checked byte by byte in tests without sockets; the prober
(:mod:`southbound.netprobe`) only moves packets.

ICMPv6 errors are reported as ICMPv4's ``(type, code)`` (:func:`icmp4_terms`: time exceeded
11/0, port unreachable 3/3, no route 3/0, address unreachable 3/1), so the path table and its
black-hole rule read both families alike.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

from southbound.probing import ICMP_DEST_UNREACHABLE, ICMP_TIME_EXCEEDED

IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
IPV6_RECVERR = getattr(socket, "IPV6_RECVERR", 25)
SO_EE_ORIGIN_ICMP = 2
SO_EE_ORIGIN_ICMP6 = 3
_EXTENDED_ERR = struct.Struct("=IBBBBII")
ICMP6_DST_UNREACH = 1
ICMP6_TIME_EXCEEDED = 3
_ICMP6_UNREACH = {0: 0, 1: 13, 3: 1, 4: 3, 5: 13, 6: 13}
"""ICMPv6 destination-unreachable code -> ICMPv4's: no route -> net (0), administratively
prohibited / policy -> prohibited (13), address -> host (1), port -> port (3)."""

Tuple4 = tuple[str, int, str, int]
"""``(source address, source port, destination address, destination port)``."""
Packet = tuple[Tuple4, int]
"""One datagram: its 4-tuple and TTL."""


def icmp4_terms(icmp6_type: int, icmp6_code: int) -> tuple[int, int]:
    """An ICMPv6 error as ICMPv4's ``(type, code)`` (see the module docstring); anything else
    is passed through with its type offset by 256, so it matches no ICMPv4 meaning."""
    if icmp6_type == ICMP6_TIME_EXCEEDED:
        return ICMP_TIME_EXCEEDED, icmp6_code
    if icmp6_type == ICMP6_DST_UNREACH:
        return ICMP_DEST_UNREACHABLE, _ICMP6_UNREACH.get(icmp6_code, 13)
    return 256 + icmp6_type, icmp6_code


def parse_icmp(datagram: bytes) -> tuple[str, int, int, Packet] | None:
    """``(answering address, ICMP type, code, quoted packet)`` from a raw ICMP datagram (IP
    header included), or ``None`` if it does not quote a UDP datagram of ours."""
    if len(datagram) < 20:
        return None
    outer = (datagram[0] & 0x0F) * 4
    if len(datagram) < outer + 8 + 20:
        return None
    icmp_type, icmp_code = datagram[outer], datagram[outer + 1]
    inner = outer + 8
    inner_len = (datagram[inner] & 0x0F) * 4
    if datagram[inner + 9] != socket.IPPROTO_UDP or len(datagram) < inner + inner_len + 8:
        return None
    src = socket.inet_ntoa(datagram[inner + 12 : inner + 16])
    dst = socket.inet_ntoa(datagram[inner + 16 : inner + 20])
    sport, dport, length = struct.unpack_from("!HHH", datagram, inner + inner_len)
    ttl = length - 8
    answerer = socket.inet_ntoa(datagram[12:16])
    return answerer, icmp_type, icmp_code, ((src, sport, dst, dport), ttl)


def parse_icmp6(message: bytes, answerer: str) -> tuple[str, int, int, Packet] | None:
    """The same from a raw ICMPv6 socket's message (no IPv6 header: the kernel strips it; the
    answering address comes from ``recvfrom``). Type and code in ICMPv4's terms."""
    if len(message) < 8 + 40 + 8 or message[0] not in (ICMP6_DST_UNREACH, ICMP6_TIME_EXCEEDED):
        return None
    inner = 8
    if message[inner + 6] != socket.IPPROTO_UDP:  # extension headers: not a probe of ours
        return None
    src = str(ipaddress.IPv6Address(message[inner + 8 : inner + 24]))
    dst = str(ipaddress.IPv6Address(message[inner + 24 : inner + 40]))
    sport, dport, length = struct.unpack_from("!HHH", message, inner + 40)
    icmp_type, icmp_code = icmp4_terms(message[0], message[1])
    return answerer, icmp_type, icmp_code, ((src, sport, dst, dport), length - 8)


def canonical(address: str) -> str:
    """One spelling per address (IPv6 has many), as the probes' 4-tuples are keyed."""
    return str(ipaddress.ip_address(address.partition("%")[0]))


def read_offender(
    data: bytes, v6: bool
) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int, int] | None:
    """``(answering address, type, code)`` (ICMPv4's terms) from an ``IP(V6)_RECVERR``
    control message: ``sock_extended_err`` followed by the offender's ``sockaddr``."""
    size = _EXTENDED_ERR.size
    if len(data) < size + (24 if v6 else 8):
        return None
    _, origin, icmp_type, icmp_code, _, _, _ = _EXTENDED_ERR.unpack_from(data)
    if v6:
        if origin != SO_EE_ORIGIN_ICMP6:
            return None
        icmp_type, icmp_code = icmp4_terms(icmp_type, icmp_code)
        return ipaddress.IPv6Address(data[size + 8 : size + 24]), icmp_type, icmp_code
    if origin != SO_EE_ORIGIN_ICMP:
        return None
    return ipaddress.IPv4Address(data[size + 4 : size + 8]), icmp_type, icmp_code
