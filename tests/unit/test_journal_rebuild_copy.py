"""We test how ``netctl journal rebuild`` reads a broken journal's tables
(:func:`netctl.journal.rebuild._copy`): the leaf pages of three tables of a small journal
are overwritten with random bytes (a seeded generator: the same 300 cases every run), and
for each case the copy must end, copy the untouched tables whole, and copy only rows in
row-id order.

A broken page can yield row ids out of order — a read from row id 22 that returns row 21
— and such a case made the copy go round for ever (seeds 54 and 281 here, before the
fix; CI saw one in the integration test that uses ``os.urandom``)."""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from netctl.journal import rebuild
from netctl.journal.migrate import migrate
from netctl.kit import journaldb

ROWS = 5  # per table: each table's only page is its root leaf, as on a young node
BROKEN = ("attachments", "ipam_allocations", "operations")


@pytest.fixture
def deadline() -> Iterator[None]:
    """A copy that goes round for ever fails the test instead of hanging the suite."""
    def expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("a copy of a broken journal did not end")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(300)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_every_copy_of_a_broken_journal_ends_in_row_id_order(
        tmp_path: Path, deadline: None) -> None:
    base, empty = tmp_path / "base.db", tmp_path / "empty.db"
    journaldb.simulate_filler_journal(base, rebuild.TABLES, ROWS)
    migrate(str(empty))
    with sqlite3.connect(base) as conn:
        pages = [page for table in BROKEN for page in journaldb.leaf_pages(conn, table)]
        size = journaldb.page_size(conn)
    spans = 0
    for seed in range(300):
        broken, built = tmp_path / "broken.db", tmp_path / f"new-{seed}.db"
        shutil.copy(base, broken)
        randomness = random.Random(seed)
        with open(broken, "r+b") as fh:
            for page in pages:  # the page header kept, as in the integration tests
                fh.seek((page - 1) * size + 8)
                fh.write(randomness.randbytes(size - 8))
        shutil.copy(empty, built)
        old = sqlite3.connect(f"file:{broken}?mode=ro", uri=True)
        new = journaldb.copy_target(built)
        report = rebuild.RebuildReport(str(broken))
        for table in rebuild.TABLES:
            rebuild._copy(old, new, table, report)
        for table in set(rebuild.TABLES) - set(BROKEN):
            assert report.copied[table] == ROWS, (seed, report)
        for table in BROKEN:
            ids = journaldb.row_ids(new, table)
            assert ids == sorted(set(ids)), (seed, table, ids)
        spans += sum(report.broken_spans.values())
        old.close()
        new.close()
        built.unlink()
    assert spans > 300  # the pages were broken: reads stopped at them
