"""Read-only questions to the journal, for people (``netctl journal``).

Plain sqlite3 opened read-only: works while the daemon writes (WAL) and while
it is down. Each function returns plain dicts, ready for a table or JSON.
"""

from __future__ import annotations

import ipaddress
import math
import re
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(value: str, now: float | None = None) -> float:
    """``90s``/``5m``/``2h``/``1d`` ago, a UNIX time, or an ISO 8601 time → UNIX seconds."""
    now = time.time() if now is None else now
    match = _DURATION_RE.match(value.strip())
    if match:
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):  # float() also takes "nan" and "inf"
            return seconds
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ValueError(f"{value!r} is neither a duration (30s, 5m, 2h, 1d), "
                         "a UNIX time nor an ISO 8601 time") from None


def connect(state_dir: str | Path) -> sqlite3.Connection:
    path = Path(state_dir) / "journal.db"
    if not path.exists():
        raise FileNotFoundError(f"no journal at {path}")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def _addresses(result: bytes | None) -> list[str]:
    if not result:
        return []
    obj = msgspec.json.decode(result)
    return [str(ip.get("address", "")) for ip in obj.get("ips") or []]


def attachments(conn: sqlite3.Connection, *, pod: str | None = None,
                container: str | None = None, ip: str | None = None, at: float | None = None,
                since: float | None = None, network: str | None = None) -> list[dict[str, Any]]:
    """Attachments (live and past) matching every filter given."""
    where: list[str] = []
    params: list[Any] = []
    if pod:
        ns, _, name = pod.partition("/")
        where.append("pod_namespace=? AND pod_name=?")
        params += [ns, name]
    if container:
        where.append("container_id=?")
        params.append(container)
    if network:
        where.append("(network=? OR network_name=? OR network LIKE ?)")
        params += [network, network, f"%/{network}"]
    if at is not None:
        where.append("created_at<=? AND (removed_at IS NULL OR removed_at>?)")
        params += [at, at]
    if since is not None:
        where.append("(created_at>=? OR removed_at>=? OR removed_at IS NULL)")
        params += [since, since]
    sql = "SELECT * FROM attachments"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY id"
    wanted = ipaddress.ip_address(ip) if ip else None
    out = []
    for row in conn.execute(sql, params):
        addrs = _addresses(row["result"])
        if wanted is not None and not any(
                ipaddress.ip_interface(a).ip == wanted for a in addrs if a):
            continue
        out.append({
            "attachment": row["id"], "container": row["container_id"],
            "pod": f"{row['pod_namespace']}/{row['pod_name']}" if row["pod_name"] else "",
            "pod_uid": row["pod_uid"], "network": row["network"], "ifname": row["ifname"],
            "netns": row["netns"], "addresses": addrs, "state": row["state"],
            "since": row["created_at"], "until": row["removed_at"], "add_op": row["add_op"],
            "del_op": row["del_op"], "error": row["error"],
        })
    return out


def operations(conn: sqlite3.Connection, *, container: str | None = None,
               since: float | None = None, limit: int = 200) -> list[dict[str, Any]]:
    where: list[str] = []
    params: list[Any] = []
    if container:
        where.append("container_id=?")
        params.append(container)
    if since is not None:
        where.append("started_at>=?")
        params.append(since)
    sql = ("SELECT id, verb, container_id, ifname, pod_namespace, pod_name, origin, state, code,"
           " error, started_at, finished_at FROM operations")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY id DESC LIMIT ?"
    return [dict(r) for r in conn.execute(sql, [*params, limit])][::-1]


def steps(conn: sqlite3.Connection, operation_id: int) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(
        "SELECT s.id, s.verb, a.network, s.ifname, s.position, s.plugin_type, s.state, s.code,"
        " s.error, s.seconds FROM steps s JOIN attachments a ON a.id = s.attachment_id"
        " WHERE s.operation_id=? ORDER BY s.id", (operation_id,))]
