"""The daemon's background pruning of the journal (docs/journal.md, "Retention"): batches of
at most ``batch`` rows of each kind, ``pause`` apart, each an ordinary journal write; then
the freed pages given back ``vacuum_step`` at a time, ``keep_free`` left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import trio

from netctl.errors import CNIError
from netctl.journal.retention import Pruned, Retention, cutoffs, show_duration
from netctl.journal.store import Journal

log = logging.getLogger("netctl.journal")

BATCH = 25  # rows of each kind per transaction: a few ms (docs/benchmarks.md)
PAUSE = 0.025  # between batches: the requests' writes get the database most of the time
INTERVAL = 600.0
VACUUM_STEP = 64  # pages per transaction (≈ 2 ms)
KEEP_FREE = 256  # free pages left for the next writes (1 MiB of 4 KiB pages)


class Pruner:
    def __init__(self, journal: Journal, settings: Retention, *,
                 clock: Callable[[], float] = time.time, batch: int = BATCH,
                 pause: float = PAUSE, interval: float = INTERVAL,
                 vacuum_step: int = VACUUM_STEP, keep_free: int = KEEP_FREE) -> None:
        self.journal = journal
        self.settings = settings
        self.clock = clock
        self.batch = batch
        self.pause = pause
        self.interval = interval
        self.vacuum_step = vacuum_step
        self.keep_free = keep_free
        self.pruned = Pruned()  # since the daemon started
        self.batches = 0
        self.vacuumed_pages = 0
        self.rounds = 0
        self.last_prune: float | None = None  # when the last round ended (the clock's time)
        self.last_round_s = 0.0
        self.longest_batch_s = 0.0  # the longest prune or vacuum write, as its caller waited
        self.last_error = ""

    async def prune_once(self) -> Pruned:
        """One round: batches until nothing more is due, then the incremental vacuum."""
        started = time.monotonic()
        cut = cutoffs(self.settings, self.clock())
        round_total = Pruned()
        while True:
            t0 = time.monotonic()
            got = await self.journal.prune(cut, self.batch)
            self.longest_batch_s = max(self.longest_batch_s, time.monotonic() - t0)
            self.batches += 1
            round_total.add(got)
            self.pruned.add(got)
            if not got.full(self.batch):
                break
            await trio.sleep(self.pause)
        # the vacuum: only after pruning, and only writes when a read finds enough free pages
        while any(asdict(round_total).values()) and \
                (await self.journal.size()).free_pages > self.keep_free:
            t0 = time.monotonic()
            freed = await self.journal.vacuum(self.vacuum_step, self.keep_free)
            self.longest_batch_s = max(self.longest_batch_s, time.monotonic() - t0)
            self.vacuumed_pages += freed
            if freed < self.vacuum_step:
                break
            await trio.sleep(self.pause)
        self.rounds += 1
        self.last_prune = self.clock()
        self.last_round_s = time.monotonic() - started
        return round_total

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Rounds for ever (nothing at all when both retentions are off)."""
        task_status.started()
        if not self.settings.enabled:
            return
        while True:
            try:
                got = await self.prune_once()
            except CNIError as exc:  # the journal's write failed or was late: next round
                self.last_error = exc.msg
                log.warning("pruning the journal: %s", exc.msg)
            else:
                if any(asdict(got).values()):
                    log.info("journal pruned: %s", ", ".join(
                        f"{n} {k}" for k, n in asdict(got).items() if n))
            await trio.sleep(self.interval)

    def status(self) -> dict[str, Any]:
        return {"journal_retention": show_duration(self.settings.journal),
                "allocation_retention": show_duration(self.settings.allocations),
                "last_prune": self.last_prune, "last_round_s": round(self.last_round_s, 3),
                "rounds": self.rounds, "batches": self.batches,
                "longest_batch_s": round(self.longest_batch_s, 4), "pruned": asdict(self.pruned),
                "vacuumed_pages": self.vacuumed_pages, "last_error": self.last_error}
