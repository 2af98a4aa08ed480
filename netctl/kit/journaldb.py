"""What the kit reads of a journal file: counts, states and timestamps for the benches, the
harness and the tests' assertions — read-only, plain sqlite3, on a file a daemon may be
writing (WAL). The product's own reads are :mod:`netctl.journal.query`'s; these serve only
the kit, and live with it."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable

from netctl.journal.query import containers_filter


def live_attachment_count(conn: sqlite3.Connection, containers: Collection[str]) -> int:
    """How many attachments of ``containers`` are not removed."""
    only, args = containers_filter(containers)
    return int(conn.execute(
        f"SELECT COUNT(*) FROM attachments WHERE state != 'removed'{only}",
        args).fetchone()[0])


def live_counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """(attachments not removed, allocations not released)."""
    atts = conn.execute("SELECT COUNT(*) FROM attachments WHERE state != 'removed'")
    allocs = conn.execute("SELECT COUNT(*) FROM ipam_allocations WHERE released_at IS NULL")
    return int(atts.fetchone()[0]), int(allocs.fetchone()[0])


def integrity(conn: sqlite3.Connection) -> list[str]:
    """``PRAGMA integrity_check``: ``["ok"]`` when the file is sound."""
    return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]


# -- what the benches read: counts and timestamps ---------------------------------------------

TABLES = ("operations", "steps", "attachments", "ipam_pools", "ipam_allocations")


def row_counts(conn: sqlite3.Connection, tables: Iterable[str] = TABLES) -> dict[str, int]:
    """The rows of each of ``tables`` (of :data:`TABLES`)."""
    out = {}
    for t in tables:
        if t not in TABLES:
            raise ValueError(f"{t!r} is not one of the journal's tables {TABLES}")
        out[t] = int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
    return out


def operations_of_origin(conn: sqlite3.Connection, origin: str) -> list[sqlite3.Row]:
    """Every operation of ``origin`` (``runtime``, ``ipam``, ``gc``, ``event``…): its id,
    verb, container_id, state, started_at and finished_at."""
    return conn.execute(
        "SELECT id, verb, container_id, state, started_at, finished_at FROM operations"
        " WHERE origin=?", (origin,)).fetchall()


def operation_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """How many operations of each verb."""
    return {str(v): int(n) for v, n in conn.execute(
        "SELECT verb, count(*) FROM operations GROUP BY verb")}


def operation_states(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(verb, origin, state) of every operation."""
    return [(str(v), str(o), str(s)) for v, o, s in conn.execute(
        "SELECT verb, origin, state FROM operations")]


def containers_after(conn: sqlite3.Connection, origin: str, after: int) -> dict[int, str]:
    """The container of each operation of ``origin`` with an id above ``after``."""
    return {int(r[0]): str(r[1]) for r in conn.execute(
        "SELECT id, container_id FROM operations WHERE origin=? AND id > ?", (origin, after))}


def last_operation_id(conn: sqlite3.Connection) -> int:
    """The newest operation's id; 0 without one."""
    return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM operations").fetchone()[0])


def step_times(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Every delegate step: its operation_id, attachment_id, started_at, finished_at,
    seconds and state."""
    return conn.execute("SELECT operation_id, attachment_id, started_at, finished_at,"
                        " seconds, state FROM steps").fetchall()


def held_by(conn: sqlite3.Connection, container: str) -> int:
    """How many allocations ``container`` holds (not released)."""
    return int(conn.execute("SELECT COUNT(*) FROM ipam_allocations WHERE container_id=?"
                            " AND released_at IS NULL", (container,)).fetchone()[0])


def last_release(conn: sqlite3.Connection, container: str) -> tuple[float | None, int]:
    """(the newest release time of ``container``'s allocations, how many it still holds)."""
    row = conn.execute("SELECT max(released_at), count(*) - count(released_at)"
                       " FROM ipam_allocations WHERE container_id=?", (container,)).fetchone()
    return row[0], int(row[1])


def event_release(conn: sqlite3.Connection, container: str) -> sqlite3.Row | None:
    """The done DEL or RELEASE on events of ``container``: its started_at and finished_at."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT started_at, finished_at FROM operations WHERE origin='event'"
        " AND verb IN ('DEL', 'RELEASE') AND container_id=? AND state='done'",
        (container,)).fetchone()
    return row


def index_names(conn: sqlite3.Connection) -> list[str]:
    """The journal's own indexes (not SQLite's automatic ones), by name."""
    return [str(r[0]) for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
        " ORDER BY name")]


def schema_version(conn: sqlite3.Connection) -> int | None:
    """The newest migration applied."""
    version = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
    return None if version is None else int(version)


def add_chain_seconds(conn: sqlite3.Connection, pod_prefix: str) -> list[dict[str, float]]:
    """Per ADD done of a pod named ``pod_prefix``…, in order: each attachment's network and
    its steps' seconds."""
    ops = conn.execute("SELECT id FROM operations WHERE verb='ADD' AND state='done' AND"
                       " pod_name LIKE ? ORDER BY id", (f"{pod_prefix}%",)).fetchall()
    out = []
    for (op_id,) in ops:
        rows = conn.execute(
            "SELECT a.network, sum(s.seconds) FROM steps s JOIN attachments a ON"
            " a.id=s.attachment_id WHERE s.operation_id=? GROUP BY a.id", (op_id,)).fetchall()
        out.append({net: float(t or 0) for net, t in rows})
    return out


def file_of(conn: sqlite3.Connection) -> str:
    """The path of the file ``conn`` has open."""
    return str(conn.execute("PRAGMA database_list").fetchone()[2])


# -- a journal written whole: a simulated history (netctl bench journal) ---------------------

HISTORY_INSERTS = {
    "operations": "INSERT INTO operations (id, verb, container_id, netns, ifname,"
    " caller_network, caller_version, pod_namespace, pod_name, pod_uid, request, origin,"
    " state, code, error, started_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "attachments": "INSERT INTO attachments (id, container_id, ifname, network,"
    " network_name, is_default, caller_network, caller_ifname, netns, pod_namespace,"
    " pod_name, pod_uid, cni_version, chain, capability_args, cni_args, steps_started,"
    " result, state, add_op, del_op, error, created_at, removed_at)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "steps": "INSERT INTO steps (id, operation_id, attachment_id, position, verb, plugin_type,"
    " config, netns, ifname, state, result, code, error, stderr, started_at, finished_at,"
    " seconds) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "ipam_pools": "INSERT INTO ipam_pools (key, network_name, range, family, size, cursor,"
    " created_at) VALUES (?,?,?,?,?,?,?)",
    "ipam_allocations": "INSERT INTO ipam_allocations (id, pool, scope, address, prefix,"
    " container_id, ifname, netns, pod_namespace, pod_name, pod_uid, attachment_id,"
    " allocated_op, released_op, allocated_at, released_at)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
}


def write_history(path: str, rows: dict[str, Iterable[tuple[object, ...]]]) -> None:
    """``rows`` (per table of :data:`HISTORY_INSERTS`, in that order) into the migrated
    journal at ``path``: one transaction, executemany, without a rollback journal (the rows
    written once, not into the WAL and then the file: 2 to 3 times faster); the file is in
    WAL mode again after, as the daemon keeps it."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-400000")  # KiB: the indexes' pages stay in memory
        conn.execute("BEGIN")
        for table, insert in HISTORY_INSERTS.items():
            conn.executemany(insert, rows.get(table, ()))
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
