"""Shared pieces of the libc4p tests: the built library, a controller and an agent as real
processes, and a rank (the C driver ``c4p_check``) run under valgrind where it is installed.

Every process a helper starts is killed on exit (in a ``finally``); sockets live in the test's
own temporary directory; TCP ports come from binding port 0; waits are bounded.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import yaml
from service_cases import ADMIN_TOKEN, wait_until

from c4p.client.mirror import AppliedBinding
from c4p.files import save_fabric
from topology.model import Fabric

ROOT = Path(__file__).resolve().parents[1]
LIBC4P = ROOT / "libc4p"
BUILD = LIBC4P / "build"
CHECK = BUILD / "c4p_check"
VALGRIND = shutil.which("valgrind")
VALGRIND_ERROR = 99


def build_libc4p() -> str | None:
    """``make -C libc4p``; the reason it cannot run here, or None."""
    if shutil.which("cc") is None or shutil.which("make") is None:
        return "no C compiler or make on this machine"
    done = subprocess.run(
        ["make", "-s", "-C", str(LIBC4P)], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"make -C libc4p failed:\n{done.stdout}\n{done.stderr}")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def controller_config(
    fabric: Fabric, directory: Path, metrics: str | None = None
) -> tuple[Path, str]:
    """A ``c4p serve`` config on a free port (a restart comes back on the same one)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_fabric(fabric, directory / "fabric.json")
    address = f"127.0.0.1:{free_port()}"
    config = directory / "controller.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "fabric": {"path": "fabric.json"},
                "listen": {"address": address, "grace_s": 0.5},
                "store": {"path": "state/c4p.db", "synchronous": "normal"},
                "auth": {"admin": [{"value": ADMIN_TOKEN}]},
                "metrics": {"address": metrics},
                "logging": {"level": "warning"},
                "controller": {"debounce_s": 0.02, "max_delay_s": 0.2},
                "planner": {"budget_s": 1.0},
            }
        )
    )
    return config, address


def agent_config(
    directory: Path, host: str, controller: str, **socket_options: object
) -> tuple[Path, Path]:
    """A ``c4p agent`` config with a ``bindings:`` section and no ports (a bindings-only
    agent: no raw sockets needed); returns (config file, socket path)."""
    directory.mkdir(parents=True, exist_ok=True)
    sock = directory / "agent.sock"
    config = directory / "agent.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "host": host,
                "controllers": [controller],
                "reconnect": {"initial_s": 0.05, "max_s": 0.5},
                "bindings": {
                    "socket": {"path": str(sock), **socket_options},
                    "state_dir": "state",  # relative: read from the config's directory
                    "verify_timeout_s": 3.0,
                },
            }
        )
    )
    return config, sock


@contextmanager
def process(argv: list[str], ready: Path, what: str) -> Iterator[subprocess.Popen[bytes]]:
    """A child that writes ``ready`` once serving; killed on exit whatever happens."""
    ready.unlink(missing_ok=True)
    log = ready.with_suffix(".log")  # a file, not a pipe: a chatty child never blocks on it
    with log.open("wb") as err:
        child = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    try:
        if not wait_until(lambda: ready.exists() or child.poll() is not None, 60, 0.05):
            raise TimeoutError(f"{what} did not become ready: {log.read_text()[-2000:]}")
        if child.poll() is not None:
            raise RuntimeError(
                f"{what} exited with status {child.returncode}: {log.read_text()[-2000:]}"
            )
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)


def controller(config: Path) -> Iterator[subprocess.Popen[bytes]]:
    ready = config.parent / "controller.ready"
    argv = [sys.executable, "-m", "c4p", "serve", "--config", str(config)]
    return process([*argv, "--ready-file", str(ready)], ready, "the controller")


AGENT = [sys.executable, "-c", "from c4p.cli import main; main()", "agent"]
"""``c4p agent`` as a process (the installed entry point's code, without needing it on PATH)."""


