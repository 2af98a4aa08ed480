"""The one renderer of ``netctl bench`` reports, with rich.

A bench turns its report (the dict ``--json`` prints) into a list of blocks: lines of
text and tables built by :func:`table`, printed by :func:`show`.
Long work shows its progress the same way (:func:`steps`, :func:`~netctl.commands.console.waiting`):
a bar or a spinner on a terminal, plain lines elsewhere.
The helpers below build the rows and lines several benches share (netctl beside its
baseline with the ratio, latency percentiles, the daemon's figures, the verdict).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

# the product's spinner, which the benches use through this module
from netctl.commands.console import waiting as waiting

WIDTH = 100  # columns, when stdout is not a terminal

Row = Sequence[str]


def table(columns: Row, rows: Iterable[Row], title: str = "") -> RenderableType:
    """A table of strings: ``columns`` its header, the first column left-aligned, the
    others right-aligned; under ``title``, when given."""
    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for i, name in enumerate(columns):
        out.add_column(name, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        out.add_row(*row)
    return Group(Text(title, style="bold"), out) if title else out


def show(blocks: Iterable[RenderableType], file: IO[str] | None = None) -> None:
    """Print ``blocks`` (tables, text): on a terminal with colour and its width, to a pipe
    or a file as plain text at most :data:`WIDTH` columns wide."""
    out = file or sys.stdout
    console = Console(file=out, width=None if out.isatty() else WIDTH, markup=False,
                      highlight=False)
    for block in blocks:
        console.print(block)


# -- progress on long work --------------------------------------------------------------------

Step = Callable[[str], None]
_live: list[Progress] = []  # the bar on screen, when one is: nested work adds a row to it


@contextlib.contextmanager
def steps(what: str, total: int, *, prefix: str = "netctl bench",
          file: IO[str] | None = None) -> Iterator[Step]:
    """Progress over ``total`` pieces of long work: call ``step(line)`` after each (the
    line may be empty). On a terminal (``file``, stderr by default) a rich bar counts
    them, elapsed and remaining time, the lines printed above it; work started inside
    (a phase of an iteration) gets its own row under it. Elsewhere (a pipe, a file, the
    tests) only the lines, as plain ``prefix: line`` lines. Threads may step at once."""
    out = file or sys.stderr
    if not out.isatty():
        def plain(line: str = "") -> None:
            if line:
                print(f"{prefix}: {line}", file=out, flush=True)

        yield plain
        return
    if _live:  # inside another's work: a row of the bar already on screen
        bar = _live[-1]
        task = bar.add_task(what, total=total)
        try:
            yield _stepper(bar, task, prefix)
        finally:
            bar.remove_task(task)
            bar.refresh()
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                   console=Console(file=out, markup=False, highlight=False))
    with bar:
        _live.append(bar)
        try:
            yield _stepper(bar, bar.add_task(what, total=total), prefix)
        finally:
            _live.pop()


def _stepper(bar: Progress, task: TaskID, prefix: str) -> Step:
    def step(line: str = "") -> None:
        if line:
            bar.console.print(f"{prefix}: {line}")
        bar.advance(task)

    return step


def say(line: str, prefix: str = "netctl bench") -> None:
    """One line of progress: above the bar when one is on screen, else on stderr."""
    if _live:
        _live[-1].console.print(f"{prefix}: {line}")
    else:
        print(f"{prefix}: {line}", file=sys.stderr, flush=True)


# -- shared rows and lines -------------------------------------------------------------------


def num(v: Any, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def compare(label: str, netctl: dict[str, Any], other: dict[str, Any], key: str) -> Row:
    """A row: ``key`` of both sides and their ratio."""
    return (label, num(netctl[key]), num(other[key]), num(ratio(netctl[key], other[key])))


def latency_rows(netctl: dict[str, Any], other: dict[str, Any],
                 ratios: dict[str, Any]) -> list[Row]:
    return [(f"{verb} {q} (ms)", num(netctl[f"{verb.lower()}_ms"][q]),
             num(other[f"{verb.lower()}_ms"][q]), num(ratios[f"{verb.lower()}_{q}"]))
            for verb in ("ADD", "DEL") for q in ("p50", "p95", "p99")]


def daemon_rows(report: dict[str, Any], other_version: str, note: str = "") -> list[Row]:
    """The daemon's peak RSS; the plugin's VERSION against the other side's plugin's."""
    rss = report["daemon"]["peak_rss_kib"]
    rows: list[Row] = [("daemon peak RSS (MiB)", num(rss / 1024 if rss else None), "-", "")]
    pv, ov = report["plugin"]["version_ms"], report["plugin"][other_version]
    rows += [(f"plugin VERSION {q} (ms{note})", num(pv[q]), num(ov[q]), num(ratio(pv[q], ov[q])))
             for q in ("p50", "p95")]
    return rows


def load_line(params: dict[str, Any]) -> str:
    return (f"load average (1, 5, 15 min) at start {params['loadavg_start']}, "
            f"at end {params['loadavg_end']}")


def status_line(report: dict[str, Any], what: str) -> str:
    st = report["plugin"]["status_ms"]
    return f"{what}: p50 {st['p50']:.2f} ms, p95 {st['p95']:.2f} ms"


def breakdown_table(b: dict[str, Any], title: str,
                    rows: Sequence[tuple[str, str]]) -> RenderableType:
    """The median ADD and DEL of each (label, key) of a breakdown."""
    return table(("", "ADD", "DEL"), [(label, num(b["ADD"][key]["p50"]), num(b["DEL"][key]["p50"]))
                                      for label, key in rows], title)


def operations_text(b: dict[str, Any]) -> str:
    return ", ".join(f"{count} {verb}" for verb, count in sorted(b["operations"].items()))


def verdict(problems: list[str], ok: str) -> list[RenderableType]:
    if not problems:
        return [Text(f"ok: {ok}", style="bold green")]
    lines: list[RenderableType] = [Text(f"FAILED: {len(problems)} problem(s):",
                                        style="bold red")]
    lines += [f"  {msg}" for msg in problems[:50]]
    if len(problems) > 50:
        lines.append(f"  … and {len(problems) - 50} more")
    return lines
