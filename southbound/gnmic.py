"""gnmic's target file, read as gnmic reads it, so one file serves both tools.

Why: an operator who already collects telemetry with gnmic has a file of targets in gnmic's
shape, and both ``c4p fabric discover`` and ``c4p serve`` must take it as it is (this is
their one reader: :class:`southbound.targets.TargetsFile` calls :func:`from_gnmic`). What
gnmic accepts is in its own documentation (github.com/openconfig/gnmic, ``docs/user_guide/
targets/targets.md``, ``docs/global_flags.md``, ``docs/user_guide/subscriptions.md``):

* ``targets`` maps a key to a target's options; the key is its name and, without ``address``,
  its address (``host`` or ``host:port``); ``name`` overrides the name.
* Top-level keys are gnmic's global flags: defaults of every target (``username``,
  ``insecure``, ``tls-ca``...). An address without a port gets the top-level ``port``, else
  gnmic's default 57400 (not IANA's 9339, which c4p's own file defaults to).
* ``subscriptions.<name>.target`` is the request prefix's target (SONiC needs ``OC-YANG``),
  ``set-target: true`` the target's name; a target's ``subscriptions`` list picks which apply
  (all when absent). c4p sends one prefix target per switch: two different ones are refused.
* gnmic's options c4p does not use (``token``, ``retry-timer``, ``buffer-size``,
  ``tls-min-version``, ``metadata``, gRPC tuning, outputs...) are accepted and named in one
  warning line; a key gnmic does not document is refused (a typo must not pass silently).

c4p is stricter than gnmic in one place: it never trusts a certificate it cannot verify, so
``skip-verify`` without ``tls-ca`` is refused with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("c4p.southbound.gnmic")

GNMIC_DEFAULT_PORT = 57400

USED_KEYS = frozenset(
    {
        "address",
        "name",
        "username",
        "password",
        "insecure",
        "skip-verify",
        "tls-ca",
        "tls-cert",
        "tls-key",
        "tls-server-name",
        "encoding",
        "timeout",
        "subscriptions",
    }
)
"""Target options c4p reads (``subscriptions`` for the prefix target only)."""

UNUSED_TARGET_KEYS = frozenset(
    {
        "token",
        "auth-scheme",
        "tls-max-version",
        "tls-min-version",
        "tls-version",
        "log-tls-secret",
        "outputs",
        "buffer-size",
        "retry-timer",
        "tags",
        "event-tags",
        "proto-files",
        "proto-dirs",
        "gzip",
        "proxy",
        "cipher-suites",
        "tcp-keepalive",
        "grpc-keepalive",
        "grpc-read-buffer-size",
        "grpc-write-buffer-size",
        "grpc-conn-window-size",
        "grpc-window-size",
        "grpc-static-conn-window-size",
        "grpc-static-stream-window-size",
        "metadata",
        "tunnel-target-type",
    }
)
"""Target options gnmic documents that c4p has no use for: accepted, named in a warning."""

UNUSED_GLOBAL_KEYS = frozenset(
    {
        "retry",
        "cluster-name",
        "config",
        "debug",
        "dir",
        "exclude",
        "file",
        "format",
        "instance-name",
        "log",
        "log-file",
        "log-format",
        "log-max-size",
        "log-max-backups",
        "log-compress",
        "no-prefix",
        "proto-dir",
        "proto-file",
        "proxy-from-env",
        "targets-file",
        "calculate-latency",
        "max-msg-size",
        "print-request",
        "target-buffer-size",
        "prometheus-address",
        "subscribe-name",
    }
)
"""gnmic's global flags (top level) that are not target defaults and c4p does not use."""

SECTIONS = frozenset(
    {
        "outputs",
        "inputs",
        "processors",
        "actions",
        "api",
        "api-server",
        "gnmi-server",
        "tunnel-server",
        "loader",
        "clustering",
        "locker",
    }
)
"""gnmic's sections that are not about reaching a target: ignored without a word."""


def is_gnmic(data: Any) -> bool:
    """gnmic's shape: ``targets`` is a mapping (c4p's is a list)."""
    return isinstance(data, Mapping) and isinstance(data.get("targets"), Mapping)


def _port(value: Any, where: str) -> int:
    text = str(value)
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{where}: {value!r} is not a TCP port")
    return int(text)


