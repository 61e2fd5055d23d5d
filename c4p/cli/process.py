"""The command line's process: when it started loading, and the event of a reader gone away.

Why a module of its own: the package (:mod:`c4p.cli`, whose dispatcher loads the command
groups) and the commands' shared module (:mod:`c4p.cli.common`) both need these; here, below
both, neither imports the other for them (they were read from the package, an import circle
through the agent group).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()
"""When the command line started loading (``--timings`` counts imports from here): this module
is the first thing :mod:`c4p.cli` imports."""

CLOSED_PIPE = 141
"""Exit status when standard output's reader went away (``c4p fabric show f.yaml | head -1``):
128 + SIGPIPE, what the shell reports for ``cat`` or ``grep`` in the same place. Not 1 (that
means "a finding") and not a message: the reader chose to stop reading."""


class ClosedPipe(Exception):  # noqa: N818 - an event, not an error of the user's
    """Standard output's reader went away (``| head -1``); :func:`c4p.cli.run` ends quietly.

    Why not ``BrokenPipeError``: typer turns any ``EPIPE`` into exit 1 ("a finding") before
    c4p could see it, and rich's console into ``SystemExit(1)``; c4p's console
    (:data:`c4p.cli.common.console`) and error path raise this instead."""
