"""One emulated switch's gNMI service: Capabilities, Get and Subscribe (STREAM, ONCE, POLL)
answered from the fabric emulator's state, with a switch's credential checks and the
quirks of a flavour.

Why apart from :mod:`c4p.testing.gnmi_target`: that module runs a fabric of these (one
``grpc.server`` per switch on a loopback port, kill and revive, the targets file); this is what
one server answers, the protocol the gNMI driver is tested against.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from c4p.testing.dataplane import FabricEmulator
from c4p.testing.flavours import Flavour
from c4p.testing.oc_payloads import ECN_QUEUE, MODELS, SUBTREES, get_answer, switch_tree

GATE_WAIT_S = 30.0
"""Longest an LLDP subscription waits for its gate (a test that never opens it fails)."""


COUNTER_LEAVES = (
    "in-octets",
    "out-octets",
    "in-errors",
    "out-errors",
    "in-discards",
    "out-discards",
)


def _elem(name: str, keys: dict[str, str] | None = None) -> Any:
    return gnmi_pb2.PathElem(name=name, key=keys or {})


def _path(*elems: Any) -> Any:
    return gnmi_pb2.Path(elem=list(elems))


def _json(value: Any) -> Any:
    return gnmi_pb2.TypedValue(json_ietf_val=json.dumps(value).encode())


def _names(path: Any) -> list[str]:
    return [e.name.rsplit(":", 1)[-1] for e in path.elem]


_ENTRY_KEYS = {
    "interface": ("name", "interface-id"),
    "neighbor": ("id",),
    "queue": ("name",),
    "subinterface": ("index",),
}


def _split(node: Any) -> list[tuple[list[Any], Any]]:
    """A subtree cut as devices cut it: one (relative path, value) per list entry, the
    container's own leaves in one more. Lists below an entry stay inside it."""
    out: list[tuple[list[Any], Any]] = []
    leaves: dict[str, Any] = {}
    for member, value in node.items():
        name = member.rsplit(":", 1)[-1]
        if isinstance(value, list) and name in _ENTRY_KEYS:
            for entry in value:
                key = next(k for k in _ENTRY_KEYS[name] if k in entry)
                out.append(([_elem(member, {key: str(entry[key])})], entry))
        elif isinstance(value, dict):
            out.extend(([_elem(member), *e], v) for e, v in _split(value))
        else:
            leaves[member] = value
    if leaves:
        out.append(([], leaves))
    return out


class _Sub:
    """One subscription of a SubscribeRequest, as the target understood it."""

    def __init__(self, kind: str, interval_s: float, on_change: bool, heartbeat_s: float) -> None:
        self.kind = kind
        self.interval_s = interval_s
        self.on_change = on_change
        self.heartbeat_s = heartbeat_s
        self.due = 0.0


