"""What the command line prints beyond lines: tables and a spinner, with rich.

:func:`table` builds a table (the first column left-aligned, the others right-aligned, one
style for all); :func:`show` prints blocks: on a terminal with colour and its width, to a
pipe or a file as plain text at most :data:`WIDTH` columns wide. :func:`waiting` shows a
spinner while one long call runs, on a terminal only. ``netctl bench`` (the kit) prints
through these too.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import IO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

WIDTH = 100  # columns, when stdout is not a terminal

Row = Sequence[str]


def table(columns: Row, rows: Iterable[Row], title: str = "") -> RenderableType:
    """A table of strings: ``columns`` its header, the first column left-aligned; under
    ``title``, when given."""
    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for i, name in enumerate(columns):
        out.add_column(name, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        out.add_row(*row)
    return Group(Text(title, style="bold"), out) if title else out


@contextlib.contextmanager
def waiting(what: str, file: IO[str] | None = None) -> Iterator[None]:
    """A spinner saying ``what`` while one long call runs, on a terminal; nothing
    elsewhere."""
    out = file or sys.stderr
    if not out.isatty():
        yield
        return
    with Console(file=out, markup=False, highlight=False).status(what):
        yield
