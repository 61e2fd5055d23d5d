"""gnmic's target file, read as a c4p targets file, so one file serves both tools.

Why: an operator who already collects telemetry with gnmic has a file of targets in gnmic's
shape (https://gnmic.openconfig.net/user_guide/targets/targets/): ``targets`` is a mapping from
a name (or ``host:port``) to ``address``, ``username``, ``password``, ``insecure``,
``skip-verify``, ``tls-ca``, ``tls-cert``, ``tls-key``, ``tls-server-name``, ``encoding``...,
and the same keys at the top level are defaults for every target. This module turns that shape
into c4p's (``defaults`` + a list of targets) before validation, so every error still names the
field. gnmic's sections that are not about reaching a target (``subscriptions``, ``outputs``,
``processors``...) are ignored; anything else unknown is refused.

c4p is stricter than gnmic in one place: it never trusts a certificate it cannot verify, so
``skip-verify`` without ``tls-ca`` is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TARGET_KEYS = frozenset(
    {
        "address",
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
    }
)
IGNORED_KEYS = frozenset(
    {
        "name",
        "subscriptions",
        "outputs",
        "inputs",
        "processors",
        "actions",
        "tags",
        "event-tags",
        "gzip",
        "proxy",
        "tunnel-target-type",
        "api",
        "api-server",
        "gnmi-server",
        "loader",
        "clustering",
        "log",
        "log-file",
        "debug",
        "format",
        "max-msg-size",
        "retry",
        "print-request",
        "no-prefix",
        "target-buffer-size",
        "tunnel-server",
        "prometheus-address",
    }
)


def is_gnmic(data: Any) -> bool:
    """gnmic's shape: ``targets`` is a mapping (c4p's is a list)."""
    return isinstance(data, Mapping) and isinstance(data.get("targets"), Mapping)


def _split_address(text: str, where: str) -> tuple[str, int | None]:
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
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


def _target(name: str, entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(entry) - TARGET_KEYS - IGNORED_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown gnmic key(s) {', '.join(unknown)}")
    host, port = _split_address(str(entry.get("address") or name), f"{where}.address")
    gnmi: dict[str, Any] = {}
    if port is not None:
        gnmi["port"] = port
    ca, cert, key = entry.get("tls-ca"), entry.get("tls-cert"), entry.get("tls-key")
    if entry.get("insecure"):
        if ca or cert or key:
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
        tls: dict[str, Any] = {"mode": "mtls" if cert or key else "tls", "ca_file": ca}
        if cert or key:
            tls.update(cert_file=cert, key_file=key)
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
    out: dict[str, Any] = {"name": name if entry.get("address") else host}
    out.update(address=host, driver="gnmi", gnmi=gnmi)
    if entry.get("timeout") is not None:
        out["timeouts"] = {"rpc_s": _seconds(entry["timeout"], f"{where}.timeout")}
    return out


def from_gnmic(data: Mapping[str, Any]) -> dict[str, Any]:
    """A gnmic target file as c4p's targets-file data (top-level keys are defaults)."""
    unknown = sorted(set(data) - {"targets"} - TARGET_KEYS - IGNORED_KEYS)
    if unknown:
        raise ValueError(f"unknown gnmic key(s) {', '.join(unknown)}")
    defaults = {k: v for k, v in data.items() if k in TARGET_KEYS and k != "address"}
    targets = []
    for name, entry in data["targets"].items():
        where = f"targets.{name}"
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: expected a mapping of gnmic target options")
        targets.append(_target(str(name), {**defaults, **entry}, where))
    return {"targets": targets}
