"""What the parts of the cluster store share: the API and the journal they write through
with the caches of blocks and nodes (:class:`Cluster`), and what this node holds
(:class:`Holdings`: its allocations, its blocks, and the addresses that count as used
besides). Built once by :func:`netctl.ipam.cluster.cluster_store`.

A block has one shape per layer: the API object (:class:`~netctl.kube.client.objects.Block`,
imported here as ``IPAMBlock``), the journal's record
(:class:`~netctl.journal.records.BlockRecord`), and the numbers the arithmetic works on
(:class:`netctl.ipam.cluster.blocks.Block`); :class:`Held` ties the three of a block this
node holds together.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import trio

from netctl.ipam.cluster.blocks import Block
from netctl.ipam.planner import SetUnion
from netctl.ipam.store import IndexStore
from netctl.journal.records import BlockRecord
from netctl.journal.store import Journal
from netctl.kube.client.api import Api
from netctl.kube.client.informer import Informer
from netctl.kube.client.objects import Block as IPAMBlock
from netctl.kube.client.objects import Node


@dataclass(frozen=True)
class ClusterSettings:
    node: str
    block_idle: float = 600.0  # a block empty this long is released (keeping one per pool)
    node_gone_grace: float = 300.0  # a deleted node's blocks are taken over after this
    ready_wait: float = 10.0  # an allocation waits this long for the store's start


@dataclass
class Held:
    """A block this node holds: its journal record, its numbers, its API object."""

    record: BlockRecord
    block: Block
    obj: IPAMBlock
    empty_since: float | None = None


@dataclass
class Cluster:
    """The API server and the journal, and the caches of every block and node."""

    api: Api
    journal: Journal
    settings: ClusterSettings
    blocks: Informer[IPAMBlock]
    nodes: Informer[Node]

    def cached(self, name: str) -> IPAMBlock | None:
        return self.blocks.cache.get(("", name))

    def scope_blocks(self, scope: str) -> list[IPAMBlock]:
        return [b for b in self.blocks.cache.values() if b.spec.scope == scope]


@dataclass
class Holdings:
    """What this node holds: its live allocations (``index``), its blocks (``held``, by
    name), and, counted as used beside its allocations, whereabouts' addresses
    (``foreign``) and the addresses of its blocks granted to other nodes (``lent``), each
    by family."""

    index: IndexStore
    held: dict[str, Held] = field(default_factory=dict)
    foreign: dict[int, set[int]] = field(default_factory=dict)
    lent: dict[int, set[int]] = field(default_factory=dict)
    # set when the sticky reservations changed: the blocks' published ones are out of date
    sticky_changed: trio.Event = field(default_factory=trio.Event)

    def used(self, scope: str, version: int) -> AbstractSet[int]:
        used = self.index.used(scope, version)
        for extra in (self.foreign.get(version), self.lent.get(version)):
            if extra:
                used = SetUnion(used, extra)
        return used

    def of_pool(self, pool: str) -> list[Block]:
        return [h.block for h in self.held.values() if h.record.pool == pool]