class EmulatedTarget(gnmi_pb2_grpc.gNMIServicer):  # type: ignore[misc]
    """The gNMI service of one emulated switch."""

    def __init__(
        self,
        emu: FabricEmulator,
        switch: str,
        *,
        credentials: tuple[str, str] | None = None,
        as_numbers: bool = False,
        lldp_stream: bool = True,
        lldp_gate: threading.Event | None = None,
    ) -> None:
        self.emu = emu
        self.switch = switch
        self.credentials = credentials
        self.as_numbers = as_numbers
        self.lldp_stream = lldp_stream
        self.lldp_gate = lldp_gate
        """Set: an LLDP ON_CHANGE subscription waits for it before reading its initial state
        (a slow target: what changes meanwhile shows only in that state)."""

    # -- helpers ----------------------------------------------------------------------------

    def _admit(self, context: Any) -> None:
        if self.credentials is None:
            return
        meta = dict(context.invocation_metadata())
        if (meta.get("username"), meta.get("password")) != self.credentials:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad username or password")

    def _slow(self, context: Any) -> None:
        end = time.monotonic() + self.emu.delay(self.switch)
        while context.is_active() and (left := end - time.monotonic()) > 0:
            time.sleep(min(0.05, left))

    def _tree(self, *parts: str) -> dict[str, Any]:
        return switch_tree(self.emu, self.switch, parts=parts, as_numbers=self.as_numbers)

    @property
    def flavour(self) -> Flavour:
        return self.emu.flavour_of(self.switch)

    def _check_request(self, context: Any, prefix: Any, paths: Iterable[Any]) -> None:
        """The request rules of this switch's OS (see :mod:`c4p.testing.flavours`)."""
        flavour = self.flavour
        if flavour.prefix_target and (prefix is None or prefix.target != flavour.prefix_target):
            # sonic-gnmi's answer to a request without a prefix target.
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "No target specified in prefix")
        if flavour.origin:
            for path in paths:
                origin = path.origin or (prefix.origin if prefix is not None else "")
                if origin != flavour.origin:
                    context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"path origin {origin or '(none)'!r}: OpenConfig paths need origin "
                        f"{flavour.origin!r}",
                    )

    def _check_encoding(self, context: Any, encoding: int) -> None:
        name = gnmi_pb2.Encoding.Name(encoding)
        if name not in self.flavour.encodings or name not in ("JSON_IETF", "JSON"):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"encoding {name} is not supported")

    # -- unary RPCs -------------------------------------------------------------------------

    def Capabilities(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC name)
        self._admit(context)
        self._slow(context)
        return gnmi_pb2.CapabilityResponse(
            supported_models=[
                gnmi_pb2.ModelData(name=n, organization="OpenConfig working group", version=v)
                for n, v in MODELS
            ],
            supported_encodings=[gnmi_pb2.Encoding.Value(e) for e in self.flavour.encodings],
            gNMI_version="0.8.0",
        )

    def Get(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._admit(context)
        self._slow(context)
        self._check_request(context, request.prefix, request.path)
        self._check_encoding(context, request.encoding)
        flavour = self.flavour
        tree = self._tree("interfaces", "lldp", "system", "qos")
        pairs: list[tuple[list[Any], Any]] = []
        for path in request.path:
            text = "/" + "/".join(_names(path))
            wanted = ["/interfaces", "/lldp", "/system/state", "/qos/interfaces"]
            for sub in wanted if text == "/" else [text]:
                if sub not in SUBTREES or (sub == "/system/state" and not flavour.has_system):
                    context.abort(grpc.StatusCode.NOT_FOUND, f"path {text} is not served")
                elems = [_elem(n) for n in sub.strip("/").split("/")]
                raw = self.emu.raw_answer(self.switch, sub)
                if raw is not None:
                    pairs.append((elems, gnmi_pb2.TypedValue(json_ietf_val=raw)))
                    continue
                answer = get_answer(tree, sub)
                if flavour.split != "one":
                    pairs.extend((elems + e, _json(v)) for e, v in _split(answer))
                elif flavour.wrapped:
                    last = sub.rsplit("/", 1)[1]
                    inner = {k.rsplit(":", 1)[-1]: v for k, v in answer.items()}
                    pairs.append((elems, _json({f"{SUBTREES[sub][1]}:{last}": inner})))
                else:
                    pairs.append((elems, _json(answer)))
        now = time.time_ns()
        prefix = gnmi_pb2.Path(target=request.prefix.target) if request.prefix.target else None
        updates = [gnmi_pb2.Update(path=_path(*e), val=v) for e, v in pairs]
        if flavour.split == "notifications":
            notes = [
                gnmi_pb2.Notification(timestamp=now, prefix=prefix, update=[u]) for u in updates
            ]
        else:
            notes = [gnmi_pb2.Notification(timestamp=now, prefix=prefix, update=updates)]
        return gnmi_pb2.GetResponse(notification=notes)

    # -- Subscribe --------------------------------------------------------------------------

    def _subs(self, request: Any, context: Any) -> list[_Sub]:
        subs = []
        for s in request.subscription:
            names = _names(s.path)
            mode = gnmi_pb2.SubscriptionMode.Name(s.mode)
            interval = max(0.05, s.sample_interval / 1e9) if s.sample_interval else 1.0
            heartbeat = s.heartbeat_interval / 1e9 if s.heartbeat_interval else 0.0
            if names[:2] == ["interfaces", "interface"] and names[2:] == ["state", "oper-status"]:
                subs.append(_Sub("oper", interval, mode != "SAMPLE", heartbeat))
            elif names[:2] == ["interfaces", "interface"] and names[2:4] == ["state", "counters"]:
                subs.append(_Sub("counters", interval, False, 0.0))
            elif names[:1] == ["qos"] and names[-1:] == ["ecn-marked-pkts"]:
                subs.append(_Sub("ecn", interval, False, 0.0))
            elif names[:2] == ["lldp", "interfaces"] and mode == "ON_CHANGE" and self.lldp_stream:
                subs.append(_Sub("lldp", interval, True, 0.0))
            elif names == ["interfaces"]:
                subs.append(_Sub("oper", interval, mode != "SAMPLE", heartbeat))
                subs.append(_Sub("counters", interval, False, 0.0))
            else:
                context.abort(grpc.StatusCode.NOT_FOUND, f"cannot subscribe to /{'/'.join(names)}")
        return subs

    def _notes(
        self, kind: str, tree: dict[str, Any], only: set[str] | None = None
    ) -> Iterator[Any]:
        """Notifications of one kind: oper-status one per interface (prefix = the interface),
        counters and ECN marks batched into one notification (prefix = the list's parent),
        the two shapes devices use."""
        now = time.time_ns()
        if kind == "ecn":
            updates = []
            for entry in tree["qos"]["interfaces"]["interface"]:
                queue = entry["output"]["queues"]["queue"][0]
                path = _path(
                    _elem("interface", {"interface-id": entry["interface-id"]}),
                    _elem("output"),
                    _elem("queues"),
                    _elem("queue", {"name": ECN_QUEUE}),
                    _elem("state"),
                    _elem("ecn-marked-pkts"),
                )
                updates.append(
                    gnmi_pb2.Update(path=path, val=_json(queue["state"]["ecn-marked-pkts"]))
                )
            prefix = _path(_elem("qos"), _elem("interfaces"))
            yield gnmi_pb2.Notification(timestamp=now, prefix=prefix, update=updates)
            return
        batch = []
        for entry in tree["interfaces"]["interface"]:
            name = str(entry.get("name"))
            if only is not None and name not in only:
                continue
            state = entry.get("state", {})
            if kind == "oper":
                prefix = _path(_elem("interfaces"), _elem("interface", {"name": name}))
                leaf = _path(_elem("state"), _elem("oper-status"))
                update = gnmi_pb2.Update(path=leaf, val=_json(state.get("oper-status")))
                yield gnmi_pb2.Notification(timestamp=now, prefix=prefix, update=[update])
                continue
            counters = state.get("counters", {})
            for leaf in COUNTER_LEAVES:
                if leaf in counters:
                    path = _path(
                        _elem("interface", {"name": name}),
                        _elem("state"),
                        _elem("counters"),
                        _elem(leaf),
                    )
                    batch.append(gnmi_pb2.Update(path=path, val=_json(counters[leaf])))
        if batch:
            prefix = _path(_elem("interfaces"))
            yield gnmi_pb2.Notification(timestamp=now, prefix=prefix, update=batch)

    def _all(self, subs: list[_Sub], tree: dict[str, Any]) -> Iterator[Any]:
        for kind in dict.fromkeys(s.kind for s in subs):
            if kind == "lldp":
                yield gnmi_pb2.SubscribeResponse(update=self._lldp_note(self._lldp_tables(), {}))
                continue
            for note in self._notes(kind, tree):
                yield gnmi_pb2.SubscribeResponse(update=note)

    def _lldp_tables(self) -> dict[str, Any]:
        """Each interface's LLDP ``neighbors`` container, as the Get answer has it."""
        entries = self._tree("lldp")["lldp"]["interfaces"]["interface"]
        return {str(e["name"]): e.get("neighbors", {}) for e in entries}

    def _lldp_note(self, tables: dict[str, Any], before: dict[str, Any]) -> Any:
        """One notification: the neighbour tables that changed, and deletes for those gone."""
        updates = [
            gnmi_pb2.Update(
                path=_path(_elem("interface", {"name": name}), _elem("neighbors")),
                val=_json(table),
            )
            for name, table in sorted(tables.items())
            if before.get(name) != table
        ]
        gone = [
            _path(_elem("interface", {"name": name}), _elem("neighbors"))
            for name in sorted(set(before) - set(tables))
        ]
        prefix = _path(_elem("lldp"), _elem("interfaces"))
        return gnmi_pb2.Notification(
            timestamp=time.time_ns(), prefix=prefix, update=updates, delete=gone
        )

    def Subscribe(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:  # noqa: N802
        self._admit(context)
        first = next(request_iterator, None)
        if first is None:
            return
        if not first.HasField("subscribe"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first request must be subscribe")
        request = first.subscribe
        self._check_request(context, request.prefix, [s.path for s in request.subscription])
        self._check_encoding(context, request.encoding)
        subs = self._subs(request, context)
        mode = gnmi_pb2.SubscriptionList.Mode.Name(request.mode)
        if self.lldp_gate is not None and any(s.kind == "lldp" for s in subs):
            deadline = time.monotonic() + GATE_WAIT_S
            while not self.lldp_gate.wait(0.05) and context.is_active():
                if time.monotonic() > deadline:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "the LLDP gate was never opened")
        # The version is read before the state it stands for: a change in between is seen.
        version = self.emu.version(self.switch)
        tree = self._tree("interfaces", "qos")
        yield from self._all(subs, tree)
        yield gnmi_pb2.SubscribeResponse(sync_response=True)
        if mode == "ONCE":
            return
        if mode == "POLL":
            for req in request_iterator:
                if req.HasField("poll"):
                    yield from self._all(subs, self._tree("interfaces", "qos"))
                    yield gnmi_pb2.SubscribeResponse(sync_response=True)
            return
        yield from self._stream(subs, context, tree, version)

    def _stream(
        self, subs: list[_Sub], context: Any, tree: dict[str, Any], version: int
    ) -> Iterator[Any]:
        """After the initial sync: changes of ``tree`` (at ``version``), and samples."""
        context.add_callback(self.emu.poke)
        # Switches do not sample in step: each starts at its own phase of the interval.
        phase = (zlib.crc32(self.switch.encode()) % 1000) / 1000
        start = time.monotonic()
        for s in subs:
            s.due = start + (s.heartbeat_s if s.on_change else s.interval_s * (0.5 + phase))
        sent = {e["name"]: e["state"].get("oper-status") for e in tree["interfaces"]["interface"]}
        on_change = any(s.on_change and s.kind == "oper" for s in subs)
        lldp = any(s.kind == "lldp" for s in subs)
        sent_lldp = self._lldp_tables() if lldp else {}
        while context.is_active():
            due = [s.due for s in subs if not s.on_change or s.heartbeat_s]
            wait = min([d - time.monotonic() for d in due] + [1.0])
            seen = self.emu.wait_for_change(self.switch, version, max(0.0, wait))
            if not context.is_active():
                break
            changed_state, version = seen != version, seen
            if changed_state and on_change:
                tree = self._tree("interfaces")
                now_status = {
                    e["name"]: e["state"].get("oper-status")
                    for e in tree["interfaces"]["interface"]
                }
                changed = {n for n, v in now_status.items() if sent.get(n) != v}
                sent = now_status
                for note in self._notes("oper", tree, changed):
                    yield gnmi_pb2.SubscribeResponse(update=note)
            if changed_state and lldp:
                tables = self._lldp_tables()
                if tables != sent_lldp:
                    yield gnmi_pb2.SubscribeResponse(update=self._lldp_note(tables, sent_lldp))
                    sent_lldp = tables
            now = time.monotonic()
            ready = [s for s in subs if (not s.on_change or s.heartbeat_s) and s.due <= now]
            if ready:
                tree = self._tree("interfaces", "qos")
                for s in ready:
                    s.due = now + (s.heartbeat_s if s.on_change else s.interval_s)
                    for note in self._notes(s.kind, tree):
                        yield gnmi_pb2.SubscribeResponse(update=note)
