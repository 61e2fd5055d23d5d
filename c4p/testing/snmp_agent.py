"""A real SNMP agent for an emulated fabric: ``.snmprec`` files served by snmpsim.

Why snmpsim: the SNMP driver must be tested against a real agent speaking real SNMP
(v2c and v3 authPriv, GETBULK, counters). One ``snmpsim-command-responder`` process serves
every switch: each switch is one ``<switch>.snmprec`` file, selected by SNMPv2c community or
SNMPv3 context name equal to the switch name, so a 2,048-GPU fabric (96 switches) is still
one process on one loopback port.

The files hold IF-MIB (ifTable, ifXTable) and LLDP-MIB (local ports, remote systems,
management addresses) as the emulator sees the fabric when they are written. LLDP local port
numbers are deliberately *not* the ifIndex (``ifIndex + 1000``), so the driver must map them
through ``lldpLocPortId``, as on many real switches. Octet, error and ECN counters advance with
snmpsim's ``numeric`` variation at the rate the emulator carries; a change of link state is
shown by :meth:`SnmpAgent.refresh` (rewrite and restart on the same port).

The process binds 127.0.0.1 only, runs with ``SNMPSIM_ALLOW_ROOT=true`` (needed as root), and
:meth:`SnmpAgent.stop` (or the context manager) terminates it, then kills it if it lingers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from c4p.testing.dataplane import FabricEmulator
from southbound.targets import DriverName, SnmpOptions, TargetConfig, TargetsFile, Timeouts

LLDP_PORT_OFFSET = 1000
STARTUP_TIMEOUT_S = 60.0
_RESPONDER = "import sys; from snmpsim.commands.responder import main; sys.exit(main())"


@dataclass(frozen=True)
class V3User:
    """The agent's SNMPv3 USM user (snmpsim flag spelling for the protocols)."""

    user: str = "c4p"
    auth_key: str = "c4p-auth-key"
    priv_key: str = "c4p-priv-key"
    auth_proto: str = "SHA256"
    priv_proto: str = "AES"


def _oid_key(oid: str) -> tuple[int, ...]:
    return tuple(int(x) for x in oid.split("."))


def _hex(text: str) -> str:
    return text.encode().hex()


def _mac_hex(mac: str) -> str:
    return mac.replace(":", "")


def _counter(oid: str, tag: int, value: int, rate: float) -> tuple[str, str]:
    if rate > 0:
        return oid, f"{tag}:numeric|rate={rate:.6f},initial={value}"
    return oid, f"{tag}|{value}"


def snmprec(emu: FabricEmulator, switch: str) -> str:
    """The ``.snmprec`` text of one switch (records in OID order)."""
    rows: list[tuple[str, str]] = [
        ("1.3.6.1.2.1.1.1.0", "4|c4p emulated switch"),
        ("1.3.6.1.2.1.1.3.0", "67|100"),
        ("1.3.6.1.2.1.1.5.0", f"4|{switch}"),
    ]
    for port in emu.ports(switch):
        i, name = port.if_index, port.interface
        c = emu.counters(switch, name)
        rx, tx = emu.rates(switch, name)
        up = emu.link_up(port.link)
        rows += [
            (f"1.3.6.1.2.1.2.2.1.1.{i}", f"2|{i}"),
            (f"1.3.6.1.2.1.2.2.1.2.{i}", f"4|{name}"),
            (f"1.3.6.1.2.1.2.2.1.8.{i}", f"2|{1 if up else 2}"),
            (f"1.3.6.1.2.1.2.2.1.13.{i}", f"65|{c.in_discards % 2**32}"),
            _counter(f"1.3.6.1.2.1.2.2.1.14.{i}", 65, c.in_errors % 2**32, 0.0),
            _counter(f"1.3.6.1.2.1.2.2.1.19.{i}", 65, c.out_discards % 2**32, 0.0),
            (f"1.3.6.1.2.1.2.2.1.20.{i}", f"65|{c.out_errors % 2**32}"),
            (f"1.3.6.1.2.1.31.1.1.1.1.{i}", f"4|{name}"),
            _counter(f"1.3.6.1.2.1.31.1.1.1.6.{i}", 70, c.in_octets, rx),
            _counter(f"1.3.6.1.2.1.31.1.1.1.10.{i}", 70, c.out_octets, tx),
            (f"1.3.6.1.2.1.31.1.1.1.15.{i}", f"66|{round(port.speed_gbps * 1000)}"),
        ]
        p = i + LLDP_PORT_OFFSET
        rows += [
            (f"1.0.8802.1.1.2.1.3.7.1.2.{p}", "2|5"),
            (f"1.0.8802.1.1.2.1.3.7.1.3.{p}", f"4|{name}"),
            (f"1.0.8802.1.1.2.1.3.7.1.4.{p}", f"4|{name}"),
        ]
    for n in emu.neighbors(switch):
        p = emu.port(switch, n.local_interface).if_index + LLDP_PORT_OFFSET
        idx = f"0.{p}.1"
        caps = "28" if n.is_switch else "01"
        rows += [
            (f"1.0.8802.1.1.2.1.4.1.1.4.{idx}", "2|4"),
            (f"1.0.8802.1.1.2.1.4.1.1.5.{idx}", f"4x|{_mac_hex(n.chassis_id)}"),
            (f"1.0.8802.1.1.2.1.4.1.1.6.{idx}", "2|5"),
            (f"1.0.8802.1.1.2.1.4.1.1.7.{idx}", f"4x|{_hex(n.port_id)}"),
            (f"1.0.8802.1.1.2.1.4.1.1.8.{idx}", f"4x|{_hex(n.port_description)}"),
            (f"1.0.8802.1.1.2.1.4.1.1.9.{idx}", f"4x|{_hex(n.system_name)}"),
            (f"1.0.8802.1.1.2.1.4.1.1.11.{idx}", f"4x|{caps}"),
            (f"1.0.8802.1.1.2.1.4.1.1.12.{idx}", f"4x|{caps}"),
        ]
        if n.mgmt_address is not None:
            octets = str(n.mgmt_address)
            rows.append((f"1.0.8802.1.1.2.1.4.2.1.3.{idx}.1.4.{octets}", "2|2"))
    rows.sort(key=lambda r: _oid_key(r[0]))
    return "".join(f"{oid}|{value}\n" for oid, value in rows)


