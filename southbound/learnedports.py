"""The learned port source: binding's questions ("which ports take this path", "which path does
this port take") answered by a :class:`~southbound.pathtable.PathTable`.

Why apart from :mod:`southbound.pathtable`: the table learns from probes and knows nothing of
binding; this adapter is the binding side's view of it (the
:class:`~southbound.ports.PortSource` that :mod:`southbound.bindings` chooses in learned mode),
beside the predicted source of :mod:`southbound.ports`.
"""

from __future__ import annotations

from collections.abc import Sequence

from southbound.pathtable import PathTable
from southbound.ports import PortRequest
from southbound.routes import Middle


class LearnedPorts:
    """The :class:`~southbound.ports.PortSource` answered by a :class:`PathTable`."""

    mode = "learned"

    def __init__(self, table: PathTable) -> None:
        self.table = table

    def find(self, requests: Sequence[PortRequest]) -> list[tuple[int, ...]]:
        out = []
        for r in requests:
            key = self.table.key_of(r.src, r.dst)
            ports = self.table.ports_of_middle(key, r.middle, r.count + len(r.exclude))
            out.append(tuple(p for p in ports if p not in r.exclude)[: r.count])
        return out

    def alternatives(self, src: int, dst: int) -> dict[Middle, tuple[int, ...]]:
        key = self.table.key_of(src, dst)
        found = {m: self.table.ports_of_middle(key, m, 64) for m in sorted(self.table.middles(key))}
        return {m: ports for m, ports in found.items() if ports}

    def middles_of(
        self, src: Sequence[int], dst: Sequence[int], sports: Sequence[int]
    ) -> list[Middle | None]:
        return [
            self.table.middle_of_port(self.table.key_of(s, d), p)
            for s, d, p in zip(src, dst, sports, strict=True)
        ]
