"""We test :meth:`netctl.journal.store.Journal.running`, the one way a journaled operation
ends, on a real journal file: the end its body sets, done when it sets none, ``failed(exc)``
when it raises (the exception going on), left running when ``failed`` says None (for the
replay), and finished even when the body is cancelled."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import trio
from netctl_kit import journaldb

from netctl.errors import CNIError
from netctl.journal import query
from netctl.journal.records import OpEnd, OpStart
from netctl.journal.store import open_journal


def states(tmp_path: Path) -> dict[str, tuple[str, str | None]]:
    with contextlib.closing(query.connect(tmp_path)) as conn:
        return {o["container_id"]: (o["state"], o["error"])
                for o in journaldb.operation_rows(conn)}


def test_every_way_an_operation_ends(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_journal(tmp_path) as journal:
            async def begin(name: str) -> int:
                op_id, _ = await journal.begin(OpStart(verb="ADD", container_id=name))
                return op_id

            def failed(exc: BaseException) -> OpEnd:
                return OpEnd(state="failed", error=f"failed: {exc}")

            async with journal.running(await begin("plain"), failed):
                pass
            async with journal.running(await begin("set"), failed) as closing:
                closing.end = OpEnd(state="compensated", error="set by the body")
            with pytest.raises(CNIError, match="boom"):
                async with journal.running(await begin("raised"), failed):
                    raise CNIError(11, "boom")
            with pytest.raises(CNIError):
                async with journal.running(await begin("replay"), lambda exc: None):
                    raise CNIError(11, "left for the replay")
            with trio.move_on_after(0.05) as scope:
                async with journal.running(await begin("cancelled"), failed):
                    await trio.sleep_forever()
            assert scope.cancelled_caught

    trio.run(main)
    got = states(tmp_path)
    assert got["plain"] == ("done", None)
    assert got["set"] == ("compensated", "set by the body")
    assert got["raised"] == ("failed", "failed: boom")
    assert got["replay"] == ("running", None)
    assert got["cancelled"] == ("failed", "failed: cancelled due to deadline")
