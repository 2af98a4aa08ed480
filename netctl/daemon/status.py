"""What the daemon says about itself: :class:`Health` (whether it can serve ADDs and why
not; the metrics' snapshot) and :class:`StatusDocument` (what ``netctl status`` prints)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from netctl import __version__
from netctl.engine.admission import Admission
from netctl.engine.degraded import full_pools, is_degraded, pool_fills
from netctl.engine.degraded import reasons as degraded_reasons
from netctl.engine.readiness import daemon_reasons
from netctl.ipam.store import Store
from netctl.journal.pruner import Pruner
from netctl.journal.store import Journal
from netctl.kube.mode import KubeHealth, KubeMode
from netctl.metrics import Snapshot
from netctl.reconcile.watch import EventWatcher


@dataclass
class Health:
    """The daemon's state, from memory: ready or not (and why), and the scrape's numbers."""

    journal: Journal
    ipam: Store
    admission: Admission
    kube: KubeHealth | None  # Kubernetes mode
    pool_degraded_at: float
    mounts: list[str] = dataclasses.field(default_factory=list)  # netns not propagated

    def not_ready(self) -> list[str]:
        """Why the daemon cannot serve ADDs now: ``netctl status`` and STATUS."""
        path = self.journal.path
        writable = os.access(path, os.W_OK) and os.access(os.path.dirname(path), os.W_OK)
        return daemon_reasons(journal_writable=writable) if self.kube is None \
            else self.kube.not_ready(writable)

    def snapshot(self) -> Snapshot:
        """The scrape's state, from memory: counters, caches, two stat calls."""
        journal = self.journal
        size = 0
        for path in (journal.path, journal.path + "-wal"):
            with contextlib.suppress(OSError):
                size += os.stat(path).st_size
        stuck = len(journal.live.failing)
        local = Snapshot(
            in_flight=self.admission.in_flight, queued=self.admission.queued,
            ready=not self.not_ready(),
            degraded=bool(self.mounts) or journal.trouble is not None
            or is_degraded(stuck, self.ipam.pool_fill(), self.pool_degraded_at),
            journal_writable=journal.trouble is None, journal_refused=journal.refused,
            stuck=stuck, pools=self.ipam.index.pool_usage(),
            journal_bytes=size, journal_writes=journal.writes,
            journal_commits=journal.commits)
        return local if self.kube is None else self.kube.snapshot(local)


@dataclass
class StatusDocument:
    """The status document: ready or not and why, degraded or not and why, the numbers."""

    health: Health
    kube: KubeMode | None  # Kubernetes mode
    networks_dir: str  # where `netctl status` checks names
    pruner: Pruner
    events: EventWatcher | None  # reconcile-events
    replay: dict[str, Any]  # the start-up replay's report

    async def read(self) -> dict[str, Any]:
        health, journal, kube = self.health, self.health.journal, self.kube
        reasons = health.not_ready()
        stuck = await journal.stuck_attachments()
        fill = health.ipam.pool_fill()
        full = full_pools(fill, health.pool_degraded_at)
        degraded = [*health.mounts, *([journal.trouble] if journal.trouble else []),
                    *degraded_reasons(stuck, full, health.pool_degraded_at)]
        return {
            "ready": not reasons, "reasons": reasons,
            "state": "not ready" if reasons else "degraded" if degraded else "ready",
            "degraded": bool(degraded), "degraded_reasons": degraded,
            "pools": [p.to_json() for p in pool_fills(fill)],
            "pool_degraded_at": health.pool_degraded_at,
            "sticky": health.ipam.index.sticky_status(),
            "version": __version__, "pid": os.getpid(),
            "networks_dir": self.networks_dir,
            "in_flight": health.admission.in_flight, "queued": health.admission.queued,
            "journal": journal.path, "journal_writes": journal.writes,
            "journal_commits": journal.commits,  # fewer than writes: group commit
            "journal_trips": journal.trips,  # calls on the database thread
            "journal_size": (await journal.size()).as_dict(),
            "retention": self.pruner.status(),
            "replay": self.replay,
            "stuck": stuck,
            "events": self.events.status() if self.events is not None else None,
            "kubernetes": kube.status() if kube is not None else None,
        }
