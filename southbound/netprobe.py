"""A real prober: UDP probes on real sockets, ICMP answers read from the kernel.

Each packet of a :class:`~southbound.probing.Probe` is a UDP datagram from the probe's source
address and port to its destination, port 4791, sent with ``IP_TTL`` (IPv6: the unicast hop
limit) set to one TTL of the probe's range. The switch where the TTL runs out answers ICMP
time exceeded; a router without a route answers destination unreachable (net/host: a **black
hole**, reported as an answer, see :attr:`HopReply.black_hole`); the destination host answers
port unreachable.

**Hashed like the traffic.** Probes leave from *unconnected* UDP sockets (``bind`` to the
source address and port, then ``sendto``), never connected ones (``connect``): connecting gives a
socket a random flow hash (``sk_txhash``) that the kernel stamps on every packet, and a Linux
router under ``fib_multipath_hash_policy=1`` reuses a packet's L4 hash for its next-hop choice
where one is present, so a probe from a connected socket takes a path chosen by that random
number, not by its 5-tuple (measured on the lab: the same 5-tuple from eight connected sockets
crossed four different spines; from ``sendto`` one spine eight times). A RoCE NIC's packets
carry no socket hash, so only unconnected probes see what the QP's 5-tuple will get. One socket
serves every destination of its ``(source address, source port)``.

**Matching.** A router quotes the IP header and at least the first 8 bytes of the datagram
(RFC 792): the UDP header. The 4-tuple in it names the probe; the TTL must be recoverable from
those 8 bytes too, so it is encoded in the UDP *length*: the payload is ``ttl`` bytes long.
Any number of probes can be in flight: the 4-tuple plus length is unique per packet.

**Two privilege levels** (:class:`Privilege`):

- ``raw``: a raw ICMP socket (needs ``CAP_NET_RAW``) sees every ICMP message the host gets,
  with the full quote, so every TTL of every probe can be in flight at once.
- ``recverr``: unprivileged. Each probe socket sets ``IP_RECVERR`` (``IPV6_RECVERR``) and reads
  its ICMP errors from the socket's error queue (``MSG_ERRQUEUE``; ``sock_extended_err``
  carries the ICMP type and code, ``SO_EE_OFFENDER`` the answering address, and the message's
  address the quoted destination, which names the 4-tuple on an unconnected socket: Linux
  queues errors for unconnected UDP sockets once ``IP_RECVERR`` is set). The kernel hands over
  the quoted *payload*, not the UDP header, so with an 8-byte quote nothing tells the TTLs of
  one 4-tuple apart: a 4-tuple has at most one TTL in flight at a time (different 4-tuples
  still overlap).

**IPv6.** A probe between IPv6 addresses goes out on an ``AF_INET6`` socket; answers are ICMPv6
(time exceeded type 3, destination unreachable type 1), reported in ICMPv4's terms
(:func:`southbound.icmp.icmp4_terms`), so the path table reads both families alike.

``auto`` takes ``raw`` where the process may open a raw socket (it is the faster one for full
traces), else ``recverr``; :attr:`SocketProber.privilege` says which was used.

**Pacing and losses.** Every packet waits for a token from its possible answering switches
(:class:`southbound.pacing.Pacer`). A packet unanswered after ``timeout`` is lost *for this
round*: the pacer backs off those switches and the packet is sent again in the next round, up
to ``rounds`` rounds. A packet still unanswered is reported as ``None``, which the path table
reads as incomplete, never as a path.
"""

from __future__ import annotations

import errno
import ipaddress
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from southbound.icmp import (
    IP_RECVERR,
    IPV6_RECVERR,
    Packet,
    Tuple4,
    canonical,
    icmp4_terms,
    parse_icmp,
    parse_icmp6,
    read_offender,
)
from southbound.pacing import Pacer
from southbound.probing import HopReply, Probe, Trace


class Privilege(StrEnum):
    """How answers are read (see the module docstring)."""

    RAW = "raw"
    RECVERR = "recverr"


