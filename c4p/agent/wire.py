"""The local wire format between ``libc4p`` (in a rank) and the host agent, version 1.

Why a hand-made binary format and not protobuf: the library lives inside a training process
that already carries its own protobuf (often another version), so it must parse what the agent
sends with nothing but libc. Fixed-width big-endian integers and length-prefixed strings are
parsed in a few dozen lines of C and are easy to bound: every length is checked against what is
left of the frame before it is used. ``docs/api.md`` ("The local binding API") is the reference
for the layout; this module and ``libc4p/src/wire.c`` implement it.

A frame is a 12-byte header, then ``length`` bytes of payload::

    magic "C4PL" | version u16 | type u16 | length u32

The header and the ERROR message keep their layout in every version, so a library and an agent
of different versions can always tell each other *that* they differ.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

MAGIC = b"C4PL"
VERSION = 1
HEADER = struct.Struct(">4sHHI")
MAX_PAYLOAD = 4 << 20  # 4 MiB: ~60,000 bindings; a host of 8 ranks needs far less
MAX_NAME = 128  # job and communicator ids (topology's Name)
MAX_TOKEN = 512
MAX_TEXT = 1024
MAX_REPORT = 256 << 10  # a REPORT frame's payload (libc4p's C4P_REPORT_MAX_PAYLOAD)
STEP_UNKNOWN = (1 << 64) - 1  # a transfer whose collective call the library cannot tell


class MsgType(IntEnum):
    HELLO = 1  # library -> agent: job id, token
    WELCOME = 2  # agent -> library: the session is open, with the job's bindings on this host
    BINDINGS = 3  # agent -> library: a full set or a delta
    ERROR = 4  # either way: a code and a message; the sender closes after it
    REPORT = 5  # library -> agent, after WELCOME: measured transfers and collective calls


class Code(IntEnum):
    """Result codes shared with ``c4p.h`` (``C4P_E*``); the numbers are part of the ABI."""

    OK = 0
    NOT_YET = 1
    INVALID = 2
    NO_MEMORY = 3
    CONNECT = 4
    AUTH = 5
    PERMISSION = 6
    PROTOCOL = 7
    VERSION = 8
    UNAVAILABLE = 9
    MISMATCH = 10
    FILE = 11
    NOT_SUPPORTED = 12
    TIMEOUT = 13
    PEER = 14
    INTERNAL = 15
    APPLY = 16
    DROPPED = 17


class Kind(IntEnum):
    FULL = 1
    DELTA = 2


class WireError(ValueError):
    """A frame that breaks the format; ``code`` is what the agent answers with."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code


INBOUND_LIMITS: dict[int, int] = {
    MsgType.HELLO: 2 + MAX_NAME + 2 + MAX_TOKEN,
    MsgType.ERROR: 4 + 2 + MAX_TEXT,
    MsgType.REPORT: MAX_REPORT,
}
"""The largest payload of each type a library may send to the agent.

Why per type and checked on the header: the agent must know how much it will buffer before it
reads a byte of payload. ``MAX_PAYLOAD`` (4 MiB) is for the agent's full sets; a HELLO is at
most 644 bytes, so 200 connections declaring 4 MiB each would otherwise hold 800 MB."""


def inbound_limit(kind: int) -> int:
    """The payload ceiling of a frame of type ``kind`` from a library; ``WireError`` for a type
    only the agent sends (or no type at all), so its payload is never read."""
    try:
        return INBOUND_LIMITS[kind]
    except KeyError:
        name = MsgType(kind).name if kind in MsgType._value2member_map_ else str(kind)
        raise WireError(Code.PROTOCOL, f"type {name} is not a message a library sends") from None


@dataclass(frozen=True, order=True)
class QpKey:
    """How a rank names a QP: what NCCL's ``net_ib`` knows at connect time."""

    communicator: str
    src_rank: int
    dst_rank: int
    channel: int
    qp: int


@dataclass(frozen=True)
class LocalBinding:
    key: QpKey
    udp_sport: int
    flow_label: int
    epoch: int  # the plan epoch that set it


