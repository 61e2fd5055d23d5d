"""gNMI faces for the lab's switches, answering from the namespaces' real kernel state.

Why: discovery, link events and link loads must be tested against a switch whose state c4p did
not make up. Each lab switch gets the project's own gNMI target (:mod:`c4p.testing.gnmi_target`,
real gRPC on 127.0.0.1 in the root namespace) with a different *data source*:
:class:`KernelSource` is a :class:`~c4p.testing.dataplane.FabricEmulator` whose state-reading
methods are replaced by reads of the kernel and of lldpd:

- interface oper-status and counters from ``ip -n NS -j -s link`` (a cable is up when both of
  its ends' kernels say ``UP``; counters are the kernel's 64-bit byte, error and drop counts);
- LLDP neighbours from ``lldpcli -f json show neighbors`` of the lldpd in that namespace.

A poller thread reads every namespace every ``interval`` seconds; when an interface changes
state it bumps that switch's version, which wakes the target's ON_CHANGE streams exactly as a
link failed in the emulator does. The target code is not changed: the seam is the emulator's
interface.
"""

from __future__ import annotations

import ipaddress
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from c4p.lab import netns
from c4p.lab.build import Lab
from c4p.lab.lldp import Lldp, neighbors
from c4p.testing.dataplane import FabricEmulator, Neighbor, PortCounters
from c4p.testing.gnmi_target import GnmiFabric


class KernelSource(FabricEmulator):
    """The lab's kernels and lldpds behind the emulator's interface (see the module doc)."""

    def __init__(self, lab: Lab, lldp: Lldp, *, interval: float = 0.25) -> None:
        super().__init__(lab.fabric)
        self.lab = lab
        self.lldp = lldp
        self.interval = interval
        self._links: dict[tuple[str, str], dict[str, Any]] = {}
        self._lldp: dict[str, list[Neighbor]] = {s: [] for s in self.switches}
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lab-kernel")
        self.refresh()
        self._thread = threading.Thread(target=self._poll, name="lab-kernel-poll", daemon=True)
        self._thread.start()

    # -- reading the kernel ------------------------------------------------------------------

    def _read(self, device: str) -> dict[tuple[str, str], dict[str, Any]]:
        ns = self.lab.ns(device)
        return {(device, link["ifname"]): link for link in netns.ip_json(["-s", "link"], ns)}

    def refresh(self, lldp_too: bool = True) -> None:
        """Read every namespace once; bump the version of switches whose interfaces changed.
        (LLDP tables change at lldpd's pace, so the poller reads them every fourth time.)"""
        devices = list(self.lab.plan.namespaces)
        fresh: dict[tuple[str, str], dict[str, Any]] = {}
        for part in self._pool.map(self._read, devices):
            fresh.update(part)
        lldp = (
            dict(zip(self.switches, self._pool.map(self._neighbors, self.switches), strict=True))
            if lldp_too
            else self._lldp
        )
        with self._lock:
            before = {k: v.get("operstate") for k, v in self._links.items()}
            self._links = fresh
            self._lldp = lldp
            changed = {d for (d, i), v in fresh.items() if before.get((d, i)) != v.get("operstate")}
            for cable in self.lab.plan.cables:
                ends = {cable.a.device, cable.b.device}
                if any(e in changed for e in ends):
                    for device in ends & set(self._versions):
                        self._versions[device] += 1
                        self._conds[device].notify_all()

    def _neighbors(self, switch: str) -> list[Neighbor]:
        out = []
        for n in neighbors(self.lldp.socket(switch), self.lab.ns(switch)):
            mgmt = n["mgmt"]
            out.append(
                Neighbor(
                    local_interface=n["local"],
                    system_name=n["system_name"],
                    port_id=n["port_id"],
                    chassis_id=n["chassis_id"],
                    port_description=n["port_description"],
                    mgmt_address=ipaddress.IPv4Address(mgmt) if mgmt else None,
                    is_switch=bool(n["capabilities"] & {"bridge", "router"}),
                )
            )
        return out

    def _poll(self) -> None:
        rounds = 0
        while not self._stop.wait(self.interval):
            rounds += 1
            try:
                self.refresh(lldp_too=rounds % 4 == 0)
            except Exception:  # noqa: BLE001  a namespace going away at teardown
                if self._stop.is_set():
                    return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=True)

    # -- the emulator's interface, from the kernel -------------------------------------------

    def link_up(self, link: int) -> bool:
        cable = self.lab.plan.cables[link]
        with self._lock:
            return all(
                self._links.get((e.device, e.interface), {}).get("operstate") == "UP"
                for e in (cable.a, cable.b)
            )

    def counters(self, switch: str, interface: str) -> PortCounters:
        with self._lock:
            stats = self._links.get((switch, interface), {}).get("stats64", {})
        rx, tx = stats.get("rx", {}), stats.get("tx", {})
        return PortCounters(
            in_octets=int(rx.get("bytes", 0)),
            out_octets=int(tx.get("bytes", 0)),
            in_errors=int(rx.get("errors", 0)),
            out_errors=int(tx.get("errors", 0)),
            in_discards=int(rx.get("dropped", 0)),
            out_discards=int(tx.get("dropped", 0)),
            ecn_marked=0,
        )

    def neighbors(self, switch: str) -> list[Neighbor]:
        with self._lock:
            return list(self._lldp.get(switch, []))


class LabGnmi:
    """lldpd everywhere, the kernel source, and one gNMI target per lab switch (a context)."""

    def __init__(self, lab: Lab, *, interval: float = 0.25) -> None:
        self.lab = lab
        self.interval = interval
        self.lldp = Lldp(lab.plan)
        self.source: KernelSource | None = None
        self.servers: GnmiFabric | None = None

    def __enter__(self) -> GnmiFabric:
        try:
            self.lldp.start()
            self.source = KernelSource(self.lab, self.lldp, interval=self.interval)
            self.servers = GnmiFabric(self.source).start()
        except BaseException:
            self.close()
            raise
        return self.servers

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.servers is not None:
            self.servers.stop()
        if self.source is not None:
            self.source.close()
        for proc in self.lldp.procs.values():
            proc.kill()
            proc.wait(timeout=10)
