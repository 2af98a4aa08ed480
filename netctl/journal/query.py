"""Read-only questions to the journal, for people (``netctl journal``), with plain sqlite3
(works while the daemon writes, and while it is down); plain dicts out."""

from __future__ import annotations

import ipaddress
import json
import math
import sqlite3
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from netctl.journal.retention import duration_seconds

PAGE = 100  # `netctl journal`: the newest attachments shown unless --limit says otherwise


ZONE_NOTE = ("{value!r} has no time zone: read as {how} (give Z or an offset such as "
             "+01:00 to say otherwise)")


@dataclass(frozen=True)
class TimeRead:
    """A ``--at``/``--since`` value read: UNIX seconds, and a note when the value left
    something to choose (an ISO 8601 time without a zone)."""

    seconds: float
    note: str = ""


def read_time(value: str, now: float | None = None, *, local: bool = False) -> TimeRead:
    """``90s``/``5m``/``2h``/``1d`` ago, a UNIX time, or an RFC 3339 / ISO 8601 time
    (``2026-11-25T23:41:07Z``, ``…+01:00``) → UNIX seconds. A time without a zone is read
    as UTC — the zone ``netctl journal`` prints — or, with ``local``, as this machine's
    local time; the note says which."""
    now = time.time() if now is None else now
    ago = duration_seconds(value)
    if ago is not None:
        return TimeRead(now - ago)
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):  # float() also takes "nan" and "inf"
            return TimeRead(seconds)
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is neither a duration (30s, 5m, 2h, 1d), a UNIX time "
                         "nor an RFC 3339 time (2026-11-25T23:41:07Z, …+01:00)") from None
    if when.tzinfo is not None:
        return TimeRead(when.timestamp())
    if local:
        zone = when.astimezone().strftime("%z")
        return TimeRead(when.astimezone().timestamp(), ZONE_NOTE.format(
            value=value, how=f"local time (UTC{zone[:3]}:{zone[3:]})"))
    return TimeRead(when.replace(tzinfo=UTC).timestamp(),
                    ZONE_NOTE.format(value=value, how="UTC"))


JOURNAL_FILE = "journal.db"


def journal_path(state_dir: str | Path) -> Path:
    return Path(state_dir) / JOURNAL_FILE


def open_read_only(path: str | Path, timeout: float = 5.0) -> sqlite3.Connection:
    """A read-only connection to the journal file ``path`` (rows are :class:`sqlite3.Row`:
    by index or by name)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)
    conn.row_factory = sqlite3.Row
    return conn


def existing_journal(state_dir: str | Path) -> Path:
    """The journal's file in ``state_dir``; FileNotFoundError when there is none."""
    path = journal_path(state_dir)
    if not path.exists():
        raise FileNotFoundError(f"no journal at {path}")
    return path


def connect(state_dir: str | Path) -> sqlite3.Connection:
    return open_read_only(existing_journal(state_dir))


def _addresses(result: bytes | None) -> list[str]:
    if not result:
        return []
    obj = msgspec.json.decode(result)
    return [str(ip.get("address", "")) for ip in obj.get("ips") or []]


def has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    """Whether ``table`` has ``column``: a journal an older netctl's daemon still writes
    may not be migrated that far yet."""
    return any(r[1] == column for r in conn.execute(f"PRAGMA table_info({table})"))


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                        (name,)).fetchone() is not None


def pod_selector(pod: str | None, namespace: str | None) -> str | None:
    """``--pod`` and ``--namespace`` as one selector for :func:`_pod_filter`: ``NS/*`` for
    a whole namespace, ``NS/NAME`` for a pod of it; ValueError when they disagree."""
    if not namespace:
        return pod or None
    if not pod:
        return f"{namespace}/*"
    if "/" not in pod:
        return f"{namespace}/{pod}"
    if pod.partition("/")[0] != namespace:
        raise ValueError(f"--pod {pod} is not in --namespace {namespace}: give one of them, "
                         "or the pod's own namespace")
    return pod


