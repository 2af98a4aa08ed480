"""The journal store: aiosqlite behind trio (through trio-asyncio), one writer connection.

Writes are group-committed: a write queues its statements; whichever writer
holds the (one-connection) lock next runs every queued write in one
transaction, in one trip across the trio/asyncio bridge, and wakes their
callers. A lone write costs one transaction as before; under load, the steps
of many concurrent chains share a commit. If a batch fails, its writes are
retried one transaction each, so one bad write cannot fail the others.
The engine calls it before and after every side effect; the reconciler reads
what was left unfinished; the CLI reads the same tables (plain sqlite3, WAL
lets it read while the daemon writes).

Must be used inside ``trio_asyncio.open_loop()``; :func:`open_journal` opens
one when the caller has none.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite
import msgspec
import trio
import trio_asyncio

from netctl.errors import CNIError
from netctl.journal.migrate import migrate

T = TypeVar("T")


class Attachment(msgspec.Struct, kw_only=True):
    """One network of one container, as the journal keeps it."""

    id: int
    container_id: str
    ifname: str
    network: str
    network_name: str
    is_default: bool
    caller_network: str
    caller_ifname: str
    netns: str
    pod_namespace: str
    pod_name: str
    pod_uid: str
    cni_version: str
    chain: bytes
    capability_args: dict[str, Any]
    cni_args: dict[str, Any]
    steps_started: int
    result: dict[str, Any] | None
    state: str
    add_op: int | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Attachment:
        return cls(
            id=row["id"],
            container_id=row["container_id"],
            ifname=row["ifname"],
            network=row["network"],
            network_name=row["network_name"],
            is_default=bool(row["is_default"]),
            caller_network=row["caller_network"],
            caller_ifname=row["caller_ifname"],
            netns=row["netns"],
            pod_namespace=row["pod_namespace"],
            pod_name=row["pod_name"],
            pod_uid=row["pod_uid"],
            cni_version=row["cni_version"],
            chain=bytes(row["chain"]),
            capability_args=msgspec.json.decode(row["capability_args"]),
            cni_args=msgspec.json.decode(row["cni_args"]),
            steps_started=row["steps_started"],
            result=msgspec.json.decode(row["result"]) if row["result"] else None,
            state=row["state"],
            add_op=row["add_op"],
        )


class Operation(msgspec.Struct, kw_only=True):
    id: int
    verb: str
    container_id: str
    netns: str
    ifname: str
    state: str
    origin: str


async def _insert_operation(
    db: aiosqlite.Connection, verb: str, container_id: str, state: str, now: float, *,
    netns: str = "", ifname: str = "", caller_network: str = "", caller_version: str = "",
    pod: tuple[str, str, str] = ("", "", ""), request: bytes | None = None,
    origin: str = "runtime",
) -> int:
    """One operations row; a closed one (not ``running``) gets its finish time too."""
    cur = await db.execute(
        "INSERT INTO operations (verb, container_id, netns, ifname, caller_network,"
        " caller_version, pod_namespace, pod_name, pod_uid, request, origin, state,"
        " started_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (verb, container_id, netns, ifname, caller_network, caller_version, *pod, request,
         origin, state, now, None if state == "running" else now),
    )
    assert cur.lastrowid is not None
    return cur.lastrowid


async def _record_failure(db: aiosqlite.Connection, *, verb: str, container_id: str,
                          code: int, msg: str, fields: dict[str, Any]) -> None:
    op_id = await _insert_operation(db, verb, container_id, "failed", time.time(), **fields)
    await db.execute("UPDATE operations SET code=?, error=? WHERE id=?", (code, msg, op_id))


def _json(value: Any) -> bytes | None:
    return None if value is None else msgspec.json.encode(value)


class _Write:
    """One queued write and, once its batch committed, its outcome."""

    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[aiosqlite.Connection], Awaitable[Any]]) -> None:
        self.fn = fn
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class Journal:
    """Typed writes and reads of the journal tables."""

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self._db = db
        self._lock = trio.Lock()
        self._queue: list[_Write] = []
        self.path = path
        self.commits = 0  # transactions committed (batches), for benchmarks
        self.writes = 0  # writes committed

    # -- plumbing ---------------------------------------------------------------

    async def _commit(self, batch: list[_Write]) -> None:
        """Run ``batch`` in one transaction; on failure, each write in its own."""
        db = self._db

        async def one_transaction(items: list[_Write]) -> list[Any]:
            await db.execute("BEGIN IMMEDIATE")
            try:
                results = [await item.fn(db) for item in items]
            except BaseException:
                await db.execute("ROLLBACK")
                raise
            await db.execute("COMMIT")
            return results

        async def body() -> None:
            try:
                results = await one_transaction(batch)
            except Exception:
                if len(batch) == 1:
                    raise
                for item in batch:  # find the bad one; commit the others
                    try:
                        [item.result] = await one_transaction([item])
                    except Exception as exc:
                        item.error = exc
                    self.commits += 1
            else:
                for item, result in zip(batch, results, strict=True):
                    item.result = result
                self.commits += 1

        try:
            await trio_asyncio.aio_as_trio(body)()
        except Exception as exc:
            for item in batch:
                item.error = exc
        for item in batch:
            item.done = True
        self.writes += len(batch)

    async def _write(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        item = _Write(fn)
        self._queue.append(item)
        with trio.CancelScope(shield=True):  # a journal write always completes
            async with self._lock:
                if not item.done:  # nobody took it along: commit what is queued now
                    batch, self._queue = self._queue, []
                    await self._commit(batch)
        if item.error is not None:
            raise item.error
        return cast(T, item.result)

    async def write(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """Run ``fn`` in a journal transaction (group-committed like every write)."""
        return await self._write(fn)

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        db = self._db

        async def body() -> list[sqlite3.Row]:
            return list(await db.execute_fetchall(sql, params))

        with trio.CancelScope(shield=True):
            async with self._lock:
                return cast(list[sqlite3.Row], await trio_asyncio.aio_as_trio(body)())
        raise AssertionError("unreachable: a shielded scope is never cancelled")

    # -- operations -------------------------------------------------------------

    async def begin_operation(
        self,
        verb: str,
        container_id: str,
        *,
        attachments: Sequence[dict[str, Any]] = (),
        removing: Sequence[int] = (),
        **fields: Any,
    ) -> tuple[int, list[int]]:
        """Record an operation before its first side effect, in one transaction with the
        attachments it will add (state ``adding``) and those it will remove (``removing``).
        ``fields``: netns, ifname, caller_network, caller_version, pod, request, origin.
        Returns the operation's id and the new attachments' ids."""
        async def fn(db: aiosqlite.Connection) -> tuple[int, list[int]]:
            now = time.time()
            op_id = await _insert_operation(db, verb, container_id, "running", now, **fields)
            att_ids = []
            for att in attachments:
                cur = await db.execute(
                    "INSERT INTO attachments (container_id, ifname, network, network_name,"
                    " is_default, caller_network, caller_ifname, netns, pod_namespace,"
                    " pod_name, pod_uid, cni_version, chain, capability_args, cni_args, state,"
                    " add_op, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'adding',?,?)",
                    (att["container_id"], att["ifname"], att["network"], att["network_name"],
                     int(att["is_default"]), att["caller_network"], att["caller_ifname"],
                     att["netns"], att["pod_namespace"], att["pod_name"], att["pod_uid"],
                     att["cni_version"], att["chain"], _json(att["capability_args"]),
                     _json(att["cni_args"]), op_id, now),
                )
                assert cur.lastrowid is not None
                att_ids.append(cur.lastrowid)
            for att_id in removing:
                await db.execute("UPDATE attachments SET state='removing', del_op=? WHERE id=?",
                                 (op_id, att_id))
            return op_id, att_ids

        return await self._write(fn)

    async def whole_operation(
        self, verb: str, container_id: str,
        body: Callable[[aiosqlite.Connection, int], Awaitable[T]], **fields: Any,
    ) -> T:
        """An operation whose only side effects are journal rows (an IPAM allocation or
        release): recorded, done and closed in one transaction, so it happened entirely or
        not at all. If ``body`` fails, nothing of it stays and the failure is recorded."""
        async def fn(db: aiosqlite.Connection) -> T:
            op_id = await _insert_operation(db, verb, container_id, "done", time.time(),
                                            **fields)
            out = await body(db, op_id)
            await db.execute("UPDATE operations SET finished_at=? WHERE id=?",
                             (time.time(), op_id))
            return out

        try:
            return await self._write(fn)
        except CNIError as exc:
            await self._write(partial(_record_failure, verb=verb, container_id=container_id,
                                      code=exc.code, msg=exc.msg, fields=fields))
            raise

    async def finish_operation(
        self, op_id: int, state: str, code: int | None = None, error: str | None = None,
        attached: Iterable[tuple[int, dict[str, Any] | None]] = (),
        removed: Iterable[tuple[int, str | None]] = (),
    ) -> None:
        """Close an operation. ``attached`` (id, final result) pairs become live
        attachments; ``removed`` (id, error) pairs are removed when error is None, else
        keep their state (for a later DEL or the replay) with that error."""
        rows = list(attached)
        gone = list(removed)

        async def fn(db: aiosqlite.Connection) -> None:
            now = time.time()
            for att_id, result in rows:
                await db.execute(
                    "UPDATE attachments SET state='attached', result=? WHERE id=?",
                    (_json(result), att_id),
                )
            for att_id, err in gone:
                if err is None:
                    await db.execute("UPDATE attachments SET state='removed', error=NULL,"
                                     " removed_at=? WHERE id=?", (now, att_id))
                else:
                    await db.execute("UPDATE attachments SET error=? WHERE id=?", (err, att_id))
            await db.execute(
                "UPDATE operations SET state=?, code=?, error=?, finished_at=? WHERE id=?",
                (state, code, error, now, op_id),
            )

        await self._write(fn)

    async def unfinished_operations(self) -> list[Operation]:
        rows = await self._read(
            "SELECT id, verb, container_id, netns, ifname, state, origin FROM operations"
            " WHERE state='running' ORDER BY id"
        )
        return [Operation(**dict(row)) for row in rows]

    # -- attachments ------------------------------------------------------------

    async def live_attachments(self, container_id: str | None = None) -> list[Attachment]:
        """Attachments not yet removed (all of them, or one container's)."""
        if container_id is None:
            rows = await self._read(
                "SELECT * FROM attachments WHERE state != 'removed' ORDER BY id")
        else:
            rows = await self._read(
                "SELECT * FROM attachments WHERE state != 'removed' AND container_id=?"
                " ORDER BY id", (container_id,))
        return [Attachment.from_row(r) for r in rows]

    # -- steps ------------------------------------------------------------------

    async def begin_step(
        self, op_id: int, att_id: int, position: int, verb: str, plugin_type: str,
        config: bytes | Callable[[aiosqlite.Connection], Awaitable[bytes]], netns: str,
        ifname: str,
    ) -> tuple[int, bytes]:
        """Record a step before its plugin runs; return its id and config bytes.

        ``config`` may be a function computing the bytes inside the same transaction
        (the engine allocates addresses that way: committed with the step, or not at all).
        """
        async def fn(db: aiosqlite.Connection) -> tuple[int, bytes]:
            conf = config if isinstance(config, bytes) else await config(db)
            cur = await db.execute(
                "INSERT INTO steps (operation_id, attachment_id, position, verb, plugin_type,"
                " config, netns, ifname, state, started_at) VALUES (?,?,?,?,?,?,?,?,"
                "'running',?)",
                (op_id, att_id, position, verb, plugin_type, conf, netns, ifname,
                 time.time()),
            )
            if verb == "ADD":
                await db.execute(
                    "UPDATE attachments SET steps_started=MAX(steps_started, ?) WHERE id=?",
                    (position + 1, att_id))
            assert cur.lastrowid is not None
            return cur.lastrowid, conf

        return await self._write(fn)

    async def end_step(
        self, step_id: int, *, att_id: int, verb: str, result: dict[str, Any] | None,
        code: int | None, error: str | None, stderr: bytes, seconds: float,
        also: Callable[[aiosqlite.Connection], Awaitable[Any]] | None = None,
    ) -> None:
        """Record a step's outcome; ``also`` runs in the same transaction (e.g. a release)."""
        async def fn(db: aiosqlite.Connection) -> None:
            if also is not None:
                await also(db)
            await db.execute(
                "UPDATE steps SET state=?, result=?, code=?, error=?, stderr=?, finished_at=?,"
                " seconds=? WHERE id=?",
                ("failed" if error else "ok", _json(result), code, error, stderr or None,
                 time.time(), seconds, step_id),
            )
            if verb == "ADD" and error is None and result is not None:
                await db.execute("UPDATE attachments SET result=? WHERE id=?",
                                 (_json(result), att_id))

        await self._write(fn)


@asynccontextmanager
async def open_journal(state_dir: str | Path) -> AsyncIterator[Journal]:
    """Migrate and open ``<state_dir>/journal.db``, inside a trio-asyncio loop."""
    directory = Path(state_dir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # noqa: ASYNC240 - start-up
    path = str(directory / "journal.db")
    migrate(path)
    if trio_asyncio.current_loop.get() is None:
        async with trio_asyncio.open_loop():
            async with _connected(path) as journal:
                yield journal
    else:
        async with _connected(path) as journal:
            yield journal


@asynccontextmanager
async def _connected(path: str) -> AsyncIterator[Journal]:
    async def connect() -> aiosqlite.Connection:
        db = await aiosqlite.connect(path, isolation_level=None)
        db.row_factory = sqlite3.Row
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON",
                       "busy_timeout=5000"):
            await db.execute(f"PRAGMA {pragma}")
        return db

    db = await trio_asyncio.aio_as_trio(connect)()
    try:
        yield Journal(db, path)
    finally:
        with trio.CancelScope(shield=True):
            await trio_asyncio.aio_as_trio(db.close)()
