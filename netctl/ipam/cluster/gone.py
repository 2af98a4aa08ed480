"""The blocks of nodes that are gone, taken over by one daemon: the holder of a Lease.

Every daemon watching every Node would cost each of them every node's status updates (a
kubelet reports at least every 5 minutes, and on every change): O(N) events per node,
O(N²) for the cluster. Only one daemon needs to know which nodes are gone, so one does:
the holder of the Lease ``kube-system/netctl-ipam-gone-nodes``
(:class:`~netctl.kubeapi.leases.LeaseHold`). While it holds it, it watches the Nodes
and the blocks — their metadata only: a block's node is its label — and, in each
maintenance round, hands over to itself the blocks
of a node whose Node has been gone for ``node-gone-grace`` seconds and that has no pod
left in the API (an update carrying the resourceVersion read). The others read the Lease
once per lease duration (``node-gone-grace``/5, between 2 s and 60 s), and the first to
find it not renewed takes it. A new holder lists the Nodes and counts a node gone from
the moment it finds it missing: never earlier than the old holder would have.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from netctl.ipam.cluster.claims import Claims
from netctl.ipam.cluster.lifecycle import CLAIMING
from netctl.ipam.cluster.state import Cluster
from netctl.journal.records import BlockRecord
from netctl.kubeapi import blocks as block_objects
from netctl.kubeapi.blocks import LENDER_LABEL, NODE_LABEL
from netctl.kubeapi.informer import Informer
from netctl.kubeapi.leases import LeaseHold
from netctl.kubeapi.objects import Block as IPAMBlock
from netctl.kubeapi.objects import Borrow, Node
from netctl.kubeapi.pods import pods_on

log = logging.getLogger("netctl.ipam")

LEASE_NAMESPACE, LEASE_NAME = "kube-system", "netctl-ipam-gone-nodes"


def lease_duration(node_gone_grace: float) -> float:
    """How long the Lease stays its holder's unrenewed: a fifth of the grace, 2 s to 60 s."""
    return max(2.0, min(60.0, node_gone_grace / 5))


@dataclass
class GoneNodes:
    cluster: Cluster
    claims: Claims
    lease: LeaseHold
    nodes: Informer[Node]  # every Node's metadata; runs only while the Lease is held
    owners: Informer[IPAMBlock]  # every block's metadata (its node label); the same
    handovers: int = 0
    _gone_since: dict[str, float] = field(default_factory=dict)  # node → first seen gone

    async def run(self) -> None:
        """Hold the Lease, or watch for it to be free; the Node cache runs while it is
        held (for ever: cancel to stop)."""
        while True:
            if await self.lease.tick():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.nodes.run)
                    nursery.start_soon(self.owners.run)
                    while await self._still_held():
                        pass
                    nursery.cancel_scope.cancel()
                self.nodes.reset()
                self.owners.reset()
                self._gone_since.clear()
            await trio.sleep(self.lease.every)

    async def _still_held(self) -> bool:
        await trio.sleep(self.lease.every)
        return await self.lease.tick()

    async def take_over(self, now: float) -> int:
        """The blocks of nodes whose Node object is gone, after the grace, when no pod of
        theirs is left (only the Lease's holder: 0 for the others)."""
        nodes = self.nodes
        if not self.lease.held or not nodes.synced.is_set() or not self.owners.synced.is_set():
            return 0
        api, me = self.cluster.api, self.cluster.settings.node
        names = {name for _, name in nodes.cache}
        of_node: dict[str, list[str]] = {}
        for b in self.owners.cache.values():
            owner = b.metadata.labels.get(NODE_LABEL, "")
            if owner:
                of_node.setdefault(owner, []).append(b.metadata.name)
        owners = set(of_node) - {me}
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
            for name in of_node[node]:
                obj = await block_objects.get(api, name)  # the whole object, as it is now
                if obj is None or obj.spec.node != node:
                    continue
                rec = await self.claims.life.open(BlockRecord(
                    name=obj.metadata.name, pool=obj.spec.pool, scope=obj.spec.scope,
                    cidr=obj.spec.cidr, node=me, state=CLAIMING))
                new = await block_objects.hand_over(api, obj, me)
                if new is None:
                    await self.claims.life.move(rec, "refused")
                    continue
                await self.claims.hold(rec, new, taken_over=True)
                self.handovers += 1
                taken += 1
                log.info("took over block %s of pool %s from node %s (gone)", obj.spec.cidr,
                         obj.spec.pool, node)
            await self._lent_by(node)
        return taken

    async def _lent_by(self, node: str) -> None:
        """The borrow objects naming blocks ``node`` (gone) lent from, now this node's
        blocks, named this node's to answer (their lender label): what they were granted
        stays lent here, never handed out again."""
        api, me = self.cluster.api, self.cluster.settings.node
        for obj in await block_objects.listed(api, f"{LENDER_LABEL}={node}"):
            if isinstance(obj, Borrow) and obj.spec.parent in self.claims.holdings.held:
                new = await block_objects.label(api, obj, lender=me)
                if new is not None:
                    self.cluster.asking.cache[("", new.metadata.name)] = new

    def status(self) -> dict[str, object]:
        return {"held": self.lease.held, "name": f"{self.lease.namespace}/{self.lease.name}",
                "duration_s": self.lease.duration, "transitions": self.lease.transitions}
