"""The journal's rows: the SQL that writes and reads each record, as functions of a
connection that :class:`~netctl.journal.store.Journal` and
:class:`~netctl.journal.allocations.IpamRecords` compose into their transactions."""

from __future__ import annotations

import ipaddress
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from netctl.cni.config import Chain, parse_chain
from netctl.cni.request import Pod
from netctl.journal.live import LiveIndex
from netctl.journal.records import (
    Allocation,
    Attachment,
    OpStart,
    Owner,
    PoolInfo,
    Reservation,
    StepStart,
)


def to_json(value: Any) -> bytes | None:
    return None if value is None else msgspec.json.encode(value)


def attachment_of(row: sqlite3.Row) -> Attachment:
    return Attachment(
        id=row["id"], container_id=row["container_id"], ifname=row["ifname"],
        network=row["network"], chain=chain_of(bytes(row["chain"]), row["network"]),
        is_default=bool(row["is_default"]), caller_network=row["caller_network"],
        caller_ifname=row["caller_ifname"], netns=row["netns"],
        pod=Pod(namespace=row["pod_namespace"], name=row["pod_name"], uid=row["pod_uid"]),
        capability_args=msgspec.json.decode(row["capability_args"]),
        cni_args=msgspec.json.decode(row["cni_args"]), steps_started=row["steps_started"],
        result=msgspec.json.decode(row["result"]) if row["result"] else None,
        state=row["state"], add_op=row["add_op"], del_op=row["del_op"], error=row["error"],
        del_failures=row["del_failures"], retry_at=row["retry_at"],
        created_at=row["created_at"], identity=row["sticky_key"],
        resource=row["device_resource"], device=row["device_id"])


_CHAINS: dict[bytes, Chain] = {}


def chain_of(raw: bytes, network: str) -> Chain:
    """Chains as journaled were valid when planned; parse each distinct one once."""
    chain = _CHAINS.get(raw)
    if chain is None:
        if len(_CHAINS) > 1024:
            _CHAINS.clear()
        chain = _CHAINS[raw] = parse_chain(raw, f"network {network}")
    return chain


def allocation_of(row: sqlite3.Row) -> Allocation:
    addr = ipaddress.ip_address(row["address"])
    return Allocation(
        pool=row["pool"], scope=row["scope"], ip=int(addr), version=addr.version,
        prefix=row["prefix"], allocated_at=row["allocated_at"],
        owner=Owner(row["container_id"], row["ifname"], row["netns"],
                    Pod(namespace=row["pod_namespace"], name=row["pod_name"],
                        uid=row["pod_uid"]), row["attachment_id"], row["sticky_key"]),
        sticky=row["sticky_key"], sticky_for=row["sticky_for"] or 0.0)


def reservation_of(row: sqlite3.Row) -> Reservation:
    addr = ipaddress.ip_address(row["address"])
    return Reservation(row["pool"], row["scope"], addr.version, int(addr), row["sticky_key"],
                       row["ifname"], row["reserved_until"], row["address"],
                       row["container_id"])


def insert_operation(db: sqlite3.Connection, op: OpStart, now: float) -> int:
    cur = db.execute(
        "INSERT INTO operations (verb, container_id, netns, ifname, caller_network,"
        " caller_version, pod_namespace, pod_name, pod_uid, request, origin, reason, state,"
        " started_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'running',?)",
        (op.verb, op.container_id, op.netns, op.ifname, op.caller_network, op.caller_version,
         op.pod.namespace, op.pod.name, op.pod.uid, op.request, op.origin, op.reason, now))
    assert cur.lastrowid is not None
    return cur.lastrowid


def close_operation(db: sqlite3.Connection, op_id: int, state: str, code: int | None,
                     error: str | None, now: float) -> None:
    db.execute("UPDATE operations SET state=?, code=?, error=?, finished_at=? WHERE id=?",
               (state, code, error, now, op_id))


