"""We test this aspect of the journal's trips to its database thread, on a real journal
file: a thread that hangs fails a write (code 5) and a read within ``write_deadline``,
its late answers are dropped, and the journal serves the next writes and reads.
"""

from __future__ import annotations

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

            journal._db._tx.put_nowait((None, stuck))  # the thread is busy elsewhere
            started = trio.current_time()
            with pytest.raises(CNIError) as late:
                await journal.begin(OpStart(verb="ADD", container_id="late"))
            assert late.value.code == IO_FAILURE and "did not finish" in late.value.msg
            assert trio.current_time() - started < 0.5
            with pytest.raises(trio.TooSlowError):
                await journal.live_attachments()
            await trio.sleep(0.6)  # the thread answers the cancelled trips: dropped
            op = await journal.begin(OpStart(verb="ADD", container_id="later"))
            await journal.finish(op, OpEnd(state="done"))
            # the late write itself ran meanwhile: the deadline bounds the wait, not the thread
            assert [op.container_id for op in await journal.unfinished_operations()] == ["late"]

    trio.run(main)
