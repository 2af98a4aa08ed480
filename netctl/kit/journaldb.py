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

