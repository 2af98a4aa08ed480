"""What the journal forgets, and when: the retention rules (docs/journal.md, "Retention":
what each age prunes, and what is never pruned), and the statements that prune. Every
function taking ``db`` runs inside one group-committed write
(:meth:`netctl.journal.store.Journal.prune`); the rest is pure.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass

DAY = 86400.0
DEFAULT_JOURNAL = 7 * DAY
DEFAULT_ALLOCATIONS = 90 * DAY
REMOVED_KEPT = DAY  # removed attachments younger than this are kept (the reconciler's sweep)

_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY}


def duration_seconds(text: str) -> float | None:
    """``90s``/``30m``/``12h``/``7d`` → seconds; None for anything else."""
    match = _DURATION_RE.match(text.strip())
    return float(match.group(1)) * _UNITS[match.group(2)] if match else None


def parse_duration(value: str | float) -> float:
    """A retention setting → seconds, 0.0 meaning off: a duration (``7d``), plain seconds,
    ``0`` or ``off`` (also YAML's ``off``: false). ValueError for anything else."""
    bad = ValueError(f"{value!r} is not a duration (7d, 12h, 30m, 90s, seconds, or 0/off)")
    if isinstance(value, bool):
        if value:
            raise bad
        return 0.0
    text = str(value).strip().lower()
    seconds = 0.0 if text == "off" else duration_seconds(text)
    if seconds is None:
        try:
            seconds = float(text)
        except ValueError:
            raise bad from None
    if not 0 <= seconds < float("inf"):
        raise bad
    return seconds


def show_duration(seconds: float) -> str:
    """The inverse, for status: ``7d``, ``12h``, ``90s``; ``off`` for 0."""
    if seconds <= 0:
        return "off"
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Retention:
    """The two ages in seconds; 0: that part is kept for ever."""

    journal: float = DEFAULT_JOURNAL
    allocations: float = DEFAULT_ALLOCATIONS

    @property
    def enabled(self) -> bool:
        return self.journal > 0 or self.allocations > 0


@dataclass(frozen=True)
class Cutoffs:
    """What ended before these times goes; None: that kind is kept."""

    operations: float | None
    removed: float | None  # removed attachments
    allocations: float | None  # released allocations and ended block records


def cutoffs(settings: Retention, now: float) -> Cutoffs:
    journal = now - settings.journal if settings.journal > 0 else None
    return Cutoffs(
        operations=journal,
        removed=None if journal is None else min(journal, now - REMOVED_KEPT),
        allocations=now - settings.allocations if settings.allocations > 0 else None)


@dataclass
class Pruned:
    """Rows deleted, per table (steps and attachment addresses go with their owners)."""

    operations: int = 0
    steps: int = 0
    attachments: int = 0
    allocations: int = 0
    blocks: int = 0

    def add(self, other: Pruned) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def full(self, limit: int) -> bool:
        """Whether a batch took as many as it could of some kind (more may be waiting)."""
        return max(self.operations, self.attachments, self.allocations, self.blocks) >= limit


def _ids(db: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> list[int]:
    return [int(r[0]) for r in db.execute(sql, params)]


def _marks(ids: list[int]) -> str:
    return ",".join("?" * len(ids))


def prune_batch(db: sqlite3.Connection, cut: Cutoffs, limit: int) -> Pruned:
    """One batch: up to ``limit`` rows of each kind past their cut-offs, with their steps
    (children first, references from kept rows cleared)."""
    out = Pruned()
    if cut.removed is not None:
        ids = _ids(db, (
            "SELECT a.id FROM attachments a WHERE a.state='removed' AND a.removed_at < ?"
            " AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.id IN (a.add_op, a.del_op)"
            "   AND o.state='running')"
            " AND NOT EXISTS (SELECT 1 FROM ipam_allocations al WHERE al.attachment_id=a.id"
            "   AND al.released_at IS NULL)"
            " ORDER BY a.removed_at LIMIT ?"), (cut.removed, limit))
        if ids:
            out.steps += db.execute(
                f"DELETE FROM steps WHERE attachment_id IN ({_marks(ids)})", ids).rowcount
            db.execute(f"UPDATE ipam_allocations SET attachment_id=NULL WHERE attachment_id IN"
                       f" ({_marks(ids)})", ids)
            # attachment_addresses go with them (trigger attachment_addresses_delete)
            out.attachments += db.execute(
                f"DELETE FROM attachments WHERE id IN ({_marks(ids)})", ids).rowcount
    if cut.operations is not None:
        ids = _ids(db, (
            "SELECT o.id FROM operations o WHERE o.started_at < ? AND o.finished_at < ?"
            " AND o.state != 'running'"
            " AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.add_op=o.id)"
            " AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.del_op=o.id)"
            " AND NOT EXISTS (SELECT 1 FROM ipam_allocations al WHERE al.allocated_op=o.id"
            "   AND al.released_at IS NULL)"
            " ORDER BY o.started_at LIMIT ?"), (cut.operations, cut.operations, limit))
        if ids:
            out.steps += db.execute(
                f"DELETE FROM steps WHERE operation_id IN ({_marks(ids)})", ids).rowcount
            for column in ("allocated_op", "released_op", "reservation_op"):
                db.execute(f"UPDATE ipam_allocations SET {column}=NULL WHERE {column} IN"
                           f" ({_marks(ids)})", ids)
            out.operations += db.execute(
                f"DELETE FROM operations WHERE id IN ({_marks(ids)})", ids).rowcount
    if cut.allocations is not None:
        out.allocations += db.execute(
            "DELETE FROM ipam_allocations WHERE id IN (SELECT id FROM ipam_allocations"
            " WHERE released_at IS NOT NULL AND released_at < ? AND (reserved_until IS NULL"
            " OR reservation_end IS NOT NULL) ORDER BY released_at LIMIT ?)",
            (cut.allocations, limit)).rowcount
        out.blocks += db.execute(
            "DELETE FROM ipam_blocks WHERE id IN (SELECT id FROM ipam_blocks"
            " WHERE until IS NOT NULL AND until < ? ORDER BY until LIMIT ?)",
            (cut.allocations, limit)).rowcount
    return out


def vacuum_pages(db: sqlite3.Connection, pages: int, keep_free: int = 0) -> int:
    """Hand up to ``pages`` free pages back to the file system, leaving ``keep_free``; how
    many. One ``PRAGMA incremental_vacuum`` per page: Python's sqlite3 steps that pragma
    once, and each step frees one page."""
    free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
    todo = max(0, min(pages, free - keep_free))
    for _ in range(todo):
        db.execute("PRAGMA incremental_vacuum")
    return todo


@dataclass(frozen=True)
class Size:
    """The journal on disk: bytes of the file and its WAL, pages, free pages."""

    file_bytes: int
    wal_bytes: int
    page_size: int
    pages: int
    free_pages: int
    auto_vacuum: str

    def as_dict(self) -> dict[str, object]:
        return {"bytes": self.file_bytes + self.wal_bytes, "file_bytes": self.file_bytes,
                "wal_bytes": self.wal_bytes, "page_size": self.page_size,
                "pages": self.pages, "free_pages": self.free_pages,
                "auto_vacuum": self.auto_vacuum}


def size(db: sqlite3.Connection, path: str) -> Size:
    def stat(p: str) -> int:
        try:
            return os.stat(p).st_size
        except FileNotFoundError:
            return 0

    mode = int(db.execute("PRAGMA auto_vacuum").fetchone()[0])
    return Size(stat(path), stat(path + "-wal"),
                int(db.execute("PRAGMA page_size").fetchone()[0]),
                int(db.execute("PRAGMA page_count").fetchone()[0]),
                int(db.execute("PRAGMA freelist_count").fetchone()[0]),
                {0: "none", 1: "full", 2: "incremental"}.get(mode, str(mode)))