Filter = tuple[str, list[Any]] | None  # a WHERE clause and its parameters; None: no filter


def sql_where(*filters: Filter) -> tuple[str, list[Any]]:
    """The filters given, ANDed: `` WHERE …`` ("" for none) and the parameters."""
    given = [f for f in filters if f is not None]
    if not given:
        return "", []
    return " WHERE " + " AND ".join(c for c, _ in given), [p for _, ps in given for p in ps]


def _equal(column: str, value: str | None) -> Filter:
    return (f"{column}=?", [value]) if value else None


def _alive(start: str, end: str, at: float | None, since: float | None) -> list[Filter]:
    """Rows that began by ``at`` and had not ended then; rows alive at any time since ``since``."""
    return [None if at is None else (f"{start}<=? AND ({end} IS NULL OR {end}>?)", [at, at]),
            None if since is None else (f"({start}>=? OR {end}>=? OR {end} IS NULL)",
                                        [since, since])]


def _pod_filter(pod: str | None) -> Filter:
    """``NS/NAME`` matches that pod (``/NAME``: a pod with no namespace, as podman's);
    ``NS/*`` every pod of namespace NS; a bare ``NAME`` matches a pod of that name in
    any namespace."""
    if not pod:
        return None
    if "/" not in pod:
        return "pod_name=?", [pod]
    ns, _, name = pod.partition("/")
    if name == "*":
        return "pod_namespace=?", [ns]
    return "pod_namespace=? AND pod_name=?", [ns, name]


def pod_of(row: sqlite3.Row) -> str:
    """``ns/name``, or the name alone for a pod with no namespace (podman's); "": none."""
    if not row["pod_name"]:
        return ""
    return f"{row['pod_namespace']}/{row['pod_name']}" if row["pod_namespace"] \
        else str(row["pod_name"])


def _network_filter(name: str, table: str = "") -> tuple[str, list[Any]]:
    """An attachment's network by name: its NAD ``ns/name``, its NAD name in any
    namespace, or its chain's CNI name."""
    t = f"{table}." if table else ""
    return (f"({t}network=? OR {t}network_name=? OR {t}network LIKE ?)",
            [name, name, f"%/{name}"])


class AmbiguousContainer(ValueError):
    """``--container PREFIX`` that more than one container id starts with."""

    def __init__(self, prefix: str, candidates: list[str]) -> None:
        self.prefix, self.candidates = prefix, candidates
        super().__init__(f"container id prefix {prefix!r} is ambiguous: it matches "
                         f"{', '.join(candidates)}; give more of the id")


def resolve_container(conn: sqlite3.Connection, prefix: str, limit: int = 10) -> str:
    """The full container id that ``prefix`` names: the id itself when the journal has it,
    else the one id that starts with it; an unknown prefix as given (it matches nothing).
    :class:`AmbiguousContainer`, naming up to ``limit`` candidates, when several ids start
    with it. One range scan of the operations' container index."""
    if not prefix:
        return prefix
    rows = conn.execute(
        "SELECT DISTINCT container_id FROM operations WHERE container_id >= ?"
        " AND container_id < ? ORDER BY container_id LIMIT ?",
        (prefix, prefix + "\U0010ffff", limit + 1)).fetchall()
    found = [str(r[0]) for r in rows]
    if prefix in found or len(found) <= 1:
        return found[0] if len(found) == 1 else prefix
    shown = found[:limit] + (["…"] if len(found) > limit else [])
    raise AmbiguousContainer(prefix, shown)


