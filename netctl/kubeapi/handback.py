"""Handing addresses back to whereabouts, for a rollback (``netctl ipam handback``,
docs/migrating.md): what netctl holds on a node, written where whereabouts looks, so that
whereabouts never hands a running pod's address out again and releases it itself when the
pod's DEL reaches it.

:func:`plan` (pure) turns the journal's live allocations (:class:`Held`) into whereabouts'
records as whereabouts writes them (``pkg/storage/kubernetes/ipam.go``; the formats are in
:mod:`netctl.kubeapi.whereabouts`, which reads them): an ``IPPool`` entry per address and,
for overlapping ranges, an ``OverlappingRangeIPReservation``. :func:`hand_back` writes
them: a missing pool created whole, an existing one patched with a resourceVersion test and
only the missing entries (retried on a conflict). An entry there for the same container
and interface is ``present``; one for another owner a ``conflict``, never overwritten.
Nothing is deleted.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

import msgspec

from netctl.kubeapi.api import Api, ApiError, KubeSettings, with_api
from netctl.kubeapi.whereabouts import API_VERSION, ObjectMeta, ReservationSpec

log = logging.getLogger("netctl.kube")

NAMESPACE = "kube-system"  # whereabouts' IPPools live in its own namespace, usually this
ATTEMPTS = 5  # patches of one pool tried on resourceVersion conflicts

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Held(msgspec.Struct, frozen=True):
    """One address netctl holds (a live allocation of its journal)."""

    address: str
    pool_range: str  # the journal's range: "10.2.0.0/16" or "10.2.0.10-10.2.0.20/16"
    network_name: str
    overlapping: bool  # the allocation's scope is the network's (enable_overlapping_ranges)
    container_id: str
    ifname: str
    pod_namespace: str = ""
    pod_name: str = ""

    @property
    def podref(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}" if self.pod_name else ""


# -- pure: names, offsets, the plan ----------------------------------------------------------


def pool_network(pool_range: str) -> Network:
    """whereabouts' ``spec.range`` for a journal range: the CIDR's network (a range
    ``first-last/nn`` is ``last/nn``'s network, as whereabouts canonicalizes it)."""
    text = pool_range.rsplit("-", 1)[-1] if "-" in pool_range.split("/")[0] else pool_range
    return ipaddress.ip_network(text, strict=False)


def _normalize(text: str) -> str:
    return (text + "0" if text.endswith(":") else text).replace(":", "-").replace("/", "-")


def pool_name(network: Network, network_name: str = "") -> str:
    """The IPPool's name (whereabouts' ``IPPoolName`` without node slices)."""
    name = _normalize(network.with_prefixlen)
    return f"{network_name}-{name}" if network_name else name


def reservation_name(address: str, network_name: str = "") -> str:
    """The OverlappingRangeIPReservation's name (whereabouts' ``NormalizeIP``)."""
    name = _normalize(str(ipaddress.ip_address(address)))
    return f"{network_name}-{name}" if network_name else name


def offset(address: str, network: Network) -> int:
    """The address's key in ``spec.allocations``: counted from the network address."""
    return int(ipaddress.ip_address(address)) - int(network.network_address)


def entry(held: Held) -> dict[str, str]:
    return {"id": held.container_id, "podref": held.podref, "ifname": held.ifname}


@dataclass
class PoolPlan:
    name: str
    range: str  # spec.range
    entries: dict[str, tuple[Held, dict[str, str]]] = field(default_factory=dict)


@dataclass
class Plan:
    pools: dict[str, PoolPlan] = field(default_factory=dict)  # by name
    reservations: dict[str, Held] = field(default_factory=dict)  # by name
    skipped: list[tuple[Held, str]] = field(default_factory=list)  # what cannot be written


def plan(held: Iterable[Held]) -> Plan:
    """whereabouts' records of ``held``; an address without a pod (a plain IPAM call with
    no ``K8S_POD_*``) is skipped: whereabouts keeps no record without a podref."""
    out = Plan()
    for h in held:
        if not h.podref:
            out.skipped.append((h, "no pod: whereabouts records an address by its pod"))
            continue
        try:
            net = pool_network(h.pool_range)
        except ValueError as exc:
            out.skipped.append((h, f"range {h.pool_range!r}: {exc}"))
            continue
        name = pool_name(net, h.network_name)
        pool = out.pools.setdefault(name, PoolPlan(name, net.with_prefixlen))
        pool.entries[str(offset(h.address, net))] = (h, entry(h))
        if h.overlapping:
            out.reservations[reservation_name(h.address, h.network_name)] = h
    return out


# -- I/O: writing the plan -------------------------------------------------------------------


class Outcome(msgspec.Struct):
    address: str
    pod: str
    container: str
    ifname: str
    record: str  # "IPPool NAME offset N" or "OverlappingRangeIPReservation NAME"
    outcome: str  # written | present | conflict | would write (dry run) | skipped | failed
    detail: str = ""


class _PoolSpec(msgspec.Struct, forbid_unknown_fields=False):
    range: str = ""
    allocations: dict[str, dict[str, str]] | None = None


class _Pool(msgspec.Struct, forbid_unknown_fields=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: _PoolSpec = msgspec.field(default_factory=_PoolSpec)


class _Reservation(msgspec.Struct, forbid_unknown_fields=False):
    spec: ReservationSpec = msgspec.field(default_factory=ReservationSpec)


def _path(namespace: str, plural: str, name: str = "") -> str:
    base = f"/apis/{API_VERSION}/namespaces/{namespace}/{plural}"
    return f"{base}/{name}" if name else base


def _same(found: dict[str, str], wanted: dict[str, str]) -> bool:
    return found.get("id") == wanted["id"] and found.get("ifname", "") == wanted["ifname"]


def _outcome(h: Held, record: str, outcome: str, detail: str = "") -> Outcome:
    return Outcome(h.address, h.podref, h.container_id, h.ifname, record, outcome, detail)


async def _hand_back_pool(api: Api, namespace: str, pool: PoolPlan,
                          dry_run: bool) -> list[Outcome]:
    path = _path(namespace, "ippools", pool.name)
    for _ in range(ATTEMPTS):
        raw = await api.get(path)
        existing = msgspec.json.decode(raw, type=_Pool) if raw is not None else None
        found = (existing.spec.allocations or {}) if existing is not None else {}
        if existing is not None and existing.spec.range and \
                pool_network(existing.spec.range) != pool_network(pool.range):
            return [_outcome(h, f"IPPool {pool.name}", "conflict",
                             f"its range is {existing.spec.range}, not {pool.range}")
                    for h, _ in pool.entries.values()]
        out, add = [], {}
        for key, (h, wanted) in sorted(pool.entries.items(), key=lambda kv: int(kv[0])):
            record = f"IPPool {pool.name} offset {key}"
            if key not in found:
                add[key] = wanted
                out.append(_outcome(h, record, "would write" if dry_run else "written"))
            elif _same(found[key], wanted):
                out.append(_outcome(h, record, "present"))
            else:
                out.append(_outcome(h, record, "conflict", "held there by container "
                                    f"{found[key].get('id', '?')} ({found[key].get('podref')})"))
        if not add or dry_run:
            return out
        try:
            if existing is None:
                body = {"apiVersion": API_VERSION, "kind": "IPPool",
                        "metadata": {"name": pool.name, "namespace": namespace},
                        "spec": {"range": pool.range, "allocations": add}}
                await api.request("create", "POST", _path(namespace, "ippools"),
                                  body=msgspec.json.encode(body))
            else:
                ops: list[dict[str, object]] = [{
                    "op": "test", "path": "/metadata/resourceVersion",
                    "value": existing.metadata.resourceVersion}]
                if existing.spec.allocations is None:
                    ops.append({"op": "add", "path": "/spec/allocations", "value": {}})
                ops += [{"op": "add", "path": f"/spec/allocations/{key}", "value": value}
                        for key, value in add.items()]
                await api.request("patch", "PATCH", path, body=msgspec.json.encode(ops),
                                  content_type="application/json-patch+json")
            return out
        except ApiError as exc:
            if exc.status not in (409, 422):  # 409 created meanwhile, 422 a failed test
                raise
            log.info("IPPool %s changed while it was written (%s); again", pool.name, exc)
    raise ApiError(409, f"IPPool {pool.name} kept changing: {ATTEMPTS} attempts")


async def _hand_back_reservation(api: Api, namespace: str, name: str, h: Held,
                                 dry_run: bool) -> Outcome:
    record = f"OverlappingRangeIPReservation {name}"
    path = _path(namespace, "overlappingrangeipreservations", name)
    raw = await api.get(path)
    if raw is not None:
        spec = msgspec.json.decode(raw, type=_Reservation).spec
        if spec.podref == h.podref and spec.ifname in ("", h.ifname):
            return _outcome(h, record, "present")
        return _outcome(h, record, "conflict", f"held there by {spec.podref or 'nobody'}")
    if dry_run:
        return _outcome(h, record, "would write")
    body = {"apiVersion": API_VERSION, "kind": "OverlappingRangeIPReservation",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"containerid": h.container_id, "podref": h.podref, "ifname": h.ifname}}
    await api.request("create", "POST", _path(namespace, "overlappingrangeipreservations"),
                      body=msgspec.json.encode(body))
    return _outcome(h, record, "written")


async def hand_back(api: Api, held: Iterable[Held], *, namespace: str = NAMESPACE,
                    dry_run: bool = False) -> list[Outcome]:
    """Write :func:`plan`'s records (nothing with ``dry_run``); one outcome per record.
    A pool or reservation the API server refuses is ``failed`` with its answer; the rest
    goes on."""
    p = plan(held)
    out = [_outcome(h, "-", "skipped", why) for h, why in p.skipped]
    for pool in p.pools.values():
        try:
            out += await _hand_back_pool(api, namespace, pool, dry_run)
        except ApiError as exc:
            out += [_outcome(h, f"IPPool {pool.name}", "failed", str(exc))
                    for h, _ in pool.entries.values()]
    for name, h in p.reservations.items():
        try:
            out.append(await _hand_back_reservation(api, namespace, name, h, dry_run))
        except ApiError as exc:
            out.append(_outcome(h, f"OverlappingRangeIPReservation {name}", "failed",
                                str(exc)))
    return out


def run_hand_back(settings: KubeSettings, held: list[Held], *, namespace: str = NAMESPACE,
                  dry_run: bool = False) -> list[Outcome]:
    """:func:`hand_back` from synchronous code (the CLI)."""
    return with_api(settings, partial(hand_back, held=held, namespace=namespace,
                                      dry_run=dry_run))
