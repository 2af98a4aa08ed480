"""``netctl status`` for a person: the status document (``--json`` prints it whole) as a
few lines, one per concern: first the state (ready, degraded, NOT READY) and why, then
the numbers an operator looks at first. Pure: a dict in,
lines out; keys a daemon of another version does not send are left out."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


def state_of(health: Mapping[str, Any]) -> str:
    """The daemon's state as its status document says it (``ready``, ``degraded``, ``not
    ready``; ``down`` when it did not answer): decided once, by the daemon
    (:mod:`netctl.daemon.status`); derived the same way from ``ready`` and ``degraded`` for
    a daemon older than the field."""
    state = health.get("state")
    if isinstance(state, str) and state:
        return state
    return "not ready" if not health.get("ready") else \
        "degraded" if health.get("degraded") else "ready"

def size(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB"):
        n /= 1024
        if n < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.1f} GiB"


def ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _counts(d: Mapping[str, Any], names: Mapping[str, str]) -> str:
    return ", ".join(f"{d.get(key, 0)} {name}" for key, name in names.items())


def render(health: Mapping[str, Any], warnings: list[str], now: float | None = None
           ) -> list[str]:
    now = time.time() if now is None else now
    lines: list[str] = []

    def row(key: str, text: str) -> None:
        lines.append(f"{key:12} {text}")

    state = state_of(health)
    state = "NOT READY" if state == "not ready" else state
    row("daemon", f"{state}: pid {health.get('pid')}, version {health.get('version')}, up "
        f"{ago(float(health.get('uptime_seconds') or 0))}, socket {health.get('socket')}")
    for reason in health.get("reasons") or []:
        row("not ready", str(reason))
    for reason in health.get("degraded_reasons") or []:
        row("degraded", str(reason))
    row("requests", f"{health.get('served', 0)} served (CNI and admin), "
        f"{health.get('in_flight', 0)} in flight, {health.get('queued', 0)} queued")
    js = health.get("journal_size") or {}
    row("journal", f"{health.get('journal')}: {size(js.get('bytes', 0))} (WAL "
        f"{size(js.get('wal_bytes', 0))}, {js.get('free_pages', 0)} free pages), "
        f"{health.get('journal_writes', 0)} writes in {health.get('journal_commits', 0)} "
        "commits")
    ret = health.get("retention") or {}
    if ret:
        pruned = ret.get("pruned") or {}
        last = ret.get("last_prune")
        when = f"last round {ago(now - float(last))} ago" if last else "no round yet"
        row("retention", f"operations {ret.get('journal_retention')}, allocations "
            f"{ret.get('allocation_retention')}; {when}, {ret.get('rounds', 0)} rounds, "
            f"{sum(pruned.values())} rows pruned, {ret.get('vacuumed_pages', 0)} pages "
            "vacuumed" + (f"; last error: {ret['last_error']}" if ret.get("last_error")
                          else ""))
    replay = health.get("replay") or {}
    if replay:
        dels = replay.get("recorded_dels") or {}
        row("start-up", f"replay closed {replay.get('operations', 0)} unfinished operations, "
            f"undid {replay.get('attachments', 0)} attachments of "
            f"{replay.get('containers', 0)} containers, finished "
            f"{dels.get('finished', 0)} DELs recorded while down"
            + (f"; failed: {'; '.join(replay['failed'])}" if replay.get("failed") else ""))
    pools = health.get("pools")
    if pools is not None:
        at = health.get("pool_degraded_at")
        fullest = max(pools, key=lambda p: float(p.get("fraction", 0)), default=None)
        row("pools", f"{len(pools)} known" + (
            f", fullest {fullest.get('pool')}: {fullest.get('used')} of {fullest.get('size')}"
            f" taken ({float(fullest.get('fraction', 0)):.0%})" if fullest else "")
            + (f"; degraded at {float(at):.0%}" if at else "; pool check off"))
    sticky = health.get("sticky")
    if sticky and (sticky.get("reserved") or any((sticky.get("ended") or {}).values())):
        reserved = sticky.get("reserved") or {}
        ended = sticky.get("ended") or {}
        row("sticky", f"{sum(reserved.values())} addresses reserved"
            + (f" ({', '.join(f'{p}: {n}' for p, n in sorted(reserved.items()))})"
               if reserved else "")
            + f"; since the start {ended.get('taken_back', 0)} taken back, "
            f"{ended.get('expired', 0)} expired")
    stuck = health.get("stuck") or []
    row("stuck", f"{len(stuck)} attachments whose DEL failed" + ("" if stuck else " (none)"))
    for s in stuck:
        row("", f"attachment {s.get('attachment')} of {s.get('container')} "
            f"({s.get('network')} {s.get('ifname')}): {s.get('failures')} failures, "
            f"{s.get('error')}")
    events = health.get("events")
    if events is None:
        row("events", "off (the periodic reconcile only)")
    else:
        row("events", f"{', '.join(events.get('sources') or ['no source'])}: "
            + _counts(events, {"batches": "batches", "attachments_reconciled":
                               "attachments reconciled", "allocations_released":
                               "allocations released", "events_lost": "lost"}))
    kube = health.get("kubernetes")
    if kube:
        row("kubernetes", f"node {kube.get('node')}, API server {kube.get('api_server')}")
        for name in ("pods", "nads"):
            inf = kube.get(name) or {}
            age = inf.get("age_seconds")
            row("", f"{name}: {inf.get('state')}, {inf.get('objects', 0)} cached, heard "
                f"from {'never' if age is None else ago(float(age)) + ' ago'}")
        row("", f"network-status failures {kube.get('network_status_failures', 0)}"
            + (" (required)" if kube.get("network_status_required") else ""))
        hotplug = kube.get("hotplug")
        if hotplug:
            row("", "hot-plug: " + _counts(hotplug, {
                "attached": "attached", "detached": "detached", "failed": "failed",
                "not_retried": "pods not retried until their annotation changes"}))
        ipam = kube.get("ipam")
        if ipam:
            row("", f"cluster IPAM {'ready' if ipam.get('ready') else 'NOT ready'}: "
                f"{len(ipam.get('blocks_held') or [])} blocks held, "
                + _counts(ipam, {"claims": "claims", "releases": "releases",
                                 "handovers": "hand-overs", "borrowed": "borrowed",
                                 "lent": "lent"}))
    for message in warnings:
        row("warning", f"{message} (netctl doctor)")
    return lines
