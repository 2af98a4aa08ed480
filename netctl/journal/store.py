"""The journal store: typed, trio-facing operations on the journal database. Callers name
what happened (:meth:`Journal.begin`, :meth:`~Journal.begin_step`, :meth:`~Journal.end_step`,
:meth:`~Journal.finish`) and never see SQL; each call is one group-committed transaction
(:mod:`netctl.journal.commit`), and :attr:`Journal.live` is updated as it commits.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import trio

from netctl import logs
from netctl.cni.request import Pod
from netctl.errors import IO_FAILURE, CNIError, describe, first_of
from netctl.journal.allocations import IpamRecords
from netctl.journal.commit import Committer, DatabaseThread, JournalUnwritable
from netctl.journal.events import Event, EventLog, of_operations
from netctl.journal.live import LiveIndex
from netctl.journal.migrate import PRAGMAS, migrate
from netctl.journal.query import journal_path
from netctl.journal.rebuild import ensure_sound
from netctl.journal.records import (
    Allocation,
    Attachment,
    OpEnd,
    Operation,
    OpStart,
    PoolInfo,
    StepEnd,
    StepStart,
)
from netctl.journal.retention import Cutoffs, Pruned, Size, prune_batch, vacuum_pages
from netctl.journal.retention import size as journal_size
from netctl.journal.rows import (
    attachment_of,
    close_operation,
    insert_operation,
    insert_step,
    load_live,
    record_allocations,
    release_allocations,
    to_json,
)


class Begun(NamedTuple):
    """An operation begun (:meth:`Journal.begin`): its id, and its first steps' ids."""

    op_id: int
    steps: list[int]


@dataclass
class Closing:
    """How an operation is to end, as its body says (:meth:`Journal.running`)."""

    end: OpEnd | None = None
    retry_at: Callable[[int], float] | None = None


