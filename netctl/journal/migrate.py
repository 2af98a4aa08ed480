"""The migrations runner: applies ``migrations/NNNN_name.sql`` in order, once each.

A database with a version this code does not know (a newer netctl's) is refused. The file
is kept in ``auto_vacuum=INCREMENTAL`` mode, so the pages pruning frees can be handed back
a few at a time; SQLite sets that mode only on a file without tables or with a ``VACUUM``,
so an older journal is converted once (:func:`ensure_incremental_vacuum`).
"""

from __future__ import annotations

import re
import sqlite3
import time
from importlib import resources
from pathlib import Path

from netctl.errors import IO_FAILURE, CNIError

_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class SchemaTooNew(CNIError):
    def __init__(self, found: int, known: int, path: str) -> None:
        super().__init__(
            IO_FAILURE,
            f"journal {path} has schema version {found}, newer than this netctl knows "
            f"({known}); upgrade netctl or use another --state-dir",
        )


def available() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration shipped with this code, in order."""
    out = []
    for entry in resources.files("netctl_migrations").iterdir():
        match = _NAME_RE.match(entry.name)
        if match:
            out.append((int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(out)


PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=5000")


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None)
    for pragma in PRAGMAS:
        conn.execute(f"PRAGMA {pragma}")
    return conn


def applied(conn: sqlite3.Connection) -> list[int]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    return [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]


INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


def ensure_incremental_vacuum(conn: sqlite3.Connection) -> bool:
    """Put the file in ``auto_vacuum=INCREMENTAL`` mode; True when an existing journal had
    to be rewritten for it (a ``VACUUM``: once, as long as the file is big)."""
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == INCREMENTAL:
        return False
    conn.execute(f"PRAGMA auto_vacuum={INCREMENTAL}")
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == INCREMENTAL:
        return False  # a file without tables yet takes it as it is
    conn.execute("VACUUM")
    return True


def migrate(path: str | Path) -> list[int]:
    """Bring the journal at ``path`` up to date; return the versions applied now."""
    known = available()
    newest = known[-1][0] if known else 0
    conn = connect(path)
    try:
        ensure_incremental_vacuum(conn)
        done = set(applied(conn))
        if done and max(done) > newest:
            raise SchemaTooNew(max(done), newest, str(path))
        now_applied = []
        for version, name, sql in known:
            if version in done:
                continue
            conn.executescript(
                "BEGIN;\n" + sql + "\nINSERT INTO schema_migrations VALUES "
                f"({version}, '{name}', {time.time()});\nCOMMIT;"
            )
            now_applied.append(version)
        return now_applied
    finally:
        conn.close()
