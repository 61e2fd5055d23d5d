"""Text formats (YAML and JSON) for the models of every layer, with errors that say where.

Why here: the fabric, job and plan files are all pydantic models, and a person editing one by
hand needs the same thing from each: the file name, the field path (``links[3].b``) and the
reason. This module turns text into a model or refuses it whole; it does no disk I/O itself
(``c4p.files`` reads and writes), so ``topology`` and ``solver`` stay pure.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import PurePath
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from topology.errors import FabricFileError
from topology.model import END_PATTERN, Fabric, end_problem

M = TypeVar("M", bound=BaseModel)


class TextFormat(StrEnum):
    YAML = "yaml"
    JSON = "json"

    @classmethod
    def for_name(cls, name: str | PurePath) -> TextFormat:
        """Pick the format from a file name: ``.json`` is JSON, everything else YAML."""
        return cls.JSON if str(name).lower().endswith(".json") else cls.YAML


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def problems_of(error: ValidationError) -> list[tuple[str, str]]:
    """``(field path, reason)`` for each error pydantic found, paths written ``links[3].b``."""
    found: list[tuple[str, str]] = []
    errors = error.errors()
    # pydantic also reports a list as "too short" when its items failed: only the items count.
    failed_below = {tuple(e["loc"][:i]) for e in errors for i in range(len(e["loc"]))}
    for err in errors:
        if err["type"] == "too_short" and tuple(err["loc"]) in failed_below:
            continue
        msg = str(err["msg"])
        loc = _loc(tuple(err["loc"]))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required key is missing"
        # Cross-reference problems arrive as one message at the root, already located.
        if not loc and " problem(s): " in msg:
            for item in msg.split(" problem(s): ", 1)[1].split("; "):
                path, _, reason = item.partition(": ")
                found.append((path, reason))
            continue
        ctx = err.get("ctx") or {}
        if err["type"] == "string_pattern_mismatch" and ctx.get("pattern") == END_PATTERN:
            found.append((loc, end_problem(str(err["input"]))))  # a link end: say what is wrong
            continue
        if "input" in err and err["type"] not in ("missing", "extra_forbidden"):
            shown = repr(err["input"])
            if len(shown) <= 60:
                msg = f"{msg} (got {shown})"
        found.append((loc, msg))
    return found


def _yaml() -> Any:
    """PyYAML, imported on first use: JSON files (the fast, common case for large fabrics and
    plans) never need it."""
    import yaml

    return yaml


def _safe(yaml: Any, kind: str) -> Any:
    """libyaml's safe loader or dumper where PyYAML was built with it (about 10x faster on a
    16k-GPU fabric file: tens of seconds become seconds), else the pure-Python one; both build
    plain data only."""
    return getattr(yaml, f"CSafe{kind}", getattr(yaml, f"Safe{kind}"))


def parse_data(text: str, fmt: TextFormat, source: str) -> Any:
    """Parse YAML or JSON text; syntax errors become :class:`FabricFileError` with the line."""
    if fmt is TextFormat.JSON:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise FabricFileError(source, [("", f"not valid JSON: {exc}")]) from None
    yaml = _yaml()
    try:
        return yaml.load(text, Loader=_safe(yaml, "Loader"))
    except yaml.YAMLError as exc:
        raise FabricFileError(source, [("", f"not valid YAML: {_yaml_problem(exc)}")]) from None


def _yaml_problem(exc: Exception) -> str:
    """``line 3, column 1: expected ',' or ']', but got '<stream end>'`` (PyYAML's own text
    spans lines and names ``<unicode string>`` instead of the file)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    text = f"{context}: {problem}" if context else str(problem)
    if mark is None:
        return text
    return f"line {mark.line + 1}, column {mark.column + 1}: {text}"


def parse_model(cls: type[M], text: str, fmt: TextFormat, source: str) -> M:
    """Text -> validated model, or :class:`FabricFileError` naming file, field path and reason."""
    return validate_data(cls, parse_data(text, fmt, source), source)


def validate_data(cls: type[M], data: Any, source: str) -> M:
    """Parsed data -> validated model, or :class:`FabricFileError` naming file, field path and
    reason."""
    if not isinstance(data, dict):
        raise FabricFileError(
            source, [("", f"expected a mapping at the top, got {type(data).__name__}")]
        )
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise FabricFileError(source, problems_of(exc)) from None


def dump_model(model: BaseModel, fmt: TextFormat) -> str:
    """Model -> text; defaults are left out so that files stay short and readable."""
    data = model.model_dump(mode="json", exclude_defaults=True)
    if fmt is TextFormat.JSON:
        return _json_text(data)
    yaml = _yaml()
    dumper = _safe(yaml, "Dumper")
    return str(yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=None, width=100))


def _json_text(data: Any) -> str:
    """JSON with one item of each top-level list per line (a link, a host, a planned flow):
    as easy to read and diff as indented JSON, and written by the C encoder item by item,
    which for a 16k-GPU plan is seconds faster than ``indent``'s pure-Python encoder."""
    if not isinstance(data, dict):
        return json.dumps(data, indent=1) + "\n"
    fields = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(item) for item in value)
            fields.append(f" {json.dumps(key)}: [\n  {items}\n ]")
        else:
            fields.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def parse_fabric(text: str, fmt: TextFormat, source: str = "<fabric>") -> Fabric:
    return parse_model(Fabric, text, fmt, source)


def dump_fabric(fabric: Fabric, fmt: TextFormat) -> str:
    return dump_model(fabric, fmt)