@dataclass(frozen=True)
class Hello:
    job_id: str
    token: str


@dataclass(frozen=True)
class BindingSet:
    """Body of WELCOME (always ``FULL``) and BINDINGS."""

    epoch: int
    kind: Kind
    bindings: tuple[LocalBinding, ...] = ()
    removed: tuple[QpKey, ...] = ()


@dataclass(frozen=True)
class Welcome:
    host: str
    known: bool  # False: the agent holds nothing for the job yet (the library keeps its ports)
    body: BindingSet = field(default_factory=lambda: BindingSet(0, Kind.FULL))


@dataclass(frozen=True)
class Error:
    code: Code
    message: str


class Transfer(NamedTuple):
    """A completed transfer on one connection (named as the bindings name QPs)."""

    communicator: str
    src_rank: int
    dst_rank: int
    channel: int
    qp: int
    step: int  # the communicator's call sequence number, or STEP_UNKNOWN
    bytes: int
    start_ns: int  # CLOCK_MONOTONIC of the rank's host
    end_ns: int


class Arrive(NamedTuple):
    """A rank entered a collective call."""

    communicator: str
    rank: int
    step: int
    collective: str
    bytes: int
    t_ns: int


class Complete(NamedTuple):
    """A rank left a collective call."""

    communicator: str
    rank: int
    step: int
    t_ns: int


@dataclass(frozen=True)
class Report:
    """Body of REPORT: what the ring held at one drain, and the ring's drops so far."""

    dropped: int  # samples dropped by this session since it opened (cumulative)
    transfers: tuple[Transfer, ...] = ()
    arrivals: tuple[Arrive, ...] = ()
    completions: tuple[Complete, ...] = ()


Message = Hello | Welcome | BindingSet | Error | Report


# -- encoding -----------------------------------------------------------------------------------


def _text(value: str, limit: int) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > limit:
        raise ValueError(f"string of {len(raw)} bytes over the limit of {limit}")
    return struct.pack(">H", len(raw)) + raw


def _key(k: QpKey) -> bytes:
    return _text(k.communicator, MAX_NAME) + struct.pack(
        ">IIII", k.src_rank, k.dst_rank, k.channel, k.qp
    )


def _body(b: BindingSet) -> bytes:
    parts = [struct.pack(">QBI", b.epoch, int(b.kind), len(b.bindings))]
    for x in b.bindings:
        parts.append(_key(x.key) + struct.pack(">HIQ", x.udp_sport, x.flow_label, x.epoch))
    parts.append(struct.pack(">I", len(b.removed)))
    parts.extend(_key(k) for k in b.removed)
    return b"".join(parts)


_TRANSFER = struct.Struct(">IIIIIQQQQ")
_ARRIVE = struct.Struct(">IIQIQQ")
_COMPLETE = struct.Struct(">IIQQ")


def _report(r: Report) -> bytes:
    comms = sorted(
        {x.communicator for x in r.transfers}
        | {x.communicator for x in r.arrivals}
        | {x.communicator for x in r.completions}
    )
    ids = {c: i for i, c in enumerate(comms)}
    colls = ["", *sorted({x.collective for x in r.arrivals} - {""})]
    cids = {c: i for i, c in enumerate(colls)}
    parts = [struct.pack(">QH", r.dropped, len(comms))]
    parts.extend(struct.pack(">I", ids[c]) + _text(c, MAX_NAME) for c in comms)
    parts.append(struct.pack(">H", len(colls)))
    parts.extend(_text(c, MAX_NAME) for c in colls)
    parts.append(struct.pack(">I", len(r.transfers)))
    parts.extend(_TRANSFER.pack(ids[t.communicator], *t[1:]) for t in r.transfers)
    parts.append(struct.pack(">I", len(r.arrivals)))
    parts.extend(
        _ARRIVE.pack(ids[a.communicator], a.rank, a.step, cids[a.collective], a.bytes, a.t_ns)
        for a in r.arrivals
    )
    parts.append(struct.pack(">I", len(r.completions)))
    parts.extend(_COMPLETE.pack(ids[c.communicator], *c[1:]) for c in r.completions)
    return b"".join(parts)


