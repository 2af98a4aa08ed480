"""The cluster store: the :class:`~netctl.ipam.store.Store` of ``ipam-backend: kubernetes``.
Allocation places each requested address first (its block claimed when nobody holds it,
borrowed when another node does), then plans with the pure planner on each range narrowed
to this node's blocks; when those are full, it plans in the block it would claim next and
claims it before anything is recorded, planning again when the claim lands elsewhere.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import trio

from netctl.errors import INVALID_CONFIG, POOL_EXHAUSTED, TRY_AGAIN_LATER, CNIError
from netctl.ipam.cluster.adopt import Adoption
from netctl.ipam.cluster.blocks import (
    Block,
    held_elsewhere,
    published_for,
)
from netctl.ipam.cluster.blocks import narrow as narrow_to
from netctl.ipam.cluster.borrow import Borrows
from netctl.ipam.cluster.claims import Claims
from netctl.ipam.cluster.maintain import Maintenance
from netctl.ipam.cluster.state import Cluster, Holdings
from netctl.ipam.cluster.takeover import WhereaboutsHolds
from netctl.ipam.planner import Decision, address_family, plan, pool_key, scope_of
from netctl.ipam.ranges import IPAMConfig, Range, next_free, sticky_for
from netctl.ipam.store import IndexStore, Store
from netctl.journal.allocations import Ended
from netctl.journal.records import Allocation, Owner, PoolInfo, Reservation
from netctl.kubeapi import blocks as block_objects
from netctl.kubeapi.api import ApiError
from netctl.kubeapi.informer import Informer
from netctl.kubeapi.objects import Block as IPAMBlock
from netctl.kubeapi.objects import Borrow, Node, StickyEntry

log = logging.getLogger("netctl.ipam")


@dataclass(frozen=True)
class _Claim:
    """A block planned in that this node does not hold yet: :meth:`ClusterStore.allocate`
    claims it. ``before``: how many blocks of the pool the node held when it found them
    full."""

    cfg: IPAMConfig
    rng: Range
    block: Block
    before: int


class _Replan(Exception):
    """The claim of a block planned in landed on another block: plan again."""


@dataclass
class ClusterStore:
    """The node's allocations, and the blocks it holds (see the module's docstring)."""

    cluster: Cluster
    holdings: Holdings
    claims: Claims
    borrows: Borrows
    adoption: Adoption
    whereabouts: WhereaboutsHolds
    maintenance: Maintenance
    ready: trio.Event = field(default_factory=trio.Event)
    # the blocks to claim in reserve, by the (pool, address) planned in them
    _to_claim: dict[tuple[str, int], _Claim] = field(default_factory=dict)
    rounds: int = 0  # maintenance rounds completed (the status's maintenance_rounds)

    @property
    def blocks(self) -> Informer[IPAMBlock]:
        return self.cluster.blocks

    @property
    def nodes(self) -> Informer[Node]:
        """Every Node's metadata: watched only while this daemon holds the gone-nodes
        Lease (:mod:`netctl.ipam.cluster.gone`)."""
        return self.maintenance.gone.nodes

    # -- the planner's view: the index's, with whereabouts' and the lent addresses used ----

    def held(self, pool: str, container_id: str, ifname: str) -> Allocation | None:
        return self.holdings.index.held(pool, container_id, ifname)

    def used(self, scope: str, version: int) -> AbstractSet[int]:
        return self.holdings.used(scope, version)

    def holder(self, scope: str, version: int, ip: int) -> Allocation | None:
        return self.holdings.index.holder(scope, version, ip)

    def cursor(self, pool: str) -> int | None:
        return self.holdings.index.cursor(pool)

    def reserved(self, scope: str, version: int, ip: int) -> Reservation | None:
        return self.holdings.index.reserved(scope, version, ip)

    def reservation(self, pool: str, identity: str, ifname: str) -> Reservation | None:
        return self.holdings.index.reservation(pool, identity, ifname)

    def sticky_holder(self, pool: str, identity: str, ifname: str) -> Allocation | None:
        return self.holdings.index.sticky_holder(pool, identity, ifname)

    # -- the Store: the index's ------------------------------------------------------------

    @property
    def index(self) -> IndexStore:
        return self.holdings.index

    async def _claim_planned(self, new: list[Allocation]) -> None:
        """Claim the blocks ``new`` was planned in that this node does not hold yet (its
        intent journaled first: :meth:`.Claims.claim`); :class:`_Replan` when a claim
        lands on another block."""
        due = [c for a in new if (c := self._to_claim.pop((a.pool, a.ip), None))]
        for claim in due:
            if claim.block in self.holdings.of_pool(pool_key(claim.cfg, claim.rng)):
                continue  # a request of this node claimed it meanwhile
            if await self.claims.claim_for(claim.cfg, claim.rng, claim.before) != claim.block:
                raise _Replan

    def unreserve(self, new: list[Allocation]) -> None:
        self.holdings.index.unreserve(new)
        self._sticky(new)

    def recorded(self, new: list[Allocation]) -> None:
        self.holdings.index.recorded(new)
        self._sticky(new)

    def released(self, gone: Iterable[Allocation]) -> None:
        gone = list(gone)
        self.holdings.index.released(gone)
        self._sticky(gone)

    def ended(self, ended: Iterable[Reservation], how: Ended = "expired") -> None:
        self.holdings.index.ended(ended, how)
        self.holdings.sticky_changed.set()

    def _sticky(self, allocs: Iterable[Allocation]) -> None:
        """Sticky allocations came or went: the published reservations may be stale."""
        if any(a.sticky for a in allocs):
            self.holdings.sticky_changed.set()

    # -- allocation ------------------------------------------------------------------------

    async def allocate(self, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                       wanted: list[str], now: float) -> Decision:
        await self._wait_ready()
        pools = {pool_key(cfg, r): PoolInfo(cfg.network_name, r.key, r.version, r.size)
                 for r in ranges}
        self.index.know_pools({key: info.size for key, info in pools.items()})
        ident = owner.identity if sticky_for(cfg) is not None else ""
        await self.borrows.place(cfg, ranges, wanted, ident, owner.ifname)
        if ident:
            wanted = [*wanted, *await self._reserved_elsewhere(cfg, ranges, owner, wanted,
                                                               now)]
        for _ in range(64):
            planned = await self._plan(cfg, ranges, owner, wanted, now)
            if planned is None:
                continue
            decision, to_claim = planned
            self.holdings.index.take(decision.new)
            self._to_claim.update(((a.pool, a.ip), to_claim[a.pool]) for a in decision.new
                                  if a.pool in to_claim and to_claim[a.pool].block.contains(a.ip))
            try:
                await self._claim_planned(decision.new)
            except _Replan:
                self.unreserve(decision.new)
                continue
            except BaseException:
                self.unreserve(decision.new)
                raise
            return Decision(decision.leases, decision.new, pools)
        raise CNIError(TRY_AGAIN_LATER, "ipam: no address after claiming 64 blocks; "
                       "try again later")

    async def _plan(self, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                    wanted: list[str], now: float) -> tuple[Decision, dict[str, _Claim]] | None:
        """The plan in this node's blocks; when they are full, in them and the block to
        claim next of each full range (by pool). None: plan again — a block was claimed
        here (the cache knowing none free, from the API's own list; or the next blocks
        having no free address either: whereabouts' or lent), or no address yet."""
        narrowed = [narrow_to(r, self.holdings.of_pool(pool_key(cfg, r))) for r in ranges]
        try:
            return plan(cfg, narrowed, owner, wanted, self, now), {}
        except CNIError as exc:
            if exc.code != POOL_EXHAUSTED:
                raise
        full = [(r, len(self.holdings.of_pool(pool_key(cfg, r))),
                 await self.claims.next_block(cfg, r))
                for r, mine in zip(ranges, narrowed, strict=True)
                if self._needs_block(cfg, r, mine, owner)]
        to_claim = {pool_key(cfg, r): _Claim(cfg, r, blk, before)
                    for r, before, blk in full if blk is not None}
        if full and len(to_claim) == len(full):
            widened = [narrow_to(r, [*self.holdings.of_pool(key), to_claim[key].block]
                                 if (key := pool_key(cfg, r)) in to_claim
                                 else self.holdings.of_pool(key)) for r in ranges]
            try:
                return plan(cfg, widened, owner, wanted, self, now), to_claim
            except CNIError as exc:
                if exc.code != POOL_EXHAUSTED:
                    raise
        # the cache knows no free block of a range (the claim reads the API's own list), or
        # the next blocks have no free address either (whereabouts', lent): claimed here
        for r, before, _ in full:
            await self.claims.claim_for(cfg, r, before)
        return None

    async def _wait_ready(self) -> None:
        if self.ready.is_set():
            return
        with trio.move_on_after(self.cluster.settings.ready_wait):
            await self.ready.wait()
        if not self.ready.is_set():
            raise CNIError(TRY_AGAIN_LATER, "ipam: the cluster-wide IPAM is not ready: this "
                           f"node's blocks are not read from {self.cluster.api.host} yet; "
                           "try again later")

    def _needs_block(self, cfg: IPAMConfig, full: Range, narrowed: Range,
                     owner: Owner) -> bool:
        key = pool_key(cfg, full)
        if self.held(key, owner.container_id, owner.ifname) is not None:
            return False
        scope = scope_of(cfg, key)
        return next_free(narrowed, self.used(scope, narrowed.version), None,
                         "lowest") is None

    async def _reserved_elsewhere(self, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                                  wanted: list[str], now: float) -> list[str]:
        """The addresses reserved for ``owner``'s sticky identity that another node
        published (``spec.reserved`` of its blocks), each borrowed from its block's node
        to be requested here; one refused (taken meanwhile) is left out: a new address."""
        out: list[str] = []
        index = self.holdings.index
        for rng in ranges:
            key = pool_key(cfg, rng)
            if any(address_family(w) == rng.version for w in wanted) \
                    or index.held(key, owner.container_id, owner.ifname) is not None \
                    or index.reservation(key, owner.identity, owner.ifname) is not None \
                    or index.sticky_holder(key, owner.identity, owner.ifname) is not None:
                continue
            # other nodes' blocks of the scope, read now (one LIST by label): a
            # reservation published a moment ago must be found
            blocks = await self.cluster.scope_blocks(scope_of(cfg, key))
            published = published_for(blocks, self.cluster.settings.node, key,
                                      owner.identity, owner.ifname, now)
            if published is None:
                continue
            found, obj = published
            try:
                if isinstance(obj, Borrow):  # its borrower hands it over
                    await self.borrows.take(cfg, rng, key, obj, owner.identity, owner.ifname)
                else:
                    await self.borrows.place(cfg, [rng], [found], owner.identity, owner.ifname)
            except CNIError as exc:
                if exc.code != INVALID_CONFIG:
                    raise
                log.info("the address %s reserved for %s is not granted (%s): a new one",
                         found, owner.identity, exc.msg)
                continue
            out.append(found)
        return out

    # -- the lifecycle: start, the answers to borrows, maintenance ------------------------

    async def publish_reservations(self) -> None:
        """For ever: each time the sticky reservations change, publish them on the blocks
        that hold their addresses (:meth:`sync_reservations`)."""
        await self.ready.wait()
        while True:
            await self.holdings.sticky_changed.wait()
            self.holdings.sticky_changed = trio.Event()
            try:
                await self.sync_reservations()
            except (ApiError, CNIError) as exc:
                log.warning("sticky reservations not published: %s; retried in the next "
                            "maintenance round", exc)

    async def sync_reservations(self) -> int:
        """Each held block's ``spec.reserved`` made what this node's reservations of its
        addresses are (a borrowed address's on its borrow object): one update per block
        that differs, under the resourceVersion read. How many blocks were written."""
        node = self.cluster.settings.node
        want: dict[str, list[StickyEntry]] = {}
        for res in self.index.reservations():
            name = self._block_of(res.scope, res.version, res.ip)
            if name is not None:
                want.setdefault(name, []).append(StickyEntry(
                    res.address, res.identity, res.ifname, res.until, node))
        written = 0
        for name, h in list(self.holdings.held.items()):
            entries = sorted(want.get(name, []), key=lambda e: (e.address, e.identity))
            obj: IPAMBlock | None = self.cluster.cached(name) or h.obj
            for _ in range(3):
                if obj is None or obj.spec.reserved == entries:
                    break
                done = await block_objects.set_reserved(self.cluster.api, obj, entries)
                if done is not None:
                    self.cluster.blocks.cache[("", name)] = h.obj = done
                    written += 1
                    break
                obj = await block_objects.get(self.cluster.api, name)  # changed: read again
        return written

    def _block_of(self, scope: str, version: int, ip: int) -> str | None:
        """The held block an address is published on: its borrow object when it was
        borrowed, else this node's block holding it."""
        inside = [(h.block.prefix, name) for name, h in self.holdings.held.items()
                  if h.record.scope == scope and h.block.version == version
                  and h.block.contains(ip)]
        return max(inside)[1] if inside else None

    async def start(self) -> None:
        """Once the caches are filled: label the blocks made before blocks carried labels,
        settle unfinished claims, load the held blocks, adopt the blocks the journal lost;
        then :attr:`ready`."""
        await self.cluster.blocks.synced.wait()
        await self.cluster.asking.synced.wait()
        await self.claims.label_unlabelled()
        await self.claims.settle()
        node = self.cluster.settings.node
        ours = {b.metadata.name: b for b in self.cluster.blocks.cache.values()
                if b.spec.node == node}
        lost = [name for name in ours if name not in self.holdings.held]
        if lost:
            await self.adoption.adopt([ours[n] for n in lost])
        self.holdings.lent = self.borrows.lent_now()
        self.ready.set()

    async def run(self, block_check: float, takeover: bool = False) -> None:
        """Everything the store runs, for ever (cancel to stop): its caches, the answers to
        other nodes' asks, the reservations published, its start (after taking over
        whereabouts' holds, with ``takeover``), then a maintenance round every
        ``block_check`` seconds. The daemon runs it; so does each node ``netctl bench
        scale`` simulates."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.blocks.run)
            nursery.start_soon(self.cluster.asking.run)
            nursery.start_soon(self.maintenance.gone.run)  # the Lease; Nodes while held
            nursery.start_soon(self.borrows.answer_borrows)
            nursery.start_soon(self.publish_reservations)
            while True:
                try:
                    if not self.ready.is_set():
                        if takeover:
                            await self.whereabouts.take_over()
                        await self.start()
                    else:
                        await self.maintain()
                except (ApiError, CNIError) as exc:
                    log.warning("cluster IPAM: %s; retrying", exc)
                await trio.sleep(block_check if self.ready.is_set() else 1.0)

    async def maintain(self, now: float | None = None) -> dict[str, Any]:
        """One round, once ready: settle unfinished claims, read whereabouts' holds again
        when due, count the lent addresses again and answer the asks the watch brought
        early, the upkeep of blocks (:mod:`netctl.ipam.cluster.maintain`), release the
        adopted addresses of pods that are gone."""
        now = time.monotonic() if now is None else now
        if not self.ready.is_set():
            return {}
        await self.claims.settle()
        if self.whereabouts.due(now):
            await self.whereabouts.take_over()
        self.holdings.lent = self.borrows.lent_now()
        await self.borrows.answer_cached()
        await self.sync_reservations()
        for scope in sorted({h.record.scope for h in self.holdings.held.values()}):
            # the pools' fill: other nodes' blocks, read now and then (not watched)
            await self.cluster.scope_blocks(scope, fresh_for=self.cluster.settings.fill_read)
        done = await self.maintenance.round(now)
        freed = await self.adoption.release_gone()
        self.rounds += 1
        return {**done, "adopted_freed": freed}

    # -- for the metrics and the status ----------------------------------------------------

    def blocks_by_node(self) -> dict[str, int]:
        """How many blocks each node holds: this node's from its cache, the others' as
        last read (a claim's or a sticky address's read of their scope)."""
        me = self.cluster.settings.node
        return Counter([*(b.spec.node for b in self.cluster.known()),
                        *(me for b in self.cluster.blocks.cache.values()
                          if b.spec.node == me)])

    def pool_fill(self) -> dict[str, tuple[int | None, int]]:
        """Every known pool's size and how many of its addresses this node can no longer
        hand out: its own live allocations and sticky reservations, plus every address in
        other nodes' blocks (:func:`~netctl.ipam.cluster.blocks.held_elsewhere`). Capped
        at the pool's size (netctl/engine/degraded.py)."""
        usage = self.holdings.index.pool_fill()  # live and reserved
        others = held_elsewhere(self.cluster.known(),
                                self.cluster.settings.node, usage, self.holdings.held)
        return {pool: (size, used + others.get(pool, 0) if size is None
                       else min(size, used + others.get(pool, 0)))
                for pool, (size, used) in usage.items()}

    def status(self) -> dict[str, Any]:
        return {"backend": "kubernetes", "ready": self.ready.is_set(),
                "blocks_held": sorted(f"{h.record.pool} {h.record.cidr}"
                                      for h in self.holdings.held.values()),
                "blocks_by_node": self.blocks_by_node(), "claims": self.claims.claims,
                "releases": self.maintenance.releases, "maintenance_rounds": self.rounds,
                "handovers": self.maintenance.gone.handovers,
                "whereabouts_holds": self.whereabouts.holds,
                "borrowed": self.borrows.borrows,
                "lent": sum(len(v) for v in self.holdings.lent.values()),
                "sticky_published_elsewhere": sum(
                    len(b.spec.reserved) for b in self.cluster.known()),
                "blocks_cache": self.cluster.blocks.status(),
                "asking_cache": self.cluster.asking.status(),
                "scope_reads": self.cluster.reads,
                "gone_nodes_lease": self.maintenance.gone.status(),
                # the holder's caches (every Node, every block's owner): only while held
                **({"nodes_cache": self.nodes.status(),
                    "owners_cache": self.maintenance.gone.owners.status()}
                   if self.maintenance.gone.lease.held else {})}


_CHECK: type[Store] = ClusterStore  # mypy: the cluster store implements the interface
