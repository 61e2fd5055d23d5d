"""The ECMP baseline: where the flows go when nobody plans them.

Why: every figure c4p reports about a plan is a ratio against this. Upstream NCCL leaves the
GRH flow label at 0, so the kernel derives it from the two QP numbers
(``rdma_calc_flow_label(lqpn, rqpn)``), turns it into the UDP source port
(``rdma_flow_label_to_udp_sport``), and every switch hashes the 5-tuple onto a member of its
ECMP group. QP numbers are allocated by the NICs, effectively at random, so the baseline draws
them from a seed: the same seed gives the same ports and the same paths, and a sweep over seeds
gives the distribution an operator would see from run to run. Each flow's QP numbers are a hash
of the seed and the flow's id, not the next draw of one generator, so a flow keeps its port
when other jobs come or go, as a live QP does.

The forwarding itself is :func:`topology.forwarding.forward_many`, the same data-plane model
that source-port synthesis checks its ports against.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from solver.workload.flows import Flow
from topology.forwarding import forward_many
from topology.index import FabricIndex, IntArray
from topology.model import Fabric
from topology.roce import rdma_calc_flow_label_many, rdma_flow_label_to_udp_sport_many

QPN_BITS = 24
"""QP numbers are 24 bits on the wire."""

FIRST_QPN = 2
"""QPs 0 and 1 are the special management QPs; ordinary QPs are numbered from 2."""


@dataclass(frozen=True, eq=False)
class EcmpResult:
    """Per flow: its QP numbers, flow label, UDP source port and path (empty if unreachable).

    ``unreachable`` lists the positions of flows the fabric cannot deliver (a NIC link or every
    path down).
    """

    seed: int
    lqpn: npt.NDArray[np.uint64] = field(repr=False)
    rqpn: npt.NDArray[np.uint64] = field(repr=False)
    flow_labels: npt.NDArray[np.uint64] = field(repr=False)
    sports: npt.NDArray[np.uint64] = field(repr=False)
    paths: tuple[tuple[int, ...], ...] = field(repr=False)
    unreachable: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.paths)


def random_qpns(
    flow_ids: Sequence[str], seed: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """Local and remote QP numbers (``2 .. 2**24 - 1``) of each flow, from the seed and its id."""
    digests = b"".join(
        hashlib.blake2b(f"{seed}/{fid}".encode(), digest_size=8).digest() for fid in flow_ids
    )
    words = np.frombuffer(digests, dtype=">u8").astype(np.uint64)
    span = np.uint64((1 << QPN_BITS) - FIRST_QPN)
    local = (words & np.uint64(0xFFFFFFFF)) % span + np.uint64(FIRST_QPN)
    remote = (words >> np.uint64(32)) % span + np.uint64(FIRST_QPN)
    return local, remote


_SRC, _DST = operator.attrgetter("src"), operator.attrgetter("dst")
"""A flow's two NIC ports, read by ``map`` (no Python step per flow)."""


def _nodes(index: FabricIndex, flows: Sequence[Flow], end: Callable[[Flow], str]) -> IntArray:
    """The node number of one end of every flow: the index's own dictionary lookup through
    ``map`` (a method call per flow was 0.2 s at 131k GPUs); an unknown name is asked again
    of :meth:`FabricIndex.node`, for its error."""
    try:
        return np.fromiter(map(index.node_of.__getitem__, map(end, flows)), np.int64, len(flows))
    except KeyError:
        return np.fromiter(map(index.node, map(end, flows)), np.int64, count=len(flows))


def ecmp_paths(fabric: Fabric, flows: Sequence[Flow], seed: int = 0) -> EcmpResult:
    """The path each flow takes under ECMP with kernel-chosen source ports, for one seed."""
    index = fabric.index
    lqpn, rqpn = random_qpns([f.id for f in flows], seed)
    labels = rdma_calc_flow_label_many(lqpn, rqpn)
    sports = rdma_flow_label_to_udp_sport_many(labels)
    src, dst = _nodes(index, flows, _SRC), _nodes(index, flows, _DST)
    paths = tuple(forward_many(fabric, src, dst, sports)) if len(flows) else ()
    unreachable = tuple(i for i, p in enumerate(paths) if not p)
    return EcmpResult(
        seed=seed,
        lqpn=lqpn,
        rqpn=rqpn,
        flow_labels=labels,
        sports=sports,
        paths=paths,
        unreachable=unreachable,
    )
