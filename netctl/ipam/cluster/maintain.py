"""The upkeep of blocks in each maintenance round
(:meth:`netctl.ipam.cluster.store.ClusterStore.maintain`, every ``block-check`` seconds):

- other nodes' blocks recorded as they come and go (``seen``), so that ``netctl journal
  --ip`` can name the node that held an address at a time;
- a block this node has held no address in for ``block-idle`` seconds (seen empty in two
  rounds that far apart) released — deleted with its resourceVersion as precondition —
  keeping at least one block per pool;
- the blocks of a node whose Node object has been gone for ``node-gone-grace`` seconds,
  and that has no pod left in the API, handed over to this node (an update carrying the
  resourceVersion read: of two nodes racing, one wins).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from netctl.ipam.cluster.claims import Claims
from netctl.ipam.cluster.state import Cluster, Held, Holdings
from netctl.journal.records import BlockRecord
from netctl.kube.client import blocks as block_objects
from netctl.kube.client.api import ApiError
from netctl.kube.client.pods import pods_on

log = logging.getLogger("netctl.ipam")


@dataclass
class Maintenance:
    cluster: Cluster
    holdings: Holdings
    claims: Claims
    releases: int = 0
    handovers: int = 0
    _seen: dict[str, tuple[int, str]] = field(default_factory=dict)  # name → (record, node)
    _gone_since: dict[str, float] = field(default_factory=dict)  # node → first seen gone

    async def round(self, now: float) -> dict[str, int]:
        """Record the blocks seen, release the idle ones, take over those of nodes gone
        (see the module's docstring)."""
        await self._record_seen()
        released = await self._release_idle(now)
        taken = await self._take_over(now)
        return {"released": released, "taken_over": taken}

    async def _record_seen(self) -> None:
        journal, node = self.cluster.journal, self.cluster.settings.node
        if not self._seen:
            for rec in await journal.ipam.open_blocks():
                if rec.state == "seen":
                    self._seen[rec.name] = (rec.id, rec.node)
        current = {b.metadata.name: b for b in self.cluster.blocks.cache.values()
                   if b.spec.node != node}
        for name, (rec_id, owner) in list(self._seen.items()):
            obj = current.get(name)
            if obj is None or obj.spec.node != owner:
                await journal.ipam.set_block(rec_id, "seen", ended=True)
                del self._seen[name]
        for name, obj in current.items():
            if name not in self._seen:
                rec = BlockRecord(name=name, pool=obj.spec.pool, scope=obj.spec.scope,
                                  cidr=obj.spec.cidr, node=obj.spec.node, state="seen")
                self._seen[name] = (await journal.ipam.open_block(rec), obj.spec.node)

    def _in_use(self, h: Held) -> bool:
        lent = self.holdings.lent.get(h.block.version, set())
        if any(h.block.contains(ip) for ip in lent):
            return True
        used = self.holdings.index.used(h.record.scope, h.block.version)
        if len(used) <= h.block.end - h.block.start:
            return any(h.block.contains(ip) for ip in used)
        return any(ip in used for ip in range(h.block.start, h.block.end + 1))

    async def _release_idle(self, now: float) -> int:
        api, journal, held = self.cluster.api, self.cluster.journal, self.holdings.held
        released = 0
        for name, h in list(held.items()):
            if self._in_use(h):
                h.empty_since = None
                continue
            if h.empty_since is None:
                h.empty_since = now
                continue
            if now - h.empty_since < self.cluster.settings.block_idle:
                continue
            if not h.obj.spec.parent and len(
                    [b for b in held.values() if b.record.pool == h.record.pool
                     and not b.obj.spec.parent]) <= 1:
                continue  # keep one block per pool (a borrowed address is given back)
            del held[name]  # no allocation lands in it from here on
            try:
                done = await block_objects.release(api, self.cluster.cached(name) or h.obj)
            except ApiError as exc:
                log.warning("block %s not released: %s", h.record.cidr, exc)
                held[name] = h
                continue
            if not done:  # it changed meanwhile: read it again next round
                await self.claims.lose(h.record, await block_objects.get(api, name))
                continue
            self.cluster.blocks.cache.pop(("", name), None)
            await journal.ipam.set_block(h.record.id, "released", ended=True)
            self.releases += 1
            released += 1
            log.info("released block %s of pool %s (idle)", h.record.cidr, h.record.pool)
        return released

    async def _take_over(self, now: float) -> int:
        """The blocks of nodes whose Node object is gone, after the grace, when no pod of
        theirs is left."""
        nodes, blocks = self.cluster.nodes, self.cluster.blocks
        if not nodes.synced.is_set():
            return 0
        api, journal, me = self.cluster.api, self.cluster.journal, self.cluster.settings.node
        names = {name for _, name in nodes.cache}
        owners = {b.spec.node for b in blocks.cache.values()} - {me}
        for node in list(self._gone_since):
            if node in names or node not in owners:
                del self._gone_since[node]
        taken = 0
        for node in sorted(owners - names):
            since = self._gone_since.setdefault(node, now)
            if now - since < self.cluster.settings.node_gone_grace:
                continue
            if await pods_on(api, node, limit=1):
                log.info("node %s is gone but still has pods: its blocks are kept", node)
                continue
            for obj in [b for b in blocks.cache.values() if b.spec.node == node]:
                rec = BlockRecord(name=obj.metadata.name, pool=obj.spec.pool,
                                  scope=obj.spec.scope, cidr=obj.spec.cidr, node=me,
                                  state="claiming")
                rec.id = await journal.ipam.open_block(rec)
                new = await block_objects.hand_over(api, obj, me)
                if new is None:
                    await journal.ipam.set_block(rec.id, "taken", ended=True)
                    continue
                await self.claims.hold(rec, new)
                self.handovers += 1
                taken += 1
                log.info("took over block %s of pool %s from node %s (gone)", obj.spec.cidr,
                         obj.spec.pool, node)
        return taken
