"""Flows, the connections they belong to, and the communicators those serve.

Why three levels: the fabric sees *flows* (one QP each, the unit a path and a UDP source port
are given to); NCCL sees *connections* (a rank pair on one channel, carried by one or more QPs);
a job's speed is set by its *communicators*, each running at the pace of its slowest
connection. Evaluation computes rates per flow and must aggregate them back up, so a
:class:`Workload` keeps all three and the links between them.

Names: a flow's id is ``"job/communicator/connection/qp"``; job and communicator ids cannot
contain ``/`` (they follow the fabric's name rules), so the id is unambiguous.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solver.workload.jobs import Collective, Pattern
from topology.index import IntArray
from topology.model import Fabric


@dataclass(frozen=True, slots=True)
class Flow:
    """One QP: from NIC port ``src`` to NIC port ``dst`` (node names ``"<host>:<port>"``).

    ``rate`` is relative volume (a weight): max-min fairness shares bandwidth in proportion to
    it, and link load sums it.
    """

    job: str
    communicator: str
    connection: int
    qp: int
    src: str
    dst: str
    rate: float = 1.0

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"flow {self.id}: rate must be > 0, got {self.rate}")

    @property
    def id(self) -> str:
        return f"{self.job}/{self.communicator}/{self.connection}/{self.qp}"


@dataclass(frozen=True, slots=True)
class Connection:
    """A rank pair on one channel (NCCL's unit), carried by ``qps`` flows.

    ``pairs`` is how many (source rank, destination rank) pairs of the collective the connection
    carries: 1, except for rail-only all-to-all, where NIC *r* of a host forwards for every
    rank of its host (PXN) and so carries that many pairs' data. ``tree`` is which tree of a
    double binary tree the connection belongs to (0 for other patterns).
    """

    job: str
    communicator: str
    index: int
    src_rank: int
    dst_rank: int
    channel: int
    src_host: str
    src_nic: str
    dst_host: str
    dst_nic: str
    qps: int = 1
    pairs: int = 1
    tree: int = 0

    @property
    def id(self) -> str:
        return f"{self.job}/{self.communicator}/{self.index}"


_new = object.__new__
(_flow_job, _flow_communicator, _flow_connection, _flow_qp, _flow_src, _flow_dst, _flow_rate) = (
    vars(Flow)[name].__set__ for name in Flow.__slots__
)
"""Each slot's own setter (the member descriptor's ``__set__``), in field order."""


def make_flow(
    job: str, communicator: str, connection: int, qp: int, src: str, dst: str, rate: float
) -> Flow:
    """``Flow(job, communicator, connection, qp, src, dst, rate)`` as its constructor makes it:
    the same check of the rate (a rate that is not ``> 0`` goes to the constructor, which
    refuses it), then each slot set by its own descriptor (the tests hold the two to each
    other). Why: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` (the class's own refuses), some 1.1 us for these seven against 0.5,
    and a workload makes one per QP (16,384 for a 16k-GPU ring or shuffled ring). Unlike the
    unslotted records (``RankNic``, ``Edge``), a flow costs no memory more: its slots are the
    same slots."""
    if not rate > 0:
        return Flow(job, communicator, connection, qp, src, dst, rate)
    flow: Flow = _new(Flow)
    _flow_job(flow, job)
    _flow_communicator(flow, communicator)
    _flow_connection(flow, connection)
    _flow_qp(flow, qp)
    _flow_src(flow, src)
    _flow_dst(flow, dst)
    _flow_rate(flow, rate)
    return flow


(
    _conn_job, _conn_communicator, _conn_index, _conn_src_rank, _conn_dst_rank, _conn_channel,
    _conn_src_host, _conn_src_nic, _conn_dst_host, _conn_dst_nic, _conn_qps, _conn_pairs,
    _conn_tree,
) = (vars(Connection)[name].__set__ for name in Connection.__slots__)  # fmt: skip


def make_connection(
    job: str,
    communicator: str,
    index: int,
    src_rank: int,
    dst_rank: int,
    channel: int,
    src_host: str,
    src_nic: str,
    dst_host: str,
    dst_nic: str,
    qps: int,
    pairs: int,
    tree: int,
) -> Connection:
    """``Connection(...)`` of these thirteen fields, in field order, as its constructor makes
    it (no ``__post_init__``; the tests hold the two to each other), each slot set by its own
    descriptor. Why: as :func:`make_flow`; 2.3 us a connection by the constructor with
    keywords against 1.0, one per rank pair and channel (16,384 at 16k GPUs)."""
    conn: Connection = _new(Connection)
    _conn_job(conn, job)
    _conn_communicator(conn, communicator)
    _conn_index(conn, index)
    _conn_src_rank(conn, src_rank)
    _conn_dst_rank(conn, dst_rank)
    _conn_channel(conn, channel)
    _conn_src_host(conn, src_host)
    _conn_src_nic(conn, src_nic)
    _conn_dst_host(conn, dst_host)
    _conn_dst_nic(conn, dst_nic)
    _conn_qps(conn, qps)
    _conn_pairs(conn, pairs)
    _conn_tree(conn, tree)
    return conn


@dataclass(frozen=True, slots=True)
class Communicator:
    """What evaluation needs of a communicator to predict its bus bandwidth.

    ``line_rate_gbps`` is the slowest NIC among its ranks (a NIC's rate is the sum of its port
    speeds): the yardstick its bus bandwidth is a fraction of.
    """

    job: str
    id: str
    pattern: Pattern
    collective: Collective
    size: int
    trees: int
    priority: int
    line_rate_gbps: float


@dataclass(frozen=True, eq=False)
class Workload:
    """The flows of some jobs with their connections and communicators, in one consistent set.

    ``flow_connection[i]`` is the position in ``connections`` of flow ``i``'s connection.
    """

    flows: tuple[Flow, ...]
    connections: tuple[Connection, ...]
    communicators: tuple[Communicator, ...]
    flow_connection: IntArray

    def __post_init__(self) -> None:
        if len(self.flow_connection) != len(self.flows):
            raise ValueError("flow_connection must have one entry per flow")

    def __len__(self) -> int:
        return len(self.flows)

    @classmethod
    def build(
        cls,
        flows: Sequence[Flow],
        connections: Sequence[Connection],
        communicators: Sequence[Communicator],
    ) -> Workload:
        """Link flows to their connections by (job, communicator, connection index)."""
        position = {(c.job, c.communicator, c.index): i for i, c in enumerate(connections)}
        try:
            links = [position[(f.job, f.communicator, f.connection)] for f in flows]
        except KeyError as exc:
            raise ValueError(
                f"a flow's connection {exc.args[0]} is not among the connections"
            ) from None
        return cls(
            tuple(flows), tuple(connections), tuple(communicators), np.asarray(links, np.int64)
        )

    @classmethod
    def from_flows(cls, fabric: Fabric, flows: Sequence[Flow]) -> Workload:
        """A workload for flows known without their job specs (a plan file, live intents).

        Every communicator is taken as ``explicit`` (its bus bandwidth is its slowest
        connection); ranks are numbered per communicator by first appearance of each NIC.
        """
        index = fabric.index
        conns: dict[tuple[str, str, int], Connection] = {}
        comm_ranks: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
        comm_rate: dict[tuple[str, str], float] = {}
        qps: dict[tuple[str, str, int], int] = {}
        for flow in flows:
            src, dst = index.port(flow.src), index.port(flow.dst)
            ranks = comm_ranks.setdefault((flow.job, flow.communicator), {})
            a = ranks.setdefault((src.host.name, src.nic.name), len(ranks))
            b = ranks.setdefault((dst.host.name, dst.nic.name), len(ranks))
            key = (flow.job, flow.communicator, flow.connection)
            qps[key] = qps.get(key, 0) + 1
            conns.setdefault(
                key,
                Connection(*key, a, b, 0, src.host.name, src.nic.name, dst.host.name, dst.nic.name),
            )
            rate = nic_line_rate(fabric, [f"{src.host.name}:{p.name}" for p in src.nic.ports])
            comm_rate[(flow.job, flow.communicator)] = min(
                comm_rate.get((flow.job, flow.communicator), rate), rate
            )
        connections = [
            Connection(
                c.job, c.communicator, c.index, c.src_rank, c.dst_rank, c.channel,
                c.src_host, c.src_nic, c.dst_host, c.dst_nic, qps=qps[key],
            )
            for key, c in conns.items()
        ]  # fmt: skip
        communicators = [
            Communicator(
                job=job,
                id=comm,
                pattern=Pattern.EXPLICIT,
                collective=Collective.ALL_REDUCE,
                size=len(ranks),
                trees=1,
                priority=1,
                line_rate_gbps=comm_rate[(job, comm)],
            )
            for (job, comm), ranks in comm_ranks.items()
        ]
        return cls.build(flows, connections, communicators)


def _cabled(fabric: Fabric, node: int) -> bool:
    return bool(fabric.index.out_resources[node])


def nic_line_rate(fabric: Fabric, ports: Sequence[str]) -> float:
    """A NIC's line rate: the sum of its cabled ports' speeds (Gb/s)."""
    index = fabric.index
    return sum(index.line_rate(index.node(p)) for p in ports if _cabled(fabric, index.node(p)))