def encode(message: Message, version: int = VERSION) -> bytes:
    """One frame."""
    if isinstance(message, Report):
        payload = _report(message)
        if len(payload) > MAX_REPORT:
            raise ValueError(f"report of {len(payload)} bytes over {MAX_REPORT}")
        return HEADER.pack(MAGIC, version, int(MsgType.REPORT), len(payload)) + payload
    if isinstance(message, Hello):
        kind, payload = (
            MsgType.HELLO,
            _text(message.job_id, MAX_NAME) + _text(message.token, MAX_TOKEN),
        )
    elif isinstance(message, Welcome):
        head = struct.pack(">B", 1 if message.known else 0) + _text(message.host, MAX_NAME)
        kind, payload = MsgType.WELCOME, head + _body(message.body)
    elif isinstance(message, BindingSet):
        kind, payload = MsgType.BINDINGS, _body(message)
    else:
        text = message.message.encode("utf-8")[:MAX_TEXT].decode("utf-8", "ignore")
        kind, payload = MsgType.ERROR, struct.pack(">I", int(message.code)) + _text(text, MAX_TEXT)
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes over {MAX_PAYLOAD}")
    return HEADER.pack(MAGIC, version, int(kind), len(payload)) + payload


# -- decoding -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    version: int
    type: int
    length: int


def parse_header(raw: bytes) -> Header:
    """Check the magic and the length (the version is the caller's to judge: see ``decode``)."""
    if len(raw) != HEADER.size:
        raise WireError(Code.PROTOCOL, f"header of {len(raw)} bytes, expected {HEADER.size}")
    magic, version, kind, length = HEADER.unpack(raw)
    if magic != MAGIC:
        raise WireError(Code.PROTOCOL, f"bad magic {magic!r}, expected {MAGIC!r}")
    if length > MAX_PAYLOAD:
        raise WireError(Code.PROTOCOL, f"frame length {length} over {MAX_PAYLOAD}")
    return Header(version, kind, length)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int, what: str) -> bytes:
        if self.at + n > len(self.data):
            raise WireError(Code.PROTOCOL, f"{what}: truncated at byte {self.at} of the payload")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u(self, fmt: str, what: str) -> int:
        s = struct.Struct(">" + fmt)
        return int(s.unpack(self.take(s.size, what))[0])

    def text(self, limit: int, what: str) -> str:
        n = self.u("H", what)
        if n > limit:
            raise WireError(Code.PROTOCOL, f"{what}: {n} bytes over the limit of {limit}")
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise WireError(Code.PROTOCOL, f"{what}: not UTF-8") from None

    def key(self) -> QpKey:
        comm = self.text(MAX_NAME, "communicator")
        src, dst, ch, qp = (self.u("I", f) for f in ("src_rank", "dst_rank", "channel", "qp"))
        return QpKey(comm, src, dst, ch, qp)

    def body(self) -> BindingSet:
        epoch = self.u("Q", "epoch")
        raw_kind = self.u("B", "kind")
        if raw_kind not in (Kind.FULL, Kind.DELTA):
            raise WireError(Code.PROTOCOL, f"kind: {raw_kind} is neither FULL (1) nor DELTA (2)")
        count = self.u("I", "binding count")
        bindings = []
        for _ in range(count):
            key = self.key()
            sport, label = self.u("H", "udp_sport"), self.u("I", "flow_label")
            set_at = self.u("Q", "binding epoch")
            bindings.append(LocalBinding(key, sport, label, set_at))
        gone = self.u("I", "removed count")
        removed = tuple(self.key() for _ in range(gone))
        return BindingSet(epoch, Kind(raw_kind), tuple(bindings), removed)

    def records(self, shape: struct.Struct, what: str) -> list[tuple[int, ...]]:
        count = self.u("I", f"{what} count")
        raw = self.take(count * shape.size, what)
        return list(shape.iter_unpack(raw))

    def report(self) -> Report:
        dropped = self.u("Q", "dropped")
        comms: dict[int, str] = {}
        for _ in range(self.u("H", "communicator count")):
            ident = self.u("I", "communicator id")
            comms[ident] = self.text(MAX_NAME, "communicator")
        colls = [self.text(MAX_NAME, "collective") for _ in range(self.u("H", "collective count"))]

        rows = self.records(_TRANSFER, "transfer")
        arrive_rows = self.records(_ARRIVE, "arrival")
        complete_rows = self.records(_COMPLETE, "completion")
        # Checked in bulk, then built in comprehensions: a frame carries thousands of records.
        used = {r[0] for r in rows} | {r[0] for r in arrive_rows} | {r[0] for r in complete_rows}
        if missing := used - comms.keys():
            raise WireError(Code.PROTOCOL, f"communicator id {min(missing)} not in frame")
        if bad := next((r for r in rows if r[8] < r[7]), None):
            raise WireError(Code.PROTOCOL, f"transfer: end_ns {bad[8]} before start_ns {bad[7]}")
        if bad := next((r for r in arrive_rows if r[3] >= len(colls)), None):
            raise WireError(Code.PROTOCOL, f"collective id {bad[3]} not in the frame")
        transfers = [Transfer(comms[r[0]], *r[1:]) for r in rows]
        arrivals = [
            Arrive(comms[c], rank, step, colls[k], n, t) for c, rank, step, k, n, t in arrive_rows
        ]
        completions = [Complete(comms[r[0]], *r[1:]) for r in complete_rows]
        return Report(dropped, tuple(transfers), tuple(arrivals), tuple(completions))

    def end(self) -> None:
        if self.at != len(self.data):
            raise WireError(Code.PROTOCOL, f"{len(self.data) - self.at} bytes after the message")


