"""The upkeep of blocks in each maintenance round (every ``block-check`` seconds): the gone
nodes' blocks handed over (by the Lease's holder, :mod:`netctl.ipam.cluster.gone`); a
block this node has held no address in for ``block-idle`` seconds (seen empty in two
rounds that far apart) released, keeping one per pool; a block taken over from a gone
node released in the first round that finds it empty, whatever ``block-idle`` says and
without keeping one: this node never asked for it, and the other nodes may need it now.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from netctl.ipam.cluster.claims import Claims
from netctl.ipam.cluster.gone import GoneNodes
from netctl.ipam.cluster.state import Cluster, Held, Holdings
from netctl.kubeapi import blocks as block_objects
from netctl.kubeapi.api import ApiError
from netctl.kubeapi.objects import Borrow

log = logging.getLogger("netctl.ipam")


@dataclass
class Maintenance:
    cluster: Cluster
    holdings: Holdings
    claims: Claims
    gone: GoneNodes  # the blocks of nodes that are gone (the Lease's holder alone)
    releases: int = 0

    async def round(self, now: float) -> dict[str, int]:
        """Release the idle blocks, take over those of nodes gone
        (see the module's docstring)."""
        released = await self._release_idle(now)
        taken = await self.gone.take_over(now)  # the empty ones released next round
        return {"released": released, "taken_over": taken}

    def _in_use(self, h: Held) -> bool:
        lent = self.holdings.lent.get(h.block.version, set())
        if any(h.block.contains(ip) for ip in lent):
            return True
        used = self.holdings.index.used(h.record.scope, h.block.version)
        if len(used) <= h.block.end - h.block.start:
            return any(h.block.contains(ip) for ip in used)
        return any(ip in used for ip in range(h.block.start, h.block.end + 1))

    def _reserved(self, name: str, h: Held) -> bool:
        """Whether a sticky reservation still running is published on the block: the
        identity it waits for asks whoever holds the block."""
        obj = self.cluster.cached(name) or h.obj
        wall = time.time()
        return any(entry.until > wall for entry in obj.spec.reserved)

    async def _release_idle(self, now: float) -> int:
        api, held = self.cluster.api, self.holdings.held
        released = 0
        for name, h in list(held.items()):
            if self._in_use(h):
                h.empty_since = None
                h.taken_over = False  # in use here: from now on a block like the others
                continue
            if h.taken_over and not self._reserved(name, h):
                pass  # a gone node's block, empty: it serves the cluster again at once
            elif h.empty_since is None:
                h.empty_since = now
                continue
            elif now - h.empty_since < self.cluster.settings.block_idle:
                continue
            elif not isinstance(h.obj, Borrow) and len(
                    [b for b in held.values() if b.record.pool == h.record.pool
                     and not isinstance(b.obj, Borrow)]) <= 1:
                continue  # keep one block per pool (a borrowed address is given back)
            self.claims.life.withdraw(name)  # no allocation lands in it from here on
            try:
                done = await block_objects.release(api, self.cluster.cached(name) or h.obj)
            except ApiError as exc:
                log.warning("block %s not released: %s", h.record.cidr, exc)
                self.claims.life.restore(h)
                continue
            if not done:  # it changed meanwhile: read it again next round
                await self.claims.lose(h.record, await block_objects.get(api, name))
                continue
            self.cluster.blocks.cache.pop(("", name), None)
            await self.claims.life.move(h.record, "released")
            self.releases += 1
            released += 1
            log.info("released block %s of pool %s (%s)", h.record.cidr, h.record.pool,
                     "taken over, empty" if h.taken_over else "idle")
        return released
