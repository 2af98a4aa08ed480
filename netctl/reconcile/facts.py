"""Gathering the reconciler's facts: the journal (read-only), netns paths, host links (one
route-netlink dump in the host's netns). Synchronous: the daemon runs it in a worker thread,
``netctl reconcile --dry-run`` directly while the daemon is down.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from pathlib import Path

import msgspec

from netctl.cni import rtnl
from netctl.cni.netns import is_netns
from netctl.journal import query
from netctl.journal.retention import REMOVED_KEPT
from netctl.reconcile.plan import AllocationFact, AttachmentFact, Facts, Link


def host_links() -> dict[str, Link]:
    return {link.name: Link(link.kind, link.mac) for link in rtnl.links()}


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
    """The facts; without ``sweep`` (a run on events) no removed attachments nor host
    links; with ``containers``, only theirs."""
    now = time.time() if now is None else now
    on_host = (host_links() if links is None else links) if sweep else {}
    conn = query.open_read_only(journal_path)
    try:
        running = query.running_ids(conn)
        attachments = [
            AttachmentFact(id=r[0], container_id=r[1], network=r[2], ifname=r[3], netns=r[4],
                           state=r[5], op_running=(r[6] in running or r[7] in running),
                           result=_result(r[8]), del_failures=r[9], retry_at=r[10],
                           error=r[11])
            for r in query.unremoved_attachments(conn, containers)]
        # removed attachments pruning keeps, naming a veth on the host now: all the sweep
        # may unlink
        veths = sorted(name for name, link in on_host.items() if link.kind == "veth")
        removed = [(i, _result(blob)) for i, blob in query.removed_results(
            conn, now - REMOVED_KEPT, veths)] if sweep else []
        allocations = [
            AllocationFact(id=r[0], pool=r[1], address=r[2], container_id=r[3], ifname=r[4],
                           netns=r[5], attachment_id=r[6], attachment_state=r[7],
                           age=now - r[8], scope=r[9], prefix=r[10], since=r[8],
                           pod=query.pod_of(r))
            for r in query.live_allocations(conn, containers)]
    finally:
        conn.close()
    paths = {a.netns for a in attachments if a.netns} | {a.netns for a in allocations if a.netns}
    return Facts(
        attachments=attachments, removed_results=removed, allocations=allocations,
        netns_exists=netns_exist(paths),
        host_links=on_host,
        busy=frozenset(busy), now=now)
