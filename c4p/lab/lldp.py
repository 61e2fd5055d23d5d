"""lldpd in every lab namespace, set up the way c4p's discovery reads LLDP.

Why real lldpd: the LLDP neighbours the lab's gNMI faces report must come from frames that
really crossed the veth cables, so that a cable taken down really disappears from both ends'
tables (after lldpd's TTL), as on a switch.

Conventions (see :mod:`southbound.observed`): a switch advertises its name as system name and
its interface name as port id (``portidsubtype ifname``); a host advertises its name, each NIC
port's name as port id with the NIC name as port description, and the NIC port's address as
management address. Transmit interval 1 s (hold x4) so that changes show within seconds.

Each lldpd runs in the foreground (``-d``, no pid file that could clash with a system lldpd or
another lab), with its own control socket ``<tmp>/c4p-run-<token>/lldp/<device>.sock`` and
configuration file (``-O``), in its own session; it dies with its namespace at teardown.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from c4p.lab import netns
from c4p.lab.addressing import LabError, LabPlan, runtime_dir

TX_INTERVAL_S = 1


def lldpd_missing() -> str | None:
    missing = [t for t in ("lldpd", "lldpcli") if shutil.which(t) is None]
    return f"missing {', '.join(missing)} (Debian package lldpd)" if missing else None


def _config(plan: LabPlan, device: str) -> str:
    lines = [
        f"configure system hostname {device}",
        "configure lldp portidsubtype ifname",
        f"configure lldp tx-interval {TX_INTERVAL_S}",
    ]
    host = next((h for h in plan.fabric.hosts if h.name == device), None)
    if host is not None:
        lines.append("configure system capabilities enabled station")
        for nic in host.nics:
            for port in nic.ports:
                lines.append(
                    f"configure ports {port.name} lldp portidsubtype local {port.name} "
                    f"description {nic.name}"
                )
        addresses = ",".join(str(p.address) for n in host.nics for p in n.ports)
        lines.append(f"configure system ip management pattern {addresses}")
    else:
        lines.append("configure system capabilities enabled bridge,router")
        lines.append(f"configure system ip management pattern {plan.loopbacks[device]}")
    return "\n".join(lines) + "\n"


class Lldp:
    """The lldpd daemons of one lab (one per namespace)."""

    def __init__(self, plan: LabPlan) -> None:
        self.plan = plan
        self.root = runtime_dir(plan.token) / "lldp"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def socket(self, device: str) -> Path:
        return self.root / f"{device}.sock"

    def start(self) -> None:
        reason = lldpd_missing()
        if reason:
            raise LabError(f"lldp: {reason}")
        self.root.mkdir(parents=True, exist_ok=True)
        for device, ns in self.plan.namespaces.items():
            conf = self.root / f"{device}.conf"
            conf.write_text(_config(self.plan, device))
            log = (self.root / f"{device}.log").open("wb")
            self.procs[device] = subprocess.Popen(
                ["ip", "netns", "exec", ns, "lldpd", "-d", "-u", str(self.socket(device)),
                 "-O", str(conf)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            log.close()
        deadline = time.monotonic() + 20
        for device in self.plan.namespaces:
            while not self.socket(device).exists():
                if self.procs[device].poll() is not None or time.monotonic() > deadline:
                    raise LabError(f"lldp: lldpd for {device} did not start (see its log)")
                time.sleep(0.05)


def neighbors(socket: Path, ns: str) -> list[dict[str, Any]]:
    """lldpcli's neighbours as flat records: local interface, system name, chassis id, port
    id and description, management address, capabilities enabled."""
    out = netns.run(["lldpcli", "-u", str(socket), "-f", "json", "show", "neighbors"], ns=ns)
    data = json.loads(out or "{}").get("lldp") or {}
    interfaces = data.get("interface") or []
    if isinstance(interfaces, dict):  # lldpcli: a dict keyed by name, or a list of such dicts
        interfaces = [interfaces]
    records = []
    for group in interfaces:
        for local, body in group.items():
            chassis = body.get("chassis") or {}
            if len(chassis) == 1 and isinstance(next(iter(chassis.values())), dict):
                name, info = next(iter(chassis.items()))
            else:
                name, info = chassis.get("name", {}).get("value", ""), chassis
            caps = info.get("capability") or []
            if isinstance(caps, dict):
                caps = [caps]
            mgmt = info.get("mgmt-ip")
            port = body.get("port") or {}
            records.append(
                {
                    "local": local,
                    "system_name": name,
                    "chassis_id": (info.get("id") or {}).get("value", ""),
                    "port_id": (port.get("id") or {}).get("value", ""),
                    "port_description": port.get("descr", ""),
                    "mgmt": mgmt[0] if isinstance(mgmt, list) else mgmt,
                    "capabilities": {c.get("type", "").lower() for c in caps if c.get("enabled")},
                }
            )
    return records
