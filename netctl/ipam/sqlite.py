"""The sqlite IPAM backend: pools and allocations in the journal database.

Every function here runs *inside* a journal transaction (it is handed the
connection), so an allocation is committed together with the journal step that
uses it, and a release together with the step that undid it: the journal and
the allocator can never disagree. Decisions (which address is next, is a
requested one allowed) are the pure functions of :mod:`netctl.ipam.ranges`.

Allocation is idempotent per (pool, container id, ifname): a repeated ADD gets
the address it already holds.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

import aiosqlite

from netctl.errors import INVALID_CONFIG, POOL_EXHAUSTED, CNIError
from netctl.ipam.backend import Backend, Lease, Owner, pool_key, scope_of
from netctl.ipam.ranges import IPAMConfig, Range, next_free, requested


async def _rows(db: aiosqlite.Connection, sql: str, params: tuple[Any, ...]) -> list[Any]:
    return list(await db.execute_fetchall(sql, params))  # one trip to the database thread


async def allocate(db: aiosqlite.Connection, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                   wanted: list[str]) -> list[Lease]:
    """One address from each range for ``owner`` (the ones it holds already, if any).

    ``wanted`` are requested addresses (``ips``): each must fall in one of the
    ranges and be free, or the whole allocation is refused (code 7)."""
    unmatched = [w for w in wanted
                 if not any(ipaddress.ip_interface(w).version == r.version for r in ranges)]
    if unmatched:
        raise CNIError(INVALID_CONFIG, f"requested address {unmatched[0]} matches no range of "
                       f"{', '.join(pool_key(cfg, r) for r in ranges)}")
    now = time.time()
    leases = []
    for rng in ranges:
        key = pool_key(cfg, rng)
        scope = scope_of(cfg, key)
        await db.execute(
            "INSERT OR IGNORE INTO ipam_pools (key, network_name, range, family, size,"
            " created_at) VALUES (?,?,?,?,?,?)",
            (key, cfg.network_name, rng.key, rng.version, str(rng.size), now))
        held = await _rows(db, "SELECT address, prefix FROM ipam_allocations WHERE pool=? AND"
                           " container_id=? AND ifname=? AND released_at IS NULL",
                           (key, owner.container_id, owner.ifname))
        if held:
            leases.append(Lease(key, f"{held[0][0]}/{held[0][1]}", rng.gateway))
            continue
        used_rows = await _rows(db, "SELECT address, container_id FROM ipam_allocations"
                                " WHERE scope=? AND released_at IS NULL", (scope,))
        used = {}  # this family only: an IPv6 int may equal an IPv4 one
        for text, cid in used_rows:
            addr = ipaddress.ip_address(text)
            if addr.version == rng.version:
                used[int(addr)] = cid
        mine = [w for w in wanted if ipaddress.ip_interface(w).version == rng.version]
        if mine:
            ip = requested(rng, mine[0])
            if ip in used:
                raise CNIError(INVALID_CONFIG, f"requested address {mine[0]} in pool {key} is "
                               f"already allocated to container {used[ip]}")
        else:
            cursor = await _rows(db, "SELECT cursor FROM ipam_pools WHERE key=?", (key,))
            after = int(cursor[0][0]) if cursor and cursor[0][0] is not None else None
            found = next_free(rng, set(used), after, cfg.allocation_order)
            if found is None:
                raise CNIError(POOL_EXHAUSTED, f"address pool {key} is exhausted: all "
                               f"{rng.size} addresses are allocated")
            ip = found
            await db.execute("UPDATE ipam_pools SET cursor=? WHERE key=?", (str(ip), key))
        address = rng.host(ip)
        await db.execute(
            "INSERT INTO ipam_allocations (pool, scope, address, prefix, container_id, ifname,"
            " netns, pod_namespace, pod_name, pod_uid, attachment_id, allocated_op,"
            " allocated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (key, scope, address, rng.cidr.prefixlen, owner.container_id, owner.ifname,
             owner.netns, *owner.pod, owner.attachment_id, owner.op_id, now))
        leases.append(Lease(key, f"{address}/{rng.cidr.prefixlen}", rng.gateway))
    return leases


async def held_by(db: aiosqlite.Connection, cfg: IPAMConfig, ranges: list[Range], *,
                  attachment_id: int | None = None, container_id: str | None = None,
                  ifname: str | None = None) -> list[Lease]:
    """The live leases of an attachment, or of (container, ifname) in these ranges' pools."""
    gateways = {pool_key(cfg, r): r.gateway for r in ranges}
    if attachment_id is not None:
        rows = await _rows(db, "SELECT pool, address, prefix FROM ipam_allocations WHERE"
                           " attachment_id=? AND released_at IS NULL ORDER BY id",
                           (attachment_id,))
    else:
        rows = await _rows(db, "SELECT pool, address, prefix FROM ipam_allocations WHERE"
                           " container_id=? AND ifname=? AND released_at IS NULL ORDER BY id",
                           (container_id, ifname))
        rows = [r for r in rows if r[0] in gateways]
    return [Lease(pool, f"{addr}/{prefix}", gateways.get(pool)) for pool, addr, prefix in rows]


