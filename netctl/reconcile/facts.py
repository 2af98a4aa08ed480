"""Gathering the reconciler's facts: the journal (read-only sqlite3), netns paths, host links.

Synchronous on purpose: the daemon runs it in a worker thread, and
``netctl reconcile --dry-run`` runs it directly while the daemon is down. A
read-only WAL reader never blocks the daemon's writer. Host links come from
pyroute2 in the host's own netns (no setns anywhere).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Iterable
from pathlib import Path

import msgspec
from pyroute2 import IPRoute

from netctl.cni.netns import is_netns
from netctl.journal.retention import REMOVED_KEPT
from netctl.reconcile.plan import AllocationFact, AttachmentFact, Facts, Link

# removed attachments whose host links are still checked (pruning never takes them)
REMOVED_WINDOW = REMOVED_KEPT


def host_links() -> dict[str, Link]:
    out = {}
    with IPRoute() as ipr:
        for msg in ipr.get_links():
            info = msg.get_attr("IFLA_LINKINFO")
            kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
            out[str(msg.get_attr("IFLA_IFNAME"))] = Link(
                str(kind or ""), str(msg.get_attr("IFLA_ADDRESS") or "").lower())
    return out


def netns_exist(paths: Iterable[str]) -> dict[str, bool]:
    """Whether each path is (still) a network namespace: not one any more is gone too."""
    return {path: is_netns(path) for path in paths}


def _result(blob: bytes | None) -> dict[str, object] | None:
    if not blob:
        return None
    obj = msgspec.json.decode(blob)
    return obj if isinstance(obj, dict) else None


def gather(journal_path: str | Path, busy: Iterable[str] = (), now: float | None = None,
           links: dict[str, Link] | None = None, *, sweep: bool = True,
           containers: Collection[str] | None = None) -> Facts:
    """The facts; without ``sweep`` neither removed attachments nor host links (what only
    the sweep for leftover host veths needs), for a run on kernel events; with
    ``containers``, only those containers' attachments and allocations."""
    now = time.time() if now is None else now
    only, args = "", []
    if containers is not None:  # one parameter, however many: a JSON array
        only = " AND {}container_id IN (SELECT value FROM json_each(?))"
        args = [msgspec.json.encode(sorted(containers)).decode()]
    conn = sqlite3.connect(f"file:{journal_path}?mode=ro", uri=True)
    try:
        running = {row[0] for row in conn.execute(
            "SELECT id FROM operations WHERE state='running'")}
        attachments = [
            AttachmentFact(id=r[0], container_id=r[1], network=r[2], ifname=r[3], netns=r[4],
                           state=r[5], op_running=(r[6] in running or r[7] in running),
                           result=_result(r[8]), del_failures=r[9], retry_at=r[10],
                           error=r[11])
            for r in conn.execute(
                "SELECT id, container_id, network, ifname, netns, state, add_op, del_op, result,"
                " del_failures, retry_at, error FROM attachments WHERE state != 'removed'"
                f"{only.format('')} ORDER BY id", args)]
        # an attachment an operator forgot (``netctl forget``, maybe with --force while
        # its pod ran) was never DELeted: its host links are not the sweep's to delete
        removed = [(r[0], _result(r[1])) for r in conn.execute(
            "SELECT id, result FROM attachments WHERE state='removed' AND removed_at > ?"
            " AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = attachments.del_op"
            " AND o.verb = 'FORGET')",
            (now - REMOVED_WINDOW,))] if sweep else []
        allocations = [
            AllocationFact(id=r[0], pool=r[1], address=r[2], container_id=r[3], ifname=r[4],
                           netns=r[5], attachment_id=r[6], attachment_state=r[7],
                           age=now - r[8], scope=r[9], prefix=r[10], since=r[8],
                           pod=f"{r[11]}/{r[12]}" if r[12] else "")
            for r in conn.execute(
                "SELECT a.id, a.pool, a.address, a.container_id, a.ifname, a.netns,"
                " a.attachment_id, t.state, a.allocated_at, a.scope, a.prefix,"
                " a.pod_namespace, a.pod_name FROM ipam_allocations a"
                " LEFT JOIN attachments t ON t.id = a.attachment_id"
                f" WHERE a.released_at IS NULL{only.format('a.')} ORDER BY a.id", args)]
    finally:
        conn.close()
    paths = {a.netns for a in attachments if a.netns} | {a.netns for a in allocations if a.netns}
    return Facts(
        attachments=attachments, removed_results=removed, allocations=allocations,
        netns_exists=netns_exist(paths),
        host_links=(host_links() if links is None else links) if sweep else {},
        busy=frozenset(busy), now=now)
