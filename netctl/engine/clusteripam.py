"""The cluster-wide IPAM store (``ipam-backend: kubernetes``): a node allocates inside the
address blocks it claimed through the API, from its own journal.

:class:`ClusterStore` is the node's :class:`~netctl.ipam.store.IndexStore` (the live
allocations, the planner's view) plus the blocks this node holds. An allocation is
planned by the same pure planner, on each range narrowed to this node's blocks of it
(:func:`netctl.ipam.blocks.narrow`): steady-state churn writes nothing to the API for
IPAM. The API is called only when:

- a range has no free address in this node's blocks: the node **claims** the next
  block nobody holds (:func:`netctl.ipam.blocks.candidates`, from the node's own starting
  point), journaling the intent first (``ipam_blocks`` state ``claiming``), then creating
  the block object — create is the claim, AlreadyExists means another node has it —
  then recording it ``held``. A claim whose outcome was not recorded (a crash, an API
  server that did not answer) is settled by :meth:`ClusterStore.settle` at start-up and
  in each maintenance round, by reading the object;
- a requested address (``ips``, ``IP=``) lies in a block nobody holds: that block is
  claimed. One in another node's block is refused (code 7, naming the node);
- :meth:`ClusterStore.maintain` (every ``block-check`` seconds): a block this node has
  held no address in for ``block-idle`` seconds (seen empty in two rounds that far
  apart) is released — deleted with its resourceVersion as precondition — keeping at
  least one block per pool; blocks of a node whose Node object has been gone for
  ``node-gone-grace`` seconds, and that has no pod left in the API, are handed over to
  this node (an update carrying the resourceVersion read: of two nodes racing, one wins);
  other nodes' blocks are recorded as they come and go, so that ``netctl journal --ip``
  can name the node that held an address at a time.

At start, before it allocates anything (:attr:`ClusterStore.ready`), the store settles
its unfinished claims and **adopts** the blocks the API says are this node's that its
journal does not hold (a wiped state dir): the addresses the node's pods hold in them,
read from their network-status (one LIST of the node's pods), are recorded as held
(``ADOPT`` operations, owner ``pod:<uid>``) until those pods are gone.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from netctl.cni.request import Pod as PodRef
from netctl.errors import INVALID_CONFIG, POOL_EXHAUSTED, TRY_AGAIN_LATER, CNIError
from netctl.ipam import blocks as bmath
from netctl.ipam.planner import (
    Allocation,
    Decision,
    Owner,
    PoolInfo,
    SetUnion,
    plan,
    pool_key,
    scope_of,
)
from netctl.ipam.ranges import IPAMConfig, Range, next_free, requested
from netctl.ipam.store import IndexStore
from netctl.journal.records import BlockRecord, OpStart
from netctl.journal.store import Journal
from netctl.kube import blocks as kblocks
from netctl.kube import whereabouts
from netctl.kube.api import Api, ApiError
from netctl.kube.informer import Informer
from netctl.kube.objects import NETWORK_STATUS, Block, BlockSpec, Node

log = logging.getLogger("netctl.ipam")

WHEREABOUTS_REFRESH = 60.0
ADOPTED = "pod:"  # the owner container id of an adopted address: pod:<uid>


@dataclass(frozen=True)
class ClusterSettings:
    node: str
    block_idle: float = 600.0  # a block empty this long is released (keeping one per pool)
    node_gone_grace: float = 300.0  # a deleted node's blocks are taken over after this
    ready_wait: float = 10.0  # an allocation waits this long for the store's start


@dataclass
class Held:
    record: BlockRecord
    block: bmath.Block
    obj: Block
    empty_since: float | None = None


class _Status(msgspec.Struct, forbid_unknown_fields=False):
    name: str = ""
    interface: str = ""
    ips: list[str] = []


class _PodMeta(msgspec.Struct, forbid_unknown_fields=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    annotations: dict[str, str] = {}


class _FullPod(msgspec.Struct, forbid_unknown_fields=False):
    metadata: _PodMeta = msgspec.field(default_factory=_PodMeta)


class _PodList(msgspec.Struct, forbid_unknown_fields=False):
    items: list[_FullPod] = []


class _BlockList(msgspec.Struct, forbid_unknown_fields=False):
    items: list[Block] = []


def _ip(text: str) -> tuple[int, int] | None:
    try:
        addr = ipaddress.ip_address(text.split("/")[0])
    except ValueError:
        return None
    return addr.version, int(addr)


@dataclass
class ClusterStore(IndexStore):
    """The node's allocations, and the blocks it holds (see the module's docstring)."""

    api: Api | None = None
    journal: Journal | None = None
    settings: ClusterSettings = field(default_factory=lambda: ClusterSettings(""))
    blocks: Informer[Block] | None = None
    nodes: Informer[Node] | None = None
    # this node's pod UIDs (None until the pod cache is filled)
    live_pods: Callable[[], AbstractSet[str] | None] | None = None
    mine: dict[str, Held] = field(default_factory=dict)  # block name → a block held
    foreign: dict[int, set[int]] = field(default_factory=dict)  # family → whereabouts' holds
    lent: dict[int, set[int]] = field(default_factory=dict)  # family → granted to other nodes
    borrows: int = 0  # requested addresses granted by another node
    ready: trio.Event = field(default_factory=trio.Event)
    claims: int = 0
    releases: int = 0
    handovers: int = 0
    _locks: dict[str, trio.Lock] = field(default_factory=dict)
    _seen: dict[str, tuple[int, str]] = field(default_factory=dict)  # name → (record, node)
    _gone_since: dict[str, float] = field(default_factory=dict)  # node → first seen gone
    _claiming: set[int] = field(default_factory=set)  # records of claims in flight
    _pending: dict[str, BlockRecord] = field(default_factory=dict)  # borrows not answered
    _whereabouts_at: float | None = None  # when whereabouts' holds were last read
    whereabouts_holds: int = 0

    # -- the planner's view ----------------------------------------------------------------

    def used(self, scope: str, version: int) -> AbstractSet[int]:
        used = super().used(scope, version)
        for extra in (self.foreign.get(version), self.lent.get(version)):
            if extra:
                used = SetUnion(used, extra)
        return used

    # -- allocation ------------------------------------------------------------------------

    def blocks_of(self, pool: str) -> list[bmath.Block]:
        return [h.block for h in self.mine.values() if h.record.pool == pool]

    async def allocate(self, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                       wanted: list[str], now: float) -> Decision:
        await self._wait_ready()
        pools = {pool_key(cfg, r): PoolInfo(cfg.network_name, r.key, r.version, r.size)
                 for r in ranges}
        self.know_pools({key: info.size for key, info in pools.items()})
        await self._place_requested(cfg, ranges, wanted)
        for _ in range(64):
            narrowed = [bmath.narrow(r, self.blocks_of(pool_key(cfg, r))) for r in ranges]
            try:
                decision = plan(cfg, narrowed, owner, wanted, self, now)
            except CNIError as exc:
                if exc.code != POOL_EXHAUSTED:
                    raise
                for full, mine in zip(ranges, narrowed, strict=True):
                    if self._needs_block(cfg, full, mine, owner):
                        await self._claim_for(cfg, full)
                continue
            self.take(decision.new)
            return Decision(decision.leases, decision.new, pools)
        raise CNIError(TRY_AGAIN_LATER, "ipam: no address after claiming 64 blocks; "
                       "try again later")

    async def _wait_ready(self) -> None:
        if self.ready.is_set():
            return
        with trio.move_on_after(self.settings.ready_wait):
            await self.ready.wait()
        if not self.ready.is_set():
            host = self.api.host if self.api else "the API server"
            raise CNIError(TRY_AGAIN_LATER, "ipam: the cluster-wide IPAM is not ready: this "
                           f"node's blocks are not read from {host} yet; try again later")

    def _needs_block(self, cfg: IPAMConfig, full: Range, mine: Range, owner: Owner) -> bool:
        key = pool_key(cfg, full)
        if self.held(key, owner.container_id, owner.ifname) is not None:
            return False
        scope = scope_of(cfg, key)
        return next_free(mine, self.used(scope, mine.version), None, "lowest") is None

    async def _place_requested(self, cfg: IPAMConfig, ranges: list[Range],
                               wanted: list[str]) -> None:
        """Each requested address inside a block of this node: the block claimed when nobody
        holds it; refused (code 7) when another node does."""
        for text in wanted:
            for rng in ranges:
                try:
                    ip = requested(rng, text)
                except CNIError:
                    continue  # another range's, or invalid: the planner says which
                key = pool_key(cfg, rng)
                blk = bmath.block_at(rng, bmath.block_prefix(rng, cfg.block_size), ip)
                if any(h.block == blk for h in self.mine.values() if h.record.pool == key):
                    break
                name = bmath.block_name(scope_of(cfg, key), blk)
                other = self._cached(name)
                if other is None and \
                        await self._claim(key, scope_of(cfg, key), blk, cfg, rng) is not None:
                    break
                other = self._cached(name)
                if other is not None and other.spec.node != self.settings.node:
                    single = bmath.Block(rng.version, ip, bmath.BITS[rng.version])
                    if bmath.block_name(scope_of(cfg, key), single) not in self.mine:
                        await self._borrow(cfg, rng, key, ip, text, other)
                    break
                raise CNIError(TRY_AGAIN_LATER, f"requested address {text} in pool {key}: "
                               f"block {blk.cidr} was claimed meanwhile; try again")

    async def _borrow(self, cfg: IPAMConfig, rng: Range, key: str, ip: int, text: str,
                      parent: Block) -> None:
        """A requested address in another node's block: a borrow object (a single-address
        block naming that block) is created, and that node grants it — the address is
        free there, and it never hands it out while the object exists — or refuses it.
        Code 7 when refused or already borrowed, 11 when the owner does not answer in time."""
        assert self.api is not None and self.journal is not None
        scope = scope_of(cfg, key)
        single = bmath.Block(rng.version, ip, bmath.BITS[rng.version])
        owner = parent.spec.node
        obj = await self._claim(key, scope, single, cfg, rng, parent=parent.metadata.name)
        if obj is None:
            other = self._cached(bmath.block_name(scope, single))
            who = f"node {other.spec.node}" if other is not None else "another node"
            raise CNIError(INVALID_CONFIG, f"requested address {text} in pool {key} is "
                           f"already claimed by {who}")
        rec = self._pending.pop(obj.metadata.name)
        answer = ""
        with trio.move_on_after(self.settings.ready_wait):
            while True:
                found = await kblocks.get(self.api, obj.metadata.name)
                answer = found.spec.grant if found is not None else "refused"
                if answer:
                    break
                await trio.sleep(0.05)
        if answer == "granted" and found is not None:
            await self._hold(rec, found)
            self.borrows += 1
            log.info("borrowed %s of pool %s from node %s", text, key, owner)
            return
        done = await kblocks.release(self.api, found) if found is not None else True
        await self.journal.set_block(rec.id, "taken" if done else "claiming",
                                     ended=done)
        if answer == "refused":
            raise CNIError(INVALID_CONFIG, f"requested address {text} in pool {key} is in "
                           f"use: node {owner}, whose block {parent.spec.cidr} holds it, "
                           "refused it")
        raise CNIError(TRY_AGAIN_LATER, f"requested address {text} in pool {key} lies in "
                       f"block {parent.spec.cidr} of node {owner}, which did not answer "
                       f"within {self.settings.ready_wait:g} s; try again later")

    async def answer_borrows(self, asked: trio.MemoryReceiveChannel[Block]) -> None:
        """Answer the borrow objects naming this node's blocks as they come (the blocks'
        watch sends them here)."""
        async for obj in asked:
            await self._answer(obj)

    def asked(self, obj: Block) -> bool:
        """Whether ``obj`` asks this node for an address of one of its blocks."""
        return bool(obj.spec.parent) and not obj.spec.grant and obj.spec.parent in self.mine

    async def _answer(self, obj: Block) -> None:
        assert self.api is not None
        h = self.mine.get(obj.spec.parent)
        found = _ip(obj.spec.cidr)
        grant = "refused"
        if h is not None and found is not None and h.block.version == found[0] \
                and h.block.contains(found[1]) \
                and found[1] not in self.used(h.record.scope, found[0]):
            grant = "granted"
            self.lent.setdefault(found[0], set()).add(found[1])  # before any await
        try:
            done = await kblocks.answer(self.api, obj, grant)
        except ApiError:
            done = None
        if done is None and grant == "granted" and found is not None:
            self.lent[found[0]].discard(found[1])  # not written: not lent
        elif done is not None:
            log.info("%s address %s of block %s to node %s", grant, obj.spec.cidr,
                     h.record.cidr if h else obj.spec.parent, obj.spec.node)

    def _lent_now(self) -> dict[int, set[int]]:
        """The addresses of this node's blocks granted to other nodes, from the cache."""
        lent: dict[int, set[int]] = {}
        if self.blocks is None:
            return lent
        for b in self.blocks.cache.values():
            if b.spec.parent in self.mine and b.spec.grant == "granted" \
                    and b.spec.node != self.settings.node:  # not one taken over with it
                found = _ip(b.spec.cidr)
                if found is not None:
                    lent.setdefault(found[0], set()).add(found[1])
        return lent

    def _cached(self, name: str) -> Block | None:
        return self.blocks.cache.get(("", name)) if self.blocks is not None else None

    async def _claim_for(self, cfg: IPAMConfig, rng: Range) -> None:
        """Claim one more block of ``rng`` for this node (one claim at a time per pool; a
        request that waited finds the block another request claimed)."""
        key = pool_key(cfg, rng)
        lock = self._locks.setdefault(key, trio.Lock())
        before = len(self.blocks_of(key))
        async with lock:
            if len(self.blocks_of(key)) != before:
                return  # claimed while this request waited
            if self.blocks is None or not self.blocks.synced.is_set():
                raise CNIError(TRY_AGAIN_LATER, f"ipam: pool {key} needs a new block and the "
                               "cache of blocks is not filled yet; try again later")
            scope = scope_of(cfg, key)
            prefix = bmath.block_prefix(rng, cfg.block_size)
            present = {n for _, n in self.blocks.cache}
            for fresh in (False, True):  # the cache, then (it may lag) the API's own list
                if fresh:
                    present = await self._block_names()
                for blk in bmath.candidates(rng, prefix, self.settings.node):
                    if bmath.block_name(scope, blk) in present \
                            or self._overlaps(scope, blk, present):
                        continue
                    if await self._claim(key, scope, blk, cfg, rng) is not None:
                        return
            owners = sorted({b.spec.node for b in self._scope_blocks(scope)})
            raise CNIError(POOL_EXHAUSTED, f"address pool {key} is exhausted: every block of "
                           f"/{prefix} is claimed (by nodes {', '.join(owners) or 'none'}) and "
                           f"this node's {before} blocks of it are full ({rng.size} addresses "
                           "in all)")

    async def _block_names(self) -> set[str]:
        """The names of every block, from one LIST (when the cache says none is free)."""
        assert self.api is not None
        data = await self.api.list(kblocks.BLOCKS, [])
        return {b.metadata.name for b in msgspec.json.decode(data, type=_BlockList).items}

    def _scope_blocks(self, scope: str) -> list[Block]:
        if self.blocks is None:
            return []
        return [b for b in self.blocks.cache.values() if b.spec.scope == scope]

    def _overlaps(self, scope: str, blk: bmath.Block, present: AbstractSet[str]) -> bool:
        """A block of another size in the same scope (pools of one network_name with other
        block sizes) covering part of ``blk``; of the blocks named in ``present``."""
        net = ipaddress.ip_network(blk.cidr)
        for other in self._scope_blocks(scope):
            if other.metadata.name not in present:
                continue
            try:
                if ipaddress.ip_network(other.spec.cidr).overlaps(net):
                    return True
            except ValueError:
                continue
        return False

    async def _claim(self, pool: str, scope: str, blk: bmath.Block, cfg: IPAMConfig,
                     rng: Range, parent: str = "") -> Block | None:
        """The claim itself: intent journaled, object created, outcome journaled (a borrow,
        with ``parent``, is held only once granted: its record waits in ``_pending``)."""
        assert self.api is not None and self.journal is not None
        name = bmath.block_name(scope, blk)
        rec = BlockRecord(name=name, pool=pool, scope=scope, cidr=blk.cidr,
                          node=self.settings.node, state="claiming")
        rec.id = await self.journal.open_block(rec)
        spec = BlockSpec(pool=pool, scope=scope, range=rng.key, networkName=cfg.network_name,
                         poolSize=rng.size, prefix=rng.cidr.prefixlen, cidr=blk.cidr,
                         node=self.settings.node, claimedAt=kblocks.now_rfc3339(),
                         parent=parent)
        self._claiming.add(rec.id)
        try:
            obj = await kblocks.claim(self.api, name, spec)
        except ApiError as exc:  # the outcome is unknown: settled later by reading it
            self._claiming.discard(rec.id)
            raise CNIError(TRY_AGAIN_LATER, f"ipam: pool {pool} needs a new block and the API "
                           f"server {self.api.host} did not take the claim of {blk.cidr} "
                           f"({exc}); try again later") from None
        try:
            if obj is None:
                await self.journal.set_block(rec.id, "taken", ended=True)
                return None
            if parent:
                self._pending[obj.metadata.name] = rec
                return obj
            await self._hold(rec, obj)
        finally:
            self._claiming.discard(rec.id)
        self.claims += 1
        log.info("claimed block %s of pool %s", blk.cidr, pool)
        return obj

    async def _hold(self, rec: BlockRecord, obj: Block, journaled: bool = False) -> None:
        assert self.journal is not None
        if self.blocks is not None:
            self.blocks.cache[("", obj.metadata.name)] = obj
        if not journaled:
            await self.journal.set_block(rec.id, "held")
        rec.state = "held"
        blk = _block_of(obj)
        if blk is not None:
            self.mine[rec.name] = Held(rec, blk, obj)

    # -- start-up --------------------------------------------------------------------------

    async def start(self) -> None:
        """Once the caches are filled: settle unfinished claims, load the held blocks,
        adopt the blocks the journal lost; then :attr:`ready`."""
        assert self.journal is not None and self.blocks is not None
        await self.blocks.synced.wait()
        await self.settle()
        mine = {b.metadata.name: b for b in self.blocks.cache.values()
                if b.spec.node == self.settings.node}
        lost = [name for name in mine if name not in self.mine]
        if lost:
            await self._adopt([mine[n] for n in lost])
        self.lent = self._lent_now()
        self.ready.set()

    async def settle(self) -> None:
        """Match the journal's open records of this node's blocks with the API: a held
        block is checked against the cache (it may have been taken over, or be gone); a
        claim whose outcome was not recorded is read (one GET)."""
        assert self.journal is not None and self.api is not None
        for rec in await self.journal.open_blocks():
            if rec.node != self.settings.node or rec.state not in ("claiming", "held") \
                    or rec.id in self._claiming:  # a claim in flight settles itself
                continue
            if rec.state == "held":
                obj = self._cached(rec.name)
            else:
                obj = await kblocks.get(self.api, rec.name)
                if rec.state == "claiming" and obj is not None \
                        and obj.spec.node == self.settings.node:
                    log.info("the claim of block %s (pool %s) had succeeded", rec.cidr,
                             rec.pool)
            if obj is not None and obj.spec.parent and obj.spec.grant != "granted" \
                    and rec.name not in self._pending:  # a borrow asked before a crash
                if await kblocks.release(self.api, obj):
                    await self.journal.set_block(rec.id, "taken", ended=True)
                continue
            if obj is not None and obj.spec.node == self.settings.node:
                if rec.name not in self.mine:
                    await self._hold(rec, obj, journaled=rec.state == "held")
            else:
                await self._lose(rec, obj)

    async def _lose(self, rec: BlockRecord, obj: Block | None) -> None:
        assert self.journal is not None
        state = "taken" if rec.state == "claiming" else "lost"
        if rec.state == "held":
            who = f"node {obj.spec.node}'s" if obj is not None else "gone"
            log.warning("block %s (pool %s) is %s now, not this node's", rec.cidr, rec.pool, who)
        await self.journal.set_block(rec.id, state, ended=True)
        self.mine.pop(rec.name, None)

    async def _adopt(self, objs: list[Block]) -> None:
        """Blocks the API says are this node's and the journal does not hold (its state dir
        was wiped): the addresses this node's pods hold in them (from their network-status)
        recorded as theirs first, then the blocks held again."""
        assert self.api is not None and self.journal is not None
        data = await self.api.list("/api/v1/pods", [
            ("fieldSelector", f"spec.nodeName={self.settings.node}")])
        pods = msgspec.json.decode(data, type=_PodList).items
        found = [(obj, blk) for obj in objs if (blk := _block_of(obj)) is not None]
        new = _adoptions(pods, found, lambda scope, version, ip:
                         self.holder(scope, version, ip) is not None)
        for alloc, info in new:
            await self.journal.one_transaction(OpStart(
                verb="ADOPT", container_id=alloc.owner.container_id,
                ifname=alloc.owner.ifname, pod=alloc.owner.pod, origin="ipam"),
                new=[alloc], pools={alloc.pool: info})
            self.take([alloc])
        for obj, _ in found:
            rec = BlockRecord(name=obj.metadata.name, pool=obj.spec.pool,
                              scope=obj.spec.scope, cidr=obj.spec.cidr,
                              node=self.settings.node, state="claiming")
            rec.id = await self.journal.open_block(rec)
            await self._hold(rec, obj)
            log.warning("block %s (pool %s) is this node's in the API but not in its journal: "
                        "adopted", obj.spec.cidr, obj.spec.pool)
        if new:
            log.warning("adopted %d addresses held by this node's pods in those blocks",
                        len(new))

    async def take_over_whereabouts(self) -> int:
        """The addresses whereabouts recorded (IPPools, OverlappingRangeIPReservations) whose
        pods still exist: taken, in every pool of their family, until those pods are gone
        (read again every :data:`WHEREABOUTS_REFRESH` seconds)."""
        assert self.api is not None
        holds = await whereabouts.live_holds(self.api, await whereabouts.read_holds(self.api))
        foreign: dict[int, set[int]] = {}
        for version, ip in whereabouts.by_address(holds):
            foreign.setdefault(version, set()).add(ip)
        self.foreign = foreign
        self._whereabouts_at = time.monotonic()
        self.whereabouts_holds = len(holds)
        return len(holds)

    # -- maintenance -----------------------------------------------------------------------

    async def maintain(self, now: float | None = None) -> dict[str, Any]:
        """One round: settle, record other nodes' blocks, release idle blocks, take over
        the blocks of nodes that are gone, release adopted addresses of pods that are gone."""
        now = time.monotonic() if now is None else now
        if not self.ready.is_set():
            return {}
        await self.settle()
        if self._whereabouts_at is not None and \
                now - self._whereabouts_at >= WHEREABOUTS_REFRESH:
            await self.take_over_whereabouts()
        self.lent = self._lent_now()
        if self.blocks is not None:
            for obj in [b for b in self.blocks.cache.values() if self.asked(b)]:
                await self._answer(obj)  # asks the watch brought before this node held it
        await self._record_seen()
        released = await self._release_idle(now)
        taken = await self._take_over(now)
        freed = await self._release_adopted()
        return {"released": released, "taken_over": taken, "adopted_freed": freed}

    async def _record_seen(self) -> None:
        assert self.journal is not None and self.blocks is not None
        if not self._seen:
            for rec in await self.journal.open_blocks():
                if rec.state == "seen":
                    self._seen[rec.name] = (rec.id, rec.node)
        current = {b.metadata.name: b for b in self.blocks.cache.values()
                   if b.spec.node != self.settings.node}
        for name, (rec_id, node) in list(self._seen.items()):
            obj = current.get(name)
            if obj is None or obj.spec.node != node:
                await self.journal.set_block(rec_id, "seen", ended=True)
                del self._seen[name]
        for name, obj in current.items():
            if name not in self._seen:
                rec = BlockRecord(name=name, pool=obj.spec.pool, scope=obj.spec.scope,
                                  cidr=obj.spec.cidr, node=obj.spec.node, state="seen")
                self._seen[name] = (await self.journal.open_block(rec), obj.spec.node)

    def _in_use(self, h: Held) -> bool:
        lent = self.lent.get(h.block.version, set())
        if any(h.block.contains(ip) for ip in lent):
            return True
        used = super().used(h.record.scope, h.block.version)
        if len(used) <= h.block.end - h.block.start:
            return any(h.block.contains(ip) for ip in used)
        return any(ip in used for ip in range(h.block.start, h.block.end + 1))

    async def _release_idle(self, now: float) -> int:
        assert self.api is not None and self.journal is not None
        released = 0
        for name, h in list(self.mine.items()):
            if self._in_use(h):
                h.empty_since = None
                continue
            if h.empty_since is None:
                h.empty_since = now
                continue
            if now - h.empty_since < self.settings.block_idle:
                continue
            if not h.obj.spec.parent and len(
                    [b for b in self.mine.values() if b.record.pool == h.record.pool
                     and not b.obj.spec.parent]) <= 1:
                continue  # keep one block per pool (a borrowed address is given back)
            del self.mine[name]  # no allocation lands in it from here on
            try:
                done = await kblocks.release(self.api, self._cached(name) or h.obj)
            except ApiError as exc:
                log.warning("block %s not released: %s", h.record.cidr, exc)
                self.mine[name] = h
                continue
            if not done:  # it changed meanwhile: read it again next round
                await self._lose(h.record, await kblocks.get(self.api, name))
                continue
            if self.blocks is not None:
                self.blocks.cache.pop(("", name), None)
            await self.journal.set_block(h.record.id, "released", ended=True)
            self.releases += 1
            released += 1
            log.info("released block %s of pool %s (idle)", h.record.cidr, h.record.pool)
        return released

    async def _take_over(self, now: float) -> int:
        """The blocks of nodes whose Node object is gone, after the grace, when no pod of
        theirs is left."""
        if self.nodes is None or self.blocks is None or not self.nodes.synced.is_set():
            return 0
        assert self.api is not None and self.journal is not None
        names = {name for _, name in self.nodes.cache}
        owners = {b.spec.node for b in self.blocks.cache.values()} - {self.settings.node}
        for node in list(self._gone_since):
            if node in names or node not in owners:
                del self._gone_since[node]
        taken = 0
        for node in sorted(owners - names):
            since = self._gone_since.setdefault(node, now)
            if now - since < self.settings.node_gone_grace:
                continue
            data = await self.api.list("/api/v1/pods", [
                ("fieldSelector", f"spec.nodeName={node}"), ("limit", "1")])
            if msgspec.json.decode(data, type=_PodList).items:
                log.info("node %s is gone but still has pods: its blocks are kept", node)
                continue
            for obj in [b for b in self.blocks.cache.values() if b.spec.node == node]:
                rec = BlockRecord(name=obj.metadata.name, pool=obj.spec.pool,
                                  scope=obj.spec.scope, cidr=obj.spec.cidr,
                                  node=self.settings.node, state="claiming")
                rec.id = await self.journal.open_block(rec)
                new = await kblocks.hand_over(self.api, obj, self.settings.node)
                if new is None:
                    await self.journal.set_block(rec.id, "taken", ended=True)
                    continue
                await self._hold(rec, new)
                self.handovers += 1
                taken += 1
                log.info("took over block %s of pool %s from node %s (gone)", obj.spec.cidr,
                         obj.spec.pool, node)
        return taken

    async def _release_adopted(self) -> int:
        if self.live_pods is None:
            return 0
        live = self.live_pods()
        if live is None:
            return 0
        gone = [a for a in self.live() if a.owner.container_id.startswith(ADOPTED)
                and a.owner.container_id[len(ADOPTED):] not in live]
        if not gone:
            return 0
        assert self.journal is not None
        await self.journal.one_transaction(OpStart(verb="DEL", origin="pod-deleted",
                                                   container_id=gone[0].owner.container_id),
                                           gone=gone)
        self.released(gone)
        return len(gone)

    def blocks_by_node(self) -> dict[str, int]:
        """How many blocks each node holds, from the blocks cache."""
        by_node: dict[str, int] = {}
        if self.blocks is not None:
            for b in self.blocks.cache.values():
                by_node[b.spec.node] = by_node.get(b.spec.node, 0) + 1
        return by_node

    def pool_fill(self) -> dict[str, tuple[int | None, int]]:
        """Every known pool's size and how many of its addresses this node can no longer
        hand out: its own live allocations, plus every address in other nodes' blocks
        (counted by the block's size; a borrowed address only when it was granted out of
        one of this node's blocks, the others lie in a block counted already). Capped at
        the pool's size (netctl/engine/degraded.py)."""
        usage = self.pool_usage()
        others: dict[str, int] = {}
        if self.blocks is not None:
            for obj in self.blocks.cache.values():
                spec = obj.spec
                if spec.node == self.settings.node or spec.pool not in usage:
                    continue
                if spec.parent:
                    n = 1 if spec.parent in self.mine and spec.grant == "granted" else 0
                else:
                    n = _cidr_size(spec.cidr)
                others[spec.pool] = others.get(spec.pool, 0) + n
        return {pool: (size, used + others.get(pool, 0) if size is None
                       else min(size, used + others.get(pool, 0)))
                for pool, (size, used) in usage.items()}

    def status(self) -> dict[str, Any]:
        by_node = self.blocks_by_node()
        return {"backend": "kubernetes", "ready": self.ready.is_set(),
                "blocks_held": sorted(f"{h.record.pool} {h.record.cidr}"
                                      for h in self.mine.values()),
                "blocks_by_node": by_node, "claims": self.claims, "releases": self.releases,
                "handovers": self.handovers, "whereabouts_holds": self.whereabouts_holds,
                "borrowed": self.borrows,
                "lent": sum(len(v) for v in self.lent.values()),
                "blocks_cache": self.blocks.status() if self.blocks else None,
                "nodes_cache": self.nodes.status() if self.nodes else None}