def attachments(conn: sqlite3.Connection, *, pod: str | None = None,
                container: str | None = None, ip: str | None = None, at: float | None = None,
                since: float | None = None, network: str | None = None,
                device: str | None = None, limit: int = 0) -> list[dict[str, Any]]:
    """Attachments (live and past) matching every filter given, oldest first; with
    ``limit``, the newest ``limit`` of them only (a StatefulSet's pod name can have
    thousands in a week: they are read newest first from the index, never all).

    With ``ip``, the candidates come from the address index (``attachment_addresses``,
    migrations/0003), then each is confirmed on its decoded result (a journal without the
    index: every result is decoded)."""
    wanted = ipaddress.ip_interface(ip.strip()).ip if ip else None  # "10.1.0.5[/24]"
    by_address: Filter = None
    if ip and wanted is not None and _has_table(conn, "attachment_addresses"):
        # the canonical text plugins write, and the text as given (lower case, no prefix)
        forms = sorted({str(wanted), ip.strip().split("/")[0].lower()})
        by_address = ("id IN (SELECT attachment_id FROM attachment_addresses WHERE address"
                      f" IN ({','.join('?' * len(forms))}))", forms)
    if device and not has_column(conn, "attachments", "device_id"):
        return []  # a journal from before device networks (migrations/0009)
    clause, params = sql_where(by_address, _pod_filter(pod), _equal("container_id", container),
                               _equal("device_id", device),
                               _network_filter(network) if network else None,
                               *_alive("created_at", "removed_at", at, since))
    sql = "SELECT * FROM attachments" + clause
    newest_first = bool(limit) and since is None and wanted is None
    if newest_first:
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
    elif since is None:
        sql += " ORDER BY id"
    # else sorted below: unordered, the since filter's OR runs on the created_at and
    # removed_at indexes instead of a scan of the table in id order
    out = []
    for row in conn.execute(sql, params):
        addrs = _addresses(row["result"])
        if wanted is not None and not any(
                ipaddress.ip_interface(a).ip == wanted for a in addrs if a):
            continue
        out.append({
            "attachment": row["id"], "container": row["container_id"],
            "pod": pod_of(row),
            "pod_uid": row["pod_uid"], "network": row["network"], "ifname": row["ifname"],
            "netns": row["netns"], "addresses": addrs, "state": row["state"],
            "since": row["created_at"], "until": row["removed_at"], "add_op": row["add_op"],
            "del_op": row["del_op"], "error": row["error"],
            **({"resource": row["device_resource"], "device": row["device_id"]}
               if "device_id" in row.keys() and row["device_id"] else {}),
        })
    if since is not None:
        out.sort(key=lambda a: int(a["attachment"]))
    if newest_first:
        out.reverse()
    elif limit:
        out = out[-limit:]
    return out


OPS_PAGE = 200  # `netctl journal`: the newest operations a filter matches


def _op_columns(conn: sqlite3.Connection) -> str:
    """The operation columns a journal shows (``reason`` NULL before migrations/0007)."""
    reason = "reason" if has_column(conn, "operations", "reason") else "NULL AS reason"
    return ("id, verb, container_id, ifname, pod_namespace, pod_name, origin, state, code,"
            f" error, {reason}, started_at, finished_at")


def _operation(row: sqlite3.Row) -> dict[str, Any]:
    return {**dict(row), "pod": pod_of(row)}


def operations(conn: sqlite3.Connection, *, container: str | None = None,
               pod: str | None = None, since: float | None = None,
               limit: int = OPS_PAGE) -> list[dict[str, Any]]:
    """The newest ``limit`` operations of ``container`` and/or ``pod`` (a
    :func:`_pod_filter` selector: ``NS/NAME``, ``NAME``, ``NS/*``) started since
    ``since``, oldest first. Without a filter: the newest of all."""
    clause, params = sql_where(_equal("container_id", container), _pod_filter(pod),
                               None if since is None else ("started_at>=?", [since]))
    sql = f"SELECT {_op_columns(conn)} FROM operations{clause} ORDER BY id DESC LIMIT ?"
    return [_operation(r) for r in conn.execute(sql, [*params, limit])][::-1]


