"""The journal's database thread and group commit. It knows no table.

:class:`DatabaseThread` owns the one ``sqlite3.Connection`` and the thread that uses it
(why not aiosqlite: docs/architecture.md, "The layers"). :class:`Committer` runs functions
there, one trip per transaction; writes are group-committed (one that fails is rolled
back alone), shielded, within ``write_deadline`` (else code 5).
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeGuard, TypeVar, cast

import outcome
import trio

from netctl.errors import IO_FAILURE, CNIError

log = logging.getLogger("netctl.journal")

T = TypeVar("T")
Sync = Callable[[sqlite3.Connection], T]


class _Write:
    """One queued write and, once its batch committed, its outcome; ``indexed`` is applied
    to the result as the batch commits. ``task``: the writer, parked while another commits."""

    __slots__ = ("done", "error", "fn", "indexed", "result", "task")

    def __init__(self, fn: Sync[Any], indexed: Callable[[Any], None] | None) -> None:
        self.fn = fn
        self.indexed = indexed
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.task: trio.lowlevel.Task | None = None


class JournalUnwritable(CNIError):
    """The journal's disk refused a write (full, read-only, an I/O error): nothing that
    write was to record happened. The daemon is degraded, keeps a DEL aside
    (:func:`netctl.reconcile.pending.keep`) and answers an ADD with this error."""

    def __init__(self, path: str, exc: sqlite3.Error) -> None:
        self.reason = unwritable_reason(path, exc)
        super().__init__(IO_FAILURE, self.reason)


# SQLite's primary result codes of a disk that refuses a write (sqlite3.h): the journal
# is fine, the filesystem under it is not
_DISK_CODES = {8: "read-only", 10: "an I/O error", 13: "full", 14: "cannot be opened"}


def disk_refused(exc: BaseException | None) -> TypeGuard[sqlite3.Error]:
    """Whether ``exc`` is SQLite saying the disk refused a write."""
    return isinstance(exc, sqlite3.Error) and \
        (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _DISK_CODES


def unwritable_reason(path: str, exc: sqlite3.Error) -> str:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    what = "the disk holding it is full" if code == 13 else \
        f"its disk is {_DISK_CODES[code]}" if code == 8 else \
        f"its disk reported {_DISK_CODES.get(code, 'an error')}"
    return f"journal {path} cannot be written: {what} ({exc})"


def _no_abort(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # a write once asked for is waited for (shielded)


def _run_batch(batch: list[_Write], db: sqlite3.Connection) -> None:
    """On the database thread: the batch in one transaction; should a write fail, the
    batch again with each write in a savepoint, so that only the failed write is lost
    (savepoints around every write cost a tenth of the journal's SQL)."""
    try:
        _transaction(batch, db, savepoints=False)
    except Exception:
        _transaction(batch, db, savepoints=True)


def _transaction(batch: list[_Write], db: sqlite3.Connection, *, savepoints: bool) -> None:
    """The batch's writes in one transaction; with ``savepoints``, a write that fails is
    undone alone (its error kept), else the first failure rolls everything back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for item in batch:
            if not savepoints:
                item.result = item.fn(db)
                continue
            item.result, item.error = None, None
            db.execute("SAVEPOINT w")
            try:
                item.result = item.fn(db)
            except Exception as exc:
                db.execute("ROLLBACK TO w")
                item.error = exc
            db.execute("RELEASE w")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


class _Answer:
    """One trip's answer, delivered through trio's token; once cancelled, the thread's late
    answer is dropped."""

    __slots__ = ("_done", "_task", "_token")

    def __init__(self) -> None:
        self._task = trio.lowlevel.current_task()
        self._token = trio.lowlevel.current_trio_token()
        self._done = False

    def cancel(self) -> None:
        self._done = True

    def deliver(self, answer: outcome.Outcome[Any]) -> None:
        try:
            self._token.run_sync_soon(self._resolve, answer)
        except trio.RunFinishedError:
            pass  # nobody waits any more

    def _resolve(self, answer: outcome.Outcome[Any]) -> None:
        if not self._done:
            self._done = True
            trio.lowlevel.reschedule(self._task, answer)


class DatabaseThread:
    """The journal's connection (``pragmas`` applied) and the one thread that uses it."""

    def __init__(self, path: str, pragmas: Sequence[str] = ()) -> None:
        self.path = path
        self._pragmas = tuple(pragmas)
        # a function of the connection (of None: the call that makes it), and who waits
        self._calls: queue.SimpleQueue[tuple[_Answer, Callable[[Any], Any]] | None] = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="netctl-journal",
                                        daemon=True)
        self._conn: sqlite3.Connection | None = None  # the thread's alone
        self._open = False

    async def open(self) -> None:
        """Start the thread and connect on it (its error raised here)."""
        self._thread.start()
        self._open = True
        try:
            await self.call(self._connect)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.close()
            raise

    def _connect(self, _: object) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        for pragma in self._pragmas:
            conn.execute(f"PRAGMA {pragma}")
        self._conn = conn

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            answer, fn = item
            answer.deliver(outcome.capture(fn, self._conn))
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def call(self, fn: Sync[T]) -> T:
        """``fn(connection)`` run on the thread, after what is queued before it. Cancelled
        while it waits, the caller goes on (``fn`` runs all the same)."""
        if not self._open:
            raise ValueError(f"journal {self.path}: the connection is closed")
        answer = _Answer()
        self._calls.put((answer, fn))

        def abort(_: object) -> trio.lowlevel.Abort:
            answer.cancel()
            return trio.lowlevel.Abort.SUCCEEDED

        return cast(T, await trio.lowlevel.wait_task_rescheduled(abort))

    async def close(self) -> None:
        """The calls queued run, the connection closed, the thread gone."""
        if not self._open:
            return
        self._open = False
        self._calls.put(None)
        await trio.to_thread.run_sync(self._thread.join)


