"""Checks of a command's output options, made before any work; and of its input files' kind.

Why before: a 131,072-GPU plan takes a minute and a half; finding only then that ``-o`` names
a folder that does not exist (or that two outputs would interleave on standard output) wastes
it. Why refuse rather than guess: ``-o plan.txt`` used to be written as YAML without a word,
``-o /nonexistent/dir/x.json`` created the folders (a typo in a path made a tree somewhere), and
``-o - --json -`` wrote YAML and then JSON into one stream no reader could split. Each refusal
is one line naming the option, the value and the reason (exit 2, through
:func:`c4p.cli.common.guarded`).
"""

from __future__ import annotations

from pathlib import Path

from topology.errors import C4pError

DATA_SUFFIXES = (".yaml", ".yml", ".json")
"""What c4p's data files (fabrics, jobs, plans, bindings) may be called: the extension picks
the format (:meth:`topology.formats.TextFormat.for_name`)."""


def check_outputs(
    *outputs: tuple[str, Path | None, tuple[str, ...] | None],
) -> None:
    """Refuse outputs that clash or would surprise: ``(option, path, suffixes)`` per output
    option (``path`` ``None`` when not given; ``suffixes`` ``None`` for any name).

    * at most one of them may be ``-`` (standard output);
    * a file's extension must be one of ``suffixes`` (the format is chosen by it);
    * a file's folder must exist (c4p creates no folders for ``-o`` or ``--json``)."""
    to_stdout = [option for option, path, _ in outputs if path is not None and str(path) == "-"]
    if len(to_stdout) > 1:
        raise C4pError(
            f"{' and '.join(f'{o} -' for o in to_stdout)}: each would write to standard output; "
            "give all but one of them a file name"
        )
    for option, path, suffixes in outputs:
        if path is None or str(path) == "-":
            continue
        if path.is_dir():
            raise C4pError(f"{option} {path}: is a directory; give a file name")
        if suffixes is not None and path.suffix.lower() not in suffixes:
            said = f"extension {path.suffix!r}" if path.suffix else "no extension"
            raise C4pError(
                f"{option} {path}: {said}; the extension picks the format: "
                f"name it *{', *'.join(suffixes)}"
            )
        folder = path.parent
        if not folder.is_dir():
            what = "not a directory" if folder.exists() else "no such directory"
            raise C4pError(
                f"{option} {path}: cannot write: {what} {folder} (c4p creates no directories)"
            )


FILE_KINDS = {"fabric": "switches", "jobs": "jobs", "plan": "flows"}
"""Each data file's kind and the top-level key only that kind has."""


def check_kind(data: object, path: Path, expected: str) -> None:
    """Refuse a file of another kind where ``expected`` is wanted (``plan --fabric jobs.yaml``
    said "unknown key jobs", which reads as a broken fabric file, not a swapped option)."""
    if not isinstance(data, dict) or FILE_KINDS[expected] in data:
        return
    for kind, key in FILE_KINDS.items():
        if kind != expected and key in data:
            raise C4pError(f"{path}: is a {kind} file, not a {expected} file")
