"""No import circles among the project's modules, except the few listed here; none in libc4p.

Why a test: a circle (``a`` imports ``b`` imports ``a``) means neither module can be read,
tested or moved without the other, and the order Python happens to load them in decides whether
a name exists yet. Circles crept in one convenient import at a time (``c4p/lab/bgp.py`` <->
``build.py``, ``solver``'s bounds <-> problem, libc4p's ``session.c`` <-> ``static.c``), so
this reads every import from the syntax tree, as ``tests/test_rooms.py`` does (function-level
and ``TYPE_CHECKING`` imports included: a lazy import is still a dependency), builds the graph
of ``c4p``, ``southbound``, ``topology`` and ``solver`` and fails on any strongly connected part
that is not in :data:`KNOWN` exactly (a known circle that grows fails too).

:data:`KNOWN` is the allow-list of circles that remain, each with why it is not broken yet; it
only shrinks. The packages named in :data:`NO_CIRCLES` may have none at all. libc4p's C files
are held to the same rule through the functions one file defines and another calls.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("c4p", "southbound", "topology", "solver")

KNOWN: dict[frozenset[str], str] = {}
"""Circles that remain, and why; a new circle, or one of these grown, fails the test."""

NO_CIRCLES = (
    "southbound",
    "c4p.client",
    "c4p.agent",
    "c4p.testing",
    "c4p.lab",
    "c4p.store",
    "solver",
)
"""Packages that may not be part of any circle, even a known one."""


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of :data:`PACKAGES`."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its syntax tree: ``from a import b``
    depends on ``a.b`` where that is a module, else on ``a`` (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    found.add(full)
                elif base in modules:
                    found.add(base)
    found.discard(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected parts of more than one node (Tarjan's algorithm, iterative so a
    deep chain cannot hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.add(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(frozenset(part))
    return found


def module_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_the_circle_finder_finds_a_circle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert circles({"x": {"y"}, "y": set()}) == []


def test_no_import_circle_but_the_known_ones() -> None:
    found = circles(module_graph())
    new = [sorted(c) for c in found if c not in KNOWN]
    assert not new, f"import circles not in KNOWN (break them; do not list them): {new}"


def test_every_known_circle_is_still_there() -> None:
    """KNOWN only shrinks: a circle that was broken must leave it, or it could come back
    unnoticed."""
    found = set(circles(module_graph()))
    gone = [sorted(c) for c in KNOWN if c not in found]
    assert not gone, f"circles broken, take them out of KNOWN: {gone}"


def test_the_packages_held_to_it_have_no_circle_at_all() -> None:
    for part in circles(module_graph()):
        inside = sorted(m for m in part if m.startswith(NO_CIRCLES))
        assert not inside, f"{sorted(part)}: a circle through {inside}"
    for known in KNOWN:
        assert not any(m.startswith(NO_CIRCLES) for m in known), sorted(known)


C_DEFINITION = re.compile(r"^[a-z_][\w \*]*?\b(c4p_\w+)\(", re.MULTILINE)
C_CALL = re.compile(r"\b(c4p_\w+)\(")


def test_libc4p_files_call_each_other_one_way() -> None:
    """A C file "imports" the files that define the ``c4p_`` functions it calls; the sources
    must form no circle (``session.c`` and ``static.c`` once called each other: the log they
    share is ``log.c`` now, the frame sender ``send.c``)."""
    sources = sorted((ROOT / "libc4p" / "src").glob("*.c"))
    assert sources, "libc4p/src has no C files"
    defined: dict[str, str] = {}
    texts = {path.name: path.read_text() for path in sources}
    for name, text in texts.items():
        for function in C_DEFINITION.findall(text):
            defined.setdefault(function, name)
    graph = {
        name: {defined[f] for f in C_CALL.findall(text) if f in defined} - {name}
        for name, text in texts.items()
    }
    assert graph["session.c"], "the call graph found no calls: the patterns are wrong"
    assert circles(graph) == [], circles(graph)
