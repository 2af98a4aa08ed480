"""A broken journal: found at start, never written over, rebuilt by a command.

:func:`check` runs SQLite's ``quick_check`` on a read-only connection before the daemon
migrates or opens the journal: a file that fails it is :class:`JournalBroken`, and the
daemon stops, naming it and the command below.

:func:`rebuild` (``netctl journal rebuild``, the daemon stopped) moves the broken file aside
(``journal.db.broken-<time>``, with its ``-wal`` and ``-shm``), makes a new journal, and
copies into it every row of the broken one that can still be read, in row-id order; where
a broken page stops a read, the copy goes on from the first row id after it that reads.
The live network namespaces then settle the addresses the lost rows held
(:mod:`netctl.journal.recover`); the daemon's start settles the rest (replay, recorded
DELs, the first reconcile round, the cluster IPAM's adoption).
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from netctl.errors import IO_FAILURE, CNIError
from netctl.journal.migrate import migrate
from netctl.journal.recover import recover

# the tables the journal's writes fill, parents first; the others (the address index) are
# filled by their triggers as the rows come in
TABLES = ("operations", "attachments", "steps", "ipam_pools", "ipam_allocations",
          "ipam_blocks")
MAX_ROWID = (1 << 63) - 1
MAX_SPANS = 10_000  # broken places read past in one table before its read stops


class JournalBroken(CNIError):
    """The journal fails its integrity check: not opened, not written."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.problems = problems
        shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)"
                                            if len(problems) > 3 else "")
        super().__init__(IO_FAILURE, (
            f"journal {path} fails its integrity check ({shown}): it is neither opened nor "
            f"written; stop netctl and run `netctl journal rebuild --state-dir "
            f"{os.path.dirname(path) or '.'}`, which keeps it aside and builds a new one "
            "from what can be read and what the node holds (docs/operating.md, "
            "\"A broken journal\")"))


