"""We test these aspects of ``netctl journal --running`` (what is in flight, or what a crash
cut short) on a real journal file made by the migrations runner, with rows written by hand:
every running operation is listed, however many operations came after it (the plain
listing keeps only the last 200), none that finished; the attachments listed are those a
running operation adds or removes; and ``query.running_operations`` gives the same rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from netctl_kit import journaldb

from netctl.commands.cli import main
from netctl.journal import query
from netctl.journal.migrate import migrate

T0 = 1_700_000_000.0


def operation(conn: sqlite3.Connection, verb: str, container: str, state: str) -> int:
    return journaldb.write_operation(conn, verb=verb, container_id=container, state=state,
                                     started_at=T0)


def attachment(conn: sqlite3.Connection, container: str, state: str, add_op: int,
               del_op: int | None = None) -> int:
    return journaldb.write_attachment(conn, container_id=container, state=state,
                                      created_at=T0, add_op=add_op, del_op=del_op)


def test_running_lists_every_running_operation_and_what_it_touches(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    migrate(tmp_path / "journal.db")
    conn = sqlite3.connect(tmp_path / "journal.db", isolation_level=None)
    try:
        cut = operation(conn, "ADD", "cut", "running")  # cut by a crash, long ago
        attachment(conn, "cut", "adding", cut)
        for i in range(250):  # more than the plain listing shows
            done = operation(conn, "ADD", f"pod{i}", "done")
            attachment(conn, f"pod{i}", "attached", done)
        added = operation(conn, "ADD", "leaving", "done")
        removing = operation(conn, "DEL", "leaving", "running")
        attachment(conn, "leaving", "removing", added, removing)
    finally:
        conn.close()

    assert main(["journal", "--state-dir", str(tmp_path), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert cut not in [op["id"] for op in plain["operations"]]

    assert main(["journal", "--state-dir", str(tmp_path), "--running", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [(op["id"], op["verb"], op["container_id"], op["state"])
            for op in answer["operations"]] == [(cut, "ADD", "cut", "running"),
                                                (removing, "DEL", "leaving", "running")]
    assert [(a["container"], a["state"]) for a in answer["attachments"]] == [
        ("cut", "adding"), ("leaving", "removing")]

    read = query.connect(tmp_path)
    try:
        assert query.running_operations(read) == answer["operations"]
    finally:
        read.close()

    assert main(["journal", "--state-dir", str(tmp_path), "--running"]) == 0
    table = capsys.readouterr().out
    assert "cut" in table and "leaving" in table and "pod1" not in table