def operations_by_id(conn: sqlite3.Connection, ids: set[int]) -> list[dict[str, Any]]:
    """The operations with these ids (those the rows shown name), oldest first."""
    wanted = sorted(ids)
    out: list[dict[str, Any]] = []
    for i in range(0, len(wanted), 500):  # SQLite's bound parameters per statement
        chunk = wanted[i:i + 500]
        out += [_operation(r) for r in conn.execute(
            f"SELECT {_op_columns(conn)} FROM operations WHERE id IN"
            f" ({','.join('?' * len(chunk))}) ORDER BY id", chunk)]
    return out


@dataclass(frozen=True)
class Filters:
    """What ``netctl journal`` asks: every filter given must match."""

    pod: str | None = None  # a _pod_filter selector: NS/NAME, NAME, /NAME, NS/*
    container: str | None = None  # an id or a unique prefix of one
    ip: str | None = None
    at: float | None = None
    since: float | None = None
    network: str | None = None
    device: str | None = None  # a device id a device network held
    running: bool = False
    limit: int = PAGE  # attachments; 0: all
    notes: tuple[str, ...] = field(default=())  # how the times given were read


def journal(conn: sqlite3.Connection, f: Filters) -> dict[str, Any]:
    """The one answer of ``netctl journal`` (``--json`` prints it whole, the tables are
    rendered from it: docs/journal.md): the newest ``limit`` matching attachments; with
    ``ip``, the IPAM's allocations of the address and the cluster IPAM's blocks that held it;
    the operations of the container or pod asked for (the newest :data:`OPS_PAGE`; without a
    filter, the newest of all) and every operation the rows shown name; ``running``: every
    running operation and the attachments they touch."""
    container = resolve_container(conn, f.container) if f.container else None
    limit = 0 if f.running else max(f.limit, 0)
    atts = attachments(conn, pod=f.pod, container=container, ip=f.ip, at=f.at,
                       since=f.since, network=f.network, device=f.device,
                       limit=limit + 1 if limit else 0)  # one more: are there older?
    older = bool(limit) and len(atts) > limit
    atts = atts[1:] if older else atts
    # the IPAM's record of the address: the only one in plain-plugin mode (no attachment)
    allocs = allocations_at(conn, f.ip, f.at, since=f.since, container=container,
                            pod=f.pod) if f.ip else []
    older_ops = False
    if f.running:
        ops = running_operations(conn)
        touched = {op["id"] for op in ops}
        atts = [a for a in atts if a["add_op"] in touched or a["del_op"] in touched]
    else:
        ops = []
        if container or f.pod or not (f.ip or f.network or f.device or f.at is not None):
            ops = operations(conn, container=container, pod=f.pod, since=f.since,
                             limit=OPS_PAGE + 1)
            older_ops = len(ops) > OPS_PAGE
            ops = ops[1:] if older_ops else ops
        named = {a[k] for a in atts for k in ("add_op", "del_op") if a[k] is not None}
        named |= {a[k] for a in allocs for k in ("allocated_op", "released_op",
                                                 "reservation_op") if a[k] is not None}
        named -= {op["id"] for op in ops}
        if named:
            ops = sorted(ops + operations_by_id(conn, named), key=lambda op: int(op["id"]))
    blocks = blocks_at(conn, f.ip, f.at) if f.ip else []
    return {"attachments": atts, "allocations": allocs, "operations": ops, "blocks": blocks,
            "older_attachments": older, "older_operations": older_ops,
            "notes": list(f.notes)}


def steps(conn: sqlite3.Connection, operation_id: int) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(
        "SELECT s.id, s.verb, a.network, s.ifname, s.position, s.plugin_type, s.state, s.code,"
        " s.error, s.seconds FROM steps s JOIN attachments a ON a.id = s.attachment_id"
        " WHERE s.operation_id=? ORDER BY s.id", (operation_id,))]


