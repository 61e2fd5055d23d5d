"""Who is on the other end of a loopback connection: the operating-system user owning the
caller's socket.

Why: with open registration (no registration token; allowed on loopback only) the controller
still has to tell one caller from another, or a replayed RegisterJob hands one job's token to
anyone on the host (issue 33). Every process on the host shares the address 127.0.0.1, and a
retry may come on a new connection (a new port), so neither tells callers apart; the kernel's
socket table does: the caller's socket (local address = the peer address gRPC reports) belongs
to the uid that created it. Users are the boundary the host itself enforces (a process of the
same user could read the other's memory anyway), so "the same credential" on open loopback is
"the same uid".

Linux only (``/proc/net/tcp``, ``/proc/net/tcp6``, read in the controller's network namespace,
which a loopback caller shares); anything else has no identity here (``None``).
"""

from __future__ import annotations

import ipaddress
import struct


def _address(hex_address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``0100007F:D431`` -> (127.0.0.1, 54321): the kernel prints each 32-bit word of the
    address in host byte order, the port in network order."""
    host, _, port = hex_address.partition(":")
    words = [int(host[k : k + 8], 16) for k in range(0, len(host), 8)]
    raw = b"".join(struct.pack("=I", w) for w in words)
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(port, 16)


def _peer(peer: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int] | None:
    """gRPC's ``ipv4:127.0.0.1:5000`` / ``ipv6:[::1]:5000`` as (address, port)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = rest.rpartition(":")
    try:
        address = ipaddress.ip_address(host.strip("[]"))
        return address, int(port)
    except ValueError:
        return None


def loopback_uid(peer: str) -> int | None:
    """The uid owning the caller's socket, for a loopback peer; ``None`` if unknown."""
    found = _peer(peer)
    if found is None or not found[0].is_loopback:
        return None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as lines:
                next(lines, None)  # the header
                for line in lines:
                    fields = line.split()
                    if len(fields) < 8:
                        continue
                    try:
                        if _address(fields[1]) == found:
                            return int(fields[7])
                    except ValueError:
                        continue
        except OSError:
            continue
    return None


def identity(peer: str, cert_names: list[str]) -> str:
    """The caller's identity when it shows no credential: its client certificate's name
    (mTLS), else the uid of a loopback caller's socket; "" when neither is known."""
    if cert_names:
        return "cert:" + sorted(cert_names)[0]
    uid = loopback_uid(peer)
    return "" if uid is None else f"uid:{uid}"