def _cidr_size(cidr: str) -> int:
    """How many addresses a block's CIDR spans (0 when it does not parse)."""
    _, sep, prefix = cidr.rpartition("/")
    if not sep or not prefix.isdigit():
        return 0
    return 1 << max(0, (128 if ":" in cidr else 32) - int(prefix))


def _status_addresses(pod: _FullPod) -> list[tuple[str, int, int]]:
    """(interface, family, address) of every address the pod's network-status names."""
    raw = pod.metadata.annotations.get(NETWORK_STATUS)
    if not raw:
        return []
    try:
        entries = msgspec.json.decode(raw, type=list[_Status])
    except msgspec.MsgspecError:
        log.warning("pod %s/%s: a malformed network-status ignored", pod.metadata.namespace,
                    pod.metadata.name)
        return []
    return [(e.interface, *found) for e in entries for text in e.ips
            if (found := _ip(text)) is not None]


def _adoptions(pods: list[_FullPod], found: list[tuple[Block, bmath.Block]],
               held: Callable[[str, int, int], bool]) -> list[tuple[Allocation, PoolInfo]]:
    """The allocations adopting the addresses ``pods``' network-status names in the blocks
    ``found``: one per (scope, address) not ``held`` already. An address in two blocks of
    a scope (a borrowed /32 inside a block taken over) is adopted in the narrowest; one
    that two pods name, by the first (warned)."""
    new: dict[tuple[str, int, int], tuple[Allocation, PoolInfo]] = {}
    narrowest = sorted(found, key=lambda f: (-f[1].prefix, f[0].metadata.name))
    for pod in pods:
        for ifname, version, ip in _status_addresses(pod):
            seen: set[tuple[str, int, int]] = set()  # this address's scopes
            for obj, blk in narrowest:
                key = (obj.spec.scope, version, ip)
                if blk.version != version or not blk.contains(ip) or key in seen \
                        or held(*key):
                    continue
                seen.add(key)
                if key not in new:
                    new[key] = _adopted(obj, blk, ip, pod, ifname)
                elif (first := new[key][0].owner.pod) is not None \
                        and first.uid != pod.metadata.uid:
                    log.warning("pods %s/%s and %s/%s both name %s in their network-status:"
                                " adopted for the first", first.namespace, first.name,
                                pod.metadata.namespace, pod.metadata.name,
                                new[key][0].address)
    return list(new.values())


def _adopted(obj: Block, blk: bmath.Block, ip: int, pod: _FullPod, ifname: str
             ) -> tuple[Allocation, PoolInfo]:
    """An address of a pod in an adopted block, as an allocation owned by the pod."""
    meta, spec = pod.metadata, obj.spec
    owner = Owner(f"{ADOPTED}{meta.uid}", ifname or "eth0", "",
                  PodRef(namespace=meta.namespace, name=meta.name, uid=meta.uid), None)
    prefix = spec.prefix or blk.prefix
    alloc = Allocation(spec.pool, spec.scope, ip, blk.version, prefix, owner, time.time())
    return alloc, PoolInfo(spec.networkName, spec.range or spec.pool, blk.version,
                           spec.poolSize)


def _block_of(obj: Block) -> bmath.Block | None:
    try:
        net = ipaddress.ip_network(obj.spec.cidr)
    except ValueError:
        log.warning("block %s has a malformed cidr %r: ignored", obj.metadata.name,
                    obj.spec.cidr)
        return None
    return bmath.Block(net.version, int(net.network_address), net.prefixlen)
