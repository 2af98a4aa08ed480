"""whereabouts' reservations, read for a takeover: every address whereabouts handed out
is held until its pod is gone, so netctl's cluster IPAM never hands it out twice.

whereabouts (github.com/k8snetworkplumbingwg/whereabouts) keeps its state in two custom
resources of ``whereabouts.cni.cncf.io/v1alpha1``, both namespaced (in whereabouts' own
namespace, usually kube-system), which are listed here cluster-wide:

- ``ippools``: ``spec.range`` a CIDR, ``spec.allocations`` a map from an address's
  OFFSET to its owner ``{"id": container id, "podref": "ns/name", "ifname": …}``. The
  offset is a decimal string counted from the address written in ``spec.range`` (the
  first result of Go's ``net.ParseCIDR``: whereabouts writes the network address there,
  so offset 1 of ``10.2.0.0/16`` is ``10.2.0.1``); see ``toIPReservationList`` in its
  ``pkg/storage/kubernetes/ipam.go`` and ``IPAddOffset`` in ``pkg/iphelpers``.
- ``overlappingrangeipreservations``: one object per address handed out from a range
  with ``enable_overlapping_ranges``; the address is the object's NAME (``NormalizeIP``:
  the address's text with ``:`` replaced by ``-``, a ``0`` appended when the text ends in
  ``::``, and ``<network_name>-`` in front when the network has a name), the owner in
  ``spec.podref``, ``spec.containerid`` (whereabouts leaves it empty), ``spec.ifname``.
  The name prefix makes an IPv6 name ambiguous (``net-1-fd00--5``: ``fd00::5`` of network
  ``net-1``, or ``1:fd00::5`` of ``net``): a name is read as every address a suffix of it
  can be, narrowed to those inside a pool's range when any is; what is left is held.

Each address becomes a :class:`Hold`. An entry that cannot be read is skipped with a
warning naming the object and the entry; the rest is kept. A resource that is not served
(404: whereabouts' CRDs not installed) holds nothing; an API server that cannot be reached,
or refuses, is an :class:`~netctl.kubeapi.api.ApiError` (status 0 too for a list that is
not JSON).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Sequence

import msgspec
import trio

from netctl.kubeapi.api import Api, ApiError
from netctl.kubeapi.pods import pod_path

log = logging.getLogger("netctl.kube")

GROUP = "whereabouts.cni.cncf.io"
API_VERSION = f"{GROUP}/v1alpha1"
IPPOOLS = f"/apis/{API_VERSION}/ippools"
RESERVATIONS = f"/apis/{API_VERSION}/overlappingrangeipreservations"
GET_CONCURRENCY = 8  # pod GETs in flight in :func:`live_holds`

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Hold(msgspec.Struct, frozen=True):
    """One address whereabouts handed out, and to whom."""

    address: str  # canonical text: 10.2.0.1, fd00::1
    version: int  # 4 or 6
    pool_range: str  # the IPPool's spec.range; "" for an overlapping-range reservation
    pod_namespace: str  # "" with pod_name when the podref is missing or unreadable
    pod_name: str
    container_id: str
    ifname: str

    @property
    def podref(self) -> tuple[str, str] | None:
        return (self.pod_namespace, self.pod_name) if self.pod_name else None


# -- the objects' JSON, as far as it is read (here, and written back by handback.py) --------

class ObjectMeta(msgspec.Struct, forbid_unknown_fields=False):
    name: str = ""
    namespace: str = ""
    resourceVersion: str = ""


class _Item(msgspec.Struct, forbid_unknown_fields=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: msgspec.Raw = msgspec.Raw(b"{}")


class _List(msgspec.Struct, forbid_unknown_fields=False):
    items: list[msgspec.Raw] | None = None


class _PoolSpec(msgspec.Struct, forbid_unknown_fields=False):
    range: str = ""
    allocations: dict[str, msgspec.Raw] | None = None


class _PoolRange(msgspec.Struct, forbid_unknown_fields=False):
    range: str = ""


class _Allocation(msgspec.Struct, forbid_unknown_fields=False):
    id: str = ""
    podref: str = ""
    ifname: str = ""


class ReservationSpec(msgspec.Struct, forbid_unknown_fields=False):
    containerid: str = ""
    podref: str = ""
    ifname: str = ""


# -- pure: objects → holds -------------------------------------------------------------------

def _pod(podref: str, what: str) -> tuple[str, str]:
    """``ns/name`` → (ns, name); ("", "") for none (unknown owner), with a warning when
    there was something that is not ``ns/name``."""
    namespace, slash, name = podref.partition("/")
    if slash and namespace and name and "/" not in name:
        return namespace, name
    if podref:
        log.warning("whereabouts %s: podref %r is not namespace/name; the address is held "
                    "for an unknown owner", what, podref)
    return "", ""


def _range(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """``spec.range``: a CIDR (the address written, and its network), as Go's
    ``net.ParseCIDR`` reads it; ValueError otherwise."""
    if "/" not in text:
        raise ValueError(f"{text!r} is not a CIDR")
    return ipaddress.ip_interface(text)


def pool_holds(name: str, namespace: str, spec: bytes) -> list[Hold]:
    """The holds of one IPPool (``spec`` its JSON); what cannot be read is skipped, with a
    warning."""
    what = f"IPPool {namespace}/{name}"
    try:
        decoded = msgspec.json.decode(spec, type=_PoolSpec)
        base = _range(decoded.range)
    except (msgspec.MsgspecError, ValueError) as exc:
        log.warning("whereabouts %s skipped: no readable spec.range (%s)", what, exc)
        return []
    network = base.network
    holds = []
    for offset, raw in (decoded.allocations or {}).items():
        entry = f"{what} allocation {offset!r}"
        if not (offset.isascii() and offset.isdigit()):
            log.warning("whereabouts %s skipped: the offset is not a decimal number", entry)
            continue
        number = int(offset)
        if int(base.ip) + number > int(network.broadcast_address):
            log.warning("whereabouts %s skipped: offset %d is outside the range %s", entry,
                        number, decoded.range)
            continue
        try:
            owner = msgspec.json.decode(raw, type=_Allocation)
        except msgspec.MsgspecError as exc:
            log.warning("whereabouts %s skipped: %s", entry, exc)
            continue
        address = base.ip + number
        namespace_, pod = _pod(owner.podref, entry)
        holds.append(Hold(str(address), address.version, decoded.range, namespace_, pod,
                          owner.id, owner.ifname))
    return holds


def reservation_addresses(name: str, ranges: Iterable[Network]) -> list[Address]:
    """The addresses an OverlappingRangeIPReservation's name can mean: every suffix (after
    a ``-``, or the whole name) that is an address once ``-`` is ``:`` again; when several
    can, those inside one of ``ranges`` (the pools'), if any is."""
    starts = [0, *(i + 1 for i, c in enumerate(name) if c == "-")]
    found: list[Address] = []
    for start in starts:
        try:
            address = ipaddress.ip_address(name[start:].replace("-", ":"))
        except ValueError:
            continue
        if address not in found:
            found.append(address)
    if len(found) > 1:
        networks = list(ranges)
        inside = [a for a in found if any(a in n for n in networks if n.version == a.version)]
        found = inside or found
    return found


def reservation_holds(name: str, namespace: str, spec: bytes,
                      ranges: Sequence[Network] = ()) -> list[Hold]:
    """The hold(s) of one OverlappingRangeIPReservation; none, with a warning, when it
    cannot be read."""
    what = f"OverlappingRangeIPReservation {namespace}/{name}"
    try:
        decoded = msgspec.json.decode(spec, type=ReservationSpec)
    except msgspec.MsgspecError as exc:
        log.warning("whereabouts %s skipped: %s", what, exc)
        return []
    addresses = reservation_addresses(name, ranges)
    if not addresses:
        log.warning("whereabouts %s skipped: its name is no address", what)
        return []
    if len(addresses) > 1:
        log.warning("whereabouts %s: the name can mean %s; each is held", what,
                    ", ".join(map(str, addresses)))
    namespace_, pod = _pod(decoded.podref, what)
    return [Hold(str(a), a.version, "", namespace_, pod, decoded.containerid, decoded.ifname)
            for a in addresses]


def by_address(holds: Iterable[Hold]) -> dict[tuple[int, int], Hold]:
    """The holds keyed by (IP version, the address as an integer); of two holds on one
    address (a pool's entry and its overlapping reservation), the first is kept."""
    out: dict[tuple[int, int], Hold] = {}
    for hold in holds:
        out.setdefault((hold.version, int(ipaddress.ip_address(hold.address))), hold)
    return out


# -- I/O --------------------------------------------------------------------------------

async def _items(api: Api, path: str) -> list[_Item]:
    """Every object of one resource, cluster-wide; [] when it is not served (404)."""
    try:
        data = await api.list(path, [])
    except ApiError as exc:
        if exc.status == 404:
            return []
        raise
    try:
        raws = msgspec.json.decode(data, type=_List).items or []
    except msgspec.MsgspecError as exc:
        raise ApiError(0, f"API server {api.host}: the list {path} is undecodable: {exc}"
                       ) from None
    items = []
    for raw in raws:
        try:
            items.append(msgspec.json.decode(raw, type=_Item))
        except msgspec.MsgspecError as exc:
            log.warning("whereabouts: an object of %s skipped: %s", path, exc)
    return items


async def read_holds(api: Api) -> list[Hold]:
    """Every address whereabouts recorded: its IPPools' allocations, then its overlapping
    range reservations (two LISTs)."""
    pools = await _items(api, IPPOOLS)
    reservations = await _items(api, RESERVATIONS)
    holds: list[Hold] = []
    ranges: list[Network] = []
    for pool in pools:
        holds += pool_holds(pool.metadata.name, pool.metadata.namespace, bytes(pool.spec))
        try:
            ranges.append(_range(msgspec.json.decode(pool.spec, type=_PoolRange).range).network)
        except (msgspec.MsgspecError, ValueError):
            pass  # warned about by pool_holds
    for res in reservations:
        holds += reservation_holds(res.metadata.name, res.metadata.namespace,
                                   bytes(res.spec), ranges)
    return holds


async def live_holds(api: Api, holds: list[Hold]) -> list[Hold]:
    """The holds whose pod still exists, in any state (or whose owner is unknown): one GET
    per distinct podref, at most :data:`GET_CONCURRENCY` at once, so the caller calls it
    rarely (holds only shrink). A podref names no UID: a pod re-created under the same name
    keeps the address (taken is the safe side). A failed GET other than 404 raises its
    :class:`ApiError`: a pod that could not be asked about is not known to be gone."""
    refs = sorted({h.podref for h in holds if h.podref is not None})
    alive: dict[tuple[str, str], bool] = {}
    failed: list[ApiError] = []
    limiter = trio.CapacityLimiter(GET_CONCURRENCY)

    async def ask(ref: tuple[str, str], cancel: trio.CancelScope) -> None:
        async with limiter:
            try:
                found = await api.get(pod_path(*ref))
            except ApiError as exc:
                failed.append(exc)  # the first one is raised, bare (not in a group)
                cancel.cancel()
                return
            alive[ref] = found is not None

    async with trio.open_nursery() as nursery:
        for ref in refs:
            nursery.start_soon(ask, ref, nursery.cancel_scope)
    if failed:
        raise failed[0]
    return [h for h in holds if h.podref is None or alive[h.podref]]