def report_samples(payload: bytes) -> int:
    """How many samples a REPORT payload carries, read from its counts alone (no record is
    decoded): what an overloaded agent counts when it drops a frame unread."""
    r = _Reader(payload)
    r.take(8, "dropped")
    for _ in range(r.u("H", "communicator count")):
        r.take(4, "communicator id")
        r.text(MAX_NAME, "communicator")
    for _ in range(r.u("H", "collective count")):
        r.text(MAX_NAME, "collective")
    total = 0
    for shape, what in ((_TRANSFER, "transfer"), (_ARRIVE, "arrival"), (_COMPLETE, "completion")):
        count = r.u("I", f"{what} count")
        r.take(count * shape.size, what)
        total += count
    r.end()
    return total


def decode(header: Header, payload: bytes) -> Message:
    """The message of a frame whose header was checked; ``WireError`` on anything malformed."""
    if header.version != VERSION:
        raise WireError(
            Code.VERSION, f"wire version {header.version}, this side speaks version {VERSION}"
        )
    r = _Reader(payload)
    message: Message
    if header.type == MsgType.HELLO:
        message = Hello(r.text(MAX_NAME, "job_id"), r.text(MAX_TOKEN, "token"))
    elif header.type == MsgType.WELCOME:
        known = r.u("B", "known") == 1
        message = Welcome(r.text(MAX_NAME, "host"), known, r.body())
    elif header.type == MsgType.BINDINGS:
        message = r.body()
    elif header.type == MsgType.REPORT:
        if header.length > MAX_REPORT:
            raise WireError(Code.PROTOCOL, f"REPORT of {header.length} bytes over {MAX_REPORT}")
        message = r.report()
    elif header.type == MsgType.ERROR:
        code = r.u("I", "code")
        text = r.text(MAX_TEXT, "message")
        message = Error(Code(code) if code in Code._value2member_map_ else Code.INTERNAL, text)
    else:
        raise WireError(Code.PROTOCOL, f"unknown message type {header.type}")
    r.end()
    return message
