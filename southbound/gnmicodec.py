"""What the gNMI driver asks for and how the answers decode: the OpenConfig subtrees and leaves
it reads, the target's Capabilities, a ``Path`` as elements and a ``TypedValue`` as data.

Why apart from :mod:`southbound.gnmi`: the session is transport (a channel, deadlines, TLS,
streams); this is the vocabulary both its one-shot questions and its streams use, pure functions
of messages a test can build without a target. :mod:`southbound.gnmi` re-exports it.
"""

from __future__ import annotations

import json
from typing import Any

from southbound.observed import (
    Observed,
)
from southbound.oc_tree import PathElem

INTERFACES_PATH = "/interfaces"


LLDP_PATH = "/lldp"


SYSTEM_PATH = "/system/state"


QOS_PATH = "/qos/interfaces"


OPER_STATUS_PATH = "/interfaces/interface/state/oper-status"


COUNTERS_PATH = "/interfaces/interface/state/counters"


ECN_PATH = "/qos/interfaces/interface/output/queues/queue/state/ecn-marked-pkts"


LLDP_NEIGHBORS_PATH = "/lldp/interfaces/interface/neighbors"


EXPECTED_MODELS = ("openconfig-interfaces", "openconfig-lldp")


class Capabilities(Observed):
    """What a target said it supports."""

    encodings: tuple[str, ...]
    models: tuple[str, ...]
    version: str

    @property
    def has_qos(self) -> bool:
        return "openconfig-qos" in self.models


def elems_of(path: Any) -> list[PathElem]:
    """A gNMI ``Path`` message as ``[(name, keys), ...]``."""
    return [(str(e.name), dict(e.key)) for e in path.elem]


def decode_value(value: Any) -> Any:
    """A ``TypedValue`` as Python data; JSON that does not parse raises ``ValueError``."""
    kind = value.WhichOneof("value")
    if kind in ("json_ietf_val", "json_val"):
        raw = getattr(value, kind)
        try:
            return json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{kind} is not JSON: {exc}") from None
    if kind in ("string_val", "int_val", "uint_val", "bool_val", "double_val", "float_val"):
        return getattr(value, kind)
    if kind is None:
        raise ValueError("the update has no value")
    raise ValueError(f"encoding {kind} is not JSON_IETF")
