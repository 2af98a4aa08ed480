"""We test these aspects of the journal's migrations runner, on real SQLite files:

- a fresh file gets every table and its version recorded;
- running it again applies nothing and changes nothing;
- a journal written by a newer netctl (a higher schema version) is refused, untouched.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from netctl.errors import IO_FAILURE
from netctl.journal import migrate


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def recorded(path: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.execute("SELECT version, name FROM schema_migrations ORDER BY 1"))
    finally:
        conn.close()


def test_available_migrations_are_numbered_in_order() -> None:
    known = migrate.available()
    assert known and known[0][:2] == (1, "journal")
    assert [v for v, _, _ in known] == sorted({v for v, _, _ in known})
    assert all(sql.strip() for _, _, sql in known)


def test_fresh_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    known = migrate.available()
    assert migrate.migrate(path) == [v for v, _, _ in known]
    assert {"schema_migrations", "operations", "attachments", "steps"} <= tables(path)
    assert recorded(path) == [(v, n) for v, n, _ in known]
    conn = migrate.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    finally:
        conn.close()


def test_migrate_twice_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    migrate.migrate(path)
    before = (tables(path), recorded(path))
    conn = sqlite3.connect(path)
    applied_at = conn.execute("SELECT applied_at FROM schema_migrations").fetchall()
    conn.close()
    assert migrate.migrate(path) == []
    assert (tables(path), recorded(path)) == before
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT applied_at FROM schema_migrations").fetchall() == applied_at
    conn.close()


def test_schema_too_new_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    migrate.migrate(path)
    newest = migrate.available()[-1][0]
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'from_the_future', 0)", (newest + 7,))
    conn.commit()
    conn.close()
    with pytest.raises(migrate.SchemaTooNew) as info:
        migrate.migrate(path)
    assert info.value.code == IO_FAILURE == 5
    msg = info.value.msg
    assert f"schema version {newest + 7}" in msg and f"({newest})" in msg
    assert str(path) in msg and "--state-dir" in msg
    assert recorded(path)[-1] == (newest + 7, "from_the_future")


def test_schema_too_new_on_an_otherwise_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                 " applied_at REAL NOT NULL)")
    conn.execute("INSERT INTO schema_migrations VALUES (9999, 'x', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(migrate.SchemaTooNew):
        migrate.migrate(path)
    assert tables(path) == {"schema_migrations"}, "a refused journal must not be written"
