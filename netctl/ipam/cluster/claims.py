"""Claiming and releasing this node's blocks through the API, journaled: the claim of the
next free block of a pool (:meth:`Claims.claim_for`), the claim itself
(:meth:`Claims.claim`: intent journaled, object created — AlreadyExists means another
node has it — outcome journaled), and the settling of what the journal and the API say
(:meth:`Claims.settle`, at start-up and in each maintenance round).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec
import trio

from netctl.errors import POOL_EXHAUSTED, TRY_AGAIN_LATER, CNIError
from netctl.ipam.cluster.blocks import Block, block_name, block_prefix, candidates
from netctl.ipam.cluster.lifecycle import CLAIMING, HELD, Lifecycle
from netctl.ipam.cluster.state import Cluster, Holdings
from netctl.ipam.planner import pool_key, scope_of
from netctl.ipam.ranges import IPAMConfig, Range
from netctl.journal.records import BlockRecord
from netctl.kubeapi import blocks as block_objects
from netctl.kubeapi.api import ApiError
from netctl.kubeapi.objects import Block as IPAMBlock
from netctl.kubeapi.objects import BlockSpec, Borrow, BorrowSpec

log = logging.getLogger("netctl.ipam")


FRESH_FOR = 5.0  # seconds a read of a scope's blocks is used again by the next claim


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr)
    except ValueError:
        return None


def _overlaps(blk: Block, nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    """A block of another size in the same scope (pools of one network_name with other
    block sizes) covering part of ``blk``."""
    net = ipaddress.ip_network(blk.cidr)
    return any(other.version == net.version and other.overlaps(net)
               for other in nets)


@dataclass
class Claims:
    cluster: Cluster
    holdings: Holdings
    claims: int = 0
    # borrows claimed and not answered yet: name → record (held once granted)
    pending: dict[str, BlockRecord] = field(default_factory=dict)
    _locks: dict[str, trio.Lock] = field(default_factory=dict)
    _claiming: set[int] = field(default_factory=set)  # records of claims in flight
    life: Lifecycle = field(init=False)  # the blocks' records and holdings (lifecycle.py)

    def __post_init__(self) -> None:
        self.life = Lifecycle(self.cluster, self.holdings)

    async def next_block(self, cfg: IPAMConfig, rng: Range) -> Block | None:
        """The block of ``rng`` :meth:`claim_for` tries first, as the scope's blocks were
        read at most :data:`FRESH_FOR` seconds ago (None when none is free)."""
        scope = scope_of(cfg, pool_key(cfg, rng))
        blocks = await self.cluster.scope_blocks(scope, fresh_for=FRESH_FOR)
        return next(self._free(cfg, rng, blocks), None)

    def _free(self, cfg: IPAMConfig, rng: Range, blocks: list[IPAMBlock]) -> Iterator[Block]:
        """The blocks of ``rng`` none of ``blocks`` (its scope's, any node's) is or
        overlaps, in the order this node tries them."""
        scope = scope_of(cfg, pool_key(cfg, rng))
        present = {b.metadata.name for b in blocks}
        nets = [net for b in blocks if (net := _network(b.spec.cidr)) is not None]
        for blk in candidates(rng, block_prefix(rng, cfg.block_size),
                              self.cluster.settings.node):
            if block_name(scope, blk) not in present and not _overlaps(blk, nets):
                yield blk

    async def claim_for(self, cfg: IPAMConfig, rng: Range, before: int) -> Block | None:
        """Claim one more block of ``rng`` for this node, which held ``before`` blocks of it
        when it found them full; the block claimed. One claim at a time per pool: None
        when another request claimed one while this one waited."""
        key = pool_key(cfg, rng)
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            if len(self.holdings.of_pool(key)) != before:
                return None  # claimed while this request waited
            scope = scope_of(cfg, key)
            blocks: list[IPAMBlock] = []
            for fresh_for in (FRESH_FOR, 0.0):  # a recent read, then (it may lag) a new one
                blocks = await self.cluster.scope_blocks(scope, fresh_for=fresh_for)
                for blk in self._free(cfg, rng, blocks):
                    if await self.claim(key, scope, blk, cfg, rng) is not None:
                        return blk
            prefix = block_prefix(rng, cfg.block_size)
            owners = sorted({b.spec.node for b in blocks})
            raise CNIError(POOL_EXHAUSTED, f"address pool {key} is exhausted: every block of "
                           f"/{prefix} is claimed (by nodes {', '.join(owners) or 'none'}) and "
                           f"this node's {before} blocks of it are full ({rng.size} addresses "
                           "in all)")

    async def label_unlabelled(self) -> int:
        """The blocks without the node label (made by a netctl before they carried labels)
        labelled, whoever's they are: after an upgrade the first daemon to start does it
        for all, and the others find none (one LIST that selects nothing). How many."""
        done = 0
        api = self.cluster.api
        for obj in await block_objects.listed(api, f"!{block_objects.NODE_LABEL}"):
            lender = ""
            if isinstance(obj, Borrow):
                parent = await block_objects.get(api, obj.spec.parent)
                lender = parent.spec.node if parent is not None else ""
            new = await block_objects.label(api, obj, lender)
            if new is None:
                continue
            done += 1
            key = ("", new.metadata.name)  # in the caches now: their watches bring it too
            if new.spec.node == self.cluster.settings.node:
                self.cluster.blocks.cache[key] = new
            if lender == self.cluster.settings.node:
                self.cluster.asking.cache[key] = new
        if done:
            log.info("labelled %d address blocks made by an earlier netctl", done)
        return done

    async def claim(self, pool: str, scope: str, blk: Block, cfg: IPAMConfig, rng: Range,
                    parent: IPAMBlock | None = None, identity: str = "", ifname: str = ""
                    ) -> IPAMBlock | None:
        """The claim itself: intent journaled, object created, outcome journaled. With
        ``parent``, another node's block, a borrow of ``blk`` (an address of it), held only
        once granted: its record waits in ``pending``, and the parent's node is named in
        its label (the lender), so that node's watch brings it; with ``identity``, it asks
        for that sticky identity's reserved address."""
        api, node = self.cluster.api, self.cluster.settings.node
        name = block_name(scope, blk)
        rec = await self.life.open(BlockRecord(name=name, pool=pool, scope=scope,
                                               cidr=blk.cidr, node=node, state=CLAIMING))
        spec = BlockSpec(pool=pool, scope=scope, range=rng.key, networkName=cfg.network_name,
                         poolSize=rng.size, prefix=rng.cidr.prefixlen, cidr=blk.cidr,
                         node=node, claimedAt=block_objects.now_rfc3339())
        if parent is not None:
            spec = BorrowSpec(**msgspec.structs.asdict(spec), parent=parent.metadata.name,
                              identity=identity, ifname=ifname)
        self._claiming.add(rec.id)
        try:
            obj = await block_objects.claim(api, name, spec,
                                            "" if parent is None else parent.spec.node)
        except ApiError as exc:  # the outcome is unknown: settled later by reading it
            self._claiming.discard(rec.id)
            raise CNIError(TRY_AGAIN_LATER, f"ipam: pool {pool} needs a new block and the API "
                           f"server {api.host} did not take the claim of {blk.cidr} "
                           f"({exc}); try again later") from None
        try:
            if obj is None:
                await self.life.move(rec, "refused")
                return None
            if parent is not None:
                self.pending[obj.metadata.name] = rec
                return obj
            await self.hold(rec, obj)
        finally:
            self._claiming.discard(rec.id)
        self.claims += 1
        log.info("claimed block %s of pool %s", blk.cidr, pool)
        return obj

    async def hold(self, rec: BlockRecord, obj: IPAMBlock, taken_over: bool = False) -> None:
        """``rec``'s block is this node's (``obj``): held."""
        await self.life.move(rec, "settled" if rec.state == HELD else "granted", obj,
                             taken_over=taken_over)

    @contextlib.contextmanager
    def aside(self, rec_id: int) -> Iterator[None]:
        """Record ``rec_id`` left out of :meth:`settle` meanwhile: its block is changing
        hands, and the change journals its own outcome."""
        self._claiming.add(rec_id)
        try:
            yield
        finally:
            self._claiming.discard(rec_id)

    async def settle(self) -> None:
        """Match the journal's open records of this node's blocks with the API: a held
        block is checked against the cache (it may have been taken over, or be gone); a
        claim whose outcome was not recorded is read (one GET)."""
        api, journal, node = self.cluster.api, self.cluster.journal, self.cluster.settings.node
        for rec in await journal.ipam.open_blocks():
            if rec.node != node or rec.state not in ("claiming", "held") \
                    or rec.id in self._claiming:  # a claim in flight settles itself
                continue
            if rec.state == "held":
                obj = self.cluster.cached(rec.name)
            else:
                obj = await block_objects.get(api, rec.name)
                if rec.state == "claiming" and obj is not None and obj.spec.node == node:
                    log.info("the claim of block %s (pool %s) had succeeded", rec.cidr,
                             rec.pool)
            if isinstance(obj, Borrow) and obj.spec.node == node \
                    and obj.spec.grant != "granted" \
                    and rec.name not in self.pending:  # a borrow asked before a crash
                if await block_objects.release(api, obj):
                    await self.lose(rec, obj)
                continue
            if obj is not None and obj.spec.node == node:
                if rec.name not in self.holdings.held:
                    await self.hold(rec, obj)
            else:
                await self.lose(rec, obj)

    async def lose(self, rec: BlockRecord, obj: IPAMBlock | None) -> None:
        """``rec``'s block is not this node's: a claim's ``refused``, a held block ``lost``."""
        if rec.state == HELD:
            who = f"node {obj.spec.node}'s" if obj is not None else "gone"
            log.warning("block %s (pool %s) is %s now, not this node's", rec.cidr, rec.pool, who)
        await self.life.move(rec, "refused" if rec.state == CLAIMING else "lost")
