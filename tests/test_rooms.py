"""The solver's rooms import one way, and each says so in its own docstring.

Why a test: the rooms of ``solver/`` (workload -> yardstick -> exact -> space -> bounds ->
search | repair -> planning -> planner) are only a map while nothing enforces them; one
convenient import from a lower room into a higher one brings back the circles and the flat
directory this layout replaced. The test reads every module's imports from its syntax tree
(function-level imports included: a lazy import is still a dependency) and checks each against
the order below and against the "May import" line of the room's ``__init__``, so the docstring
a newcomer reads is the rule the code obeys. The layering of the top-level packages
(topology <- solver, topology <- southbound, everything <- c4p) is checked the same way.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORDER = ("workload", "yardstick", "exact", "space", "bounds", "search", "repair", "planning")
"""Rooms from the bottom up; search and repair are siblings (neither imports the other)."""
SIBLINGS = {frozenset({"search", "repair"})}


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at any depth of its syntax tree."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def room_of(module: str) -> str | None:
    """``solver.space.problem`` -> ``space``; modules outside a room -> None."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "solver" and parts[1] in ORDER:
        return parts[1]
    return None


def below(source: str, target: str) -> bool:
    """Whether the order lets ``source`` import ``target`` at all."""
    if frozenset({source, target}) in SIBLINGS:
        return False
    return ORDER.index(target) < ORDER.index(source)


def said(room: str) -> set[str]:
    """The rooms a room's docstring says it may import: the rule the import test applies."""
    doc = importlib.import_module(f"solver.{room}").__doc__ or ""
    assert "May import:" in doc, f"solver/{room}/__init__.py must say what it may import"
    text = doc.split("May import:", 1)[1]
    return {r for r in ORDER if f"solver.{r}``" in text}


def allowed(source: str, target: str) -> bool:
    return source == target or target in said(source)


def solver_modules() -> list[Path]:
    return sorted((ROOT / "solver").rglob("*.py"))


@pytest.mark.parametrize("path", solver_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_room_imports_only_the_rooms_below_it(path: Path) -> None:
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    source = room_of(module)
    wrong = []
    for target in sorted(imports_of(path)):
        top = target.split(".")[0]
        assert top not in {"c4p", "southbound"}, (
            f"{module} imports {target}: solver sees topology only"
        )
        if source is None:
            continue
        if target in {"solver", "solver.planner"}:
            wrong.append(target)  # the entry and the package's lazy names sit above every room
            continue
        room = room_of(target)
        if room is not None and not allowed(source, room):
            wrong.append(target)
    assert not wrong, f"{module} (room {source}) imports {wrong} against {ORDER}"


@pytest.mark.parametrize("room", ORDER)
def test_each_room_may_import_only_rooms_below_it(room: str) -> None:
    """What a docstring allows must respect the order, so the rooms can never form a circle."""
    wrong = sorted(r for r in said(room) if not below(room, r))
    assert not wrong, f"solver.{room} says it may import {wrong}, which are not below it"


def test_the_rooms_are_all_there_is() -> None:
    """No module sits loose beside the rooms but the package's entry, its errors and itself."""
    loose = sorted(p.name for p in (ROOT / "solver").glob("*.py"))
    assert loose == ["__init__.py", "errors.py", "planner.py"], loose


@pytest.mark.parametrize(
    ("package", "may"),
    [
        ("topology", {"topology"}),
        ("solver", {"solver", "topology"}),
        ("southbound", {"southbound", "topology"}),
    ],
)
def test_the_top_level_packages_depend_one_way(package: str, may: set[str]) -> None:
    ours = {"topology", "solver", "southbound", "c4p"}
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for target in imports_of(path):
            top = target.split(".")[0]
            if top in ours and top not in may:
                wrong.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not wrong, wrong


MAX_LINES = 500
"""A module's length limit (README: small modules named after the domain)."""

TOO_LONG: dict[str, str] = {}
"""Modules still over :data:`MAX_LINES`, each with why; the list only shrinks (one that fits
again must leave it)."""


def long_modules(root: Path) -> dict[str, int]:
    """Every module of the four packages over :data:`MAX_LINES` lines -> its length; generated
    protobuf stubs (``*_pb2*.py``) aside."""
    found: dict[str, int] = {}
    for package in ("c4p", "solver", "topology", "southbound"):
        for path in sorted((root / package).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES:
                found[path.relative_to(root).as_posix()] = lines
    return found


def test_every_module_fits_its_limit() -> None:
    """Why: a module that grew past a few screens has, in this project, always been two jobs
    side by side (issue 32 split ten of them); where that is so, it is split where the jobs
    part, not at a line count. The known exceptions must be exactly the long ones."""
    long = long_modules(ROOT)
    assert set(long) == set(TOO_LONG), {
        "too long": {m: n for m, n in long.items() if m not in TOO_LONG},
        "fit again (leave TOO_LONG)": sorted(set(TOO_LONG) - set(long)),
    }
