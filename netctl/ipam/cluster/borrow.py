"""Borrowing and lending single addresses: a requested address (``ips``, ``IP=``) in
another node's block is asked for with a borrow object — a single-address block naming
that block as its parent — which the owner grants (the address is free there, and it
never hands it out while the object exists) or refuses (:meth:`Borrows.borrow`); this
node answers the borrow objects naming its own blocks (:meth:`Borrows.answer`), and
counts the addresses it granted as used (``lent``).

Sticky addresses (:mod:`netctl.ipam.sticky`) move between nodes the same way: a node
publishes the reservations of its blocks' addresses on the block objects
(``spec.reserved``, :meth:`netctl.ipam.cluster.store.ClusterStore.publish_reservations`);
a node where the identity comes back borrows the address naming the identity
(``spec.identity``, ``spec.ifname``), and the owner grants a reserved address to that
identity only, its reservation ending there (journaled: taken back by that node).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from netctl.errors import INVALID_CONFIG, TRY_AGAIN_LATER, CNIError
from netctl.ipam.cluster.blocks import BITS, Block, block_name, parse_address
from netctl.ipam.cluster.claims import Claims
from netctl.ipam.cluster.state import Cluster, Holdings
from netctl.ipam.planner import scope_of
from netctl.ipam.ranges import IPAMConfig, Range
from netctl.ipam.sticky import Reservation
from netctl.kube import blocks as block_objects
from netctl.kube.api import ApiError
from netctl.kube.objects import Block as IPAMBlock

log = logging.getLogger("netctl.ipam")


def asks(holdings: Holdings, obj: IPAMBlock) -> bool:
    """Whether ``obj`` asks this node for an address of one of its blocks."""
    return bool(obj.spec.parent) and not obj.spec.grant and obj.spec.parent in holdings.held


@dataclass
class Borrows:
    cluster: Cluster
    holdings: Holdings
    claims: Claims
    asked: trio.MemoryReceiveChannel[IPAMBlock]  # what the blocks' watch finds :func:`asks`
    borrows: int = 0  # requested addresses granted by another node

    async def borrow(self, cfg: IPAMConfig, rng: Range, key: str, ip: int, text: str,
                     parent: IPAMBlock, identity: str = "", ifname: str = "") -> None:
        """Borrow ``ip`` of ``parent``, another node's block (see the module's docstring),
        for sticky ``identity`` on ``ifname`` when given (its reserved address there).
        Code 7 when refused or already borrowed, 11 when the owner does not answer in
        time."""
        api, journal = self.cluster.api, self.cluster.journal
        wait = self.cluster.settings.ready_wait
        scope = scope_of(cfg, key)
        single = Block(rng.version, ip, BITS[rng.version])
        owner = parent.spec.node
        obj = await self.claims.claim(key, scope, single, cfg, rng, parent=parent.metadata.name,
                                      identity=identity, ifname=ifname)
        if obj is None:
            other = self.cluster.cached(block_name(scope, single))
            who = f"node {other.spec.node}" if other is not None else "another node"
            raise CNIError(INVALID_CONFIG, f"requested address {text} in pool {key} is "
                           f"already claimed by {who}")
        rec = self.claims.pending.pop(obj.metadata.name)
        answer = ""
        with trio.move_on_after(wait):
            while True:
                found = await block_objects.get(api, obj.metadata.name)
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
        await journal.set_block(rec.id, "taken" if done else "claiming", ended=done)
        if answer == "refused":
            raise CNIError(INVALID_CONFIG, f"requested address {text} in pool {key} is in "
                           f"use: node {owner}, whose block {parent.spec.cidr} holds it, "
                           "refused it")
        raise CNIError(TRY_AGAIN_LATER, f"requested address {text} in pool {key} lies in "
                       f"block {parent.spec.cidr} of node {owner}, which did not answer "
                       f"within {wait:g} s; try again later")

    async def answer_borrows(self) -> None:
        """Answer the borrow objects naming this node's blocks as the blocks' watch
        brings them."""
        async for obj in self.asked:
            await self.answer(obj)

    async def answer_cached(self) -> None:
        """Answer the asks the watch brought before this node held their block."""
        for obj in [b for b in self.cluster.blocks.cache.values() if asks(self.holdings, b)]:
            await self.answer(obj)

    async def answer(self, obj: IPAMBlock) -> None:
        """Grant the address when it is free here, or reserved here for the sticky identity
        the borrow names (the reservation then ends: taken back by that node); else
        refuse it."""
        h = self.holdings.held.get(obj.spec.parent)
        found = parse_address(obj.spec.cidr)
        lent = self.holdings.lent
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
                index.end_reservations([res], "taken_back")  # before any await
            else:
                res = None
            if grant == "granted":
                lent.setdefault(version, set()).add(ip)  # before any await
        try:
            done = await block_objects.answer(self.cluster.api, obj, grant)
        except ApiError:
            done = None
        if done is None and grant == "granted" and found is not None:
            lent[found[0]].discard(found[1])  # not written: not lent
            if res is not None:
                index.restore_reservation(res, "taken_back")
        elif done is not None:
            log.info("%s address %s of block %s to node %s", grant, obj.spec.cidr,
                     h.record.cidr if h else obj.spec.parent, obj.spec.node)
            if res is not None:
                await self.cluster.journal.end_reservations(
                    [res], "taken back", f"taken back by node {obj.spec.node}")
                self.holdings.sticky_changed.set()

    def lent_now(self) -> dict[int, set[int]]:
        """The addresses of this node's blocks granted to other nodes, from the cache."""
        lent: dict[int, set[int]] = {}
        for b in self.cluster.blocks.cache.values():
            if b.spec.parent in self.holdings.held and b.spec.grant == "granted" \
                    and b.spec.node != self.cluster.settings.node:  # not taken over with it
                found = parse_address(b.spec.cidr)
                if found is not None:
                    lent.setdefault(found[0], set()).add(found[1])
        return lent