def record_allocations(db: sqlite3.Connection, new: Sequence[Allocation], op_id: int,
                        pools: dict[str, PoolInfo], now: float) -> None:
    """``pools`` describes each allocation's pool for ``ipam_pools``."""
    for alloc in new:
        info = pools[alloc.pool]
        db.execute("INSERT OR IGNORE INTO ipam_pools (key, network_name, range, family, size,"
                   " created_at) VALUES (?,?,?,?,?,?)",
                   (alloc.pool, info.network_name, info.range, info.family, str(info.size),
                    now))
        taken_back = alloc.sticky and db.execute(
            "UPDATE ipam_allocations SET reservation_end='taken back', reservation_op=?"
            " WHERE scope=? AND address=? AND reserved_until IS NOT NULL"
            " AND reservation_end IS NULL AND sticky_key=?",
            (op_id, alloc.scope, alloc.address, alloc.sticky)).rowcount
        if not taken_back:  # round-robin goes on where it was
            db.execute("UPDATE ipam_pools SET cursor=? WHERE key=?", (str(alloc.ip),
                                                                     alloc.pool))
        o = alloc.owner
        db.execute(
            "INSERT INTO ipam_allocations (pool, scope, address, prefix, container_id, ifname,"
            " netns, pod_namespace, pod_name, pod_uid, attachment_id, allocated_op,"
            " allocated_at, sticky_key, sticky_for) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (alloc.pool, alloc.scope, alloc.address, alloc.prefix, o.container_id, o.ifname,
             o.netns, o.pod.namespace, o.pod.name, o.pod.uid, o.attachment_id, op_id,
             alloc.allocated_at or now, alloc.sticky, alloc.sticky_for or None))


def release_allocations(db: sqlite3.Connection, gone: Iterable[Allocation], op_id: int | None,
                         now: float) -> None:
    """Released; a sticky one reserved for its identity until ``now + sticky_for`` (an
    older reservation of the identity on the same pool and interface replaced)."""
    gone = list(gone)
    for a in gone:
        if a.sticky:
            db.execute("UPDATE ipam_allocations SET reservation_end='replaced', reservation_op=?"
                       " WHERE pool=? AND sticky_key=? AND ifname=? AND reserved_until IS NOT"
                       " NULL AND reservation_end IS NULL",
                       (op_id, a.pool, a.sticky, a.owner.ifname))
    db.executemany(
        "UPDATE ipam_allocations SET released_at=?, released_op=?,"
        " reserved_until=CASE WHEN sticky_key != '' THEN ? + sticky_for END"
        " WHERE scope=? AND address=? AND released_at IS NULL",
        [(now, op_id, now, a.scope, a.address) for a in gone])


def insert_step(db: sqlite3.Connection, step: StepStart, now: float) -> int:
    """A step begun (an ADD's counts as started from here); its id."""
    cur = db.execute(
        "INSERT INTO steps (operation_id, attachment_id, position, verb, plugin_type,"
        " config, netns, ifname, state, started_at) VALUES (?,?,?,?,?,?,?,?,'running',?)",
        (step.op_id, step.attachment, step.position, step.verb, step.plugin_type,
         step.config, step.netns, step.ifname, now))
    assert cur.lastrowid is not None
    if step.verb == "ADD":  # a DEL is owed for it
        db.execute("UPDATE attachments SET steps_started=MAX(steps_started, ?) WHERE id=?",
                   (step.position + 1, step.attachment))
    return cur.lastrowid


def load_live(db: sqlite3.Connection) -> LiveIndex:
    """The index as the database has it: every live attachment and allocation, none leaving."""
    attachments = db.execute("SELECT id, container_id, netns, result, del_failures, pod_uid"
                             " FROM attachments WHERE state != 'removed'").fetchall()
    allocations = db.execute("SELECT scope, address, container_id, netns, attachment_id"
                             " FROM ipam_allocations WHERE released_at IS NULL").fetchall()
    live = LiveIndex()
    for r in attachments:
        live.attachment(r["id"], r["container_id"], r["netns"],
                        msgspec.json.decode(r["result"]) if r["result"] else None,
                        r["pod_uid"] or "")
    live.failed(r["id"] for r in attachments if r["del_failures"])
    for r in allocations:
        live.allocated((r["scope"], r["address"]), r["container_id"], r["netns"],
                       r["attachment_id"])
    return live
