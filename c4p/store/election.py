"""Leader election on an etcd lease: who of the replicas plans and writes.

How: every replica holds a lease of ``ttl`` seconds and keeps it alive (every ``ttl/4``). To
lead, a replica creates the leader key, attached to its lease, in a transaction that succeeds
only if the key does not exist (``create_revision == 0``); the value names the replica and the
address clients should use. The key lives exactly as long as the lease: when the leader stops
renewing (killed, stopped, cut off from the quorum), etcd deletes the key ``ttl`` seconds later
and the next campaign of a follower wins.

Why the create revision is the fence: it changes with every new leadership, even when the same
replica wins again, and it is what the etcd store compares in every write
(:class:`c4p.store.etcd.Fence`), so an old leader's late write cannot land.

A replica that finds its lease gone (keep-alive answers TTL 0) has lost leadership, whatever it
believed; one that cannot reach etcd does not know, and keeps serving what it has without
writing (etcd would refuse it anyway) until it can tell.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass

from c4p.store.etcd import Fence
from c4p.store.etcdclient import EtcdClient, EtcdError, created_at, put_op, range_op

log = logging.getLogger("c4p.election")


@dataclass(frozen=True)
class LeaderInfo:
    """Who leads: a replica's name and the address its clients dial."""

    name: str
    address: str

    def encode(self) -> bytes:
        return json.dumps({"name": self.name, "address": self.address}).encode()

    @classmethod
    def decode(cls, value: bytes) -> LeaderInfo | None:
        try:
            data = json.loads(value)
            return cls(str(data["name"]), str(data["address"]))
        except (ValueError, KeyError, TypeError):
            return None


class Election:
    """One replica's side of the election (blocking calls; run them off the event loop)."""

    def __init__(self, client: EtcdClient, key: bytes, me: LeaderInfo, ttl: int = 3) -> None:
        self.client = client
        self.key = key
        self.me = me
        self.ttl = ttl
        self.lease = 0
        self.fence: Fence | None = None
        self.leader: LeaderInfo | None = None
        """The leader last seen (ourselves while we lead)."""

    def campaign(self) -> Fence | None:
        """Try once to become the leader; the fence if we are, else ``None`` (and
        :attr:`leader` names who is). Raises :class:`EtcdError` if etcd cannot be reached."""
        if self.lease == 0 or self.client.keep_alive(self.lease) <= 0:
            self.lease = self.client.grant(self.ttl)
        reply = self.client.txn(
            [created_at(self.key, 0)],
            [put_op(self.key, self.me.encode(), self.lease)],
            [range_op(self.key)],
        )
        if reply.succeeded:
            self.fence = Fence(self.key, reply.header.revision)
            self.leader = self.me
            log.info(
                "elected",
                extra={"event": "elected", "replica": self.me.name, "fence": self.fence.revision},
            )
            return self.fence
        kvs = reply.responses[0].response_range.kvs
        if kvs and kvs[0].lease == self.lease and self.lease != 0:
            # we created it before and lost the answer (a retried campaign): still ours
            self.fence = Fence(self.key, kvs[0].create_revision)
            self.leader = self.me
            return self.fence
        self.leader = LeaderInfo.decode(kvs[0].value) if kvs else None
        return None

    def observe(self) -> LeaderInfo | None:
        """Read who leads now (without campaigning); also kept in :attr:`leader`."""
        found = self.client.get(self.key)
        self.leader = None if found is None else LeaderInfo.decode(found.value)
        return self.leader

    def renew(self) -> bool:
        """Keep our lease alive; ``False`` if it is gone (leadership lost). Raises
        :class:`EtcdError` when etcd cannot say (unreachable, no quorum)."""
        if self.lease == 0:
            return False
        alive = self.client.keep_alive(self.lease) > 0
        if not alive:
            self.lease = 0
            self.fence = None
        return alive

    def still_leading(self) -> bool:
        """Our lease alive *and* the leader key still the one we created."""
        if self.fence is None or not self.renew():
            return False
        found = self.client.get(self.key)
        return found is not None and found.create_revision == self.fence.revision

    def resign(self) -> None:
        """Give leadership up now (revoking the lease deletes the key); best effort."""
        lease, self.lease, self.fence = self.lease, 0, None
        if lease:
            with contextlib.suppress(EtcdError):  # else it expires by itself within ttl
                self.client.revoke(lease)
