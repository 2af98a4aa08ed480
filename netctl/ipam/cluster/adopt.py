"""Adoption: the blocks the API says are this node's that its journal does not hold (a
wiped state dir) are held again, and the addresses the node's pods hold in them, read
from their network-status (one LIST of the node's pods), are recorded as held (``ADOPT``
operations, owner ``pod:<uid>``) until those pods are gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from netctl.cni.request import Pod as PodRef
from netctl.ipam.cluster.blocks import Block, parse_address
from netctl.ipam.cluster.claims import Claims
from netctl.ipam.cluster.lifecycle import CLAIMING, block_of
from netctl.ipam.cluster.state import Cluster, Holdings
from netctl.journal.records import Allocation, BlockRecord, OpStart, Owner, PoolInfo
from netctl.kubeapi.netstatus import addresses
from netctl.kubeapi.objects import Block as IPAMBlock
from netctl.kubeapi.objects import Pod
from netctl.kubeapi.pods import pods_on

log = logging.getLogger("netctl.ipam")

ADOPTED = "pod:"  # the owner container id of an adopted address: pod:<uid>


@dataclass
class Adoption:
    cluster: Cluster
    holdings: Holdings
    claims: Claims
    live_pods: Callable[[], AbstractSet[str] | None]  # this node's pod UIDs (None: not known)

    async def adopt(self, objs: list[IPAMBlock]) -> None:
        """Blocks the API says are this node's and the journal does not hold (its state dir
        was wiped): the addresses this node's pods hold in them (from their network-status)
        recorded as theirs first, then the blocks held again."""
        journal, node, index = self.cluster.journal, self.cluster.settings.node, \
            self.holdings.index
        pods = await pods_on(self.cluster.api, node)
        found = [(obj, blk) for obj in objs if (blk := block_of(obj)) is not None]
        new = adoptions(pods, found, lambda scope, version, ip:
                        index.holder(scope, version, ip) is not None)
        for alloc, info in new:
            await journal.one_transaction(OpStart(
                verb="ADOPT", container_id=alloc.owner.container_id,
                ifname=alloc.owner.ifname, pod=alloc.owner.pod, origin="ipam"),
                new=[alloc], pools={alloc.pool: info})
            index.take([alloc])
        for obj, _ in found:
            rec = await self.claims.life.open(BlockRecord(
                name=obj.metadata.name, pool=obj.spec.pool, scope=obj.spec.scope,
                cidr=obj.spec.cidr, node=node, state=CLAIMING))
            await self.claims.hold(rec, obj)
            log.warning("block %s (pool %s) is this node's in the API but not in its journal: "
                        "adopted", obj.spec.cidr, obj.spec.pool)
        if new:
            log.warning("adopted %d addresses held by this node's pods in those blocks",
                        len(new))

    async def release_gone(self) -> int:
        """Release the adopted addresses of pods that are gone; how many."""
        live = self.live_pods()
        if live is None:
            return 0
        index = self.holdings.index
        gone = [a for a in index.live() if a.owner.container_id.startswith(ADOPTED)
                and a.owner.container_id[len(ADOPTED):] not in live]
        if not gone:
            return 0
        await self.cluster.journal.one_transaction(
            OpStart(verb="DEL", origin="pod-deleted", container_id=gone[0].owner.container_id),
            gone=gone)  # (the journal tells the store: Journal.follower)
        return len(gone)


def pod_addresses(pod: Pod) -> list[tuple[str, int, int]]:
    """(interface, family, address) of every address the pod's network-status names."""
    found = addresses(pod)
    if found is None:
        log.warning("pod %s/%s: a malformed network-status ignored", pod.metadata.namespace,
                    pod.metadata.name)
        return []
    return [(ifname, *ip) for ifname, text in found if (ip := parse_address(text)) is not None]


def adoptions(pods: Sequence[Pod], found: list[tuple[IPAMBlock, Block]],
              held: Callable[[str, int, int], bool]) -> list[tuple[Allocation, PoolInfo]]:
    """The allocations adopting the addresses ``pods``' network-status names in the blocks
    ``found``: one per (scope, address) not ``held`` already. An address in two blocks of
    a scope (a borrowed /32 inside a block taken over) is adopted in the narrowest; one
    that two pods name, by the first (warned)."""
    new: dict[tuple[str, int, int], tuple[Allocation, PoolInfo]] = {}
    narrowest = sorted(found, key=lambda f: (-f[1].prefix, f[0].metadata.name))
    for pod in pods:
        for ifname, version, ip in pod_addresses(pod):
            seen: set[tuple[str, int, int]] = set()  # this address's scopes
            for obj, blk in narrowest:
                key = (obj.spec.scope, version, ip)
                if blk.version != version or not blk.contains(ip) or key in seen \
                        or held(*key):
                    continue
                seen.add(key)
                if key not in new:
                    new[key] = adopted(obj, blk, ip, pod, ifname)
                elif (first := new[key][0].owner.pod) is not None \
                        and first.uid != pod.metadata.uid:
                    log.warning("pods %s/%s and %s/%s both name %s in their network-status:"
                                " adopted for the first", first.namespace, first.name,
                                pod.metadata.namespace, pod.metadata.name,
                                new[key][0].address)
    return list(new.values())


def adopted(obj: IPAMBlock, blk: Block, ip: int, pod: Pod, ifname: str
            ) -> tuple[Allocation, PoolInfo]:
    """An address of a pod in an adopted block, as an allocation owned by the pod."""
    meta, spec = pod.metadata, obj.spec
    owner = Owner(f"{ADOPTED}{meta.uid}", ifname or "eth0", "",
                  PodRef(namespace=meta.namespace, name=meta.name, uid=meta.uid), None)
    prefix = spec.prefix or blk.prefix
    alloc = Allocation(spec.pool, spec.scope, ip, blk.version, prefix, owner, time.time())
    return alloc, PoolInfo(spec.networkName, spec.range or spec.pool, blk.version,
                           spec.poolSize)
