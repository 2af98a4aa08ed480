"""We test this aspect of the journal's trips to its database thread, on a real journal
file: a thread that hangs fails a write (code 5) and a read within ``write_deadline``,
its late answers are dropped, and the journal serves the next writes and reads.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import trio

from netctl.errors import IO_FAILURE, CNIError
from netctl.journal.records import OpEnd, OpStart
from netctl.journal.store import open_journal


def test_a_hung_database_fails_a_write_in_time_and_the_journal_goes_on(
        tmp_path: Path) -> None:
    """``write_deadline`` bounds every trip to the database thread; the thread's late
    answer is dropped, and the next writes and reads are served."""
    async def main() -> None:
        async with open_journal(tmp_path, write_deadline=0.2) as journal:
            def stuck() -> None:
                time.sleep(0.6)

            journal._io._db._tx.put_nowait((None, stuck))  # the thread is busy elsewhere
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
                db.execute("INSERT INTO operations (verb, container_id, state, started_at)"
                           " VALUES ('ADD', 'half', 'running', 0)")
                raise sqlite3.IntegrityError("the second statement of this write failed")

            async def begin(name: str) -> None:
                ops[name], _ = await journal.begin(OpStart(verb="ADD", container_id=name))

            failed: list[CNIError] = []

            async def failing() -> None:
                try:
                    await journal._io.write(half_then_fail)
                except CNIError as exc:
                    failed.append(exc)

            journal._io._db._tx.put_nowait((None, lambda: time.sleep(0.3)))  # busy: they queue
            commits = journal.commits
            async with trio.open_nursery() as nursery:
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
