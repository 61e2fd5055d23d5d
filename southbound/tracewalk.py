"""Reading a probe's trace against the topology's ECMP groups, and the groups a path consults.

Why apart from :mod:`southbound.pathtable`: the table keeps entries and decides what is
learned; this is only the walk (see "Reading a trace" there): from the source leaf, through
each ECMP group, the answering switch choosing the member where there are several. It needs
the fabric's index and routing, never the table, so the walk can be read on its own.
"""

from __future__ import annotations

from southbound.pathentries import Outcome, TableKey
from southbound.probing import AddressBook, Trace
from southbound.routes import GroupKey, Middle
from topology.index import FabricIndex
from topology.routing import Routing


def group_closure(
    index: FabricIndex, routing: Routing, src_leaf: int, dst_leaf: int
) -> set[GroupKey]:
    """Every ECMP group any equal-cost path from ``src_leaf`` to ``dst_leaf`` consults."""
    seen: set[GroupKey] = set()
    todo = [(src_leaf, False)]
    while todo:
        node, descending = todo.pop()
        group_key = (node, dst_leaf, descending)
        if node == dst_leaf or group_key in seen:
            continue
        seen.add(group_key)
        for res in routing.next_hops(node, dst_leaf, descending):
            todo.append((int(index.res_dst[res]), descending or routing.is_down(res)))
    return seen


def read_trace(
    index: FabricIndex,
    routing: Routing,
    book: AddressBook,
    towards_of: dict[tuple[int, ...], dict[int, int]],
    trace: Trace,
    src: int,
    dst: int,
) -> tuple[Outcome, Middle | None]:
    """Walk the groups from the source leaf, letting the answers choose among members
    (``towards_of``: per group, next node -> member, filled as groups are met)."""
    src_leaf, dst_leaf = index.leaf_of(src), index.leaf_of(dst)
    if trace.black_hole is not None:
        # A router said "no route": the port leads nowhere now. An answer, not a loss;
        # nothing is learned for it (it must not be retried as if the answer were lost).
        return Outcome.BLACK_HOLE, None

    def seen(ttl: int) -> int | None:
        """The node that answered at ``ttl``; ``None`` if silent, -1 if not of the fabric."""
        address = trace.at(ttl)
        if address is None:
            return None
        node = book.node(address)
        return -1 if node is None else node

    first = seen(1)
    if first is not None and first != src_leaf:
        return Outcome.UNEXPECTED, None
    node, descending = src_leaf, False
    middle: list[int] = []
    while node != dst_leaf:
        group = routing.next_hops(node, dst_leaf, descending)
        answer = seen(len(middle) + 2)
        if answer is None:
            if len(group) != 1:
                return (Outcome.INCOMPLETE if group else Outcome.UNEXPECTED), None
            res = group[0]
        else:
            towards = towards_of.get(group)
            if towards is None:
                towards = towards_of[group] = {int(index.res_dst[r]): r for r in group}
            if answer not in towards:
                return Outcome.UNEXPECTED, None
            res = towards[answer]
        middle.append(res)
        descending = descending or routing.is_down(res)
        node = int(index.res_dst[res])
    last = seen(len(middle) + 2)
    if last is not None and last != dst:
        return Outcome.UNEXPECTED, None
    return Outcome.NEW, tuple(middle)


def groups_along(index: FabricIndex, leaves: TableKey, middle: Middle) -> set[GroupKey]:
    """The groups a packet consults along ``middle`` (from tiers: valid after a change)."""
    descending, out = False, set()
    for res in middle:
        src = int(index.res_src[res])
        out.add((src, leaves[1], descending))
        descending = descending or bool(index.tier[index.res_dst[res]] < index.tier[src])
    return out