def agent(config: Path, *options: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``c4p agent --config`` process, ready once every component has started."""
    ready = config.parent / "agent.ready"
    argv = [*AGENT, "--config", str(config), *options, "--ready-file", str(ready)]
    return process(argv, ready, "the agent")


def as_user(uid: int) -> list[str]:
    """The argv prefix that runs a command as ``uid`` (and its own group), for real."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


class Unreachable(RuntimeError):
    """A uid cannot reach the files a test would run as that uid (raised at once, with why)."""


def reachable(uid: int, path: Path, test: str = "-x") -> bool:
    """Whether ``uid`` passes the kernel's own access check for ``path`` (``test(1)`` as it)."""
    done = subprocess.run([*as_user(uid), "test", test, str(path)], timeout=30)
    return done.returncode == 0


def _blocker(path: Path) -> str:
    """The first directory on the way to ``path`` that others may not pass (for the message)."""
    for parent in reversed(path.parents):
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            return f"{parent} (mode {stat.S_IMODE(mode):04o})"
    return "an ancestor"


@contextmanager
def staged_for(uid: int, *files: Path, under: Path | None = None) -> Iterator[Path]:
    """A fresh directory every user may pass (mode 0755, in ``under`` or ``$TMPDIR``) holding
    copies of ``files`` (symbolic links kept as links), removed on exit.

    Why: a test that runs something as another uid cannot run it from the checkout, whose
    parent may be 0700 (a clone under ``/root`` or ``mktemp -d``). ``Unreachable`` at once,
    naming the directory in the way, when ``uid`` cannot reach the stage either."""
    stage = Path(tempfile.mkdtemp(prefix="c4p-uid-", dir=under))
    try:
        os.chmod(stage, 0o755)
        for f in files:
            shutil.copy2(f, stage / f.name, follow_symlinks=False)
        if not reachable(uid, stage):
            raise Unreachable(
                f"uid {uid} cannot reach {stage}: {_blocker(stage)} is in the way "
                "(set TMPDIR to a directory every user may pass)"
            )
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def interpreter_for(uid: int) -> str:
    """A Python that ``uid`` can run (the venv's may live in a 0700 directory); its stdlib only."""
    candidates = [Path(sys.executable).resolve(), Path("/usr/bin/python3")]
    for candidate in candidates:
        if reachable(uid, candidate):
            return str(candidate)
    raise Unreachable(f"uid {uid} can run none of {', '.join(map(str, candidates))}")


def kill(child: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.kill(child.pid, signal.SIGKILL)
    child.wait(30)


Key = tuple[str, int, int, int, int]


def key_of(b: AppliedBinding) -> Key:
    return (b.communicator, b.src_rank, b.dst_rank, b.channel, b.qp)


class Rank:
    """``c4p_check`` as a process: one command per line in, one answer per line out."""

    def __init__(
        self, *args: str, valgrind: bool = True, user: int | None = None, binary: Path = CHECK
    ) -> None:
        memcheck = valgrind and VALGRIND is not None and binary == CHECK
        self._stage: contextlib.ExitStack | None = None
        cwd = None
        if user is not None:  # run a copy (with its library) where that uid can reach it
            self._stage = contextlib.ExitStack()
            libs = sorted(binary.parent.glob("libc4p.so*"))
            stage = self._stage.enter_context(staged_for(user, binary, *libs))
            binary, cwd = stage / binary.name, stage
        argv = [str(binary), *args]
        if memcheck:
            argv = [
                str(VALGRIND),
                "-q",
                f"--error-exitcode={VALGRIND_ERROR}",
                "--leak-check=full",
                "--errors-for-leak-kinds=definite,indirect",
                *argv,
            ]
        if user is not None:
            argv = [*as_user(user), *argv]
        self.child = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=cwd,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.replans: list[tuple[Key, int, int]] = []
        self.replan_times: list[float] = []  # time.monotonic() when each line was read
        self.stderr_text = ""  # what the process wrote on stderr, once closed
        self._lock = threading.Lock()
        self._errors: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_errors, daemon=True)
        self._err_reader.start()
        try:
            self.opened = self.expect("open", 60)
        except BaseException:
            self.close()  # the child killed and the stage removed, then the reason
            raise

    def _read(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            words = line.split()
            if words and words[0] == "replan":
                with self._lock:
                    self.replans.append((_key(words[1:6]), int(words[6]), int(words[7])))
                    self.replan_times.append(time.monotonic())
            else:
                self.lines.put(line.strip())

    def _read_errors(self) -> None:
        assert self.child.stderr is not None
        for line in self.child.stderr:  # drained as it comes: a chatty child never blocks
            self._errors.append(line)

    def expect(self, head: str, timeout: float = 30) -> list[str]:
        """The next line starting with ``head``; a driver that exited first fails at once,
        with its status and stderr (not after ``timeout`` with an empty queue)."""
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=min(0.2, max(0.0, end - time.monotonic())))
            except queue.Empty:
                if not self._reader.is_alive() and self.lines.empty():
                    self.child.wait(10)
                    self._err_reader.join(10)
                    raise RuntimeError(
                        f"c4p_check exited with status {self.child.returncode} before "
                        f"{head!r}: {''.join(self._errors)[-2000:]}"
                    ) from None
                if time.monotonic() >= end:
                    raise
                continue
            if line.split()[0] == head:
                return line.split()

    @property
    def open_code(self) -> int:
        return int(self.opened[1])

    def send(self, line: str) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write(line + "\n")
        self.child.stdin.flush()

    def lookup(self, key: Key) -> tuple[int, int] | None:
        """(udp_sport, flow_label), or None for "none yet"."""
        comm, src, dst, ch, qp = key
        self.send(f"lookup {comm} {src} {dst} {ch} {qp}")
        words = self.lines.get(timeout=30).split()
        if words[0] == "none":
            assert int(words[6]) == 1, words  # C4P_ENOTYET
            return None
        assert words[0] == "binding" and _key(words[1:6]) == key, words
        return int(words[6]), int(words[7])

    def status(self) -> tuple[int, int, int]:
        self.send("status")
        words = self.expect("status")
        return int(words[1]), int(words[2]), int(words[3])

    def replanned(self) -> list[tuple[Key, int, int]]:
        with self._lock:
            return list(self.replans)

    def close(self) -> tuple[int, str]:
        """Quit; returns (exit status, stderr)."""
        if self.child.poll() is None:
            with suppress(BrokenPipeError, OSError):
                self.send("quit")
        try:
            self.child.wait(60)
        finally:
            if self.child.poll() is None:
                self.child.kill()
                self.child.wait(10)
        self._reader.join(30)  # the child is gone: its pipes end, and so do the readers
        self._err_reader.join(30)
        err = "".join(self._errors)
        self.stderr_text = err
        for stream in (self.child.stdin, self.child.stdout, self.child.stderr):
            with suppress(Exception):
                stream.close()  # type: ignore[union-attr]
        if self._stage is not None:
            self._stage.close()  # the staged copy is removed with the rank
        return self.child.returncode, err


def _key(words: list[str]) -> Key:
    return (words[0], int(words[1]), int(words[2]), int(words[3]), int(words[4]))


@contextmanager
def ranks(*ranks_: Rank) -> Iterator[tuple[Rank, ...]]:
    """Close every rank on exit, and fail if valgrind found an error in any of them."""
    try:
        yield ranks_
    finally:
        results = [r.close() for r in ranks_]
    for code, err in results:
        assert code != VALGRIND_ERROR, f"valgrind found errors:\n{err}"
