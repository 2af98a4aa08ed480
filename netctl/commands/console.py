"""The command line's spinner (rich), for one long call on a terminal: :func:`waiting`.
``netctl bench`` (the kit) shows its progress through it too."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import IO

from rich.console import Console


@contextlib.contextmanager
def waiting(what: str, file: IO[str] | None = None) -> Iterator[None]:
    """A spinner saying ``what`` while one long call runs, on a terminal; nothing elsewhere."""
    out = file or sys.stderr
    if not out.isatty():
        yield
        return
    with Console(file=out, markup=False, highlight=False).status(what):
        yield
