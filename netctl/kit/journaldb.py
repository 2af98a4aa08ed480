"""What the kit and the tests read of a journal file, and what they write into one by hand:
the only SQL outside :mod:`netctl.journal` (``make lint`` holds the rest of netctl and the
tests to that).

- counts, states and timestamps for the benches and the harness — read-only, plain
  sqlite3, on a file a daemon may be writing (WAL);
- the tests' reads: whole rows of each kind (:func:`operation_rows`, :func:`attachment_rows`,
  :func:`step_rows`, :func:`allocation_rows`, :func:`block_rows`), the address index, the
  schema; the tests read through :mod:`netctl.journal.query` what it answers already;
- rows a test writes by hand (``write_*``), and the journals a test makes as an older
  netctl or a crash left them (``simulate_*``): states the daemon would not write in a
  test's time;
- a simulated history, whole (``netctl bench journal``).

The product's own reads are :mod:`netctl.journal.query`'s; these serve only the kit and the
tests, and live with the kit."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from netctl.journal.migrate import applied, available, migrate
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
    """(verb, origin, state) of every operation, oldest first."""
    return [(str(v), str(o), str(s)) for v, o, s in conn.execute(
        "SELECT verb, origin, state FROM operations ORDER BY id")]


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


# -- what the tests read: rows as the journal holds them ---------------------------------------
#
# Each reader takes equality filters (None: not filtered) and returns whole rows
# (sqlite3.Row: by name or by index), oldest first (by id).


def _where(filters: Mapping[str, object], containers: Collection[str] | None = None,
           table: str = "") -> tuple[str, list[object]]:
    """`` WHERE column=? AND …`` for the filters given, ``containers``: any of them."""
    t = f"{table}." if table else ""
    clauses = [f"{t}{column}=?" for column, value in filters.items() if value is not None]
    args: list[object] = [value for value in filters.values() if value is not None]
    if containers is not None:
        only, values = containers_filter(containers, table)
        clauses.append(only.removeprefix(" AND "))
        args += values
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def _rows(conn: sqlite3.Connection, sql: str, args: Iterable[object] = ()) -> list[sqlite3.Row]:
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    return cur.execute(sql, list(args)).fetchall()


def operation_rows(conn: sqlite3.Connection, *, op_id: int | None = None,
                   container: str | None = None, containers: Collection[str] | None = None,
                   verb: str | None = None, origin: str | None = None,
                   state: str | None = None, pod_uid: str | None = None) -> list[sqlite3.Row]:
    """The operations matching every filter given, whole rows (the request, the caller's
    network, the pod's uid, the reason…), oldest first."""
    where, args = _where({"id": op_id, "container_id": container, "verb": verb,
                          "origin": origin, "state": state, "pod_uid": pod_uid}, containers)
    return _rows(conn, f"SELECT * FROM operations{where} ORDER BY id", args)


def attachment_rows(conn: sqlite3.Connection, *, att_id: int | None = None,
                    container: str | None = None, containers: Collection[str] | None = None,
                    network: str | None = None, state: str | None = None,
                    add_op: int | None = None) -> list[sqlite3.Row]:
    """The attachments matching every filter given (``network``: the network's key exactly),
    whole rows — what :func:`netctl.journal.query.attachments` does not show: the runtime's
    names for them (caller_network, caller_ifname), the result as written, del_failures —
    oldest first."""
    where, args = _where({"id": att_id, "container_id": container, "network": network,
                          "state": state, "add_op": add_op}, containers)
    return _rows(conn, f"SELECT * FROM attachments{where} ORDER BY id", args)


def step_rows(conn: sqlite3.Connection, *, operation: int | None = None,
              attachment: int | None = None, container: str | None = None,
              verb: str | None = None, plugin: str | None = None,
              state: str | None = None) -> list[sqlite3.Row]:
    """The delegate steps matching every filter given (``container``: the container of the
    step's operation; ``plugin``: the plugin's type), whole rows — the config sent, the
    result, stderr, the times — each with its attachment's ``network`` and
    ``network_name``; in the order they began (by id)."""
    where, args = _where({"operation_id": operation, "attachment_id": attachment,
                          "verb": verb, "plugin_type": plugin, "state": state}, table="s")
    if container is not None:
        where += (" AND" if where else " WHERE") + (
            " s.operation_id IN (SELECT id FROM operations WHERE container_id=?)")
        args.append(container)
    return _rows(conn, "SELECT s.*, a.network, a.network_name FROM steps s"
                 f" JOIN attachments a ON a.id = s.attachment_id{where} ORDER BY s.id", args)


def allocation_rows(conn: sqlite3.Connection, *, alloc_id: int | None = None,
                    container: str | None = None, containers: Collection[str] | None = None,
                    address: str | None = None) -> list[sqlite3.Row]:
    """The IPAM allocations matching every filter given, held and released (the history:
    who released it and when, the sticky identity and how its reservation ended), whole
    rows, oldest first. The held ones alone: :func:`netctl.journal.query.live_allocations`."""
    where, args = _where({"id": alloc_id, "container_id": container, "address": address},
                         containers)
    return _rows(conn, f"SELECT * FROM ipam_allocations{where} ORDER BY id", args)


def add_steps_not_undone(conn: sqlite3.Connection, op_id: int, *,
                         undone_in: int | None = None) -> list[sqlite3.Row]:
    """The ADD steps of operation ``op_id`` that no ``ok`` DEL step of the same attachment
    and position came after (in any operation; in operation ``undone_in`` only, when
    given), whole rows, in the order they began: what a compensation or a replay left
    undone."""
    where, args = ("", []) if undone_in is None else (" AND d.operation_id=?", [undone_in])
    return _rows(conn, "SELECT a.* FROM steps a WHERE a.operation_id=? AND a.verb='ADD'"
                 " AND NOT EXISTS (SELECT 1 FROM steps d WHERE d.verb='DEL' AND d.state='ok'"
                 " AND d.attachment_id=a.attachment_id AND d.position=a.position"
                 f" AND d.id > a.id{where}) ORDER BY a.id", [op_id, *args])


def block_rows(conn: sqlite3.Connection, *, cidr: str | None = None, node: str | None = None,
               state: str | None = None) -> list[sqlite3.Row]:
    """The cluster IPAM's block records (this node's and those it saw) matching every
    filter given, whole rows, oldest first."""
    where, args = _where({"cidr": cidr, "node": node, "state": state})
    return _rows(conn, f"SELECT * FROM ipam_blocks{where} ORDER BY id", args)


def indexed_addresses(conn: sqlite3.Connection, attachment: int) -> list[str]:
    """The addresses the address index (``attachment_addresses``) holds for ``attachment``,
    in the order they were indexed (the result's)."""
    return [str(r[0]) for r in conn.execute(
        "SELECT address FROM attachment_addresses WHERE attachment_id=? ORDER BY rowid",
        (attachment,))]


def table_names(conn: sqlite3.Connection) -> set[str]:
    """The file's tables."""
    return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def applied_migrations(conn: sqlite3.Connection) -> list[tuple[int, str, float]]:
    """(version, name, applied_at) of each migration recorded, by version."""
    return [(int(v), str(n), float(t)) for v, n, t in conn.execute(
        "SELECT version, name, applied_at FROM schema_migrations ORDER BY version")]


def settings(conn: sqlite3.Connection) -> dict[str, object]:
    """``journal_mode`` and ``auto_vacuum`` of the file, ``foreign_keys`` of ``conn``."""
    return {name: conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "foreign_keys", "auto_vacuum")}


