"""An in-memory IPAM backend: the fake the contract tests run beside the sqlite one.

Same decisions (the pure :mod:`netctl.ipam.ranges`), same rules (idempotent per
owner, requested addresses, exhaustion, uniqueness scope), storage in a list.
It ignores ``tx``. Type-checked against :class:`~netctl.ipam.backend.Backend`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from netctl.errors import INVALID_CONFIG, POOL_EXHAUSTED, CNIError
from netctl.ipam.backend import Backend, Lease, Owner, pool_key, scope_of
from netctl.ipam.ranges import IPAMConfig, Range, next_free, requested


@dataclass
class _Allocation:
    pool: str
    scope: str
    ip: int
    version: int
    address: str
    owner: Owner
    released_op: int | None = None
    released: bool = False


@dataclass
class MemoryBackend:
    cursors: dict[str, int] = field(default_factory=dict)
    allocations: list[_Allocation] = field(default_factory=list)

    def _live(self) -> list[_Allocation]:
        return [a for a in self.allocations if not a.released]

    async def allocate(self, tx: Any, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                       wanted: list[str]) -> list[Lease]:
        def family(text: str) -> int:
            return ipaddress.ip_interface(text).version

        unmatched = [w for w in wanted if not any(family(w) == r.version for r in ranges)]
        if unmatched:
            raise CNIError(INVALID_CONFIG, f"requested address {unmatched[0]} matches no range")
        planned: list[_Allocation] = []
        leases = []
        for rng in ranges:
            key = pool_key(cfg, rng)
            held = [a for a in self._live() if a.pool == key
                    and (a.owner.container_id, a.owner.ifname) == (owner.container_id,
                                                                   owner.ifname)]
            if held:
                leases.append(Lease(key, held[0].address, rng.gateway))
                continue
            scope = scope_of(cfg, key)
            used = {a.ip: a.owner.container_id for a in self._live() + planned
                    if a.scope == scope and a.version == rng.version}
            mine = [w for w in wanted if family(w) == rng.version]
            if mine:
                ip = requested(rng, mine[0])
                if ip in used:
                    raise CNIError(INVALID_CONFIG, f"requested address {mine[0]} in pool {key}"
                                   f" is already allocated to container {used[ip]}")
            else:
                found = next_free(rng, set(used), self.cursors.get(key), cfg.allocation_order)
                if found is None:
                    raise CNIError(POOL_EXHAUSTED, f"address pool {key} is exhausted: all "
                                   f"{rng.size} addresses are allocated")
                ip = found
            address = f"{rng.host(ip)}/{rng.cidr.prefixlen}"
            planned.append(_Allocation(key, scope, ip, rng.version, address, owner))
            leases.append(Lease(key, address, rng.gateway))
        for alloc in planned:  # all or nothing, like the transaction it stands in for
            self.allocations.append(alloc)
            self.cursors[alloc.pool] = alloc.ip
        return leases

    async def held_by(self, tx: Any, cfg: IPAMConfig, ranges: list[Range], *,
                      attachment_id: int | None = None, container_id: str | None = None,
                      ifname: str | None = None) -> list[Lease]:
        gateways = {pool_key(cfg, r): r.gateway for r in ranges}
        if attachment_id is not None:
            found = [a for a in self._live() if a.owner.attachment_id == attachment_id]
        else:
            found = [a for a in self._live() if a.pool in gateways
                     and (a.owner.container_id, a.owner.ifname) == (container_id, ifname)]
        return [Lease(a.pool, a.address, gateways.get(a.pool)) for a in found]

    async def release(self, tx: Any, *, op_id: int | None, attachment_id: int | None = None,
                      container_id: str | None = None, ifname: str | None = None,
                      pools: list[str] | None = None) -> int:
        if attachment_id is None and container_id is None and ifname is None and pools is None:
            raise ValueError("release needs an owner")
        count = 0
        for a in self._live():
            if ((attachment_id is None or a.owner.attachment_id == attachment_id)
                    and (container_id is None or a.owner.container_id == container_id)
                    and (ifname is None or a.owner.ifname == ifname)
                    and (pools is None or a.pool in pools)):
                a.released, a.released_op = True, op_id
                count += 1
        return count

    async def release_stale(self, tx: Any, pools: list[str], valid: set[tuple[str, str]],
                            op_id: int | None) -> int:
        count = 0
        for a in self._live():
            if a.pool in pools and a.owner.attachment_id is None and \
                    (a.owner.container_id, a.owner.ifname) not in valid:
                a.released, a.released_op = True, op_id
                count += 1
        return count


_CHECK: Backend = MemoryBackend()  # mypy: the fake implements the interface
