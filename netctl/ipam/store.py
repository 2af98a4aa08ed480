"""Where allocations live, behind a small interface, and the allocator over it.

A :class:`Store` only stores; the rules are :func:`netctl.ipam.planner.plan`'s. Its
implementations are the node's :class:`IndexStore` (``ipam-backend: sqlite``) and the
cluster store (:mod:`netctl.ipam.cluster`, ``ipam-backend: kubernetes``).

- ``allocate`` plans and counts the new allocations as used before any await, so a
  concurrent request is never handed the same address.
- The journal writes them with the step that uses them and, once committed, tells the
  store (``recorded``, ``released``, ``ended``: the store is the journal's follower); the
  caller says ``unreserve`` when it did not commit (:func:`record`). No caller keeps the
  two in step.
- Every read goes through ``index``, an :class:`IndexStore`: the live allocations in
  memory, indexed by scope and address, by owner and by attachment, so every question the
  planner asks is a dict lookup whatever the pool's fill. Alone, without a journal, it is
  the in-memory fake the contract tests run.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeVar

from netctl.ipam.planner import Decision, SetUnion, plan
from netctl.ipam.ranges import IPAMConfig, Range
from netctl.journal.allocations import Ended, Follower
from netctl.journal.records import Allocation, Owner, Reservation

T = TypeVar("T")
# what a store loads at start: the journal's live allocations, pools' cursors and open
# sticky reservations (Journal.live_allocations)
Loaded = tuple[list[Allocation], dict[str, int], list[Reservation]]


class Store(Follower, Protocol):
    """An IPAM store as the engine, the reconciler and the daemon use it; the journal
    tells it what committed (:class:`~netctl.journal.allocations.Follower`)."""

    @property
    def index(self) -> IndexStore:
        """The read view: the live allocations and sticky reservations, the pools."""
        ...

    async def allocate(self, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                       wanted: list[str], now: float) -> Decision:
        """Plan and reserve: the addresses of ``owner``'s leases, ``new`` counted as used
        until the journal records them or :meth:`unreserve` gives them back."""
        ...

    def unreserve(self, new: list[Allocation]) -> None:
        """The transaction that was to record ``new`` did not commit."""
        ...

    def pool_fill(self) -> dict[str, tuple[int | None, int]]:
        """Every known pool's size and how many of its addresses this node can no longer
        hand out (``pool-degraded-at``, netctl/engine/degraded.py)."""
        ...


@dataclass
class IndexStore:
    """Live allocations in memory (see the module's docstring)."""

    _by_scope: dict[tuple[str, int], dict[int, Allocation]] = field(default_factory=dict)
    _by_owner: dict[tuple[str, str], list[Allocation]] = field(default_factory=dict)
    _by_attachment: dict[int, list[Allocation]] = field(default_factory=dict)
    _cursors: dict[str, int] = field(default_factory=dict)
    _sizes: dict[str, int] = field(default_factory=dict)  # pool → addresses (as planned)
    _used: dict[str, int] = field(default_factory=dict)  # pool → live allocations
    # sticky: reservations by address and by (pool, identity, ifname), live sticky
    # allocations by the latter, reservations taken back and not recorded yet
    _reserved: dict[tuple[str, int], dict[int, Reservation]] = field(default_factory=dict)
    _reservations: dict[tuple[str, str, str], Reservation] = field(default_factory=dict)
    _sticky: dict[tuple[str, str, str], Allocation] = field(default_factory=dict)
    _taken_back: dict[tuple[str, int, int], Reservation] = field(default_factory=dict)
    clock: Callable[[], float] = time.time  # a reservation's end, by the wall clock
    _sticky_ended: dict[str, int] = field(default_factory=lambda: {"taken_back": 0,
                                                                    "expired": 0})

    @classmethod
    def of(cls, live: Iterable[Allocation], cursors: dict[str, int] | None = None,
           reservations: Iterable[Reservation] = ()) -> Self:
        store = cls(_cursors=dict(cursors or {}))
        for alloc in live:
            store._add(alloc)
        for res in reservations:
            store._reserve(res)
        return store

    # -- View --------------------------------------------------------------------

    def held(self, pool: str, container_id: str, ifname: str) -> Allocation | None:
        for alloc in self._by_owner.get((container_id, ifname), ()):
            if alloc.pool == pool:
                return alloc
        return None

    def used(self, scope: str, version: int) -> AbstractSet[int]:
        live = self._by_scope.get((scope, version), {}).keys()
        reserved = self._reserved.get((scope, version))
        return SetUnion(live, reserved.keys()) if reserved else live

    def holder(self, scope: str, version: int, ip: int) -> Allocation | None:
        return self._by_scope.get((scope, version), {}).get(ip)

    def cursor(self, pool: str) -> int | None:
        return self._cursors.get(pool)

    def reserved(self, scope: str, version: int, ip: int) -> Reservation | None:
        return self._reserved.get((scope, version), {}).get(ip)

    def reservation(self, pool: str, identity: str, ifname: str) -> Reservation | None:
        return self._reservations.get((pool, identity, ifname))

    def sticky_holder(self, pool: str, identity: str, ifname: str) -> Allocation | None:
        return self._sticky.get((pool, identity, ifname))

    # -- sticky reservations ----------------------------------------------------------------

    def reservations(self) -> list[Reservation]:
        return list(self._reservations.values())

    def expired(self, now: float) -> list[Reservation]:
        return [r for r in self._reservations.values() if r.until <= now]

    @property
    def index(self) -> IndexStore:
        return self

    def ended(self, ended: Iterable[Reservation], how: Ended = "expired") -> None:
        """``ended`` is no longer reserved (``how``: its time ran out, or another node
        took it back)."""
        for res in ended:
            if self._reservations.get(res.key) is res:
                self._sticky_ended[how] += 1
            self._unreserve_sticky(res)

    def restore_reservation(self, res: Reservation, how: Ended) -> None:
        """``res``, ended ``how`` in memory only, reserved again (its end was not
        written)."""
        self._sticky_ended[how] -= 1
        self._reserve(res)

    def _reserved_by_pool(self) -> Counter[str]:
        return Counter(res.pool for res in self._reservations.values())

    def sticky_status(self) -> dict[str, Any]:
        return {"reserved": dict(self._reserved_by_pool()), "ended": dict(self._sticky_ended),
                "reservations": [
                    {"pool": r.pool, "address": r.address, "identity": r.identity,
                     "ifname": r.ifname, "until": r.until, "container": r.container_id}
                    for r in sorted(self._reservations.values(),
                                    key=lambda r: (r.pool, r.version, r.ip))]}

    def _reserve(self, res: Reservation) -> None:
        old = self._reservations.get(res.key)
        if old is not None:  # the identity held another address since: this one wins
            self._unreserve_sticky(old)
        self._reservations[res.key] = res
        self._reserved.setdefault((res.scope, res.version), {})[res.ip] = res

    def _unreserve_sticky(self, res: Reservation) -> None:
        if self._reservations.get(res.key) is res:
            del self._reservations[res.key]
        by_ip = self._reserved.get((res.scope, res.version), {})
        if by_ip.get(res.ip) is res:
            del by_ip[res.ip]

    # -- for the metrics -------------------------------------------------------------------

    def know_pools(self, sizes: dict[str, int]) -> None:
        """The sizes of pools planned before (the journal's ``ipam_pools``)."""
        self._sizes.update(sizes)

    def pool_usage(self) -> dict[str, tuple[int | None, int]]:
        """Every known pool's size (None: not planned since the start) and live count."""
        return {pool: (self._sizes.get(pool), self._used.get(pool, 0))
                for pool in self._sizes.keys() | self._used.keys()}

    def pool_fill(self) -> dict[str, tuple[int | None, int]]:
        """Every known pool's size and how many of its addresses this node can no longer
        hand out (``pool-degraded-at``, netctl/engine/degraded.py): here its live ones and
        its sticky reservations."""
        reserved = self._reserved_by_pool()
        return {pool: (size, used + reserved[pool])
                for pool, (size, used) in self.pool_usage().items()}

    # -- Store -------------------------------------------------------------------

    def unreserve(self, new: list[Allocation]) -> None:
        self._drop(new)
        for alloc in new:  # the reservations they took back are the identity's again
            res = self._taken_back.pop((alloc.scope, alloc.version, alloc.ip), None)
            if res is not None:
                self._reserve(res)

    def recorded(self, new: list[Allocation]) -> None:
        for alloc in new:
            if self._taken_back.pop((alloc.scope, alloc.version, alloc.ip), None):
                self._sticky_ended["taken_back"] += 1

    def released(self, gone: Iterable[Allocation]) -> None:
        gone = list(gone)
        self._drop(gone)
        now = self.clock()
        for alloc in gone:
            if alloc.sticky:
                self._reserve(Reservation(
                    alloc.pool, alloc.scope, alloc.version, alloc.ip, alloc.sticky,
                    alloc.owner.ifname, now + alloc.sticky_for, alloc.address,
                    alloc.owner.container_id))

    def _drop(self, gone: Iterable[Allocation]) -> None:
        for alloc in gone:
            if alloc.sticky:
                skey = (alloc.pool, alloc.sticky, alloc.owner.ifname)
                if self._sticky.get(skey) is alloc:
                    del self._sticky[skey]
            scope = self._by_scope.get((alloc.scope, alloc.version), {})
            if scope.get(alloc.ip) is alloc:
                del scope[alloc.ip]
                self._used[alloc.pool] = self._used.get(alloc.pool, 1) - 1
            _without(self._by_owner, (alloc.owner.container_id, alloc.owner.ifname), alloc)
            if alloc.owner.attachment_id is not None:
                _without(self._by_attachment, alloc.owner.attachment_id, alloc)

    def of_attachment(self, attachment_id: int) -> list[Allocation]:
        return list(self._by_attachment.get(attachment_id, ()))

    def of_owner(self, container_id: str, ifname: str,
                 pools: AbstractSet[str] | None = None) -> list[Allocation]:
        return [a for a in self._by_owner.get((container_id, ifname), ())
                if pools is None or a.pool in pools]

    def live(self) -> list[Allocation]:
        return [a for scope in self._by_scope.values() for a in scope.values()]

    def _add(self, alloc: Allocation) -> None:
        self._by_scope.setdefault((alloc.scope, alloc.version), {})[alloc.ip] = alloc
        self._used[alloc.pool] = self._used.get(alloc.pool, 0) + 1
        key = (alloc.owner.container_id, alloc.owner.ifname)
        self._by_owner.setdefault(key, []).append(alloc)
        if alloc.owner.attachment_id is not None:
            self._by_attachment.setdefault(alloc.owner.attachment_id, []).append(alloc)
        if alloc.sticky:
            self._sticky[(alloc.pool, alloc.sticky, alloc.owner.ifname)] = alloc

    async def allocate(self, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                       wanted: list[str], now: float) -> Decision:
        """Plan and reserve: the decision and the taking happen with no await between
        them, so concurrent requests of one daemon never get the same address."""
        decision = plan(cfg, ranges, owner, wanted, self, now)
        for key, info in decision.pools.items():
            self._sizes[key] = info.size
        self.take(decision.new)
        return decision

    def take(self, new: list[Allocation]) -> None:
        """Count ``new`` as used and move the cursors (synchronously, after planning)."""
        for alloc in new:
            self._add(alloc)
            if alloc.sticky:  # the identity takes its reservation back
                res = self.reserved(alloc.scope, alloc.version, alloc.ip)
                if res is not None:
                    self._unreserve_sticky(res)
                    self._taken_back[(alloc.scope, alloc.version, alloc.ip)] = res
                    continue  # the cursor stays: round-robin goes on where it was
            self._cursors[alloc.pool] = alloc.ip


_CHECK: Store = IndexStore()  # mypy: the index implements the interface
K = TypeVar("K")


def _without(index: dict[K, list[Allocation]], key: K, alloc: Allocation) -> None:
    """``alloc`` out of ``index[key]``, the key gone with its last one."""
    kept = [a for a in index.get(key, []) if a is not alloc]
    if kept:
        index[key] = kept
    else:
        index.pop(key, None)


async def record(store: Store, new: list[Allocation], write: Callable[[], Awaitable[T]]
                 ) -> T:
    """Record ``new`` (reserved by :func:`allocate`) with ``write``, the journal
    transaction that uses them: the journal tells the store once it committed
    (:attr:`~netctl.journal.store.Journal.follower`); ``unreserve`` when it did not."""
    try:
        return await write()
    except BaseException:
        store.unreserve(new)
        raise
