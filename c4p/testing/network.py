"""A network whose ECMP hash the controller's model does not know, and what it really does.

Why: with the hash model in both the controller and the emulated network, "predicted" ports are
right by construction and a test of probing proves nothing. :func:`hidden_hash_network` is the
same topology with other hash seeds (as real switches, whose seeds and key layouts vendors do
not publish), to put behind the agents' prober; :func:`realized_path` says where a 5-tuple's
packets really go in it: the yardstick for bindings.
"""

from __future__ import annotations

import numpy as np

from topology.forwarding import forward_many
from topology.model import Fabric, HashProfile


def hidden_hash_network(fabric: Fabric, seed: int = 0x5EED) -> Fabric:
    """The same topology whose switches hash with seeds ``seed + i`` (switch ``i``).

    Built afresh from the data (not ``model_copy``), so nothing derived from the given
    snapshot (its cached index and hash tables) carries over.
    """
    data = fabric.model_dump(mode="json")
    for i, switch in enumerate(data["switches"]):
        profile = HashProfile(algorithm=fabric.switches[i].hash.algorithm, seed=seed + i)
        switch["hash"] = profile.model_dump(mode="json")
    return Fabric.model_validate(data)


def realized_path(network: Fabric, src: str, dst: str, sport: int) -> tuple[str, ...]:
    """The node names a RoCEv2 packet ``src -> dst`` from ``sport`` crosses in ``network``."""
    index = network.index
    path = forward_many(
        network,
        np.asarray([index.node(src)], dtype=np.int64),
        np.asarray([index.node(dst)], dtype=np.int64),
        np.asarray([sport], dtype=np.int64),
    )[0]
    return tuple(index.path_nodes(path))
