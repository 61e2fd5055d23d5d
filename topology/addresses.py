"""Address fields of the fabric model, parsed fast where the text is plain.

Why a module: a 16k-GPU fabric file holds some 33,000 addresses (a NIC port's IPv4 address and
GID, switches' management addresses), and pydantic parses each with Python's ``ipaddress``
(about 20 us a string): a third of validating the file. The annotated types here try a strict
pattern first and build the address from its integer value; anything else goes on to pydantic's
own validator, so what is accepted, its value and every error message are unchanged.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Annotated, Any

from pydantic import BeforeValidator

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")
"""Dotted-quad IPv4 in the form ``ipaddress`` accepts (decimal, no leading zeros)."""


def fast_ipv4(value: Any) -> Any:
    """A plain dotted-quad string as an address, built from its integer value.

    Why: ``ipaddress`` parses a string in pure Python (about 20 us), which was a third of
    validating a 16k-GPU fabric file. A string this pattern accepts is one ``ipaddress``
    accepts too, with the same value; anything else goes on to pydantic's own validator,
    so errors read exactly as before.
    """
    if type(value) is str and _DOTTED_QUAD.fullmatch(value):
        # The C library reads the four octets (for a dotted quad it reads them as ``ipaddress``
        # does), and the address gets its integer without the constructor's range checks,
        # which a dotted quad of this pattern cannot fail: 0.8 us instead of 3.5. The value
        # (``_ip``, the one field of an ``IPv4Address``) is what the constructor would store.
        address: Any = object.__new__(ipaddress.IPv4Address)
        address._ip = int.from_bytes(socket.inet_aton(value), "big")
        return address
    return value


IPv4 = Annotated[ipaddress.IPv4Address, BeforeValidator(fast_ipv4)]
"""An IPv4 address field (see :func:`fast_ipv4`)."""

_PLAIN_IPV6 = re.compile(r"[0-9A-Fa-f:]{2,39}")
"""Hex digits and colons only: no scope (``%eth0``), no embedded dotted quad."""


def fast_ipv6(value: Any) -> Any:
    """A plain IPv6 string (hex and colons) as an address, parsed by the C library.

    Why: as :func:`fast_ipv4`; every NIC port of a generated fabric has a GID. For strings of
    hex digits and colons, ``inet_pton`` and ``ipaddress`` accept the same ones with the same
    value (tested); anything else, or anything ``inet_pton`` refuses, goes on to pydantic's
    own validator, so errors read exactly as before.
    """
    if type(value) is str and _PLAIN_IPV6.fullmatch(value):
        try:
            packed = socket.inet_pton(socket.AF_INET6, value)
        except OSError:
            return value
        # As for IPv4: the integer constructor's fields (``_ip``, and no ``_scope_id``: the
        # pattern excludes one) without its range check, which 16 packed bytes cannot fail.
        address: Any = object.__new__(ipaddress.IPv6Address)
        address._ip = int.from_bytes(packed, "big")
        address._scope_id = None
        return address
    return value


IPv6 = Annotated[ipaddress.IPv6Address, BeforeValidator(fast_ipv6)]
"""An IPv6 address field (see :func:`fast_ipv6`)."""
