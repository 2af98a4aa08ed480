"""What the parts of the cluster store share: the API and the journal they write through
with the caches of blocks and nodes (:class:`Cluster`), and what this node holds
(:class:`Holdings`: its allocations, its blocks, and the addresses that count as used
besides). Built once by :func:`netctl.ipam.cluster.cluster_store`.

A block has one shape per layer: the API object (:class:`~netctl.kubeapi.objects.Block`,
imported here as ``IPAMBlock``; a :class:`~netctl.kubeapi.objects.Borrow` when it is a
borrowed address), the journal's record
(:class:`~netctl.journal.records.BlockRecord`), and the numbers the arithmetic works on
(:class:`netctl.ipam.cluster.blocks.Block`); :class:`Held` ties the three of a block this
node holds together.
"""

from __future__ import annotations

import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import trio

from netctl.ipam.cluster.blocks import Block
from netctl.ipam.planner import SetUnion
from netctl.ipam.store import IndexStore
from netctl.journal.records import BlockRecord
from netctl.journal.store import Journal
from netctl.kubeapi import blocks as block_objects
from netctl.kubeapi.api import Api
from netctl.kubeapi.informer import Informer
from netctl.kubeapi.objects import Block as IPAMBlock


@dataclass(frozen=True)
class ClusterSettings:
    node: str
    block_idle: float = 600.0  # a block empty this long is released (keeping one per pool)
    node_gone_grace: float = 300.0  # a deleted node's blocks are taken over after this
    ready_wait: float = 10.0  # an allocation waits this long for the store's start
    # other nodes' blocks of the scopes this node holds blocks in are read at most this
    # often (one LIST each, by label): the pools' fill (pool-degraded-at); the daemon's is
    # 30 maintenance rounds, 5 minutes by default
    fill_read: float = 300.0


@dataclass
class Held:
    """A block this node holds: its journal record, its numbers, its API object."""

    record: BlockRecord
    block: Block
    obj: IPAMBlock
    empty_since: float | None = None
    taken_over: bool = False  # handed over from a gone node: released as soon as it is empty


@dataclass
class Cluster:
    """The API server and the journal; the caches of this node's blocks (its own borrow
    objects among them) and of the borrow objects that ask it for addresses of its blocks,
    each watched by label; other nodes' blocks read when needed (:meth:`scope_blocks`)."""

    api: Api
    journal: Journal
    settings: ClusterSettings
    blocks: Informer[IPAMBlock]  # label ipam.netctl.dev/node=<this node>
    asking: Informer[IPAMBlock]  # label ipam.netctl.dev/lender=<this node>
    # a scope's blocks as last read: (when, by name), per scope digest
    _read: dict[str, tuple[float, dict[str, IPAMBlock]]] = field(default_factory=dict)
    reads: int = 0  # scope lists made
    _reading: dict[str, trio.Lock] = field(default_factory=dict)

    def cached(self, name: str) -> IPAMBlock | None:
        """This node's block ``name``, from its cache."""
        return self.blocks.cache.get(("", name))

    async def scope_blocks(self, scope: str, fresh_for: float = 0.0) -> list[IPAMBlock]:
        """Every block of uniqueness scope ``scope``, any node's: one LIST by label from
        the API server's cache (a read no older than ``fresh_for`` seconds is used again).
        What a node needs of other nodes' blocks only when it claims one, or looks for a
        sticky address published elsewhere: read then, not watched."""
        key = block_objects.scope_digest(scope)
        asked = time.monotonic()
        async with self._reading.setdefault(key, trio.Lock()):  # one read for all waiting
            read = self._read.get(key)
            if read is None or asked - read[0] > fresh_for:
                now = time.monotonic()
                found = await block_objects.listed(
                    self.api, f"{block_objects.SCOPE_LABEL}={key}")
                self.reads += 1
                read = self._read[key] = (now, {b.metadata.name: b for b in found
                                                 if b.spec.scope == scope})
        return list(read[1].values())

    def known(self) -> list[IPAMBlock]:
        """Other nodes' blocks as last read (no I/O: the metrics' pool fill)."""
        me = self.settings.node
        seen: dict[str, IPAMBlock] = {}
        for _, by_name in self._read.values():
            seen.update({n: b for n, b in by_name.items() if b.spec.node != me})
        return list(seen.values())


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