def _split_address(text: str, where: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 address (gnmic's rules)."""
    if "://" in text or text.startswith("unix:"):
        raise ValueError(f"{where}: {text!r}: c4p reaches a target over TCP (host or host:port)")
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:  # a name, an IPv4 address, or an IPv6 address without a port
        host, port = text, ""
    if not host:
        raise ValueError(f"{where}: {text!r} has no host")
    if not port:
        return host, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{where}: port {port!r} is not a TCP port")
    return host, int(port)


def _seconds(value: Any, where: str) -> float:
    text = str(value).strip()
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * scale
    raise ValueError(f"{where}: {value!r} is not a duration like 10s")


def _prefix_target(
    name: str, entry: Mapping[str, Any], subscriptions: Mapping[str, Any], where: str
) -> str | None:
    """The prefix target the target's subscriptions ask for (one at most)."""
    chosen = entry.get("subscriptions")
    if not chosen:  # gnmic: absent or empty, every subscription
        chosen = list(subscriptions)
    if isinstance(chosen, str) or not isinstance(chosen, list):
        raise ValueError(f"{where}.subscriptions: expected a list of subscription names")
    found: dict[str, str] = {}
    for sub in chosen:
        if str(sub) not in subscriptions:
            raise ValueError(f"{where}.subscriptions: no subscription {sub!r} in subscriptions")
        options = subscriptions[str(sub)] or {}
        if not isinstance(options, Mapping):
            raise ValueError(f"subscriptions.{sub}: expected a mapping")
        if options.get("target"):
            found[str(options["target"])] = str(sub)
        elif options.get("set-target"):
            found[name] = str(sub)
    if len(found) > 1:
        said = ", ".join(f"{t!r} ({s})" for t, s in sorted(found.items()))
        raise ValueError(f"{where}: its subscriptions give prefix targets {said}; c4p sends one")
    return next(iter(found), None)


def _target(
    key: str,
    entry: Mapping[str, Any],
    default_port: int,
    subscriptions: Mapping[str, Any],
    where: str,
    unused: set[str],
) -> dict[str, Any]:
    unknown = sorted(set(entry) - USED_KEYS - UNUSED_TARGET_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown gnmic key(s) {', '.join(unknown)}")
    unused.update(set(entry) & UNUSED_TARGET_KEYS)
    addresses = [a.strip() for a in str(entry.get("address") or key).split(",") if a.strip()]
    if not addresses:
        raise ValueError(f"{where}.address: empty")
    if len(addresses) > 1:
        unused.add(f"{where}.address after the first ({', '.join(addresses[1:])})")
    host, port = _split_address(addresses[0], f"{where}.address")
    gnmi: dict[str, Any] = {"port": default_port if port is None else port}
    ca, cert, key_file = entry.get("tls-ca"), entry.get("tls-cert"), entry.get("tls-key")
    if entry.get("insecure"):
        if ca or cert or key_file:
            raise ValueError(f"{where}: insecure: true takes no tls-ca, tls-cert or tls-key")
        gnmi["tls"] = {"mode": "insecure"}
    else:
        if not ca:
            why = (
                "skip-verify: c4p does not skip certificate verification"
                if entry.get("skip-verify")
                else "TLS without tls-ca: c4p does not trust a certificate without its CA"
            )
            raise ValueError(f"{where}: {why}; give tls-ca, or insecure: true for plaintext")
        tls: dict[str, Any] = {"mode": "mtls" if cert or key_file else "tls", "ca_file": ca}
        if cert or key_file:
            tls.update(cert_file=cert, key_file=key_file)
        if entry.get("tls-server-name"):
            tls["server_name"] = entry["tls-server-name"]
        gnmi["tls"] = tls
    if entry.get("username") is not None or entry.get("password") is not None:
        gnmi["credentials"] = {
            "username": str(entry.get("username") or ""),
            "password": str(entry.get("password") or ""),
        }
    if entry.get("encoding") is not None:
        encoding = str(entry["encoding"]).lower().replace("-", "_")
        if encoding not in ("json", "json_ietf"):
            raise ValueError(f"{where}.encoding: {entry['encoding']!r}: c4p reads json, json_ietf")
        gnmi["encoding"] = encoding
    name = str(entry.get("name") or (key if entry.get("address") else host))
    prefix = _prefix_target(name, entry, subscriptions, where)
    if prefix is not None:
        gnmi["prefix_target"] = prefix
    out: dict[str, Any] = {"name": name, "address": host, "driver": "gnmi", "gnmi": gnmi}
    if entry.get("timeout") is not None:
        out["timeouts"] = {"rpc_s": _seconds(entry["timeout"], f"{where}.timeout")}
    return out


def from_gnmic(data: Mapping[str, Any]) -> dict[str, Any]:
    """A gnmic target file as c4p's targets-file data (top-level keys are defaults); one
    warning line names what c4p accepted but does not use."""
    known = {"targets", "port", "address", "subscriptions"} | USED_KEYS | UNUSED_TARGET_KEYS
    unknown = sorted(set(data) - known - UNUSED_GLOBAL_KEYS - SECTIONS)
    if unknown:
        raise ValueError(f"unknown gnmic key(s) {', '.join(unknown)}")
    unused = set(data) & (UNUSED_GLOBAL_KEYS | UNUSED_TARGET_KEYS)
    if data.get("address") is not None:
        unused.add("address (c4p reads targets)")
    default_port = (
        _port(data["port"], "port") if data.get("port") is not None else GNMIC_DEFAULT_PORT
    )
    subscriptions = data.get("subscriptions") or {}
    if not isinstance(subscriptions, Mapping):
        raise ValueError("subscriptions: expected a mapping of subscription names")
    defaults = {
        k: v
        for k, v in data.items()
        if k in USED_KEYS | UNUSED_TARGET_KEYS and k not in ("address", "name", "subscriptions")
    }
    targets = []
    for key, entry in data["targets"].items():
        where = f"targets.{key}"
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: expected a mapping of gnmic target options")
        own = {**defaults, **entry}
        targets.append(_target(str(key), own, default_port, subscriptions, where, unused))
    if unused:
        log.warning("gnmic target file: c4p does not use %s (ignored)", ", ".join(sorted(unused)))
    return {"targets": targets}
