"""Tables that fit the terminal: a table when it fits, else one wrapped line per row.

Why: rich shrinks a table that is wider than the terminal by cutting cells to "int…" (the
decision log's reasons, the rollout report's headers at 80 columns), so what an operator reads
is missing exactly the part that says why. A table whose every cell fits stays a table; one
that does not becomes a line per row, ``column value, column value, ...``, wrapped at word
boundaries: the same figures, none cut. ``--wide`` keeps the table at its full width (for a
wide terminal or a pager such as ``less -S``). Redirected output is not a terminal: rich
assumes 80 columns there, so a file gets the lines unless ``--wide``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

WideOption = Annotated[
    bool,
    typer.Option("--wide", help="Keep the table at full width, however wide the terminal."),
]


def fitted(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[str] = (),
    wide: bool = False,
) -> None:
    """Print ``rows`` under ``columns`` as a table if it fits ``console`` (or ``wide``), else
    as one wrapped line per row (``right``: columns aligned right in the table)."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    needed = Measurement.get(console, console.options.update_width(100_000), table).maximum
    if needed <= console.width:
        console.print(table)
        return
    if wide:  # the console's width for this table only (rich caps a print at the console's)
        saved = console._width
        console.width = needed
        try:
            console.print(table)
        finally:
            console._width = saved
        return
    console.print(title, highlight=False)
    for row in rows:
        fields = ", ".join(f"{name} {value}" for name, value in zip(columns, row, strict=True))
        console.print(f"  {fields}", highlight=False, overflow="fold")
