"""FRR BGP for the lab: zebra + bgpd in every router namespace, eBGP as RFC 7938 lays it out.

Why BGP and not only static routes: with static routes a failed cable drops only the adjacent
router's nexthop; remote leaves keep hashing onto the spine that lost its way (a black hole).
A data-centre fabric runs eBGP so that the spine withdraws the prefix and every remote ECMP group
shrinks: the group membership change probing must then relearn (vendors remap ``hash mod n``).

Layout (RFC 7938 §5.2): every leaf has its own private ASN (65001, 65002, ...); the switches of
one higher tier (and pod) share one ASN, so paths that go down and up again are refused by AS
path loop detection. Each router peers over every cable with a router, redistributes its
connected networks (its loopback and its hosts' cables), installs up to 64 equal paths
(``maximum-paths``, ``multipath-relax``), and keeps fast timers (keepalive 1 s, hold 3 s, connect
retry 1 s) so that a cable pulled is a withdrawn route within seconds. zebra sets each BGP
route's source to the router's loopback (``set src``), so ICMP answers keep coming from it.

Daemons run per lab: config, pid files, vty sockets and the zserv socket are under
``<tmp>/c4p-run-<token>/frr/<switch>/`` (:func:`frr_root`), so labs and other FRR instances never
share one.

The daemons need five things of a lab (its token, fabric, address plan, namespaces and the ECMP
groups the cables' states call for): :class:`RoutedLab` names them, so this module does not
import :mod:`c4p.lab.build` (which starts BGP) and the two are not a circle.
"""

from __future__ import annotations

import ipaddress
import shutil
import time
from pathlib import Path
from typing import Protocol

from c4p.lab import netns
from c4p.lab.addressing import LabError, LabPlan, runtime_dir
from topology.model import Fabric

FRR_DIR = Path("/usr/lib/frr")
DAEMONS = ("zebra", "bgpd")


def frr_root(token: str) -> Path:
    """The FRR daemons' directory of a lab (see :func:`c4p.lab.addressing.runtime_dir`)."""
    return runtime_dir(token) / "frr"


def frr_missing() -> str | None:
    """``None`` if FRR's daemons are installed, else what is missing (one line)."""
    missing = [d for d in DAEMONS if not (FRR_DIR / d).exists()]
    return f"missing FRR daemons {', '.join(missing)} (Debian package frr)" if missing else None


class RoutedLab(Protocol):
    """What BGP needs of a lab (:class:`c4p.lab.build.Lab` is one)."""

    plan: LabPlan

    @property
    def token(self) -> str: ...

    @property
    def fabric(self) -> Fabric: ...

    def ns(self, device: str) -> str: ...

    def expected_groups(self) -> dict[str, dict[str, int]]: ...


class Bgp:
    """The FRR daemons of one lab."""

    def __init__(self, lab: RoutedLab) -> None:
        self.lab = lab
        self.root = frr_root(lab.token)
        switches = lab.fabric.switches
        leaves = [s for s in switches if s.tier == 1]
        self.asn: dict[str, int] = {s.name: 65001 + i for i, s in enumerate(leaves)}
        for s in switches:
            if s.tier > 1:
                self.asn[s.name] = 65100 + 10 * s.tier + (s.pod or 0)

    def _dir(self, switch: str) -> Path:
        return self.root / switch

    def _configs(self, switch: str) -> tuple[str, str]:
        plan = self.lab.plan
        loopback = plan.loopbacks[switch]
        folder = self._dir(switch)
        zebra = "\n".join(
            [
                f"hostname {switch}",
                f"log file {folder}/zebra.log",
                "route-map LOOPBACK-SRC permit 10",
                f" set src {loopback}",
                "ip protocol bgp route-map LOOPBACK-SRC",
                "",
            ]
        )
        lines = [
            "frr defaults datacenter",
            f"hostname {switch}",
            f"log file {folder}/bgpd.log",
            f"router bgp {self.asn[switch]}",
            f" bgp router-id {loopback}",
            " no bgp ebgp-requires-policy",
            " bgp bestpath as-path multipath-relax",
            " timers bgp 1 3",
        ]
        peers: list[ipaddress.IPv4Address] = []
        for end in plan.ends_of(switch):
            cable = next(c for c in plan.cables if end in (c.a, c.b))
            other = cable.b if cable.a == end else cable.a
            if other.device in self.asn:
                peers.append(other.address)
                lines += [
                    f" neighbor {other.address} remote-as {self.asn[other.device]}",
                    f" neighbor {other.address} timers connect 1",
                    f" neighbor {other.address} advertisement-interval 0",
                ]
        lines += [
            " address-family ipv4 unicast",
            "  redistribute connected",
            "  maximum-paths 64",
            " exit-address-family",
            "",
        ]
        return zebra, "\n".join(lines)

    def start(self) -> None:
        reason = frr_missing()
        if reason:
            raise LabError(f"routing bgp: {reason}")
        for switch in self.lab.plan.switches:
            folder = self._dir(switch)
            folder.mkdir(parents=True, exist_ok=True)
            zebra, bgpd = self._configs(switch)
            (folder / "zebra.conf").write_text(zebra)
            (folder / "bgpd.conf").write_text(bgpd)
            for path in (folder, *folder.iterdir()):
                shutil.chown(path, "frr", "frr")  # the daemons drop to user frr
            common = [
                "-d", "-u", "frr", "-g", "frr",
                "-z", str(folder / "zserv.api"), "--vty_socket", str(folder),
            ]  # fmt: skip
            ns = self.lab.ns(switch)
            netns.run(
                [str(FRR_DIR / "zebra"), *common, "-f", str(folder / "zebra.conf"),
                 "-i", str(folder / "zebra.pid"), "-P", "0"],
                ns=ns,
            )  # fmt: skip
            self._wait_file(folder / "zserv.api")
            netns.run(
                [str(FRR_DIR / "bgpd"), *common, "-f", str(folder / "bgpd.conf"),
                 "-i", str(folder / "bgpd.pid"), "-P", "0"],
                ns=ns,
            )  # fmt: skip

    @staticmethod
    def _wait_file(path: Path, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise LabError(f"routing bgp: {path} did not appear within {timeout:g} s")
            time.sleep(0.05)

    def wait_converged(self, timeout: float = 60.0) -> None:
        """Wait until every router's kernel has, for every host cable it does not touch, one
        nexthop per shortest-path neighbor over the cables that are up."""
        deadline = time.monotonic() + timeout
        while True:
            wrong = self.unconverged()
            if not wrong:
                return
            if time.monotonic() > deadline:
                raise LabError(f"routing bgp: not converged after {timeout:g} s: {wrong[:3]}")
            time.sleep(0.25)

    def unconverged(self) -> list[str]:
        """What still differs from the expected ECMP groups (empty: converged)."""
        expected = self.lab.expected_groups()
        wrong = []
        for switch, groups in expected.items():
            routes = netns.ip_json(["route", "show"], self.lab.ns(switch))
            have: dict[str, int] = {}
            for route in routes:
                dst = route.get("dst", "")
                hops = route.get("nexthops")
                have[dst] = len(hops) if hops else (1 if route.get("gateway") else 0)
            for prefix, count in groups.items():
                if have.get(prefix, 0) != count:
                    wrong.append(f"{switch} {prefix}: {have.get(prefix, 0)} of {count} paths")
        return wrong
