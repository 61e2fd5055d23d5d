"""Building and tearing down the lab: namespaces, veth cables, addresses, forwarding, routes.

What a router namespace gets, and why:

- ``fib_multipath_hash_policy`` (``hash_policy``, default 1) and a fixed
  ``fib_multipath_hash_seed``. Policy 1 hashes the L4 5-tuple, as RoCE fabrics do, so the UDP
  source port chooses the path (what probing learns and bindings steer); it is the kernel's
  usual choice for L4 hashing and the realistic one, because it also *reuses* a packet's L4
  hash when the packet has one: a packet from a **connected** socket carries that socket's
  random ``sk_txhash`` over the veth, and the first router would pick its next hop from that,
  not from the 5-tuple. That is why probes and lab traffic leave from unconnected sockets
  (``sendto``; see :mod:`southbound.netprobe`), as a NIC's RoCE packets carry no socket hash.
  Policy 3 hashes chosen fields (``0x37``: addresses, protocol, ports) and ignores a socket's
  hash; policy 0 hashes only the addresses (L3), so no source port can steer there: every QP
  of one address pair shares one path. :data:`HASH_POLICIES` lists what the lab accepts.
- its loopback ``/32`` on ``lo``, and every route carrying ``src <loopback>``: ICMP errors (time
  exceeded, unreachable) go out from the loopback, as most data-centre switches answer. With
  ``icmp_from="interface"`` the lab sets ``icmp_errors_use_inbound_ifaddr=1`` instead, and the
  routers answer from the address of the interface the probe came in on.
- ``ignore_routes_with_linkdown=1``: a nexthop whose cable lost carrier is not used.
- ``icmp_ratelimit`` (per-peer ICMP limit, ms; default 0: off, so the global per-namespace
  limit of ``icmp_msgs_per_sec``/``icmp_msgs_burst`` is what probing meets, like a switch's
  policer). Both are left at the kernel's defaults unless asked.

Routing: ``static`` installs, on every router, a multipath route to every NIC port and loopback
over all its shortest-path next hops (a failed cable drops only the router's own nexthop; remote
routers keep hashing onto it: a black hole, as static routing really behaves); ``bgp`` runs FRR
(:mod:`c4p.lab.bgp`), which withdraws a failed cable's routes from remote ECMP groups.

A host namespace gets each NIC port's address on its interface and, per address, a policy rule
and table whose default route leaves by that port (so a probe or a QP from an address leaves by
its own NIC, as the 5-tuple under test requires). Nothing is routed outside 198.18.0.0/15
(2001:2::/48 on an IPv6 lab).

``family=6`` builds the same lab with IPv6 only (addresses from
:func:`c4p.lab.addressing.as_ipv6`, in 2001:2::/48; ``net.ipv6.fib_multipath_hash_policy`` and
``net.ipv6.icmp.ratelimit`` instead of the IPv4 ones; duplicate address detection off, so an
address is usable at once; static routing only, answers from the loopback as above). RoCEv2
over IPv6 is hashed on the same UDP source port, and ICMPv6 answers time exceeded the same way.

Teardown deletes the namespaces (and so every veth) and the lab's work directory, and kills every
process left in them; :meth:`Lab.down` is idempotent and runs on any failure of :meth:`Lab.up`.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Literal

from c4p.files import save_fabric
from c4p.lab import netns
from c4p.lab.addressing import LabError, LabPlan, as_ipv6, plan_lab, runtime_dir
from c4p.lab.bgp import Bgp
from topology.model import Fabric

Routing = Literal["static", "bgp"]
IcmpFrom = Literal["loopback", "interface"]
HASH_POLICIES = (0, 1, 3)
"""Linux multipath hash policies the lab builds with: 0 (L3), 1 (L4, the default), 3 (custom
fields: the L4 5-tuple)."""


class Lab:
    """One lab: build with :meth:`up`, remove with :meth:`down` (or use it as a context)."""

    def __init__(
        self,
        fabric: Fabric,
        *,
        routing: Routing = "static",
        icmp_from: IcmpFrom = "loopback",
        icmp_ratelimit_ms: int = 0,
        hash_seed: int = 0x0C4B,
        hash_policy: int = 1,
        family: int = 4,
        icmp_limit: tuple[int, int] | None = None,
        token: str | None = None,
        workdir: Path | None = None,
    ) -> None:
        if routing not in ("static", "bgp"):
            raise LabError(f"routing: {routing!r} is not one of static, bgp")
        if icmp_from not in ("loopback", "interface"):
            raise LabError(f"icmp_from: {icmp_from!r} is not one of loopback, interface")
        if hash_policy not in HASH_POLICIES:
            raise LabError(
                f"hash_policy: {hash_policy!r} is not one of {', '.join(map(str, HASH_POLICIES))}"
            )
        if family not in (4, 6):
            raise LabError(f"family: {family!r} is not 4 or 6")
        if family == 6 and (routing != "static" or icmp_from != "loopback"):
            raise LabError("family: 6 is built with static routing, answers from the loopback")
        if icmp_ratelimit_ms < 0:
            raise LabError(f"icmp_ratelimit_ms: {icmp_ratelimit_ms} is negative")
        self.plan: LabPlan = plan_lab(fabric, token)
        self.routing: Routing = routing
        self.icmp_from: IcmpFrom = icmp_from
        self.icmp_ratelimit_ms = icmp_ratelimit_ms
        self.hash_seed = hash_seed
        self.hash_policy = hash_policy
        self.family = family
        self.icmp_limit = icmp_limit
        self.workdir = workdir or Path(tempfile.gettempdir()) / f"c4p-lab-{self.plan.token}"
        self._bgp: Bgp | None = None
        self.down_links: set[int] = set()
        self._made: list[str] = []  # namespaces this object created (only those are deleted)

    # -- names -------------------------------------------------------------------------------

    @property
    def fabric(self) -> Fabric:
        return self.plan.fabric

    @property
    def token(self) -> str:
        return self.plan.token

    def ns(self, device: str) -> str:
        return self.plan.namespaces[device]

    def address(self, address: ipaddress.IPv4Address) -> str:
        """How a lab address is configured in the namespaces: as it is, or its IPv6 twin."""
        return str(address) if self.family == 4 else str(as_ipv6(address))

    def _host_prefix(self) -> int:
        return 32 if self.family == 4 else 128

    # -- up / down ---------------------------------------------------------------------------

    def __enter__(self) -> Lab:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Build the lab; on any failure tear down what was built and re-raise."""
        if self._made:
            raise LabError(f"lab {self.token}: already up")
        reason = netns.namespaces_possible()
        if reason:
            raise LabError(f"lab: {reason}")
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._write_state()
            self._namespaces()
            self._cables()
            self._hosts()
            if self.routing == "static":
                self._static_routes()
            else:
                bgp = Bgp(self)
                self._bgp = bgp
                bgp.start()
                bgp.wait_converged()
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Remove everything the lab made (safe to call twice, or after a partial ``up``)."""
        for ns in self._made:
            netns.delete_namespace(ns)
        self._made.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(runtime_dir(self.token), ignore_errors=True)

    def _write_state(self) -> None:
        state = {
            "token": self.token,
            "routing": self.routing,
            "hash_policy": self.hash_policy,
            "family": self.family,
            "namespaces": sorted(self.plan.namespaces.values()),
            "workdir": str(self.workdir),
            "fabric": self.fabric.model_dump(mode="json"),
        }
        (self.workdir / "lab.json").write_text(json.dumps(state, indent=1))
        save_fabric(self.fabric, self.workdir / "fabric.json")  # the lab's addresses

    def _namespaces(self) -> None:
        taken = set(netns.existing_namespaces())
        clash = sorted(taken & set(self.plan.namespaces.values()))
        if clash:
            raise LabError(f"token: namespaces {', '.join(clash[:3])} already exist")
        for ns in self.plan.namespaces.values():
            netns.run(["ip", "netns", "add", ns])
            self._made.append(ns)
            netns.ip_batch(["link set lo up"], ns)
        for name in self.plan.switches:
            ns = self.ns(name)
            if self.family == 6:
                self._ipv6_sysctls(ns, router=True)
                netns.ip_batch(
                    [f"address add {self.address(self.plan.loopbacks[name])}/128 dev lo"], ns
                )
                continue
            netns.sysctl(
                ns,
                {
                    "net.ipv4.ip_forward": 1,
                    # See the module docstring: policy 1 reuses a connected socket's hash.
                    "net.ipv4.fib_multipath_hash_policy": self.hash_policy,
                    "net.ipv4.fib_multipath_hash_fields": "0x0037",
                    "net.ipv4.fib_multipath_hash_seed": self.hash_seed,
                    "net.ipv4.conf.all.rp_filter": 0,
                    "net.ipv4.conf.default.rp_filter": 0,
                    "net.ipv4.conf.all.ignore_routes_with_linkdown": 1,
                    "net.ipv4.conf.default.ignore_routes_with_linkdown": 1,
                    "net.ipv4.icmp_ratelimit": self.icmp_ratelimit_ms,
                    "net.ipv4.icmp_errors_use_inbound_ifaddr": int(self.icmp_from == "interface"),
                },
            )
            if self.icmp_limit is not None:  # lower than Linux's 1000/s, burst 50: like hardware
                per_sec, burst = self.icmp_limit
                netns.sysctl(
                    ns, {"net.ipv4.icmp_msgs_per_sec": per_sec, "net.ipv4.icmp_msgs_burst": burst}
                )
            netns.ip_batch([f"address add {self.plan.loopbacks[name]}/32 dev lo"], ns)
        for name in self.plan.hosts:
            netns.sysctl(
                self.ns(name),
                {"net.ipv4.conf.all.rp_filter": 0, "net.ipv4.conf.default.rp_filter": 0},
            )
            if self.family == 6:
                self._ipv6_sysctls(self.ns(name), router=False)

    def _ipv6_sysctls(self, ns: str, *, router: bool) -> None:
        """IPv6 only: no duplicate address detection (addresses usable at once), no router
        advertisements, and on routers forwarding, the hash policy and ICMPv6 unlimited per
        peer (the kernel's default of one error per second per peer would silence probes)."""
        values: dict[str, int | str] = {
            "net.ipv6.conf.all.accept_dad": 0,
            "net.ipv6.conf.default.accept_dad": 0,
            "net.ipv6.conf.all.accept_ra": 0,
            "net.ipv6.conf.default.accept_ra": 0,
        }
        if router:
            values |= {
                "net.ipv6.conf.all.forwarding": 1,
                "net.ipv6.fib_multipath_hash_policy": self.hash_policy,
                "net.ipv6.fib_multipath_hash_fields": "0x0037",
                "net.ipv4.fib_multipath_hash_seed": self.hash_seed,  # both families' seed
                "net.ipv6.conf.all.ignore_routes_with_linkdown": 1,
                "net.ipv6.conf.default.ignore_routes_with_linkdown": 1,
                "net.ipv6.icmp.ratelimit": self.icmp_ratelimit_ms,
            }
        netns.sysctl(ns, values)

    def _cables(self) -> None:
        lines = [
            f"link add {c.a.interface} netns {c.a.namespace} type veth "
            f"peer name {c.b.interface} netns {c.b.namespace}"
            for c in self.plan.cables
        ]
        netns.ip_batch(lines)
        per_ns: dict[str, list[str]] = {}
        for c in self.plan.cables:
            for e in (c.a, c.b):
                per_ns.setdefault(e.namespace, []).extend(
                    [
                        f"address add {self.address(e.address)}/{self._host_prefix() - 1} "
                        f"dev {e.interface}" + (" nodad" if self.family == 6 else ""),
                        f"link set {e.interface} up",
                    ]
                )
        for ns, lines in per_ns.items():
            netns.ip_batch(lines, ns, family=self.family)

    def _hosts(self) -> None:
        for host in self.plan.hosts:
            lines = []
            for k, e in enumerate(self.plan.ends_of(host)):
                table = 100 + k
                peer, address = self.address(e.peer), self.address(e.address)
                if k == 0:
                    lines.append(f"route add default via {peer} dev {e.interface} src {address}")
                lines.append(
                    f"route add default via {peer} dev {e.interface} src {address} table {table}"
                )
                lines.append(f"rule add from {address} table {table}")
            netns.ip_batch(lines, self.ns(host), family=self.family)

    # -- static routing ----------------------------------------------------------------------

    def _adjacency(self) -> dict[str, list[tuple[str, str, ipaddress.IPv4Address]]]:
        """device -> [(neighbor, our interface, neighbor's address)] over usable cables."""
        adj: dict[str, list[tuple[str, str, ipaddress.IPv4Address]]] = {}
        for c in self.plan.cables:
            if not self.fabric.links[c.number].usable or c.number in self.down_links:
                continue
            adj.setdefault(c.a.device, []).append((c.b.device, c.a.interface, c.b.address))
            adj.setdefault(c.b.device, []).append((c.a.device, c.b.interface, c.a.address))
        return adj

    def _static_routes(self) -> None:
        adj = self._adjacency()
        switches = set(self.plan.switches)
        targets: list[tuple[str, ipaddress.IPv4Address]] = [
            (s, self.plan.loopbacks[s]) for s in self.plan.switches
        ]
        targets += [
            (e.device, e.address) for c in self.plan.cables for e in (c.a, c.b) if e.is_host
        ]
        routes: dict[str, list[str]] = {s: [] for s in self.plan.switches}
        for device, address in targets:
            dist = _distances(adj, device, switches)
            for s in self.plan.switches:
                if s == device or s not in dist:
                    continue
                hops = [
                    (ifname, via)
                    for peer, ifname, via in adj.get(s, [])
                    if dist.get(peer, -1) == dist[s] - 1
                ]
                if dist[s] == 1 and device not in switches:
                    continue  # the host is on a cable of ours: the connected /31 covers it
                nexthops = " ".join(
                    f"nexthop via {self.address(via)} dev {ifname}" for ifname, via in hops
                )
                routes[s].append(
                    f"route replace {self.address(address)}/{self._host_prefix()} "
                    f"src {self.address(self.plan.loopbacks[s])} proto static {nexthops}"
                )
        for s, lines in routes.items():
            netns.ip_batch(lines, self.ns(s), family=self.family)

    # -- changes while up --------------------------------------------------------------------

    def set_link(self, number: int, up: bool) -> None:
        """Take link ``number`` down (or up) at its ``a`` end: its peer loses carrier too."""
        cable = self.plan.cables[number]
        state = "up" if up else "down"
        netns.ip_batch([f"link set {cable.a.interface} {state}"], cable.a.namespace)
        if up:
            self.down_links.discard(number)
        else:
            self.down_links.add(number)

    def expected_groups(self) -> dict[str, dict[str, int]]:
        """Per switch: host cable prefix (``a.b.c.d/31``) -> shortest-path next hops over the
        cables that are up (what converged routing must show; cables of its own excluded)."""
        adj = self._adjacency()
        down, self.down_links = self.down_links, set()
        full = self._adjacency()
        self.down_links = down
        switches = set(self.plan.switches)
        out: dict[str, dict[str, int]] = {s: {} for s in self.plan.switches}
        for c in self.plan.cables:
            host = c.a if c.a.is_host else c.b if c.b.is_host else None
            if host is None or c.number in self.down_links:
                continue
            prefix = f"{min(c.a.address, c.b.address)}/31"
            dist = _distances(adj, host.device, switches)
            intact = _distances(full, host.device, switches)
            for s in self.plan.switches:
                if intact.get(s, 0) <= 1:
                    continue
                if dist.get(s) != intact[s]:
                    # Only longer (valley) paths are left: eBGP's AS-path loop check refuses
                    # them, so the prefix must be withdrawn here.
                    out[s][prefix] = 0
                    continue
                out[s][prefix] = sum(
                    1 for peer, _, _ in adj.get(s, []) if dist.get(peer, -1) == dist[s] - 1
                )
        return out

    def wait_routes(self, timeout: float = 60.0) -> None:
        """With BGP, wait until routing agrees with the cables' states (no-op for static)."""
        if self._bgp is not None:
            self._bgp.wait_converged(timeout)
        else:
            time.sleep(0.05)


def _distances(
    adj: dict[str, list[tuple[str, str, ipaddress.IPv4Address]]], target: str, switches: set[str]
) -> dict[str, int]:
    """Hops from every switch to ``target``, walking only through switches."""
    dist = {target: 0}
    todo = deque([target])
    while todo:
        node = todo.popleft()
        if node != target and node not in switches:
            continue
        for peer, _, _ in adj.get(node, []):
            if peer not in dist and peer in switches:
                dist[peer] = dist[node] + 1
                todo.append(peer)
    return dist


def load_state(workdir: Path) -> dict[str, object]:
    """The state file a lab wrote (for ``c4p lab down`` in another process)."""
    path = workdir / "lab.json"
    try:
        data: dict[str, object] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LabError(f"{path}: no lab state here ({exc})") from exc
    return data


def down_from_state(workdir: Path) -> list[str]:
    """Tear down the lab whose state is in ``workdir`` (from another process); its namespaces."""
    state = load_state(workdir)
    names = state.get("namespaces")
    if not isinstance(names, list) or not all(
        isinstance(n, str) and n.startswith("c4p-") for n in names
    ):
        raise LabError(f"{workdir / 'lab.json'}: namespaces: not a list of c4p- namespaces")
    for ns in names:
        netns.delete_namespace(ns)
    shutil.rmtree(workdir, ignore_errors=True)
    token = state.get("token")
    if isinstance(token, str) and token.isalnum():
        shutil.rmtree(runtime_dir(token), ignore_errors=True)
    return names
