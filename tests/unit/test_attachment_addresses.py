"""We test these aspects of the address index (migrations/0003) behind
``netctl journal --ip``, on real journal files:

- the triggers keep ``attachment_addresses`` equal to the addresses of each attachment's
  result (prefix length dropped, lower case): set on insert, replaced on update, none for no
  result, a result that is not JSON, an ``ips`` entry that is no object or has no string
  address — and such a result never fails the write;
- the migration fills the index from the results a version-2 journal already holds;
- ``attachments(ip=…)`` finds an attachment by the address with or without a prefix length,
  an IPv6 address in any case, live and removed ones (history), with ``at``/``since``;
  a different address that shares a prefix of the text is not found;
- a journal the migration has not reached yet (an older daemon still running) is still
  searched, by decoding every result;
- ``since`` answers in id order (no longer ordered by SQL).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb

from netctl.journal import migrate, query

T0 = 1_700_000_000.0


def result(*addresses: str) -> bytes:
    return json.dumps({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}],
                       "ips": [{"address": a, "interface": 0} for a in addresses]}).encode()


def add(conn: sqlite3.Connection, container: str, res: bytes | None, *,
        created: float = T0, removed: float | None = None) -> int:
    return journaldb.write_attachment(conn, container_id=container, result=res,
                                      state="removed" if removed else "attached",
                                      created_at=created, removed_at=removed)


def indexed(conn: sqlite3.Connection, att_id: int) -> list[str]:
    return sorted(journaldb.indexed_addresses(conn, att_id))


@pytest.fixture
def db(tmp_path: Path) -> Any:
    path = tmp_path / "journal.db"
    migrate.migrate(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def read(conn: sqlite3.Connection) -> sqlite3.Connection:
    return query.connect(Path(journaldb.file_of(conn)).parent)


def test_triggers_keep_the_addresses(db: sqlite3.Connection) -> None:
    a = add(db, "c1", result("10.1.0.5/24", "FD00::5/64"))
    assert indexed(db, a) == ["10.1.0.5", "fd00::5"]
    journaldb.rewrite_result(db, a, result("10.1.0.9/24"))
    assert indexed(db, a) == ["10.1.0.9"]
    journaldb.rewrite_result(db, a, None)
    assert indexed(db, a) == []
    assert indexed(db, add(db, "c2", None)) == []
    assert indexed(db, add(db, "c3", result("10.1.0.7"))) == ["10.1.0.7"]  # no prefix length


@pytest.mark.parametrize("bad", [
    b"not json", b"\xff\xfe", b"[]", b'{"ips": "10.1.0.5"}', b'{"ips": ["10.1.0.5/24"]}',
    b'{"ips": [{"address": 5}, {"gateway": "10.1.0.1"}]}', b'{"ips": null}',
])
def test_odd_results_add_nothing_and_never_fail(db: sqlite3.Connection, bad: bytes) -> None:
    a = add(db, "odd", bad)
    assert indexed(db, a) == []
    journaldb.rewrite_result(db, a, bad)
    assert indexed(db, a) == []


def test_migration_fills_the_index_from_a_version_2_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    conn = migrate.connect(path)
    journaldb.simulate_schema(conn, 2)
    a = add(conn, "old1", result("10.2.0.5/16"))
    b = add(conn, "old2", result("10.2.0.6/16", "fd00::6/64"), removed=T0 + 10)
    conn.close()
    assert migrate.migrate(path) == [v for v, _, _ in migrate.available()[2:]]
    conn = sqlite3.connect(path)
    try:
        assert indexed(conn, a) == ["10.2.0.5"]
        assert indexed(conn, b) == ["10.2.0.6", "fd00::6"]
    finally:
        conn.close()


def test_attachments_by_ip(db: sqlite3.Connection) -> None:
    old = add(db, "old", result("10.1.0.5/24"), created=T0, removed=T0 + 100)
    new = add(db, "new", result("10.1.0.5/24"), created=T0 + 200)
    v6 = add(db, "six", result("10.1.0.6/24", "fd00::a:5/64"), created=T0)
    add(db, "near", result("10.1.0.50/24", "10.1.0.51/24"), created=T0)
    conn = read(db)
    try:
        def ids(**kw: Any) -> list[int]:
            return [a["attachment"] for a in query.attachments(conn, **kw)]

        assert ids(ip="10.1.0.5") == [old, new]  # the history, oldest first
        assert ids(ip="10.1.0.5/24") == [old, new]
        assert ids(ip=" 10.1.0.5/32 ") == [old, new]
        assert ids(ip="10.1.0.5", at=T0 + 50) == [old]
        assert ids(ip="10.1.0.5", at=T0 + 150) == []
        assert ids(ip="10.1.0.5", at=T0 + 250) == [new]
        assert ids(ip="10.1.0.5", since=T0 + 150) == [new]
        assert ids(ip="10.1.0.5", container="old") == [old]
        assert ids(ip="FD00:0:0:0:0:0:A:5") == [v6]
        assert ids(ip="fd00::a:5/64") == [v6]
        assert ids(ip="10.1.0.4") == []
        found = query.attachments(conn, ip="10.1.0.6")
        assert [a["addresses"] for a in found] == [["10.1.0.6/24", "fd00::a:5/64"]]
    finally:
        conn.close()


def test_a_journal_without_the_index_is_still_searched(db: sqlite3.Connection) -> None:
    a = add(db, "c1", result("10.3.0.5/24"))
    journaldb.simulate_no_address_index(db)
    conn = read(db)
    try:
        assert [x["attachment"] for x in query.attachments(conn, ip="10.3.0.5")] == [a]
        assert query.attachments(conn, ip="10.3.0.6") == []
    finally:
        conn.close()


def test_since_answers_in_id_order(db: sqlite3.Connection) -> None:
    made = [add(db, f"c{i}", result(f"10.4.0.{i}/24"), created=T0 + (10 - i) * 10)
            for i in range(1, 8)]
    conn = read(db)
    try:
        assert [a["attachment"] for a in query.attachments(conn, since=T0)] == made
    finally:
        conn.close()