class Committer:
    """Reads and group-committed writes on the journal's database thread, from trio
    (module doc), with their counts (the status and the benches read them)."""

    def __init__(self, db: DatabaseThread, write_deadline: float) -> None:
        self.db = db
        self.path = db.path
        self.write_deadline = write_deadline
        self._queue: list[_Write] = []
        self._committing = False  # a batch is on its way to the database thread
        self.commits = 0  # transactions committed (batches)
        self.writes = 0  # writes committed
        self.trips = 0  # calls run on the database thread (reads and batches)
        # why the last batch did not commit when its disk refused it; None once one does
        self.trouble: str | None = None
        self.refused = 0  # writes the disk refused (netctl_journal_writes_refused_total)

    async def _on_thread(self, fn: Sync[T]) -> T:
        self.trips += 1
        return await self.db.call(fn)

    async def write(self, fn: Sync[T], indexed: Callable[[T], None] | None = None) -> T:
        """Commit ``fn`` (with whatever else is queued), then, in the same step, apply
        ``indexed(result)``: an index kept so never lags behind a commit.

        While a batch is on the database thread, writes queue and their callers park; when
        it commits, its writers are woken, and the first writer queued meanwhile commits
        the next batch (one wake-up per write). Shielded; code 5 when its batch does not
        commit within ``write_deadline``."""
        item = _Write(fn, indexed)
        self._queue.append(item)
        if self._committing:
            item.task = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(_no_abort)
            item.task = None
        if not item.done:  # first in line: commit what is queued now
            await self._commit()
        if item.error is not None:
            if isinstance(item.error, CNIError):
                raise item.error
            if disk_refused(item.error):
                raise JournalUnwritable(self.path, item.error) from item.error
            raise CNIError(IO_FAILURE, f"journal {self.path}: {item.error}") from item.error
        return cast(T, item.result)

    async def _commit(self) -> None:
        """Commit the queued writes as one batch, wake their writers, and hand the next turn
        to the first writer queued meanwhile."""
        self._committing = True
        # one turn of the scheduler first: the writers it wakes (the other chains of a
        # pod, the writers of the batch just committed) queue theirs to go along
        await trio.lowlevel.cancel_shielded_checkpoint()
        batch, self._queue = self._queue, []
        committed = False
        try:
            with trio.CancelScope(shield=True,
                                  deadline=trio.current_time() + self.write_deadline):
                try:
                    await self._on_thread(partial(_run_batch, batch))
                    committed = True
                    self.commits += 1
                    refused = [o.error for o in batch if disk_refused(o.error)]
                    self._disk(refused[0] if refused else None, len(refused))
                    for other in batch:
                        if other.error is None and other.indexed is not None:
                            other.indexed(other.result)
                except Exception as exc:
                    for other in batch:
                        other.error = other.error or exc
                    if disk_refused(exc):
                        self._disk(exc, len(batch))
        finally:
            if not committed:  # past the deadline (or interrupted): no writer goes on as if
                cause = CNIError(IO_FAILURE, f"journal {self.path}: a write did not finish "
                                 f"within {self.write_deadline:g}s")
                for other in batch:
                    other.error = other.error or cause
            self.writes += len(batch)
            for other in batch:
                other.done = True
                if other.task is not None:
                    trio.lowlevel.reschedule(other.task)
            if self._queue:  # queued meanwhile: its first writer commits it
                task = self._queue[0].task
                assert task is not None  # queued while committing: parked
                trio.lowlevel.reschedule(task)
            else:
                self._committing = False

    def _disk(self, refused: sqlite3.Error | None, count: int) -> None:
        """A batch's end: its disk refused ``count`` of its writes (``refused``: why), or
        none (writable again)."""
        if refused is None:
            if self.trouble is not None:
                log.warning("journal %s is written again", self.path)
            self.trouble = None
            return
        self.refused += count
        if self.trouble is None:
            log.error("%s: ADDs fail, DELs are kept aside until it can be written",
                      unwritable_reason(self.path, refused))
        self.trouble = unwritable_reason(self.path, refused)

    async def read(self, fn: Sync[T]) -> T:
        """A read runs alone on the database thread, between write batches."""
        with trio.CancelScope(shield=True), trio.fail_after(self.write_deadline):
            return await self._on_thread(fn)
        raise AssertionError("unreachable")