def pod_attachments_plan(conn: sqlite3.Connection, namespace: str, name: str,
                         limit: int) -> str:
    """SQLite's plan for the newest ``limit`` attachments of a pod (as ``netctl journal
    --pod`` reads them), its steps' details joined by spaces."""
    return " ".join(str(r[-1]) for r in conn.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM attachments WHERE pod_namespace=? AND pod_name=?"
        " ORDER BY id DESC LIMIT ?", (namespace, name, limit)))


# -- what the tests write by hand: rows, and journals as an older netctl or a crash left them --


def _insert(conn: sqlite3.Connection, table: str, columns: Mapping[str, object]) -> int:
    names = ", ".join(columns)
    cur = conn.execute(f"INSERT INTO {table} ({names}) VALUES"
                       f" ({', '.join('?' * len(columns))})", list(columns.values()))
    assert cur.lastrowid is not None
    return cur.lastrowid


def write_operation(conn: sqlite3.Connection, *, verb: str, container_id: str, state: str,
                    started_at: float, **columns: object) -> int:
    """An operation written as given (``columns``: any others of its row); its id."""
    return _insert(conn, "operations", {"verb": verb, "container_id": container_id,
                                        "state": state, "started_at": started_at, **columns})


def write_attachment(conn: sqlite3.Connection, *, container_id: str, state: str,
                     created_at: float, **columns: object) -> int:
    """An attachment written as given: by default ``eth0`` on ``default/blue`` (chain
    ``blue``, cniVersion 1.0.0, empty chain and arguments); its id. A ``result`` fills the
    address index (the journal's triggers)."""
    return _insert(conn, "attachments", {
        "ifname": "eth0", "network": "default/blue", "network_name": "blue",
        "cni_version": "1.0.0", "chain": "{}", "capability_args": "{}", "cni_args": "{}",
        "container_id": container_id, "state": state, "created_at": created_at, **columns})