def family_of(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def raw_allowed() -> bool:
    """Whether this process may open a raw ICMP socket (root or ``CAP_NET_RAW``)."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
    except PermissionError:
        return False
    return True


def choose_privilege(requested: Privilege | str = "auto") -> Privilege:
    """``auto``: raw where allowed, else the error queue. Asking for raw without the
    capability raises ``PermissionError`` naming what is missing."""
    if requested == "auto":
        return Privilege.RAW if raw_allowed() else Privilege.RECVERR
    chosen = Privilege(requested)
    if chosen is Privilege.RAW and not raw_allowed():
        raise PermissionError("privilege: 'raw' needs CAP_NET_RAW (or root); use 'recverr'")
    return chosen


@dataclass
class ProbeStats:
    """What a prober sent and got back, over its lifetime."""

    traces: int = 0
    packets: int = 0
    """Datagrams sent, retries included."""
    answered: int = 0
    lost: int = 0
    """Distinct packets never answered in any round (reported as ``None``)."""
    retried: int = 0
    """Datagrams sent again after an unanswered round."""
    first_round_lost: int = 0
    """Distinct packets unanswered in their first round (what pacing keeps down)."""
    rounds: int = 0
    seconds: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)


def _payload(ttl: int) -> bytes:
    """The TTL lives in the UDP length (8 + ``ttl``), readable from an 8-byte quote."""
    return b"\x00" * ttl


class SocketProber:
    """A :class:`~southbound.probing.Prober` on real sockets (see the module docstring).

    ``timeout``: seconds a packet waits for its answer in a round; ``rounds``: send rounds per
    packet (the first plus retries); ``max_open``: UDP sockets open at once.
    """

    def __init__(
        self,
        *,
        privilege: Privilege | str = "auto",
        pacer: Pacer | None = None,
        timeout: float = 0.5,
        rounds: int = 3,
        max_open: int = 256,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout: {timeout} is not a positive number of seconds")
        if not 1 <= rounds <= 10:
            raise ValueError(f"rounds: {rounds} is not within 1..10")
        if not 1 <= max_open <= 4096:
            raise ValueError(f"max_open: {max_open} is not within 1..4096")
        self.privilege = choose_privilege(privilege)
        self.pacer = pacer or Pacer()
        self.timeout = timeout
        self.rounds = rounds
        self.max_open = max_open
        self.stats = ProbeStats()
        self.cancel = threading.Event()
        """Set from another thread to stop sending at once (the probes not answered by then
        come back unanswered): an agent whose controller went away must not go on probing
        for a batch nobody will read. Cleared by the next :meth:`trace_many`."""

    # -- the Prober seam ---------------------------------------------------------------------

    def trace_many(self, probes: Sequence[Probe]) -> list[Trace]:
        started = time.monotonic()
        self.cancel.clear()
        owner: dict[Packet, Probe] = {}
        for probe in probes:
            four = (str(probe.src), probe.sport, str(probe.dst), probe.dport)
            for ttl in range(probe.first_ttl, probe.max_ttl + 1):
                owner.setdefault((four, ttl), probe)
        answers: dict[Packet, HopReply] = {}
        todo = list(owner)
        for round_number in range(self.rounds):
            if not todo or self.cancel.is_set():
                break
            if round_number:
                self.stats.retried += len(todo)
            self.stats.rounds += 1
            got = self._round(todo, owner)
            answers.update(got)
            lost = [p for p in todo if p not in got]
            if round_number == 0:
                self.stats.first_round_lost += len(lost)
            self.pacer.settle([(owner[p], p[1]) for p in lost], [(owner[p], p[1]) for p in got])
            todo = lost
        self.stats.lost += len(todo)
        self.stats.answered += len(answers)
        self.stats.traces += len(probes)
        self.stats.seconds += time.monotonic() - started
        out = []
        for probe in probes:
            four = (str(probe.src), probe.sport, str(probe.dst), probe.dport)
            hops = tuple(
                answers.get((four, ttl), HopReply(ttl, None))
                for ttl in range(probe.first_ttl, probe.max_ttl + 1)
            )
            out.append(Trace(probe, hops))
        return out

    # -- one round ---------------------------------------------------------------------------

    def _round(self, packets: list[Packet], owner: dict[Packet, Probe]) -> dict[Packet, HopReply]:
        by_tuple: dict[Tuple4, list[int]] = {}
        for four, ttl in packets:
            by_tuple.setdefault(four, []).append(ttl)
        tuples = list(by_tuple)
        got: dict[Packet, HopReply] = {}
        for start in range(0, len(tuples), self.max_open):
            chunk = {t: sorted(by_tuple[t]) for t in tuples[start : start + self.max_open]}
            got.update(self._chunk(chunk, owner))
        return got

    def _open(self, bound: tuple[str, int]) -> socket.socket | None:
        """An unconnected UDP socket bound to ``(source address, source port)`` (see the module
        docstring: never ``connect``, so the kernel hashes its packets by their 5-tuple)."""
        src, sport = bound
        family = family_of(src)
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setblocking(False)
            if self.privilege is Privilege.RECVERR:
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
                else:
                    sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
            sock.bind((src, sport))
        except OSError as exc:
            sock.close()
            self._error(exc)
            return None
        return sock

    def _error(self, exc: OSError) -> None:
        name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        self.stats.errors[name] = self.stats.errors.get(name, 0) + 1

    def _chunk(
        self, chunk: dict[Tuple4, list[int]], owner: dict[Packet, Probe]
    ) -> dict[Packet, HopReply]:
        raw = self.privilege is Privilege.RAW
        families = {family_of(four[0]) for four in chunk}
        icmps: dict[int, socket.AddressFamily] = {}  # raw socket fd -> family
        raw_socks: list[socket.socket] = []
        socks: dict[tuple[str, int], socket.socket] = {}
        got: dict[Packet, HopReply] = {}
        try:
            if raw:
                for family in sorted(families):
                    proto = (
                        socket.IPPROTO_ICMPV6 if family == socket.AF_INET6 else socket.IPPROTO_ICMP
                    )
                    icmp = socket.socket(family, socket.SOCK_RAW, proto)
                    icmp.setblocking(False)
                    raw_socks.append(icmp)
                    icmps[icmp.fileno()] = family
            for four in chunk:
                bound = (four[0], four[1])
                if bound not in socks:
                    sock = self._open(bound)
                    if sock is not None:
                        socks[bound] = sock
            by_fd = {s.fileno(): bound for bound, s in socks.items()}
            raw_by_fd = {s.fileno(): s for s in raw_socks}
            poller = select.poll()
            if raw:
                for fd in raw_by_fd:
                    poller.register(fd, select.POLLIN)
            else:
                for fd in by_fd:
                    poller.register(fd, select.POLLERR)
            # Raw: every TTL may fly at once, TTL-major so bursts spread over switches.
            # Error queue: one TTL per 4-tuple in flight (see the module docstring).
            queues = {
                four: deque(ttls) for four, ttls in chunk.items() if (four[0], four[1]) in socks
            }
            in_flight: dict[Packet, float] = {}
            busy: set[Tuple4] = set()
            deadline = time.monotonic() + self.timeout * (1 + sum(map(len, chunk.values())))
            while (queues or in_flight) and time.monotonic() < deadline:
                if self.cancel.is_set():
                    break
                wake = self._send_ready(queues, busy, in_flight, socks, owner, raw)
                now = time.monotonic()
                expiry = min(in_flight.values(), default=now + 0.05) + self.timeout
                wait = max(0.0, min(wake, expiry - now, 0.05))
                for fd, _ in poller.poll(wait * 1000):
                    if fd in raw_by_fd:
                        self._read_raw(raw_by_fd[fd], icmps[fd], in_flight, busy, got)
                    elif fd in by_fd:
                        self._read_errqueue(socks[by_fd[fd]], by_fd[fd], in_flight, busy, got)
                now = time.monotonic()
                for packet, sent in list(in_flight.items()):
                    if now - sent >= self.timeout:
                        del in_flight[packet]
                        busy.discard(packet[0])
        finally:
            for sock in socks.values():
                sock.close()
            for icmp in raw_socks:
                icmp.close()
        return got

    def _send_ready(
        self,
        queues: dict[Tuple4, deque[int]],
        busy: set[Tuple4],
        in_flight: dict[Packet, float],
        socks: dict[tuple[str, int], socket.socket],
        owner: dict[Packet, Probe],
        raw: bool,
    ) -> float:
        """Send every packet whose switches have tokens; the seconds until one more may go."""
        wake = 0.05
        progress = True
        while progress:
            progress = False
            for four in list(queues):
                if four in busy:
                    continue
                queue = queues[four]
                ttl = queue[0]
                probe = owner[(four, ttl)]
                wait = self.pacer.wait(probe, ttl)
                if wait > 0:
                    wake = min(wake, wait)
                    continue
                self.pacer.take(probe, ttl)
                queue.popleft()
                if not queue:
                    del queues[four]
                if self._send(socks[(four[0], four[1])], four, ttl):
                    in_flight[(four, ttl)] = time.monotonic()
                    if not raw:
                        busy.add(four)
                progress = True
        return wake

    def _send(self, sock: socket.socket, four: Tuple4, ttl: int) -> bool:
        if sock.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, ttl)
        else:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        self.stats.packets += 1
        for _ in range(3):  # a pending ICMP error of an earlier packet fails one send
            try:
                sock.sendto(_payload(ttl), (four[2], four[3]))
                return True
            except BlockingIOError:
                return False
            except OSError as exc:
                if exc.errno not in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                    self._error(exc)
                    return False
        return False

    def _read_raw(
        self,
        icmp: socket.socket,
        family: socket.AddressFamily,
        in_flight: dict[Packet, float],
        busy: set[Tuple4],
        got: dict[Packet, HopReply],
    ) -> None:
        for _ in range(4096):
            try:
                datagram, sender = icmp.recvfrom(2048)
            except BlockingIOError:
                return
            if family == socket.AF_INET6:
                parsed = parse_icmp6(datagram, str(sender[0]).partition("%")[0])
            else:
                parsed = parse_icmp(datagram)
            if parsed is None:
                continue
            answerer, icmp_type, icmp_code, packet = parsed
            if packet in in_flight:
                del in_flight[packet]
                busy.discard(packet[0])
                got[packet] = HopReply(
                    packet[1], ipaddress.ip_address(answerer), icmp_type, icmp_code
                )

    def _read_errqueue(
        self,
        sock: socket.socket,
        bound: tuple[str, int],
        in_flight: dict[Packet, float],
        busy: set[Tuple4],
        got: dict[Packet, HopReply],
    ) -> None:
        v6 = sock.family == socket.AF_INET6
        level, kind_wanted = (
            (socket.IPPROTO_IPV6, IPV6_RECVERR) if v6 else (socket.IPPROTO_IP, IP_RECVERR)
        )
        for _ in range(64):
            try:
                quoted, ancillary, _, to = sock.recvmsg(512, 512, socket.MSG_ERRQUEUE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._error(exc)
                return
            # The message's address is the quoted packet's destination: on an unconnected
            # socket it tells which 4-tuple of this (source, port) the answer is for.
            four: Tuple4 = (bound[0], bound[1], canonical(str(to[0])), int(to[1]))
            for cmsg_level, cmsg_kind, data in ancillary:
                if cmsg_level != level or cmsg_kind != kind_wanted:
                    continue
                found = read_offender(data, v6)
                if found is None:
                    continue
                offender, icmp_type, icmp_code = found
                # The quoted payload's length is the TTL when the router quoted it; with an
                # 8-byte quote it is empty, and the one TTL of this 4-tuple in flight is it.
                if quoted:
                    packet: Packet | None = (four, len(quoted))
                else:
                    packet = next((p for p in in_flight if p[0] == four), None)
                if packet is None or packet not in in_flight:
                    continue
                del in_flight[packet]
                busy.discard(four)
                got[packet] = HopReply(packet[1], offender, icmp_type, icmp_code)


__all__ = [
    "Packet",
    "Privilege",
    "ProbeStats",
    "SocketProber",
    "Tuple4",
    "choose_privilege",
    "icmp4_terms",
    "parse_icmp",
    "parse_icmp6",
    "raw_allowed",
]