# -- the central IPAM's pools and allocations (migrations/0002_ipam.sql) ------------------------


class UnknownPool(ValueError):
    """``netctl ipam show`` of a pool the journal has never seen."""

    def __init__(self, key: str, known: list[str], what: str = "IPAM pool") -> None:
        self.key, self.known = key, known
        listed = ", ".join(known) if known else "none yet"
        super().__init__(f"no {what} {key!r} in the journal (known pools: {listed})")


def _address_order(address: str) -> tuple[int, int]:
    addr = ipaddress.ip_address(address)
    return addr.version, int(addr)


def _allocation(row: sqlite3.Row) -> dict[str, Any]:
    sticky = "sticky_key" in row.keys()  # a journal older than 0008 has none
    return {
        "pool": row["pool"], "address": f"{row['address']}/{row['prefix']}",
        "container": row["container_id"],
        "pod": pod_of(row),
        "pod_uid": row["pod_uid"], "ifname": row["ifname"], "netns": row["netns"],
        "attachment": row["attachment_id"], "since": row["allocated_at"],
        "until": row["released_at"], "allocated_op": row["allocated_op"],
        "released_op": row["released_op"],
        # sticky addresses (migrations/0008): the identity that owns it, and the
        # reservation its release left (until when, how it ended: None while open)
        "identity": row["sticky_key"] if sticky else "",
        "reserved_until": row["reserved_until"] if sticky else None,
        "reservation_end": row["reservation_end"] if sticky else None,
        "reservation_op": row["reservation_op"] if sticky else None,
    }