def write_pool(conn: sqlite3.Connection, *, key: str, pool_range: str, size: int,
               created_at: float, family: int = 4, network_name: str = "") -> None:
    """An IPAM pool (``size``: its assignable addresses, kept exact as text)."""
    _insert(conn, "ipam_pools", {"key": key, "network_name": network_name,
                                 "range": pool_range, "family": family, "size": str(size),
                                 "created_at": created_at})


def write_allocation(conn: sqlite3.Connection, *, pool: str, address: str, prefix: int,
                     container_id: str, allocated_at: float, **columns: object) -> int:
    """An allocation of ``pool`` (scope ``pool:<pool>``, ``eth0``, unless ``columns`` say
    otherwise) written as given; its id."""
    return _insert(conn, "ipam_allocations", {
        "scope": f"pool:{pool}", "ifname": "eth0", "pool": pool, "address": address,
        "prefix": prefix, "container_id": container_id, "allocated_at": allocated_at,
        **columns})


def rewrite_result(conn: sqlite3.Connection, attachment: int, result: bytes | None) -> None:
    """The attachment's result replaced (as a chain's end writes it)."""
    conn.execute("UPDATE attachments SET result=? WHERE id=?", (result, attachment))


def simulate_operation_ended(conn: sqlite3.Connection, op_id: int, state: str) -> None:
    """The operation's state set to ``state`` and nothing else: it ended without its
    attachments being closed (a crash between the two)."""
    conn.execute("UPDATE operations SET state=? WHERE id=?", (state, op_id))


def simulate_schema(conn: sqlite3.Connection, version: int) -> None:
    """The journal as an older netctl made it: the migrations up to ``version`` applied on
    an empty file, each recorded."""
    applied(conn)  # the record's table
    for number, name, sql in available():
        if number <= version:
            conn.executescript(f"BEGIN;\n{sql}\nINSERT INTO schema_migrations VALUES"
                               f" ({number}, '{name}', 0);\nCOMMIT;")


def simulate_no_address_index(conn: sqlite3.Connection) -> None:
    """The journal without migration 0003's address index (its triggers and table)."""
    for trigger in ("insert", "update", "delete"):
        conn.execute(f"DROP TRIGGER attachment_addresses_{trigger}")
    conn.execute("DROP TABLE attachment_addresses")


def simulate_no_reason(conn: sqlite3.Connection) -> None:
    """The journal as an older daemon still writes it (schema 6): operations without
    migration 0007's ``reason``."""
    conn.execute("ALTER TABLE operations DROP COLUMN reason")


def simulate_newer_schema(conn: sqlite3.Connection, version: int, name: str) -> None:
    """A migration ``version`` recorded that this netctl does not have (a newer netctl
    wrote the file)."""
    conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (version, name))


def simulate_newer_empty_journal(path: str | Path, version: int) -> None:
    """A file holding only the record of migration ``version`` (a newer netctl's, before
    its first table)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                     " name TEXT NOT NULL, applied_at REAL NOT NULL)")
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'x', 0)", (version,))
        conn.commit()
    finally:
        conn.close()


def simulate_file_before_auto_vacuum(path: str | Path) -> None:
    """A file with a table made before ``auto_vacuum`` was set (an old journal)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE older (x)")
        conn.commit()
    finally:
        conn.close()


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


# -- the file's pages (the broken-journal test overwrites some) -------------------------------


def page_size(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA page_size").fetchone()[0])


def leaf_pages(conn: sqlite3.Connection, table: str) -> list[int]:
    """The page numbers of ``table``'s leaf pages, in row order (SQLite's dbstat)."""
    if table not in TABLES:
        raise ValueError(f"{table!r} is not one of the journal's tables {TABLES}")
    return [int(r[0]) for r in conn.execute(
        "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path",
        (table,))]


def simulate_filler_journal(path: str | Path, tables: Iterable[str], rows: int) -> None:
    """A journal whose ``tables`` hold ``rows`` rows each of filler values (no foreign
    keys), checkpointed into the file: pages a test can overwrite."""
    migrate(str(path))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=OFF")
    for table in tables:
        columns = [r for r in conn.execute(f"PRAGMA table_info({table})") if not r[5]]
        names = ", ".join(r[1] for r in columns)
        for i in range(rows):
            values = [i if "INT" in (r[2] or "").upper() else f"{r[1]}-{i}-" + "x" * 30
                      for r in columns]
            conn.execute(f"INSERT INTO {table} ({names}) VALUES "
                         f"({', '.join('?' * len(columns))})", values)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def copy_target(path: str | Path) -> sqlite3.Connection:
    """A connection to a new journal as the rebuild writes it: foreign keys off, in one
    transaction."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("BEGIN")
    return conn


def row_ids(conn: sqlite3.Connection, table: str) -> list[int]:
    if table not in (*TABLES, "ipam_blocks"):
        raise ValueError(f"{table!r} is not one of the journal's tables")
    return [int(r[0]) for r in conn.execute(f"SELECT rowid FROM {table}")]
