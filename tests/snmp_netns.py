"""A switch and a host in two network namespaces, with net-snmp's ``snmpd`` and ``lldpd``.

Why here and this small: the SNMP driver must be checked against agents c4p did not write, on
a real kernel. The switch namespace runs ``snmpd`` (IF-MIB, IP-MIB) and, unless told not to,
``lldpd -x`` as its AgentX subagent (LLDP-MIB); the host namespace runs ``lldpd`` with its
default settings (so it sends its MAC as port-id and its interface name as description). A
third veth joins the switch namespace to the test's own, so the driver can reach ``snmpd``.

Safety: every name carries a per-run token; addresses are from 198.18.0.0/15 and the
namespaces have no default route; every daemon has its own config, pid, control socket and
AgentX paths in the test's temp dir; everything is killed and deleted on exit, also on failure.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

COMMUNITY = "c4p-lab-ro"
V3_USER, V3_AUTH, V3_PRIV = "c4plab", "c4p-auth-key-1", "c4p-priv-key-1"


def missing() -> str | None:
    """Why this lab cannot run here, or ``None``."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "snmpd", "lldpd"):
        if shutil.which(tool) is None:
            return f"needs {tool} (Debian packages iproute2, snmpd, lldpd)"
    return None


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=20).stdout


@dataclass
class SnmpLab:
    """What a test needs: where snmpd listens and what the switch owns."""

    tmp: Path
    token: str = field(
        default_factory=lambda: f"{os.getpid() % 1000:03d}{random.randrange(4096):03x}"
    )
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        t = self.token
        self.sw_ns, self.host_ns = f"c4pd-sw-{t}", f"c4pd-h-{t}"
        self.sw_if, self.host_if = f"vs{t}", f"vh{t}"  # the cable (<= 15 characters)
        self.mgmt_root, self.mgmt_sw = f"vm{t}", f"vn{t}"
        used = _run("ip", "-4", "-o", "addr")
        for _ in range(64):  # a /24 of 198.18.0.0/15 nobody here uses yet
            net = ipaddress.IPv4Network((0xC6120000 + (random.randrange(512) << 8), 24))
            if f" {str(net.network_address)[:-1]}" not in used:
                break
        base = net.network_address
        self.sw_addr, self.host_addr = base + 1, base + 2  # 198.18.N.0/30: the cable
        self.mgmt_addr, self.snmp_addr = base + 5, base + 6  # 198.18.N.4/30: to snmpd
        self.loopback = base + 129  # 198.18.N.129/32 on the switch's lo
        self.port = 0
        # lldpd runs lldpcli unprivileged (user _lldpd): its control sockets go in a directory
        # that user can reach (pytest's temp dirs are 0700), removed on teardown.
        self.sockets = Path(tempfile.mkdtemp(prefix=f"c4pd-{t}-"))
        self.sockets.chmod(0o755)

    def _ns(self, ns: str, *cmd: str) -> str:
        return _run("ip", "netns", "exec", ns, *cmd)

    def up(self, *, with_lldpd: bool = True) -> SnmpLab:
        for ns in (self.sw_ns, self.host_ns):
            _run("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            self._ns(ns, "ip", "link", "set", "lo", "up")
        _run("ip", "link", "add", self.sw_if, "type", "veth", "peer", "name", self.host_if)
        self.links.append(self.sw_if)
        _run("ip", "link", "set", self.sw_if, "netns", self.sw_ns)
        _run("ip", "link", "set", self.host_if, "netns", self.host_ns)
        _run("ip", "link", "add", self.mgmt_root, "type", "veth", "peer", "name", self.mgmt_sw)
        self.links.append(self.mgmt_root)
        _run("ip", "link", "set", self.mgmt_sw, "netns", self.sw_ns)
        _run("ip", "addr", "add", f"{self.mgmt_addr}/30", "dev", self.mgmt_root)
        _run("ip", "link", "set", self.mgmt_root, "up")
        self._ns(self.sw_ns, "ip", "addr", "add", f"{self.snmp_addr}/30", "dev", self.mgmt_sw)
        self._ns(self.sw_ns, "ip", "addr", "add", f"{self.sw_addr}/30", "dev", self.sw_if)
        self._ns(self.sw_ns, "ip", "addr", "add", f"{self.loopback}/32", "dev", "lo")
        self._ns(self.host_ns, "ip", "addr", "add", f"{self.host_addr}/30", "dev", self.host_if)
        for ns, dev in ((self.sw_ns, self.mgmt_sw), (self.sw_ns, self.sw_if)):
            self._ns(ns, "ip", "link", "set", dev, "up")
        self._ns(self.host_ns, "ip", "link", "set", self.host_if, "up")
        self.port = int(
            self._ns(
                self.sw_ns,
                "python3",
                "-c",
                "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                f"s.bind(('{self.snmp_addr}', 0)); print(s.getsockname()[1])",
            )
        )
        self._snmpd()
        if with_lldpd:
            self._lldpd(self.sw_ns, "leaf-lab", self.sw_if, agentx=True)
        self._lldpd(self.host_ns, "host-lab", self.host_if, agentx=False)
        return self

    @property
    def agentx(self) -> Path:
        return self.tmp / "agentx.sock"

    def _snmpd(self) -> None:
        state = self.tmp / "snmp-state"
        state.mkdir(exist_ok=True)
        conf = self.tmp / "snmpd.conf"
        conf.write_text(
            f"agentaddress udp:{self.snmp_addr}:{self.port}\n"
            f"rocommunity {COMMUNITY} 198.18.0.0/15\n"
            f'createUser {V3_USER} SHA-256 "{V3_AUTH}" AES "{V3_PRIV}"\n'
            f"rouser {V3_USER} priv\n"
            "master agentx\n"
            f"agentXSocket {self.agentx}\n"
            "agentXPerms 0600 0700\n"
            "sysName leaf-lab\n"
        )
        env = {**os.environ, "SNMP_PERSISTENT_DIR": str(state), "MIBS": ""}
        self._spawn(
            self.sw_ns,
            ["snmpd", "-f", "-C", "-c", str(conf), "-p", str(self.tmp / "snmpd.pid"),
             "-Lf", str(self.tmp / "snmpd.log")],
            env,
        )  # fmt: skip
        deadline = time.monotonic() + 15
        while not self.agentx.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _lldpd(self, ns: str, hostname: str, interface: str, *, agentx: bool) -> None:
        conf = self.tmp / f"lldpd-{hostname}.conf"
        conf.write_text(
            f"configure system hostname {hostname}\n"
            "configure lldp tx-interval 1\n"
            f"configure system interface pattern {interface}\n"
        )
        conf.chmod(0o644)
        conf = self.sockets / conf.name
        conf.write_text((self.tmp / conf.name).read_text())
        conf.chmod(0o644)
        cmd = ["lldpd", "-d", "-O", str(conf), "-u", str(self.sockets / f"{hostname}.ctl"),
               "-I", interface]  # fmt: skip
        if agentx:
            cmd += ["-x", "-X", str(self.agentx)]
        self._spawn(ns, cmd, dict(os.environ))

    def _spawn(self, ns: str, cmd: list[str], env: dict[str, str]) -> None:
        log = open(self.tmp / f"{Path(cmd[0]).name}-{len(self.procs)}.out", "wb")  # noqa: SIM115
        self.procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", ns, *cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )
        log.close()

    def down(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=20)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        shutil.rmtree(self.sockets, ignore_errors=True)


@contextlib.contextmanager
def snmp_lab(tmp: Path, *, with_lldpd: bool = True) -> Iterator[SnmpLab]:
    lab = SnmpLab(tmp)
    try:
        yield lab.up(with_lldpd=with_lldpd)
    finally:
        lab.down()