class Journal:
    def __init__(self, db: DatabaseThread, write_deadline: float,
                 clock: Callable[[], float] = time.time, next_attachment: int = 1) -> None:
        self.clock = clock  # the rows' timestamps (the retention bench passes a simulated one)
        self._io = Committer(db, write_deadline)
        self.ipam = IpamRecords(self._io, clock)  # allocations, pools, reservations, blocks
        self._next_attachment = next_attachment  # the id :meth:`number` gives next
        self.path = db.path
        self.live = LiveIndex()
        self._outer: dict[int, logs.Context] = {}  # op id → the log context it was begun in
        # op id → how it ended, when the disk refused that record (:meth:`write_unwritten`)
        self._unwritten: dict[int, tuple[OpEnd, Callable[[int], float] | None]] = {}
        # attachment id → the result its row holds, recorded by its last step's end: the
        # operation's close does not write it again (its trigger re-indexes the addresses)
        self._recorded: dict[int, dict[str, Any]] = {}
        self.event_log: EventLog | None = None  # journal-log: closed operations' events

    # -- plumbing (the counts: :class:`~netctl.journal.commit.Committer`'s) -----------------

    @property
    def write_deadline(self) -> float:
        return self._io.write_deadline

    @property
    def commits(self) -> int:
        return self._io.commits

    @property
    def writes(self) -> int:
        return self._io.writes

    @property
    def trips(self) -> int:
        return self._io.trips

    @property
    def trouble(self) -> str | None:
        return self._io.trouble

    @property
    def refused(self) -> int:
        return self._io.refused

    def _events(self, db: sqlite3.Connection, op_ids: Sequence[int]) -> list[Event]:
        """In the transaction that closes ``op_ids``: their events for :attr:`event_log`."""
        if self.event_log is None:
            return []
        return of_operations(db, op_ids, self.event_log.node)

    def _log_events(self, events: list[Event]) -> None:
        if self.event_log is not None and events:
            self.event_log(events)

    # -- operations -------------------------------------------------------------------------

    async def begin(self, op: OpStart, *, adding: Sequence[Attachment] = (),
                    removing: Sequence[Attachment] = (), first: Sequence[StepStart] = (),
                    new: Sequence[Allocation] = (), pools: dict[str, PoolInfo] | None = None
                    ) -> Begun:
        """Record an operation before its first side effect, in one transaction with the
        attachments it will add (state ``adding``) and remove (``removing``), the first step
        of some of its chains (``first``: their ``op_id`` set here) and the addresses those
        steps are given (``new``). The operation's id and the steps' ids, in ``first``'s
        order."""
        self.number(adding)  # never SQLite's own rowid: it could be one numbered already

        def fn(db: sqlite3.Connection) -> tuple[int, list[int], list[int]]:
            now = self.clock()
            op_id = insert_operation(db, op, now)
            ids = []
            for att in adding:
                att.created_at = now
                cur = db.execute(
                    "INSERT INTO attachments (id, container_id, ifname, network, network_name,"
                    " is_default, caller_network, caller_ifname, netns, pod_namespace,"
                    " pod_name, pod_uid, cni_version, chain, capability_args, cni_args, state,"
                    " add_op, created_at, steps_started, result, sticky_key, device_resource,"
                    " device_id) VALUES"
                    " (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'adding',?,?,?,?,?,?,?)",
                    (att.id, att.container_id, att.ifname, att.network,
                     att.chain.name, int(att.is_default), att.caller_network,
                     att.caller_ifname, att.netns, att.pod.namespace, att.pod.name,
                     att.pod.uid, att.chain.cni_version, att.chain.raw,
                     to_json(att.capability_args), to_json(att.cni_args), op_id, now,
                     att.steps_started, to_json(att.result), att.identity, att.resource,
                     att.device))
                assert cur.lastrowid is not None
                ids.append(cur.lastrowid)
            db.executemany("UPDATE attachments SET state='removing', del_op=? WHERE id=?",
                           [(op_id, att.id) for att in removing])
            record_allocations(db, new, op_id, pools or {}, now)
            steps = []
            for step in first:
                step.op_id = op_id
                steps.append(insert_step(db, step, now))
            return op_id, ids, steps

        def indexed(result: tuple[int, list[int], list[int]]) -> None:
            for att, att_id in zip(adding, result[1], strict=True):
                self.live.attachment(att_id, att.container_id, att.netns, att.result,
                                     att.pod.uid)
            self.live.leaving([att.id for att in removing])
            self._allocations_changed(new, ())

        op_id, ids, steps = await self._io.write(fn, indexed)
        for att, att_id in zip(adding, ids, strict=True):
            att.id, att.state, att.add_op = att_id, "adding", op_id
        for att in removing:
            att.state, att.del_op = "removing", op_id
        # the lines logged until it finishes carry the operation
        self._outer[op_id] = logs.current()
        logs.bind(op=op_id, verb=op.verb, container=op.container_id,
                  pod=logs.pod_name(op.pod.namespace, op.pod.name))
        return Begun(op_id, steps)

    def number(self, atts: Sequence[Attachment]) -> None:
        """Give ``atts`` their ids before :meth:`begin` records them (the addresses of their
        first step name them); an id never recorded is never used again."""
        for att in atts:
            if not att.id:
                att.id = self._next_attachment
                self._next_attachment += 1

    @asynccontextmanager
    async def running(self, op_id: int, failed: Callable[[BaseException], OpEnd | None],
                      retry_at: Callable[[int], float] | None = None
                      ) -> AsyncIterator[Closing]:
        """The life of operation ``op_id``, begun: the one way every journaled operation
        ends. Its body sets ``closing.end`` (and ``retry_at``); left unset, the operation
        ends done, or — when the body raises — ``failed(exc)``: None leaves it running for
        the next start's replay — unless the journal's disk refused a write of it: then it
        ends ``compensate_failed`` once the journal can be written (:meth:`write_unwritten`).
        ``retry_at``: when kept attachments may be tried again. The record is finished
        (shielded, within ``write_deadline``) before the body's exception goes on."""
        closing = Closing()
        try:
            yield closing
        except BaseException as exc:
            end = closing.end or failed(exc)
            if end is None and first_of(exc, JournalUnwritable) is not None:
                end = OpEnd(state="compensate_failed", code=IO_FAILURE, error=describe(exc))
                self._unwritten[op_id] = (end, closing.retry_at or retry_at)
            elif end is not None:
                with trio.CancelScope(shield=True):
                    try:
                        await self.finish(op_id, end, retry_at=closing.retry_at or retry_at)
                    except JournalUnwritable:
                        self._unwritten[op_id] = (end, closing.retry_at or retry_at)
            raise
        end = closing.end or OpEnd(state="done")
        try:
            await self.finish(op_id, end, retry_at=closing.retry_at)
        except JournalUnwritable:
            self._unwritten[op_id] = (end, closing.retry_at)
            raise

    async def write_unwritten(self) -> int:
        """Write the ends the disk refused (:meth:`running`), each as it ended; how many.
        The rest wait for the next call (the reconciler's rounds)."""
        written = 0
        for op_id, (end, retry_at) in list(self._unwritten.items()):
            await self.finish(op_id, end, retry_at=retry_at)
            del self._unwritten[op_id]
            written += 1
        return written

    async def finish(self, op_id: int, end: OpEnd, *, retry_at: Callable[[int], float] | None
                     = None) -> None:
        """Close an operation: attached ones go live with their results, removed ones
        are removed, kept ones keep their state with the error and one more DEL failure
        (``retry_at(failures)``: when the reconciler may try them again)."""
        outer = self._outer.pop(op_id, None)
        if outer is not None and logs.current().get("op") == op_id:
            logs.replace(outer)
        recorded = self._recorded
        same = [a.id for a in end.attached
                if a.result is not None and recorded.get(a.id) is a.result]
        changed = [a for a in end.attached if a.id not in same]
        for att in (*end.attached, *end.removed, *(a for a, _ in end.kept)):
            recorded.pop(att.id, None)

        def fn(db: sqlite3.Connection) -> list[Event]:
            now = self.clock()
            db.executemany("UPDATE attachments SET state='attached' WHERE id=?",
                           [(att_id,) for att_id in same])
            db.executemany("UPDATE attachments SET state='attached', result=? WHERE id=?",
                           [(to_json(a.result), a.id) for a in changed])
            db.executemany("UPDATE attachments SET state='removed', error=NULL, removed_at=?"
                           " WHERE id=?", [(now, a.id) for a in end.removed])
            db.executemany(
                "UPDATE attachments SET error=?, del_failures=del_failures+1, retry_at=?"
                " WHERE id=?", [(err, retry_at(a.del_failures + 1) if retry_at else None, a.id)
                                for a, err in end.kept])
            close_operation(db, op_id, end.state, end.code, end.error, now)
            return self._events(db, [op_id])

        def indexed(events: list[Event]) -> None:
            self._log_events(events)
            for att in changed:  # the others' are in since their steps ended
                self.live.result(att.id, att.result)
            self.live.removed([att.id for att in end.removed])
            self.live.leaving([att.id for att, _ in end.kept], leaving=False)
            self.live.failed([att.id for att, _ in end.kept])

        await self._io.write(fn, indexed)
        for att in end.attached:
            att.state = "attached"
        for att in end.removed:
            att.state = "removed"
        for att, err in end.kept:
            att.error = err
            att.del_failures += 1

    async def one_transaction(self, op: OpStart, *, new: Sequence[Allocation] = (),
                              gone: Sequence[Allocation] = (),
                              pools: dict[str, PoolInfo] | None = None,
                              failure: CNIError | None = None) -> int:
        """An operation whose only side effects are journal rows (a plain IPAM request, a
        release by the reconciler), begun and closed in one transaction; with ``failure``,
        recorded as failed."""
        def fn(db: sqlite3.Connection) -> tuple[int, list[Event]]:
            now = self.clock()
            op_id = insert_operation(db, op, now)
            record_allocations(db, new, op_id, pools or {}, now)
            release_allocations(db, gone, op_id, now)
            if failure is None:
                close_operation(db, op_id, "done", None, None, now)
            else:
                close_operation(db, op_id, "failed", failure.code, failure.msg, now)
            return op_id, self._events(db, [op_id])

        def indexed(result: tuple[int, list[Event]]) -> None:
            self._log_events(result[1])
            self._allocations_changed(new, gone)

        op_id, _ = await self._io.write(fn, indexed)
        return op_id

    async def forget(self, op: OpStart, atts: Sequence[Attachment],
                     gone: Sequence[Allocation]) -> int:
        """``netctl forget``: the operation, the attachments marked removed without any DEL,
        and their addresses released, in one transaction."""
        def fn(db: sqlite3.Connection) -> tuple[int, list[Event]]:
            now = self.clock()
            op_id = insert_operation(db, op, now)
            db.executemany("UPDATE attachments SET state='removed', del_op=?, removed_at=?"
                           " WHERE id=?", [(op_id, now, a.id) for a in atts])
            release_allocations(db, gone, op_id, now)
            close_operation(db, op_id, "done", None, None, now)
            return op_id, self._events(db, [op_id])

        def indexed(result: tuple[int, list[Event]]) -> None:
            self._log_events(result[1])
            self.live.removed([a.id for a in atts])
            self._allocations_changed((), gone)

        op_id, _ = await self._io.write(fn, indexed)
        for att in atts:
            att.state = "removed"
        return op_id

    async def operation_request(self, op_id: int) -> bytes | None:
        """The request an operation was begun with (a runtime's ADD: its stdin), or None."""
        rows = await self._io.read(lambda db: db.execute(
            "SELECT request FROM operations WHERE id=?", (op_id,)).fetchall())
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else None

    async def unfinished_operations(self) -> list[Operation]:
        rows = await self._io.read(lambda db: db.execute(
            "SELECT id, verb, container_id, netns, ifname, state, origin FROM operations"
            " WHERE state='running' ORDER BY id").fetchall())
        return [Operation(**dict(row)) for row in rows]

    async def unannotated(self) -> list[OpStart]:
        """The containers with live attachments whose last ANNOTATE (network-status written
        to their pod) failed, each as that ANNOTATE began: retried when a daemon starts."""
        rows = await self._io.read(lambda db: db.execute(
            "SELECT o.container_id, o.netns, o.ifname, o.caller_network, o.pod_namespace,"
            " o.pod_name, o.pod_uid FROM operations o"
            " WHERE o.verb='ANNOTATE' AND o.state='failed'"
            " AND o.id = (SELECT MAX(id) FROM operations WHERE verb='ANNOTATE'"
            "             AND container_id=o.container_id)"
            " AND EXISTS (SELECT 1 FROM attachments a WHERE a.container_id=o.container_id"
            "             AND a.state='attached')"
            " ORDER BY o.id").fetchall())
        return [OpStart(verb="ANNOTATE", container_id=r["container_id"], netns=r["netns"],
                        ifname=r["ifname"], caller_network=r["caller_network"],
                        pod=Pod(namespace=r["pod_namespace"], name=r["pod_name"],
                                uid=r["pod_uid"]), origin="kubernetes",
                        reason="network-status resumed at start: the last write had failed")
                for r in rows]

    async def close_operations(self, ops: Sequence[tuple[int, str, str]]) -> None:
        """Close operations a previous run left running: (id, state, error)."""
        def fn(db: sqlite3.Connection) -> list[Event]:
            now = self.clock()
            for op_id, state, error in ops:
                close_operation(db, op_id, state, None, error, now)
            return self._events(db, [op_id for op_id, _, _ in ops])

        await self._io.write(fn, self._log_events)

    # -- attachments ------------------------------------------------------------------------

    async def live_attachments(self, container_id: str | None = None) -> list[Attachment]:
        """Attachments not removed: all, or one container's (no read when :attr:`live` has none)."""
        if container_id is not None and not self.live.holds(container_id):
            return []
        only, args = ("", ()) if container_id is None else (" AND container_id=?",
                                                            (container_id,))
        rows = await self._io.read(lambda db: db.execute(
            f"SELECT * FROM attachments WHERE state != 'removed'{only} ORDER BY id",
            args).fetchall())
        return [attachment_of(r) for r in rows]

    async def seen(self, container_id: str) -> bool:
        """Whether the journal has any operation of this container."""
        if self.live.holds(container_id):
            return True
        rows = await self._io.read(lambda db: db.execute(
            "SELECT 1 FROM operations WHERE container_id=? LIMIT 1",
            (container_id,)).fetchall())
        return bool(rows)

    async def stuck_attachments(self) -> list[dict[str, Any]]:
        """Attachments whose clean-up failed and that are not removed yet (for status)."""
        rows = await self._io.read(lambda db: db.execute(
            "SELECT id AS attachment, container_id AS container, network, ifname, state,"
            " del_failures AS failures, retry_at, error FROM attachments"
            " WHERE state != 'removed' AND del_failures > 0 ORDER BY id").fetchall())
        return [dict(r) for r in rows]

    # -- steps ------------------------------------------------------------------------------

    async def begin_step(self, step: StepStart, *, new: Sequence[Allocation] = (),
                         pools: dict[str, PoolInfo] | None = None) -> int:
        """Record a step before its plugin runs, with the addresses it is given (``new``)."""
        def fn(db: sqlite3.Connection) -> int:
            now = self.clock()
            record_allocations(db, new, step.op_id, pools or {}, now)
            return insert_step(db, step, now)

        return await self._io.write(fn, lambda _: self._allocations_changed(new, ()))

    async def end_step(self, end: StepEnd, *, op_id: int,
                       gone: Sequence[Allocation] = ()) -> None:
        """Record a step's outcome, with the addresses it released (``gone``). A step that
        did not start (refused before any side effect) no longer counts as started."""
        def fn(db: sqlite3.Connection) -> None:
            now = self.clock()
            release_allocations(db, gone, op_id, now)
            db.execute(
                "UPDATE steps SET state=?, result=?, code=?, error=?, stderr=?, finished_at=?,"
                " seconds=? WHERE id=?",
                ("failed" if end.error else "ok", to_json(end.result), end.code, end.error,
                 end.stderr or None, now, end.seconds, end.step_id))
            if end.verb == "ADD" and not end.started:
                db.execute("UPDATE attachments SET steps_started=? WHERE id=? AND"
                           " steps_started=?", (end.position, end.attachment, end.position + 1))
            if end.verb == "ADD" and end.error is None and end.result is not None:
                db.execute("UPDATE attachments SET result=? WHERE id=?",
                           (to_json(end.result), end.attachment))

        def indexed(_: None) -> None:
            if end.verb == "ADD" and end.error is None and end.result is not None:
                self.live.result(end.attachment, end.result)
                self._recorded[end.attachment] = end.result
            self._allocations_changed((), gone)

        await self._io.write(fn, indexed)

    async def read_live(self) -> LiveIndex:
        return await self._io.read(load_live)

    def _allocations_changed(self, new: Sequence[Allocation], gone: Sequence[Allocation]
                             ) -> None:
        """A committed write's allocations and releases into :attr:`live` and to the IPAM's
        store (:attr:`IpamRecords.follower`), in the step that committed them."""
        for alloc in new:
            self.live.allocated((alloc.scope, alloc.address), alloc.owner.container_id,
                                alloc.owner.netns, alloc.owner.attachment_id)
        self.live.released([(alloc.scope, alloc.address) for alloc in gone])
        if (follower := self.ipam.follower) is not None:
            if new:
                follower.recorded(list(new))
            if gone:
                follower.released(list(gone))


    # -- retention (netctl/journal/retention.py) -------------------------------------------

    async def prune(self, cut: Cutoffs, limit: int) -> Pruned:
        """Delete one batch of what ended before ``cut`` (at most ``limit`` rows of each
        kind, with their steps), group-committed with the requests' writes."""
        return await self._io.write(partial(prune_batch, cut=cut, limit=limit))

    async def vacuum(self, pages: int, keep_free: int = 0) -> int:
        """Give up to ``pages`` free pages back to the file system (one small write)."""
        return await self._io.write(partial(vacuum_pages, pages=pages, keep_free=keep_free))

    async def size(self) -> Size:
        return await self._io.read(partial(journal_size, path=self.path))


@asynccontextmanager
async def open_journal(state_dir: str | Path, write_deadline: float = 30.0,
                       clock: Callable[[], float] = time.time) -> AsyncIterator[Journal]:
    """Migrate and open the journal of ``state_dir`` (:func:`journal_path`)."""
    directory = Path(state_dir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # noqa: ASYNC240 - start-up
    path = str(journal_path(directory))
    ensure_sound(path)  # a broken journal is never written over (rebuild.py)
    migrate(path)
    db = DatabaseThread(path, PRAGMAS)
    await db.open()
    try:
        following = await db.call(lambda conn: int(conn.execute(
            "SELECT COALESCE(MAX(id), 0) + 1 FROM attachments").fetchone()[0]))
        journal = Journal(db, write_deadline, clock, following)
        journal.live = await journal.read_live()
        yield journal
    finally:
        with trio.CancelScope(shield=True):
            await db.close()
