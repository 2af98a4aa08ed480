"""The IPAM backend interface: where allocations live, behind four calls.

The engine allocates through a :class:`Backend`; which one is configuration.
``sqlite`` (:mod:`netctl.ipam.sqlite`) keeps allocations in the journal
database and runs inside the journal transaction passed as ``tx``, so an
allocation commits with the step that uses it. A cluster backend (Kubernetes
objects) fits the same calls and may ignore ``tx``. :mod:`netctl.ipam.memory`
is an in-memory fake, type-checked against this protocol, that the contract
tests run side by side with the real one.

Shared, backend-independent pieces live here too: who owns an allocation, what
a lease is, how a pool is named, and the IPAM sections built from leases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from netctl.ipam.ranges import IPAMConfig, Range


class Backend(Protocol):
    async def allocate(self, tx: Any, cfg: IPAMConfig, ranges: list[Range], owner: Owner,
                       wanted: list[str]) -> list[Lease]:
        """One address per range for ``owner`` (what it holds already, if anything);
        ``wanted`` addresses honoured or refused (code 7); code 100 when exhausted."""
        ...

    async def held_by(self, tx: Any, cfg: IPAMConfig, ranges: list[Range], *,
                      attachment_id: int | None = None, container_id: str | None = None,
                      ifname: str | None = None) -> list[Lease]:
        """Live leases of an attachment, or of (container, ifname) in these ranges."""
        ...

    async def release(self, tx: Any, *, op_id: int | None, attachment_id: int | None = None,
                      container_id: str | None = None, ifname: str | None = None,
                      pools: list[str] | None = None) -> int:
        """Release an owner's live allocations (kept as history); return how many."""
        ...

    async def release_stale(self, tx: Any, pools: list[str], valid: set[tuple[str, str]],
                            op_id: int | None) -> int:
        """GC: release plain-plugin allocations in ``pools`` not owned by ``valid``."""
        ...


@dataclass(frozen=True)
class Owner:
    """Who an allocation is for; it is released only by the same owner."""

    container_id: str
    ifname: str
    netns: str = ""
    pod: tuple[str, str, str] = ("", "", "")
    attachment_id: int | None = None
    op_id: int | None = None


@dataclass(frozen=True)
class Lease:
    pool: str
    address: str  # CIDR form, e.g. "10.1.0.5/24"
    gateway: str | None


def pool_key(cfg: IPAMConfig, rng: Range) -> str:
    return f"{cfg.network_name}/{rng.key}" if cfg.network_name else rng.key


def scope_of(cfg: IPAMConfig, key: str) -> str:
    """Overlapping ranges of one network_name share uniqueness (whereabouts' default)."""
    return f"network:{cfg.network_name}" if cfg.enable_overlapping_ranges else f"pool:{key}"


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