def reservations_ended(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """How the sticky reservations of each pool that the journal still keeps ended
    (``expired``, ``taken back``, ``replaced``)."""
    if not has_column(conn, "ipam_allocations", "sticky_key"):
        return {}
    out: dict[str, dict[str, int]] = {}
    for pool, end, n in conn.execute(
            "SELECT pool, reservation_end, COUNT(*) FROM ipam_allocations WHERE"
            " reservation_end IS NOT NULL GROUP BY pool, reservation_end"):
        out.setdefault(pool, {})[end] = n
    return out


def reservations(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """The open sticky reservations (migrations/0008), by pool and address: each with its
    identity, interface, until when, and the container that released it."""
    if not has_column(conn, "ipam_allocations", "sticky_key"):
        return []
    rows = [{"pool": r["pool"], "address": r["address"], "identity": r["sticky_key"],
             "ifname": r["ifname"], "until": r["reserved_until"], "container": r["container_id"],
             "pod": pod_of(r)}
            for r in conn.execute("SELECT * FROM ipam_allocations WHERE reserved_until IS NOT"
                                  " NULL AND reservation_end IS NULL")]
    rows.sort(key=lambda r: (r["pool"], _address_order(r["address"])))
    return rows


def pools(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every pool with its size, live allocations, sticky reservations (counted and
    listed) and free addresses (exact ints: an IPv6 pool's size passes 2**63)."""
    live = dict(conn.execute("SELECT pool, COUNT(*) FROM ipam_allocations"
                             " WHERE released_at IS NULL GROUP BY pool").fetchall())
    blocks = blocks_by_pool(conn)
    reserved: dict[str, list[dict[str, Any]]] = {}
    for res in reservations(conn):
        reserved.setdefault(res.pop("pool"), []).append(res)
    ended = reservations_ended(conn)
    out = []
    for row in conn.execute("SELECT key, network_name, range, family, size FROM ipam_pools"
                            " ORDER BY key"):
        size, in_use = int(row["size"]), int(live.get(row["key"], 0))
        mine = reserved.get(row["key"], [])
        out.append({"key": row["key"], "network_name": row["network_name"],
                    "range": row["range"], "family": row["family"], "size": size,
                    "in_use": in_use, "reserved": len(mine),
                    "free": size - in_use - len(mine),
                    "blocks": blocks.get(row["key"], {}), "reservations": mine,
                    "reservations_ended": ended.get(row["key"], {})})
    return out


def held_addresses(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every address held now (a live allocation), with its pool's range and network name
    and its allocation scope (``network:…`` when its network's ranges may overlap)."""
    return [dict(r) for r in conn.execute(
        "SELECT al.address, al.scope, al.container_id, al.ifname, al.pod_namespace,"
        " al.pod_name, p.range AS pool_range, p.network_name FROM ipam_allocations al"
        " JOIN ipam_pools p ON p.key = al.pool WHERE al.released_at IS NULL ORDER BY al.id")]


def blocks_at(conn: sqlite3.Connection, ip: str, at: float | None = None
              ) -> list[dict[str, Any]]:
    """The cluster-wide IPAM's blocks holding ``ip`` at ``at`` (default: now), this node's
    and the others' as it saw them: whose block held an address, whose journal knows who
    had it."""
    if not _has_table(conn, "ipam_blocks"):
        return []
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return []
    clause, params = sql_where(("state IN ('held', 'seen', 'released', 'lost')", []),
                               _alive("since", "until", at, None)[0] if at is not None
                               else ("until IS NULL", []))
    out = []
    for row in conn.execute(f"SELECT * FROM ipam_blocks{clause} ORDER BY id", params):
        try:
            if addr not in ipaddress.ip_network(row["cidr"]):
                continue
        except ValueError:
            continue
        out.append({"block": row["cidr"], "pool": row["pool"], "node": row["node"],
                    "since": row["since"], "until": row["until"],
                    "mine": row["state"] != "seen"})
    return out


def blocks_by_pool(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """Blocks held now, per pool and node (this node's and those it has seen)."""
    if not _has_table(conn, "ipam_blocks"):
        return {}
    out: dict[str, dict[str, int]] = {}
    for pool, node, count in conn.execute(
            "SELECT pool, node, COUNT(*) FROM ipam_blocks WHERE until IS NULL"
            " AND state IN ('held', 'seen') GROUP BY pool, node ORDER BY pool, node"):
        out.setdefault(pool, {})[node] = count
    return out


def network_pools(conn: sqlite3.Connection, name: str) -> list[str]:
    """The keys of the pools a network allocates from, by its name: the IPAM section's
    ``network_name``; else the network of the attachments that held their addresses; else
    the CNI name a plain-plugin allocation's request carried."""
    keys = [str(r[0]) for r in conn.execute(
        "SELECT key FROM ipam_pools WHERE network_name=? ORDER BY key", (name,))]
    if keys:
        return keys
    clause, values = _network_filter(name, "a")
    return [str(r[0]) for r in conn.execute(
        "SELECT al.pool FROM ipam_allocations al JOIN attachments a ON a.id = al.attachment_id"
        f" WHERE {clause} UNION SELECT al.pool FROM ipam_allocations al"
        " JOIN operations o ON o.id = al.allocated_op"
        " WHERE al.attachment_id IS NULL AND o.caller_network=? ORDER BY 1", (*values, name))]


def pool_allocations(conn: sqlite3.Connection, key: str,
                     include_released: bool = False) -> list[dict[str, Any]]:
    """The allocations of pool ``key`` (live ones; with ``include_released`` its whole
    history), in address order. :class:`UnknownPool` when the journal has no such pool."""
    if conn.execute("SELECT 1 FROM ipam_pools WHERE key=?", (key,)).fetchone() is None:
        known = [r[0] for r in conn.execute("SELECT key FROM ipam_pools ORDER BY key")]
        raise UnknownPool(key, known)
    sql = "SELECT * FROM ipam_allocations WHERE pool=?"
    if not include_released:
        sql += " AND released_at IS NULL"
    rows = [_allocation(r) for r in conn.execute(sql + " ORDER BY id", (key,))]
    rows.sort(key=lambda a: (_address_order(a["address"].split("/")[0]), a["since"]))
    return rows


def allocations_at(conn: sqlite3.Connection, ip: str, at: float | None = None, *,
                   since: float | None = None, container: str | None = None,
                   pod: str | None = None) -> list[dict[str, Any]]:
    """Who held address ``ip`` (``10.1.0.5`` or ``10.1.0.5/24``): the allocations live at
    time ``at``, or its whole history without it; oldest first."""
    clause, params = sql_where(("address=?", [str(ipaddress.ip_interface(ip.strip()).ip)]),
                               *_alive("allocated_at", "released_at", at, since),
                               _equal("container_id", container), _pod_filter(pod))
    sql = f"SELECT * FROM ipam_allocations{clause} ORDER BY allocated_at, id"
    return [_allocation(r) for r in conn.execute(sql, params)]


def running_operations(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return [_operation(r) for r in conn.execute(
        f"SELECT {_op_columns(conn)} FROM operations WHERE state='running' ORDER BY id")]


def running_ids(conn: sqlite3.Connection) -> set[int]:
    return {int(row[0]) for row in conn.execute("SELECT id FROM operations WHERE state='running'")}


def containers_filter(containers: Collection[str] | None,
                       table: str = "") -> tuple[str, list[str]]:
    """`` AND container_id IN (…)`` for ``containers`` (nothing for None): one parameter,
    however many, a JSON array."""
    if containers is None:
        return "", []
    t = f"{table}." if table else ""
    return (f" AND {t}container_id IN (SELECT value FROM json_each(?))",
            [msgspec.json.encode(sorted(containers)).decode()])


def unremoved_attachments(conn: sqlite3.Connection,
                          containers: Collection[str] | None = None) -> list[sqlite3.Row]:
    """The attachments not removed (of ``containers`` only, when given), by id."""
    only, args = containers_filter(containers)
    return conn.execute(
        "SELECT id, container_id, network, ifname, netns, state, add_op, del_op, result,"
        " del_failures, retry_at, error FROM attachments WHERE state != 'removed'"
        f"{only} ORDER BY id", args).fetchall()


def removed_results(conn: sqlite3.Connection, after: float,
                    names: Sequence[str]) -> list[tuple[int, bytes | None]]:
    """(id, result) of the attachments removed by a DEL after ``after`` whose result names one
    of ``names`` among its interfaces (the host's veths: all the sweep may unlink). A
    forgotten attachment (``netctl forget``) was never DELeted: its links are not the
    sweep's."""
    if not names:
        return []
    return [(int(r[0]), r[1]) for r in conn.execute(
        "SELECT id, result FROM attachments WHERE state='removed' AND removed_at > ?"
        " AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = attachments.del_op"
        " AND o.verb = 'FORGET')"
        " AND json_valid(result) AND EXISTS (SELECT 1 FROM json_each(result, '$.interfaces') i"
        " WHERE CASE WHEN i.type = 'object' THEN json_extract(i.value, '$.name') END"
        " IN (SELECT value FROM json_each(?)))", (after, json.dumps(list(names))))]


def live_allocations(conn: sqlite3.Connection,
                     containers: Collection[str] | None = None) -> list[sqlite3.Row]:
    """The allocations not released (of ``containers`` only, when given), by id, each
    with its attachment's state (``attachment_state``; NULL without one)."""
    only, args = containers_filter(containers, "a")
    return conn.execute(
        "SELECT a.id, a.pool, a.address, a.container_id, a.ifname, a.netns,"
        " a.attachment_id, t.state AS attachment_state, a.allocated_at, a.scope, a.prefix,"
        " a.pod_namespace, a.pod_name FROM ipam_allocations a"
        " LEFT JOIN attachments t ON t.id = a.attachment_id"
        f" WHERE a.released_at IS NULL{only} ORDER BY a.id", args).fetchall()