def _read_only(path: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


def check(path: str) -> list[str]:
    """What SQLite's ``quick_check`` finds wrong with the journal at ``path`` ([]: sound, or
    no file yet), read-only."""
    if not os.path.exists(path):
        return []
    try:
        conn = _read_only(path)
        try:
            rows = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    return [] if rows == ["ok"] else rows


def ensure_sound(path: str) -> None:
    """:class:`JournalBroken` when the journal at ``path`` fails :func:`check`."""
    problems = check(path)
    if problems:
        raise JournalBroken(path, problems)


@dataclass
class RebuildReport:
    journal: str
    kept_aside: list[str] = field(default_factory=list)  # the broken files, moved
    problems: list[str] = field(default_factory=list)  # what the check found
    copied: dict[str, int] = field(default_factory=dict)  # rows per table
    # per table, the places where a broken page stopped the read (the rows there are lost;
    # how many is not known: a broken page's row ids are not to be trusted)
    broken_spans: dict[str, int] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # tables not read at all
    recovered: list[dict[str, Any]] = field(default_factory=list)  # from the live netns

    def to_json(self) -> dict[str, Any]:
        return {"journal": self.journal, "kept_aside": self.kept_aside,
                "problems": self.problems, "copied": self.copied,
                "broken_spans": self.broken_spans,
                "unreadable_tables": self.unreadable,
                "recovered": self.recovered}


def rebuild(path: str, *, force: bool = False, netns_dirs: tuple[str, ...] = (),
            results_dir: str = "") -> RebuildReport:
    """Keep the journal at ``path`` aside and build a new one from its readable rows, then
    from what the live netns of ``netns_dirs`` hold (see the module's docstring). A sound
    journal is left as it is unless ``force``."""
    report = RebuildReport(path, problems=check(path))
    if not os.path.exists(path) or (not report.problems and not force):
        return report
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside, building = f"{path}.broken-{stamp}", f"{path}.rebuilding"
    # the broken file keeps its name until the new one replaces it in one rename: a daemon
    # restarted meanwhile (a crash-looping pod) finds the broken journal and refuses it,
    # or the new one whole, never one half built
    os.link(path, aside)
    report.kept_aside.append(aside)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.rename(path + suffix, aside + suffix)
            report.kept_aside.append(aside + suffix)
    for suffix in ("", "-wal", "-shm"):  # what an interrupted rebuild left
        if os.path.exists(building + suffix):
            os.unlink(building + suffix)
    migrate(building)
    old = _read_only(aside)
    new = sqlite3.connect(building, isolation_level=None)
    try:
        new.execute("PRAGMA foreign_keys=OFF")  # a parent on a broken page keeps its rows
        new.execute("BEGIN IMMEDIATE")
        for table in TABLES:
            _copy(old, new, table, report)
        report.recovered = recover(new, netns_dirs, results_dir)
        new.execute("COMMIT")
    finally:
        old.close()
        new.close()  # the last connection: its WAL is checkpointed into the file
    if os.path.exists(building + "-wal"):
        raise OSError(f"{building}-wal is left after the rebuild: the new journal is not "
                      f"whole; {path} is left as it was")
    os.rename(building, path)
    return report


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")]


def _copy(old: sqlite3.Connection, new: sqlite3.Connection, table: str,
          report: RebuildReport) -> None:
    """Every readable row of ``table`` from ``old`` into ``new`` (the columns both have):
    read in row-id order; where a broken page stops the read, the first row id after it
    that reads is found (:func:`_past`) and the read goes on from there. A broken page
    can yield row ids out of order: such rows are skipped, so that every turn moves on."""
    try:
        columns = [c for c in _columns(old, table) if c in set(_columns(new, table))]
    except sqlite3.DatabaseError:
        report.unreadable.append(table)
        return
    names = ", ".join(columns)
    select = f"SELECT rowid, {names} FROM {table} WHERE rowid > ? ORDER BY rowid"
    insert = f"INSERT OR IGNORE INTO {table} ({names}) VALUES " \
             f"({', '.join('?' * len(columns))})"
    copied = spans = 0
    last = 0
    while spans < MAX_SPANS:
        try:
            for row in old.execute(select, (last,)):
                if int(row[0]) <= last:  # out of order: from a broken page
                    continue
                new.execute(insert, row[1:])
                last = int(row[0])
                copied += 1
            break
        except sqlite3.DatabaseError:
            spans += 1
            after = _past(old, table, last)
            if after is None:  # nothing readable after the broken page
                break
            try:  # that row alone: every turn moves on by one row id at least
                row = old.execute(f"SELECT rowid, {names} FROM {table} WHERE rowid = ?",
                                  (after,)).fetchone()
                new.execute(insert, row[1:])
                copied += 1
            except (sqlite3.DatabaseError, TypeError):
                pass  # counted with its span
            last = after
    report.copied[table] = copied
    if spans:
        report.broken_spans[table] = spans


def _past(conn: sqlite3.Connection, table: str, last: int) -> int | None:
    """The first row id above ``last`` that a read starting there reaches without error
    (None: none does): found by doubling the jump past ``last``, then by halving back. A
    read from ``start`` that yields a row id below ``start`` (a broken page's) fails."""
    probe = f"SELECT rowid FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1"

    def reads(start: int) -> tuple[bool, int | None]:
        try:
            row = conn.execute(probe, (start,)).fetchone()
        except sqlite3.DatabaseError:
            return False, None
        if row is None:
            return True, None
        return int(row[0]) >= start, int(row[0])

    bad, step = last, 1
    while True:
        if last + step > MAX_ROWID:
            return None
        ok, found = reads(last + step)
        if ok:
            break
        bad = last + step
        step *= 2
    good = last + step
    while good - bad > 1:  # a start that reads lies in (bad, good]: the lowest found
        mid = (bad + good) // 2
        ok, at = reads(mid)
        if ok:
            good, found = mid, at
        else:
            bad = mid
    return found


def holders(path: str) -> list[int]:
    """The processes that have the journal at ``path`` open (from ``/proc``): a running
    daemon; a rebuild does not start under one."""
    target = os.path.realpath(path)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    found.append(int(pid))
                    break
            except OSError:
                continue
    return found
