"""We test these aspects of the journal's migrations runner, on real SQLite files:

- a fresh file gets every table and its version recorded;
- running it again applies nothing and changes nothing;
- a journal written by a newer netctl (a higher schema version) is refused, untouched.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from netctl_kit import journaldb

from netctl.errors import IO_FAILURE
from netctl.journal import migrate


def tables(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return journaldb.table_names(conn)


def applied(path: Path) -> list[tuple[int, str, float]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return journaldb.applied_migrations(conn)


def recorded(path: Path) -> list[tuple[int, str]]:
    return [(version, name) for version, name, _ in applied(path)]


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
        got = journaldb.settings(conn)
        assert (got["journal_mode"], got["foreign_keys"]) == ("wal", 1)
    finally:
        conn.close()


def test_migrate_twice_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    migrate.migrate(path)
    before = (tables(path), applied(path))
    assert migrate.migrate(path) == []
    assert (tables(path), applied(path)) == before  # the times they were applied too


def test_schema_too_new_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    migrate.migrate(path)
    newest = migrate.available()[-1][0]
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        journaldb.simulate_newer_schema(conn, newest + 7, "from_the_future")
    with pytest.raises(migrate.SchemaTooNew) as info:
        migrate.migrate(path)
    assert info.value.code == IO_FAILURE == 5
    msg = info.value.msg
    assert f"schema version {newest + 7}" in msg and f"({newest})" in msg
    assert str(path) in msg and "--state-dir" in msg
    assert recorded(path)[-1] == (newest + 7, "from_the_future")


def test_schema_too_new_on_an_otherwise_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journaldb.simulate_newer_empty_journal(path, 9999)
    with pytest.raises(migrate.SchemaTooNew):
        migrate.migrate(path)
    assert tables(path) == {"schema_migrations"}, "a refused journal must not be written"
