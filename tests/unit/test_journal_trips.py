"""We test this aspect of the journal's trips to its database thread, on a real journal
file: a thread that hangs fails a write (code 5) and a read within ``write_deadline``,
its late answers are dropped, and the journal serves the next writes and reads.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing
from netctl_kit import journaldb

from netctl.errors import IO_FAILURE, CNIError
from netctl.journal.records import OpEnd, OpStart
from netctl.journal.store import Journal, open_journal


async def occupy(journal: Journal, fn: Callable[[sqlite3.Connection], object],
                 nursery: trio.Nursery) -> None:
    """The database thread given ``fn`` first (through the journal's own reads), and busy
    with it while the test goes on; a read that outlives its deadline is the test's
    point, not an error."""
    async def read() -> None:
        with contextlib.suppress(trio.TooSlowError):
            await journal._io.read(fn)
    nursery.start_soon(read)
    await trio.testing.wait_all_tasks_blocked()


def test_a_hung_database_fails_a_write_in_time_and_the_journal_goes_on(
        tmp_path: Path) -> None:
    """``write_deadline`` bounds every trip to the database thread; the thread's late
    answer is dropped, and the next writes and reads are served."""
    async def main() -> None:
        async with open_journal(tmp_path, write_deadline=0.2) as journal, \
                trio.open_nursery() as nursery:
            await occupy(journal, lambda db: time.sleep(0.6), nursery)  # busy elsewhere
            started = trio.current_time()
            with pytest.raises(CNIError) as late:
                await journal.begin(OpStart(verb="ADD", container_id="late"))
            assert late.value.code == IO_FAILURE and "did not finish" in late.value.msg
            assert trio.current_time() - started < 0.5
            with pytest.raises(trio.TooSlowError):
                await journal.live_attachments()
            await trio.sleep(0.6)  # the thread answers the cancelled trips: dropped
            op, _ = await journal.begin(OpStart(verb="ADD", container_id="later"))
            await journal.finish(op, OpEnd(state="done"))
            # the late write itself ran meanwhile: the deadline bounds the wait, not the thread
            assert [op.container_id for op in await journal.unfinished_operations()] == ["late"]

    trio.run(main)


def test_a_write_that_fails_in_a_batch_loses_only_itself(tmp_path: Path) -> None:
    """Writes queued while the thread is busy go in one transaction; one of them failing
    half-way is undone alone (its own first statement too), the others commit, and its
    caller gets the error (code 5)."""
    async def main() -> None:
        async with open_journal(tmp_path, write_deadline=5.0) as journal:
            ops: dict[str, int] = {}

            def half_then_fail(db: sqlite3.Connection) -> None:
                journaldb.write_operation(db, verb="ADD", container_id="half", state="running",
                                          started_at=0)
                raise sqlite3.IntegrityError("the second statement of this write failed")

            async def begin(name: str) -> None:
                ops[name], _ = await journal.begin(OpStart(verb="ADD", container_id=name))

            failed: list[CNIError] = []

            async def failing() -> None:
                try:
                    await journal._io.write(half_then_fail)
                except CNIError as exc:
                    failed.append(exc)

            commits = journal.commits
            async with trio.open_nursery() as nursery:
                await occupy(journal, lambda db: time.sleep(0.3), nursery)  # busy: they queue
                nursery.start_soon(begin, "first")
                nursery.start_soon(failing)
                nursery.start_soon(begin, "last")
            assert journal.commits - commits <= 2  # batched (the first may go alone)
            assert [e.code for e in failed] == [IO_FAILURE]
            assert "the second statement of this write failed" in failed[0].msg
            names = {op.container_id for op in await journal.unfinished_operations()}
            assert names == {"first", "last"}  # 'half' never committed
            for op_id in ops.values():
                await journal.finish(op_id, OpEnd(state="done"))

    trio.run(main)
