"""The journal's history as a stream of self-contained events: what ``netctl journal
export`` writes and ``journal-log`` logs (docs/journal.md, "Exporting the journal").
:func:`stream` reads a window in time order, in constant memory (one cursor per kind,
merged); :func:`of_operations` reads those of operations just closed.
"""

from __future__ import annotations

import heapq
import logging
import os
import socket
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any, Final

from netctl import logs
from netctl.journal.query import has_column, pod_of, sql_where

FIELDS: Final = ("node", "at", "event", "op", "verb", "pod", "uid", "container", "ifname",
                 "network", "address", "pool", "origin", "state", "code", "error", "reason",
                 "finished")
KINDS: Final = ("operation", "allocated", "released")  # ties at one time: in this order

Event = dict[str, Any]


def node_name(configured: str | None = None) -> str:
    """``configured`` (``--node-name``), else ``$NODE_NAME``, else the host name."""
    return configured or os.environ.get("NODE_NAME", "") or socket.gethostname()


def _reason(conn: sqlite3.Connection) -> str:
    return "o.reason" if has_column(conn, "operations", "reason") else "NULL"


def _ops_sql(conn: sqlite3.Connection, where: str) -> str:
    # the attachments an operation added or removed, by the two indexed columns (an OR
    # would scan): their networks and the addresses of their results (migrations/0003)
    touched = ("SELECT id, network FROM attachments WHERE add_op=o.id UNION "
               "SELECT id, network FROM attachments WHERE del_op=o.id")
    return (
        "SELECT o.id, o.verb, o.container_id, o.ifname, o.caller_network, o.pod_namespace,"
        " o.pod_name, o.pod_uid, o.origin, o.state, o.code, o.error,"
        f" {_reason(conn)} AS reason, o.started_at, o.finished_at,"
        f" (SELECT group_concat(network, ',') FROM (SELECT DISTINCT network FROM ({touched})"
        " ORDER BY id)) AS networks,"
        " (SELECT group_concat(aa.address, ',') FROM"
        f" (SELECT id FROM ({touched}) ORDER BY id) t"
        " JOIN attachment_addresses aa ON aa.attachment_id = t.id) AS addresses"
        f" FROM operations o{where}")


def _allocs_sql(conn: sqlite3.Connection, kind: str, where: str) -> str:
    at, op = ("allocated_at", "allocated_op") if kind == "allocated" else \
        ("released_at", "released_op")
    return (
        f"SELECT al.id, al.{at} AS at, al.{op} AS op, al.pool, al.address, al.container_id,"
        " al.ifname, al.pod_namespace, al.pod_name, al.pod_uid,"
        " COALESCE(a.network, NULLIF(p.network_name, ''), NULLIF(o.caller_network, ''))"
        " AS network,"
        f" o.verb, o.origin, {_reason(conn)} AS reason FROM ipam_allocations al"
        " LEFT JOIN ipam_pools p ON p.key = al.pool"
        " LEFT JOIN attachments a ON a.id = al.attachment_id"
        f" LEFT JOIN operations o ON o.id = al.{op}{where}")


def _time(t: float | None) -> str | None:
    return None if t is None else logs.rfc3339(t)


def _operation(row: sqlite3.Row, node: str) -> Event:
    return {
        "node": node, "at": _time(row["started_at"]), "event": "operation",
        "op": row["id"], "verb": row["verb"],
        "pod": pod_of(row) or None, "uid": row["pod_uid"] or None,
        "container": row["container_id"] or None, "ifname": row["ifname"] or None,
        "network": row["networks"] or row["caller_network"] or None,
        "address": row["addresses"], "pool": None, "origin": row["origin"],
        "state": row["state"], "code": row["code"], "error": row["error"],
        "reason": row["reason"], "finished": _time(row["finished_at"])}


def _allocation(row: sqlite3.Row, kind: str, node: str) -> Event:
    return {
        "node": node, "at": _time(row["at"]), "event": kind, "op": row["op"],
        "verb": row["verb"], "pod": pod_of(row) or None,
        "uid": row["pod_uid"] or None, "container": row["container_id"] or None,
        "ifname": row["ifname"] or None, "network": row["network"],
        "address": row["address"], "pool": row["pool"], "origin": row["origin"],
        "state": None, "code": None, "error": None, "reason": row["reason"],
        "finished": None}


def _window(column: str, since: float | None, until: float | None) -> tuple[str, list[Any]]:
    return sql_where((f"{column} IS NOT NULL", []),
                     None if since is None else (f"{column} >= ?", [since]),
                     None if until is None else (f"{column} < ?", [until]))


def stream(conn: sqlite3.Connection, node: str, since: float | None = None,
           until: float | None = None) -> Iterator[Event]:
    """Every event at or after ``since`` and before ``until`` (None: no bound), in time
    order (ties: :data:`KINDS`' order, then by id)."""
    def ops() -> Iterator[tuple[tuple[float, int, int], Event]]:
        where, params = _window("o.started_at", since, until)
        for row in conn.execute(_ops_sql(conn, where) + " ORDER BY o.started_at, o.id",
                                params):
            yield (row["started_at"], 0, row["id"]), _operation(row, node)

    def allocs(kind: str) -> Iterator[tuple[tuple[float, int, int], Event]]:
        column = "al.allocated_at" if kind == "allocated" else "al.released_at"
        where, params = _window(column, since, until)
        rank = KINDS.index(kind)
        for row in conn.execute(_allocs_sql(conn, kind, where) + f" ORDER BY {column}, al.id",
                                params):
            yield (row["at"], rank, row["id"]), _allocation(row, kind, node)

    for _, event in heapq.merge(ops(), allocs("allocated"), allocs("released"),
                                key=lambda item: item[0]):
        yield event


def of_operations(conn: sqlite3.Connection, op_ids: Iterable[int], node: str
                  ) -> list[Event]:
    """The events of these operations and of the allocations they changed, in time order."""
    wanted = sorted(set(op_ids))
    found: list[tuple[tuple[float, int, int], Event]] = []
    for i in range(0, len(wanted), 500):  # SQLite's bound parameters per statement
        ids = wanted[i:i + 500]
        marks = ",".join("?" * len(ids))
        for row in conn.execute(_ops_sql(conn, f" WHERE o.id IN ({marks})"), ids):
            found.append(((row["started_at"], 0, row["id"]), _operation(row, node)))
        for kind in ("allocated", "released"):
            op = "allocated_op" if kind == "allocated" else "released_op"
            for row in conn.execute(_allocs_sql(conn, kind, f" WHERE al.{op} IN ({marks})"), ids):
                if row["at"] is not None:
                    found.append(((row["at"], KINDS.index(kind), row["id"]),
                                  _allocation(row, kind, node)))
    found.sort(key=lambda item: item[0])
    return [event for _, event in found]


def summary(event: Event) -> str:
    """An event's log message: ``ADD done``, ``allocated 10.1.0.5``."""
    if event["event"] == "operation":
        return f"{event['verb']} {event['state']}"
    return f"{event['event']} {event['address']}"


class EventLog:
    """Writes events as log lines of ``netctl.journal.events`` (INFO), one each, whose
    fields are the event's alone (:func:`netctl.logs.fields_of`)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._log = logging.getLogger("netctl.journal.events")

    def __call__(self, events: Iterable[Event]) -> None:
        for event in events:
            self._log.info("%s", summary(event), extra={logs.EVENT: event})
