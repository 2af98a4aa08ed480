"""The allocation rules, once, for every store. Pure: no I/O, no event loop.

Given a pool's ranges, an owner, the addresses it asks for, and a
:class:`View` of what the store holds (who holds what, what is used in a
uniqueness scope, each pool's cursor), :func:`plan` decides, range by range:

- an owner that already holds an address in the pool keeps it (a repeated ADD
  gets the same address);
- a requested address must be of a range's family, in the range (the range
  maths of :func:`~netctl.ipam.ranges.requested`) and free in its scope, or
  the whole request is refused (code 7, naming the address and its holder);
- otherwise the next free address after the pool's cursor (or the lowest, by
  ``allocation_order``); none left is code 100, naming the pool and its size.

With ``sticky`` (:mod:`netctl.ipam.sticky`) and an owner with an identity, before the
cursor: an address reserved for the identity (and the interface name) is handed back;
one the identity's predecessor still holds live is code 11 (try again once it is
released: never two live holders); addresses reserved for other identities count as
used (a requested one is refused, code 7, naming the identity). A requested address
takes precedence over the identity's reservation, which then stays until it expires.

The view answers membership questions only, so a decision costs the same on an
empty pool and on a full one (for round-robin, the default: the cursor moves on).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Protocol

from netctl.errors import INVALID_CONFIG, POOL_EXHAUSTED, TRY_AGAIN_LATER, CNIError
from netctl.ipam.ranges import IPAMConfig, Range, next_free, requested, sticky_for
from netctl.journal.records import Allocation, Owner, PoolInfo, Reservation


class View(Protocol):
    """What a store knows, as the planner asks it."""

    def held(self, pool: str, container_id: str, ifname: str) -> Allocation | None: ...

    def used(self, scope: str, version: int) -> AbstractSet[int]: ...

    def holder(self, scope: str, version: int, ip: int) -> Allocation | None: ...

    def cursor(self, pool: str) -> int | None: ...

    def reserved(self, scope: str, version: int, ip: int) -> Reservation | None:
        """The sticky reservation of a released address (counted in :meth:`used`)."""
        ...

    def reservation(self, pool: str, identity: str, ifname: str) -> Reservation | None:
        """The address of ``pool`` reserved for ``identity`` on ``ifname``."""
        ...

    def sticky_holder(self, pool: str, identity: str, ifname: str) -> Allocation | None:
        """The live sticky allocation of ``pool`` that ``identity`` holds on ``ifname``."""
        ...


@dataclass(frozen=True, slots=True)
class Lease:
    pool: str
    address: str  # CIDR form, e.g. "10.1.0.5/24"
    gateway: str | None


@dataclass(frozen=True)
class Decision:
    """What :func:`plan` decided: a lease per range, and which of them are new."""

    leases: list[Lease]
    new: list[Allocation]
    pools: dict[str, PoolInfo]


def pool_key(cfg: IPAMConfig, rng: Range) -> str:
    return f"{cfg.network_name}/{rng.key}" if cfg.network_name else rng.key


def scope_of(cfg: IPAMConfig, key: str) -> str:
    """Overlapping ranges of one network_name share uniqueness (whereabouts' default)."""
    return f"network:{cfg.network_name}" if cfg.enable_overlapping_ranges else f"pool:{key}"


def address_family(text: str) -> int:
    """The IP version of an address text (a prefix length allowed); code 7 when invalid."""
    try:
        return ipaddress.ip_interface(text.strip()).version
    except ValueError:
        raise CNIError(INVALID_CONFIG, f"ipam: requested address {text!r} is not a valid IP "
                       "address") from None


def plan(cfg: IPAMConfig, ranges: list[Range], owner: Owner, wanted: list[str],
         view: View, now: float = 0.0) -> Decision:
    """One address per range for ``owner``; CNIError 7 or 100 when that cannot be."""
    unmatched = [w for w in wanted if not any(address_family(w) == r.version for r in ranges)]
    if unmatched:
        raise CNIError(INVALID_CONFIG, f"requested address {unmatched[0]} matches no range of "
                       f"{', '.join(pool_key(cfg, r) for r in ranges)}")
    for version in (4, 6):
        twice = [w for w in wanted if address_family(w) == version]
        if len(twice) > len([r for r in ranges if r.version == version]):
            raise CNIError(INVALID_CONFIG, f"requested addresses {', '.join(twice)}: more "
                           f"IPv{version} addresses than the pool has ranges (one address per "
                           "range)")
    seconds = sticky_for(cfg)
    ident = owner.identity if seconds is not None else ""
    leases: list[Lease] = []
    new: list[Allocation] = []
    pools: dict[str, PoolInfo] = {}
    for rng in ranges:
        key = pool_key(cfg, rng)
        pools[key] = PoolInfo(cfg.network_name, rng.key, rng.version, rng.size)
        mine = [w for w in wanted if address_family(w) == rng.version]
        held = view.held(key, owner.container_id, owner.ifname)
        if held is not None:
            if mine and requested(rng, mine[0]) != held.ip:
                raise CNIError(INVALID_CONFIG, f"requested address {mine[0]}: container "
                               f"{owner.container_id} {owner.ifname} already holds "
                               f"{held.address} in pool {key}")
            leases.append(Lease(key, held.cidr, rng.gateway))
            continue
        scope = scope_of(cfg, key)
        taken = {a.ip for a in new if a.scope == scope and a.version == rng.version}
        used = SetUnion(view.used(scope, rng.version), taken)
        if mine:
            ip = requested(rng, mine[0])
            if ip in used:
                _refuse_requested(view, scope, rng, ip, mine[0], key, ident, owner, taken,
                                  now)
        else:
            found = _sticky_address(view, key, rng, ident, owner, taken) if ident else None
            if found is None:
                found = next_free(rng, used, view.cursor(key), cfg.allocation_order)
            if found is None:
                raise CNIError(POOL_EXHAUSTED, f"address pool {key} is exhausted: all "
                               f"{rng.size} addresses are allocated")
            ip = found
        alloc = Allocation(key, scope, ip, rng.version, rng.cidr.prefixlen, owner, now,
                           ident, seconds or 0.0)
        new.append(alloc)
        leases.append(Lease(key, alloc.cidr, rng.gateway))
    return Decision(leases, new, pools)


def _sticky_address(view: View, key: str, rng: Range, ident: str, owner: Owner,
                    taken: AbstractSet[int]) -> int | None:
    """The address reserved for ``ident`` in this range, if any; code 11 while its
    predecessor still holds one live."""
    live = view.sticky_holder(key, ident, owner.ifname)
    if live is not None:
        raise CNIError(TRY_AGAIN_LATER, f"pool {key}: address {live.address} of {ident} is "
                       f"still held by container {live.owner.container_id} "
                       f"({live.owner.ifname}), its predecessor; try again once it is "
                       "released")
    res = view.reservation(key, ident, owner.ifname)
    if res is not None and rng.contains(res.ip) and res.ip not in taken:
        return res.ip
    return None


def _refuse_requested(view: View, scope: str, rng: Range, ip: int, text: str, key: str,
                      ident: str, owner: Owner, taken: AbstractSet[int], now: float) -> None:
    """A requested address counted as used: refused (code 7) naming who has it, unless it
    is reserved for this very identity and interface."""
    holder = view.holder(scope, rng.version, ip)
    if holder is None and ip not in taken:
        res = view.reserved(scope, rng.version, ip)
        if res is not None and (res.identity, res.ifname) == (ident, owner.ifname):
            return
        if res is not None:
            raise CNIError(INVALID_CONFIG, f"requested address {text} in pool {key} is "
                           f"reserved for {res.identity} ({res.ifname}) for another "
                           f"{max(0.0, res.until - now):.0f} s (sticky)")
    who = "this request" if holder is None else \
        f"container {holder.owner.container_id}" if holder.owner.container_id else \
        f"an unknown container in netns {holder.owner.netns}"
    raise CNIError(INVALID_CONFIG, f"requested address {text} in pool {key} is "
                   f"already allocated to {who}")


class SetUnion(AbstractSet[int]):
    """Membership in either of two sets, without copying either."""

    def __init__(self, a: AbstractSet[int], b: AbstractSet[int]) -> None:
        self._a, self._b = a, b

    def __contains__(self, ip: object) -> bool:
        return ip in self._a or ip in self._b

    def __iter__(self) -> Any:
        yield from self._a
        yield from (ip for ip in self._b if ip not in self._a)

    def __len__(self) -> int:
        return len(self._a) + sum(1 for ip in self._b if ip not in self._a)


def _addressing(cfg: IPAMConfig, leases: list[Lease], key: str) -> dict[str, Any]:
    """``leases`` as a list under ``key``, with the config's routes and dns."""
    out: dict[str, Any] = {key: [
        {"address": lease.address, **({"gateway": lease.gateway} if lease.gateway else {})}
        for lease in leases]}
    if cfg.routes:
        out["routes"] = cfg.routes
    if cfg.dns:
        out["dns"] = cfg.dns
    return out


def static_ipam(cfg: IPAMConfig, leases: list[Lease]) -> dict[str, Any]:
    """The ``static`` IPAM section a delegate runs with instead of a second IPAM exec."""
    return {"type": "static", **_addressing(cfg, leases, "addresses")}


def ipam_result(cfg: IPAMConfig, leases: list[Lease], cni_version: str) -> dict[str, Any]:
    """What a plain IPAM plugin returns for ``leases`` (1.0.0 shape; convert after)."""
    return {"cniVersion": cni_version, **_addressing(cfg, leases, "ips")}