async def release(db: aiosqlite.Connection, *, op_id: int | None,
                  attachment_id: int | None = None, container_id: str | None = None,
                  ifname: str | None = None, pools: list[str] | None = None) -> int:
    """Release the live allocations of an attachment, or of (container, ifname[, pools])."""
    where = ["released_at IS NULL"]
    params: list[Any] = []
    if attachment_id is not None:
        where.append("attachment_id=?")
        params.append(attachment_id)
    if container_id is not None:
        where.append("container_id=?")
        params.append(container_id)
    if ifname is not None:
        where.append("ifname=?")
        params.append(ifname)
    if pools is not None:
        where.append(f"pool IN ({','.join('?' * len(pools))})")
        params += pools
    if len(where) == 1:
        raise ValueError("release needs an owner")
    cur = await db.execute(
        f"UPDATE ipam_allocations SET released_at=?, released_op=? WHERE {' AND '.join(where)}",
        (time.time(), op_id, *params))
    return cur.rowcount


async def release_stale(db: aiosqlite.Connection, pools: list[str],
                        valid: set[tuple[str, str]], op_id: int | None) -> int:
    """GC of plain-plugin allocations: release those in ``pools`` whose (container, ifname)
    is not in ``valid``. Allocations made for attachments are the engine's to release."""
    rows = await _rows(db, f"SELECT id, container_id, ifname FROM ipam_allocations WHERE"
                       f" released_at IS NULL AND attachment_id IS NULL AND pool IN"
                       f" ({','.join('?' * len(pools))})", tuple(pools))
    stale = [row[0] for row in rows if (row[1], row[2]) not in valid]
    now = time.time()
    for alloc_id in stale:
        await db.execute("UPDATE ipam_allocations SET released_at=?, released_op=? WHERE id=?",
                         (now, op_id, alloc_id))
    return len(stale)


class SqliteBackend:
    """:class:`~netctl.ipam.backend.Backend` over the journal database: ``tx`` is the
    aiosqlite connection of the journal transaction the call runs in."""

    async def allocate(self, tx: Any, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                       wanted: list[str]) -> list[Lease]:
        return await allocate(tx, cfg, ranges, owner, wanted)

    async def held_by(self, tx: Any, cfg: IPAMConfig, ranges: list[Range], *,
                      attachment_id: int | None = None, container_id: str | None = None,
                      ifname: str | None = None) -> list[Lease]:
        return await held_by(tx, cfg, ranges, attachment_id=attachment_id,
                             container_id=container_id, ifname=ifname)

    async def release(self, tx: Any, *, op_id: int | None, attachment_id: int | None = None,
                      container_id: str | None = None, ifname: str | None = None,
                      pools: list[str] | None = None) -> int:
        return await release(tx, op_id=op_id, attachment_id=attachment_id,
                             container_id=container_id, ifname=ifname, pools=pools)

    async def release_stale(self, tx: Any, pools: list[str], valid: set[tuple[str, str]],
                            op_id: int | None) -> int:
        return await release_stale(tx, pools, valid, op_id)


_CHECK: Backend = SqliteBackend()  # mypy: the sqlite backend implements the interface
