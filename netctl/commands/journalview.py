"""``netctl journal`` for a person: the document of :func:`netctl.journal.query.journal` as
tables, every row of it (the table and ``--json`` cannot say different things). Times are
RFC 3339 with milliseconds, UTC (``Z``) or with ``local`` this machine's offset. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

ATTACHMENT_COLUMNS = ["container", "pod", "network", "ifname", "addresses", "state", "since",
                      "until"]
ALLOCATION_COLUMNS = ["pool", "address", "container", "pod", "identity", "ifname", "since",
                      "until", "reserved"]
BLOCK_COLUMNS = ["block", "pool", "node", "since", "until"]
OPERATION_COLUMNS = ["id", "verb", "container", "pod", "origin", "state", "code", "started",
                     "reason", "error"]


def rfc3339(t: float | None, local: bool = False) -> str:
    """UNIX seconds as RFC 3339 with ms, UTC (``Z``) or local with its offset; ``-``: none."""
    if t is None:
        return "-"
    when = datetime.fromtimestamp(t, UTC)
    if local:
        when = when.astimezone()
    text = when.isoformat(timespec="milliseconds")
    return text[:-6] + "Z" if text.endswith("+00:00") and not local else text


def cell(value: Any) -> str:
    """A value as one table cell: ``-`` for none, white space (a plugin's multi-line
    error) folded to single spaces so that a row stays one line."""
    text = " ".join(str(value).split()) if value is not None else ""
    return text or "-"


def table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    cells = [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
              for row in cells]
    return "\n".join(lines)


def timed(rows: list[dict[str, Any]], local: bool = False) -> list[dict[str, Any]]:
    """Copies of ``rows`` with ``since`` and ``until`` as RFC 3339 times."""
    return [{**r, "since": rfc3339(r.get("since"), local),
             "until": rfc3339(r.get("until"), local)} for r in rows]


def _reserved(row: Mapping[str, Any], local: bool) -> str:
    """A sticky allocation's reservation after its release: "until T" while open, then
    how it ended ("until T, taken back")."""
    until = row.get("reserved_until")
    if until is None:
        return "-"
    end = row.get("reservation_end")
    return f"until {rfc3339(until, local)}" + (f", {end}" if end else "")


def render(doc: Mapping[str, Any], local: bool = False) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr notes): the attachments' table always (its header alone when
    none matched), then the allocations, blocks and operations each when there are any.
    A cluster's document (``kubectl netctl journal``: ``nodes`` beside the rows) has a NODE
    column first in each table."""
    local = bool(local)
    first = ["node"] if "nodes" in doc else []
    notes = [str(n) for n in doc.get("notes") or []]
    if doc.get("older_attachments"):
        notes.append(f"(the newest {len(doc['attachments'])} attachments; older ones not "
                     "shown: --limit 0 for all)")
    if doc.get("older_operations"):
        notes.append(f"(the newest {len(doc['operations'])} operations of what was asked; "
                     "older ones not shown: narrow it with --since)")
    atts = [{**a, "addresses": ",".join(a["addresses"]) or "-"}
            for a in timed(list(doc["attachments"]), local)]
    # a DEVICE column when some attachment held a device (a device network's)
    columns = ATTACHMENT_COLUMNS + (["device"] if any(a.get("device") for a in atts) else [])
    out = table(atts, first + columns).splitlines()
    if doc.get("allocations"):
        allocs = [{**a, "identity": a.get("identity") or "-", "reserved": _reserved(a, local)}
                  for a in timed(list(doc["allocations"]), local)]
        out += ["", *table(allocs, first + ALLOCATION_COLUMNS).splitlines()]
    if doc.get("blocks"):  # ipam-backend: kubernetes — whose block held it, so whose journal
        out += ["", *table(timed(list(doc["blocks"]), local),
                           (["seen_by"] if first else []) + BLOCK_COLUMNS).splitlines()]
    if doc.get("operations"):
        ops = [{**op, "container": op["container_id"],
                "started": rfc3339(op["started_at"], local)} for op in doc["operations"]]
        out += ["", *table(ops, first + OPERATION_COLUMNS).splitlines()]
    return out, notes
