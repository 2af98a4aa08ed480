"""The IPAM's records in the journal (``journal.ipam``): the start-up load of live
allocations, pool cursors and open reservations; reservations ended; the pools' sizes;
the cluster IPAM's blocks. The allocations a step makes or releases are written with that
step by :class:`~netctl.journal.store.Journal`; these are the rest.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from netctl.journal.commit import Committer
from netctl.journal.records import Allocation, BlockRecord, OpStart, Reservation
from netctl.journal.rows import (
    allocation_of,
    close_operation,
    insert_operation,
    reservation_of,
)

# how a sticky reservation ended: its time ran out, or another node took it back
Ended = Literal["expired", "taken_back"]


class Follower(Protocol):
    """What follows the live allocations and reservations (the IPAM's store), told in the
    step that committed each change."""

    def recorded(self, new: list[Allocation]) -> None: ...

    def released(self, gone: list[Allocation]) -> None: ...

    def ended(self, ended: list[Reservation], how: Ended) -> None: ...


class IpamRecords:
    def __init__(self, io: Committer, clock: Callable[[], float] = time.time) -> None:
        self._io = io
        self.clock = clock
        self.follower: Follower | None = None  # the IPAM's store, set where it is made

    async def live_allocations(self) -> tuple[list[Allocation], dict[str, int],
                                              list[Reservation]]:
        """Every live allocation, every pool's cursor and the open sticky reservations."""
        def fn(db: sqlite3.Connection) -> tuple[list[Allocation], dict[str, int],
                                                list[Reservation]]:
            rows = db.execute("SELECT * FROM ipam_allocations WHERE released_at IS NULL"
                              " ORDER BY id").fetchall()
            cursors = {key: int(cursor) for key, cursor in db.execute(
                "SELECT key, cursor FROM ipam_pools WHERE cursor IS NOT NULL")}
            reserved = db.execute("SELECT * FROM ipam_allocations WHERE reserved_until IS NOT"
                                  " NULL AND reservation_end IS NULL ORDER BY id").fetchall()
            return [allocation_of(r) for r in rows], cursors, [reservation_of(r) for r in reserved]

        return await self._io.read(fn)

    async def end_reservations(self, ended: Sequence[Reservation], how: Ended = "expired",
                               why: str = "expired") -> None:
        """Sticky reservations ended (``how``) in one transaction, a RELEASE operation (origin
        ``sticky``) each, its reason naming the address, the identity and ``why``; then the
        follower told."""
        end = "taken back" if how == "taken_back" else how

        def fn(db: sqlite3.Connection) -> None:
            now = self.clock()
            for res in ended:
                reason = (f"sticky reservation of {res.address} for {res.identity} "
                          f"({res.ifname}) {why}")
                op_id = insert_operation(db, OpStart(
                    verb="RELEASE", container_id=res.container_id, ifname=res.ifname,
                    origin="sticky", reason=reason, request=reason.encode()), now)
                db.execute("UPDATE ipam_allocations SET reservation_end=?, reservation_op=?"
                           " WHERE scope=? AND address=? AND sticky_key=?"
                           " AND reserved_until IS NOT NULL AND reservation_end IS NULL",
                           (end, op_id, res.scope, res.address, res.identity))
                close_operation(db, op_id, "done", None, None, now)

        await self._io.write(fn)
        if self.follower is not None and ended:
            self.follower.ended(list(ended), how)

    async def pool_sizes(self) -> dict[str, int]:
        """Every pool's size (kept as text: an IPv6 pool's size passes SQLite's integers)."""
        rows = await self._io.read(lambda db: db.execute(
            "SELECT key, size FROM ipam_pools").fetchall())
        return {str(key): int(size) for key, size in rows}

    async def open_block(self, block: BlockRecord) -> int:
        """Record a block from now on (this node's claim, before the API request; or another
        node's, ``seen``)."""
        def fn(db: sqlite3.Connection) -> int:
            cur = db.execute(
                "INSERT INTO ipam_blocks (name, pool, scope, cidr, node, state, since)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)", (block.name, block.pool, block.scope,
                                                  block.cidr, block.node, block.state,
                                                  self.clock()))
            return int(cur.lastrowid or 0)

        return await self._io.write(fn)

    async def set_block(self, block_id: int, state: str, *, ended: bool = False) -> None:
        """A block's new state; ``ended``: the record ends (released, lost, taken, gone)."""
        def fn(db: sqlite3.Connection) -> None:
            db.execute("UPDATE ipam_blocks SET state=?, until=? WHERE id=?",
                       (state, self.clock() if ended else None, block_id))

        await self._io.write(fn)

    async def open_blocks(self) -> list[BlockRecord]:
        """Every block record not ended, this node's and the others' last seen."""
        rows = await self._io.read(lambda db: db.execute(
            "SELECT * FROM ipam_blocks WHERE until IS NULL ORDER BY id").fetchall())
        return [BlockRecord(name=r["name"], pool=r["pool"], scope=r["scope"], cidr=r["cidr"],
                            node=r["node"], state=r["state"], id=r["id"], since=r["since"])
                for r in rows]