def free_udp_port() -> int:
    """An ephemeral UDP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class SnmpAgent:
    """snmpsim serving every switch of an emulated fabric on 127.0.0.1; a context manager."""

    def __init__(
        self,
        emu: FabricEmulator,
        directory: Path,
        *,
        v3: V3User | None = None,
        switches: tuple[str, ...] | None = None,
    ) -> None:
        self.emu = emu
        self.directory = directory
        self.v3 = v3 or V3User()
        self.switches = switches if switches is not None else emu.switches
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_file(self) -> Path:
        return self.directory / "snmpsim.log"

    def write(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for old in self.data_dir.glob("*.snmprec"):
            old.unlink()
        for switch in self.switches:
            (self.data_dir / f"{switch}.snmprec").write_text(snmprec(self.emu, switch))

    def start(self) -> Self:
        self.write()
        self.port = self.port or free_udp_port()
        cache = self.directory / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-c", _RESPONDER,
            f"--data-dir={self.data_dir}", f"--cache-dir={cache}", "--force-index-rebuild",
            f"--agent-udpv4-endpoint=127.0.0.1:{self.port}",
            f"--v3-user={self.v3.user}", f"--v3-auth-key={self.v3.auth_key}",
            f"--v3-auth-proto={self.v3.auth_proto}", f"--v3-priv-key={self.v3.priv_key}",
            f"--v3-priv-proto={self.v3.priv_proto}",
        ]  # fmt: skip
        env = {**os.environ, "SNMPSIM_ALLOW_ROOT": "true", "PYTHONWARNINGS": "ignore"}
        with self.log_file.open("wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.log_file.read_text(errors="replace")
            if "Listening at UDP/IPv4 endpoint" in text:
                return
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"snmpsim exited ({self._process.returncode}):\n{text[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"snmpsim did not start listening within {STARTUP_TIMEOUT_S:g} s")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def refresh(self) -> None:
        """Show the emulator's current link states: rewrite the files, restart on the port."""
        self.stop()
        self.start()

    def targets_file(
        self,
        *,
        version: str = "2c",
        poll_interval_s: float = 0.5,
        timeouts: Timeouts | None = None,
        switches: tuple[str, ...] | None = None,
    ) -> TargetsFile:
        """Targets for the SNMP driver: v2c community or v3 context = switch name."""
        targets = []
        for switch in switches or self.switches:
            if version == "2c":
                creds: dict[str, str] = {"version": "2c", "community": switch}
            else:
                creds = {
                    "version": "3",
                    "user": self.v3.user,
                    "auth_protocol": self.v3.auth_proto.lower(),
                    "auth_key": self.v3.auth_key,
                    "priv_protocol": "aes128"
                    if self.v3.priv_proto == "AES"
                    else self.v3.priv_proto.lower(),
                    "priv_key": self.v3.priv_key,
                    "context": switch,
                }
            options = SnmpOptions.model_validate(
                {
                    "port": self.port,
                    "credentials": creds,
                    "poll_interval_s": poll_interval_s,
                    "source_address": "127.0.0.1",
                }
            )
            targets.append(
                TargetConfig(
                    name=switch,
                    address="127.0.0.1",
                    driver=DriverName.SNMP,
                    snmp=options,
                    timeouts=timeouts
                    or Timeouts(connect_s=2.0, rpc_s=3.0, retry_initial_s=0.1, retry_max_s=1.0),
                )
            )
        return TargetsFile(targets=tuple(targets))
