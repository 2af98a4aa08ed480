"""Borrowing and lending single addresses: a requested address (``ips``, ``IP=``) in
another node's block is asked for with a borrow object
(:class:`~netctl.kubeapi.objects.Borrow`: a single-address block naming that block as its
parent) which the owner grants (the address is free there, and it
never hands it out while the object exists) or refuses (:meth:`Borrows.borrow`); this
node answers the borrow objects naming its own blocks (:meth:`Borrows.answer`), and
counts the addresses it granted as used (``lent``). The lent addresses are counted again
in each maintenance round from the cache of the borrow objects asking this node
(:meth:`Borrows.lent_now`); an answer this node wrote that the cache has not brought yet
(its watch lags behind the write) is counted from what this node wrote
(:class:`Answered`) until the cache shows the object changed or gone: a grant is never
forgotten, nor the ask answered twice, because the watch is late.

Sticky addresses (:mod:`netctl.ipam.sticky`) move between nodes the same way: a node
publishes the reservations of its blocks' addresses on the block objects
(``spec.reserved``, :meth:`netctl.ipam.cluster.store.ClusterStore.publish_reservations`);
a node where the identity comes back borrows the address naming the identity
(``spec.identity``, ``spec.ifname``), and the owner grants a reserved address to that
identity only, its reservation ending there (journaled: taken back by that node).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TypeGuard

import trio

from netctl.errors import INVALID_CONFIG, TRY_AGAIN_LATER, CNIError
from netctl.ipam.cluster.blocks import (
    BITS,
    Block,
    block_at,
    block_name,
    block_prefix,
    parse_address,
)
from netctl.ipam.cluster.claims import Claims
from netctl.ipam.cluster.lifecycle import CLAIMING
from netctl.ipam.cluster.state import Cluster, Holdings
from netctl.ipam.planner import pool_key, scope_of
from netctl.ipam.ranges import IPAMConfig, Range, requested
from netctl.journal.records import BlockRecord, Reservation
from netctl.kubeapi import blocks as block_objects
from netctl.kubeapi.api import ApiError
from netctl.kubeapi.objects import Block as IPAMBlock
from netctl.kubeapi.objects import Borrow, TransferAsk

log = logging.getLogger("netctl.ipam")


def asks(obj: IPAMBlock, holdings: Holdings) -> TypeGuard[Borrow]:
    """Whether ``obj`` is a borrow that asks this node for an address of one of its
    blocks, or for the borrow itself (a transfer)."""
    if not isinstance(obj, Borrow):
        return False
    ask = obj.spec.transfer
    if ask is not None:
        return not ask.refused and obj.metadata.name in holdings.held
    return not obj.spec.grant and obj.spec.parent in holdings.held


@dataclass(frozen=True)
class Answered:
    """This node's answer on a borrow object, being written or written: the object's
    resourceVersion it answered (the version its caches hold until their watch brings the
    answer), and the address granted ((family, address); None when refused)."""

    asked: str
    granted: tuple[int, int] | None


@dataclass
class Borrows:
    cluster: Cluster
    holdings: Holdings
    claims: Claims
    asked: trio.MemoryReceiveChannel[Borrow]  # what the blocks' watch finds :func:`asks`
    borrows: int = 0  # requested addresses granted by another node
    # the answers this node wrote that its caches may not show yet, by borrow object's name
    # (dropped by :meth:`lent_now` once the caches hold another version of it, or none)
    answered: dict[str, Answered] = field(default_factory=dict)

    async def borrow(self, cfg: IPAMConfig, rng: Range, key: str, ip: int, text: str,
                     parent: IPAMBlock, identity: str = "", ifname: str = "") -> None:
        """Borrow ``ip`` of ``parent``, another node's block (see the module's docstring),
        for sticky ``identity`` on ``ifname`` when given (its reserved address there).
        Code 7 when refused or already borrowed, 11 when the owner does not answer in
        time."""
        api = self.cluster.api
        wait = self.cluster.settings.ready_wait
        scope = scope_of(cfg, key)
        single = Block(rng.version, ip, BITS[rng.version])
        owner = parent.spec.node
        obj = await self.claims.claim(key, scope, single, cfg, rng, parent=parent,
                                      identity=identity, ifname=ifname)
        if obj is None:
            other = await block_objects.get(api, block_name(scope, single))
            who = f"node {other.spec.node}" if other is not None else "another node"
            raise CNIError(INVALID_CONFIG, f"requested address {text} in pool {key} is "
                           f"already claimed by {who}")
        # the record stays pending while the answer is awaited, so that a maintenance
        # round meanwhile does not take the ask for one left by a crash (Claims.settle)
        rec = self.claims.pending[obj.metadata.name]
        try:
            answer = ""
            with trio.move_on_after(wait):
                while True:
                    found = await block_objects.get_borrow(api, obj.metadata.name)
                    answer = found.spec.grant if found is not None else "refused"
                    if answer:
                        break
                    await trio.sleep(0.05)
            if answer == "granted" and found is not None:
                await self.claims.hold(rec, found)
                self.borrows += 1
                log.info("borrowed %s of pool %s from node %s", text, key, owner)
                return
            done = await block_objects.release(api, found) if found is not None else True
            if done:  # else still claiming: settled by a maintenance round
                await self.claims.life.move(rec, "refused")
        finally:
            self.claims.pending.pop(obj.metadata.name, None)
        if answer == "refused":
            raise CNIError(INVALID_CONFIG, f"requested address {text} in pool {key} is in "
                           f"use: node {owner}, whose block {parent.spec.cidr} holds it, "
                           "refused it")
        raise CNIError(TRY_AGAIN_LATER, f"requested address {text} in pool {key} lies in "
                       f"block {parent.spec.cidr} of node {owner}, which did not answer "
                       f"within {wait:g} s; try again later")

    async def place(self, cfg: IPAMConfig, ranges: list[Range], wanted: list[str],
                    identity: str = "", ifname: str = "") -> None:
        """Each requested address inside a block of this node: the block claimed when nobody
        holds it; borrowed (or refused, code 7) when another node does — for sticky
        ``identity`` on ``ifname`` when given, so that its node grants it a reserved
        address."""
        held, node = self.holdings.held, self.cluster.settings.node
        for text in wanted:
            for rng in ranges:
                try:
                    ip = requested(rng, text)
                except CNIError:
                    continue  # another range's, or invalid: the planner says which
                key = pool_key(cfg, rng)
                scope = scope_of(cfg, key)
                blk = block_at(rng, block_prefix(rng, cfg.block_size), ip)
                if any(h.block == blk for h in held.values() if h.record.pool == key):
                    break
                name = block_name(scope, blk)
                other = await block_objects.get(self.cluster.api, name)
                if other is None and \
                        await self.claims.claim(key, scope, blk, cfg, rng) is not None:
                    break
                other = other or await block_objects.get(self.cluster.api, name)
                if other is not None and other.spec.node != node:
                    single = Block(rng.version, ip, BITS[rng.version])
                    if block_name(scope, single) not in held:
                        await self.borrow(cfg, rng, key, ip, text, other, identity, ifname)
                    break
                raise CNIError(TRY_AGAIN_LATER, f"requested address {text} in pool {key}: "
                               f"block {blk.cidr} was claimed meanwhile; try again")

    async def answer_borrows(self) -> None:
        """Answer the borrow objects naming this node's blocks as the blocks' watch
        brings them."""
        async for obj in self.asked:
            await self.answer(obj)

    async def answer_cached(self) -> None:
        """Answer the asks the watch brought before this node held their block (from the
        caches of this node's blocks and of the borrow objects asking it)."""
        seen = [*self.cluster.blocks.cache.values(), *self.cluster.asking.cache.values()]
        for obj in [b for b in seen if asks(b, self.holdings)]:
            await self.answer(obj)

    async def answer(self, obj: Borrow) -> None:
        """Grant the address when it is free here, or reserved here for the sticky identity
        the borrow names (the reservation then ends: taken back by that node); else
        refuse it."""
        if obj.spec.transfer is not None:
            await self.answer_transfer(obj)
            return
        name, asked = obj.metadata.name, obj.metadata.resourceVersion
        before = self.answered.get(name)
        if before is not None and before.asked == asked:
            return  # answered already: the cache has not brought the answer yet
        h = self.holdings.held.get(obj.spec.parent)
        found = parse_address(obj.spec.cidr)
        index = self.holdings.index
        grant = "refused"
        res: Reservation | None = None
        if h is not None and found is not None and h.block.version == found[0] \
                and h.block.contains(found[1]):
            scope, version, ip = h.record.scope, found[0], found[1]
            if ip not in self.holdings.used(scope, version):
                grant = "granted"
            elif (res := index.reserved(scope, version, ip)) is not None \
                    and obj.spec.identity and index.holder(scope, version, ip) is None \
                    and (res.identity, res.ifname) == (obj.spec.identity, obj.spec.ifname):
                grant = "granted"
                index.ended([res], "taken_back")  # before any await
            else:
                res = None
            if grant == "granted":
                self.holdings.lent.setdefault(version, set()).add(ip)  # before any await
        # before any await: a maintenance round meanwhile counts it lent (lent_now), and
        # does not answer it again
        self.answered[name] = Answered(asked, found if grant == "granted" else None)
        try:
            done = await block_objects.answer(self.cluster.api, obj, grant)
        except ApiError:
            done = None
        if done is None:
            self.answered.pop(name, None)  # not written: asked again from the cache
        if done is None and grant == "granted" and found is not None:
            # not written: not lent (the lent set may have been counted again meanwhile)
            self.holdings.lent.get(found[0], set()).discard(found[1])
            if res is not None:
                index.restore_reservation(res, "taken_back")
        elif done is not None:
            log.info("%s address %s of block %s to node %s", grant, obj.spec.cidr,
                     h.record.cidr if h else obj.spec.parent, obj.spec.node)
            if res is not None:
                await self.cluster.journal.ipam.end_reservations(
                    [res], "taken_back", f"taken back by node {obj.spec.node}")

    async def answer_transfer(self, obj: Borrow) -> None:
        """Another node asks for this node's borrow object ``obj``: handed over when its
        address is reserved here for the identity the ask names (the reservation ends:
        taken back by that node, and the object is no longer this node's); else
        refused."""
        ask = obj.spec.transfer
        h = self.holdings.held.get(obj.metadata.name)
        found = parse_address(obj.spec.cidr)
        if ask is None or h is None or found is None:
            return
        index = self.holdings.index
        scope, (version, ip) = h.record.scope, found
        res = index.reserved(scope, version, ip)
        granted = res is not None and index.holder(scope, version, ip) is None \
            and (res.identity, res.ifname) == (ask.identity, ask.ifname)
        with self.claims.aside(h.record.id):
            if granted and res is not None:
                index.ended([res], "taken_back")  # before any await
                self.claims.life.withdraw(obj.metadata.name)  # nothing lands in it now
            try:
                done = await block_objects.answer_transfer(self.cluster.api, obj, granted)
            except ApiError:
                done = None
            if done is None:
                if granted and res is not None:
                    index.restore_reservation(res, "taken_back")
                    self.claims.life.restore(h)
                return
            log.info("%s borrowed address %s to node %s for %s",
                     "handed over" if granted else "refused", obj.spec.cidr, ask.node,
                     ask.identity)
            if granted and res is not None:
                journal = self.cluster.journal
                await journal.ipam.end_reservations([res], "taken_back",
                                               f"taken back by node {ask.node}")
                await self.claims.life.move(h.record, "released")
                self.cluster.blocks.cache[("", done.metadata.name)] = done

    async def take(self, cfg: IPAMConfig, rng: Range, key: str, obj: Borrow,
                   identity: str, ifname: str) -> None:
        """Ask another node for its borrow object ``obj``, whose address is reserved there
        for ``identity`` (see :meth:`answer_transfer`); held here once handed over. Code 7
        when refused, 11 when that node does not answer in time."""
        node = self.cluster.settings.node
        wait = self.cluster.settings.ready_wait
        holder = obj.spec.node
        rec = await self.claims.life.open(BlockRecord(
            name=obj.metadata.name, pool=key, scope=scope_of(cfg, key), cidr=obj.spec.cidr,
            node=node, state=CLAIMING))
        with self.claims.aside(rec.id):  # settled here, not by a maintenance round
            asked, found = await self._ask(obj, TransferAsk(node=node, identity=identity,
                                                            ifname=ifname))
            if found is not None and found.spec.node == node:
                await self.claims.hold(rec, found)
                address = parse_address(found.spec.cidr)
                if address is not None:  # lent from a block of this node: its own again
                    self.answered.pop(found.metadata.name, None)
                    self.holdings.lent.get(address[0], set()).discard(address[1])
                self.borrows += 1
                log.info("took over borrowed address %s of pool %s from node %s for %s",
                         obj.spec.cidr, key, holder, identity)
                return
            await self.claims.life.move(rec, "refused")
            if asked is None or found is None or found.spec.transfer is None \
                    or found.spec.transfer.refused:
                raise CNIError(INVALID_CONFIG, f"address {obj.spec.cidr} of pool {key}, reserved "
                               f"for {identity} on node {holder}, was not handed over")
            raise CNIError(TRY_AGAIN_LATER, f"address {obj.spec.cidr} of pool {key} is reserved "
                           f"for {identity} on node {holder}, which did not answer within "
                           f"{wait:g} s; try again later")

    async def _ask(self, obj: Borrow, ask: TransferAsk
                   ) -> tuple[Borrow | None, Borrow | None]:
        """Ask for borrow object ``obj`` (under the resourceVersion read; read again when
        it changed) and wait for the answer; withdraw the ask when none came in time. The
        object as asked (None: not asked) and as last read."""
        api, holder = self.cluster.api, obj.spec.node
        current: Borrow | None = obj
        asked = None
        for _ in range(3):
            if current is None or current.spec.node != holder:
                break
            asked = await block_objects.ask_transfer(api, current, ask)
            if asked is not None:
                break
            current = await block_objects.get_borrow(api, obj.metadata.name)
        if asked is None:
            return None, current

        def pending(b: Borrow | None) -> bool:
            return b is not None and b.spec.node != ask.node and b.spec.transfer is not None \
                and not b.spec.transfer.refused

        found: Borrow | None = asked
        with trio.move_on_after(self.cluster.settings.ready_wait):
            while True:  # polled, as a borrow's answer is
                found = await block_objects.get_borrow(api, obj.metadata.name)
                if not pending(found):
                    break
                await trio.sleep(0.05)
        if pending(found) and found is not None \
                and await block_objects.withdraw_transfer(api, found) is None:
            found = await block_objects.get_borrow(api, obj.metadata.name)  # answered meanwhile
        return asked, found

    def lent_now(self) -> dict[int, set[int]]:
        """The addresses of this node's blocks granted to other nodes: from the cache, and
        from the answers this node wrote that the cache does not show yet (those it does
        show, or no longer holds, are forgotten here: the cache says)."""
        lent: dict[int, set[int]] = {}
        for b in self.cluster.asking.cache.values():
            if isinstance(b, Borrow) and b.spec.parent in self.holdings.held \
                    and b.spec.grant == "granted" \
                    and b.spec.node != self.cluster.settings.node:  # not taken over with it
                found = parse_address(b.spec.cidr)
                if found is not None:
                    lent.setdefault(found[0], set()).add(found[1])
        for name, answer in list(self.answered.items()):
            if self._cached_version(name) != answer.asked:
                del self.answered[name]  # the cache has the answer, a later change, or none
            elif answer.granted is not None:
                lent.setdefault(answer.granted[0], set()).add(answer.granted[1])
        return lent

    def _cached_version(self, name: str) -> str | None:
        """The resourceVersion of borrow object ``name`` in this node's caches (None: in
        neither)."""
        for cache in (self.cluster.asking.cache, self.cluster.blocks.cache):
            obj = cache.get(("", name))
            if obj is not None:
                return obj.metadata.resourceVersion
        return None
