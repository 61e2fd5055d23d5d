"""Static mode: per-host bindings files for sites that plan offline and launch without a
controller (``c4p plan ... --bindings-dir DIR``), read by ``libc4p`` instead of an agent.

Why per host and per job: a rank needs only the QPs that leave its own host, and a file
carries its fabric, job and host so that ``libc4p`` can refuse a file meant for another
(``C4P_EMISMATCH``) instead of applying wrong ports. The layout is ``DIR/<job>/<host>.c4pb``;
the format is line-oriented text (``docs/api.md``, "Static bindings files")::

    c4p-bindings 1
    fabric <name>
    job <id>
    host <name>
    epoch <n>
    count <bindings>
    # communicator src_rank dst_rank channel qp udp_sport flow_label
    b <communicator> <src_rank> <dst_rank> <channel> <qp> <udp_sport> <flow_label>

``count`` lets the reader tell a truncated file from a short one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from c4p.files import write_text
from solver.workload.flows import Connection
from southbound.bindings import BindingSet

SUFFIX = ".c4pb"
FORMAT_VERSION = 1


@dataclass(frozen=True, order=True)
class StaticBinding:
    communicator: str
    src_rank: int
    dst_rank: int
    channel: int
    qp: int
    udp_sport: int
    flow_label: int


@dataclass(frozen=True)
class HostFile:
    fabric: str
    job: str
    host: str
    epoch: int
    bindings: tuple[StaticBinding, ...]

    def render(self) -> str:
        """The file's text; a QP twice is refused here as ``libc4p`` refuses it on reading."""
        keys = [(b.communicator, b.src_rank, b.dst_rank, b.channel, b.qp) for b in self.bindings]
        if len(set(keys)) != len(keys):
            twice = sorted({k for k in keys if keys.count(k) > 1})[0]
            raise ValueError(f"{self.job}/{self.host}: QP {twice} has two bindings")
        lines = [
            f"c4p-bindings {FORMAT_VERSION}",
            f"fabric {self.fabric}",
            f"job {self.job}",
            f"host {self.host}",
            f"epoch {self.epoch}",
            f"count {len(self.bindings)}",
            "# communicator src_rank dst_rank channel qp udp_sport flow_label",
        ]
        lines += [
            f"b {b.communicator} {b.src_rank} {b.dst_rank} {b.channel} {b.qp} "
            f"{b.udp_sport} {b.flow_label}"
            for b in self.bindings
        ]
        return "\n".join(lines) + "\n"


def host_files(bindings: BindingSet, connections: Sequence[Connection]) -> list[HostFile]:
    """One file per (job, source host) of the bindings."""
    conns = {(c.job, c.communicator, c.index): c for c in connections}
    grouped: dict[tuple[str, str], list[StaticBinding]] = {}
    for b in bindings.bindings:
        c = conns[(b.job, b.communicator, b.connection)]
        host = b.src.split(":", 1)[0]
        grouped.setdefault((b.job, host), []).append(
            StaticBinding(
                b.communicator, c.src_rank, c.dst_rank, c.channel, b.qp, b.sport, b.flow_label
            )
        )
    return [
        HostFile(bindings.fabric, job, host, bindings.epoch, tuple(sorted(rows)))
        for (job, host), rows in sorted(grouped.items())
    ]


def write_host_files(files: Sequence[HostFile], directory: Path) -> list[Path]:
    """Write ``DIR/<job>/<host>.c4pb`` atomically; returns the paths written."""
    written = []
    for f in files:
        path = directory / f.job / f"{f.host}{SUFFIX}"
        write_text(path, f.render())
        written.append(path)
    return written
