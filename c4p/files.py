"""Reading and writing c4p's files: fabrics, jobs and plans, as YAML or JSON by extension.

Why a module: this is the only place the product touches the disk for its data files, so every
file error (missing file, bad syntax, bad content) comes out the same way: a
:class:`~topology.errors.FabricFileError` naming the file, the field path and the reason.
Writes go to a temporary file in the same directory and are renamed into place, so a crash never
leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from topology.errors import FabricFileError
from topology.formats import TextFormat, dump_model, parse_data, parse_model, validate_data
from topology.model import Fabric

M = TypeVar("M", bound=BaseModel)


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FabricFileError(str(path), [("", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FabricFileError(str(path), [("", f"cannot read: {exc}")]) from None


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` would, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def write_text(path: Path, text: str) -> None:
    """Write atomically: a temporary file beside the target, then a rename. ``-`` is standard
    output. The file gets the permissions any new file gets (0666 less the umask; an existing
    file keeps its own), not the temporary file's 0600. A file that cannot be written is a
    :class:`~topology.errors.FabricFileError` naming it."""
    if str(path) == "-":
        print(text, end="")
        return
    if path.is_dir():
        raise FabricFileError(str(path), [("", "is a directory; give a file name")])
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise FabricFileError(str(path), [("", f"cannot write: {exc.strerror or exc}")]) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise FabricFileError(str(path), [("", f"cannot write: {exc.strerror or exc}")]) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_model(cls: type[M], path: Path) -> M:
    return parse_model(cls, read_text(path), TextFormat.for_name(path), str(path))


def load_data(path: Path) -> Any:
    """A file's plain data (dicts, lists, strings, numbers), not yet validated: reading and
    validating are timed apart by ``c4p plan --timings``."""
    return parse_data(read_text(path), TextFormat.for_name(path), str(path))


def model_from_data(cls: type[M], data: Any, path: Path) -> M:
    """:func:`load_data`'s result as a validated model (errors name ``path``), exactly as
    :func:`load_model` would have made it from the file."""
    return validate_data(cls, data, str(path))


def save_model(model: BaseModel, path: Path) -> None:
    write_text(path, dump_model(model, TextFormat.for_name(path)))


def load_fabric(path: Path) -> Fabric:
    return load_model(Fabric, path)


def save_fabric(fabric: Fabric, path: Path) -> None:
    save_model(fabric, path)


def write_json(data: Any, path: Path) -> None:
    """Machine-readable output of a command (``--json FILE``; ``-`` is standard output)."""
    write_text(path, json.dumps(data, indent=1, default=str) + "\n")
