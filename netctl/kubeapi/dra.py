"""DRA: a pod's network devices from its ResourceClaims, and the network data written back
(``resource.k8s.io/v1``; what it does, and the RBAC it needs, is in docs/networks.md, "DRA").

A device meant for a CNI network carries, in its ResourceSlice, Multus v4.3's attributes
:data:`RESOURCE_ATTR` (matched to a NAD's ``resourceName``) and :data:`DEVICE_ATTR` (the id
its delegate gets); a device without them is no network's, except in the pod's
extended-resource claim, where it is the extended resource its request serves.

:class:`ClaimDevices` reads each claim of the pod with one GET (no daemon watches every
claim of the cluster) and looks each allocated device up in the node's slices, watched from
the first pod with claims on. A claim that cannot be read is :class:`ClaimUnread`:
:class:`netctl.kubeapi.devices.PodDevices` then takes the kubelet's answer instead
(:meth:`~ClaimDevices.prepared`). After the ADD, :meth:`~ClaimDevices.report` writes each
attached device's ``status.devices[]`` entry (KEP-4817, :func:`merged`) with the claim's
resourceVersion as precondition, retried on a conflict.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import msgspec
import trio

from netctl.devices.podresources import ClaimedDevice
from netctl.errors import TRY_AGAIN_LATER, CNIError
from netctl.journal.records import Attachment
from netctl.kubeapi.api import PATCH_MERGE, Api, ApiError
from netctl.kubeapi.events import EventRecorder, timestamp
from netctl.kubeapi.informer import Informer
from netctl.kubeapi.objects import REASON_NETWORK_DATA_REFUSED, Meta, Pod, Slice

log = logging.getLogger("netctl.kube")

DRA = "/apis/resource.k8s.io/v1"
SLICES = f"{DRA}/resourceslices"
RESOURCE_ATTR = "k8s.cni.cncf.io/resourceName"
DEVICE_ATTR = "k8s.cni.cncf.io/deviceID"
CONFLICT_TRIES = 5
READY = "Ready"
READY_REASON = "NetworkReady"
# what the ClusterRole needs for status.devices (Kubernetes 1.36 and later), named in the
# Event of a write refused for want of it
DRIVER_GRANT = ("resourceclaims/driver", "associated-node:patch")


def claim_path(namespace: str, name: str) -> str:
    return f"{DRA}/namespaces/{namespace}/resourceclaims/{name}"


class Result(msgspec.Struct, forbid_unknown_fields=False):
    """One allocated device of a claim (``status.allocation.devices.results[]``)."""

    driver: str = ""
    pool: str = ""
    device: str = ""
    request: str = ""
    shareID: str | None = None


class _Devices(msgspec.Struct, forbid_unknown_fields=False):
    results: list[Result] = []


class _Allocation(msgspec.Struct, forbid_unknown_fields=False):
    devices: _Devices = msgspec.field(default_factory=_Devices)


class _ClaimStatus(msgspec.Struct, forbid_unknown_fields=False):
    allocation: _Allocation | None = None
    devices: list[dict[str, Any]] = []  # the drivers' per-device status, kept as it is


class Claim(msgspec.Struct, forbid_unknown_fields=False):
    metadata: Meta = msgspec.field(default_factory=Meta)
    status: _ClaimStatus = msgspec.field(default_factory=_ClaimStatus)


DeviceKey = tuple[str, str, str, str]  # driver, pool, device, shareID ("" for none)


class Held(msgspec.Struct, frozen=True):
    """A network device allocated through a claim: the claim, where the device is
    published, and what a network knows it by."""

    claim: str
    driver: str
    pool: str
    device: str
    resource: str
    device_id: str
    share_id: str = ""

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device, self.share_id)


class ClaimUnread(CNIError):
    """A claim of the pod that could not be read (code 11): the kubelet's answer may
    stand in for it."""


# -- pure ------------------------------------------------------------------------------------

Index = dict[tuple[str, str, str], tuple[str, str]]  # (driver, pool, device) → attributes


def index(slices: Iterable[Slice]) -> Index:
    """Each published device's (resourceName, deviceID) attributes ("" for one it lacks),
    by (driver, pool, device)."""
    out: Index = {}
    for sl in slices:
        for dev in sl.spec.devices:
            res, did = dev.attributes.get(RESOURCE_ATTR), dev.attributes.get(DEVICE_ATTR)
            out[(sl.spec.driver, sl.spec.pool.name, dev.name)] = (
                res.text() if res is not None else "", did.text() if did is not None else "")
    return out


def held_in(name: str, results: Iterable[Result], published: Index,
            extended: Mapping[str, str]) -> list[Held]:
    """The network devices among a claim's allocated ``results`` (in order): those whose
    slice gives them a deviceID, and a resourceName — or, in the pod's extended-resource
    claim (``extended``: its request names → extended resources), the resource their
    request serves."""
    out = []
    for r in results:
        resource, device_id = published.get((r.driver, r.pool, r.device), ("", ""))
        resource = resource or extended.get(r.request.split("/")[0], "")
        if resource and device_id:
            out.append(Held(name, r.driver, r.pool, r.device, resource, device_id,
                            r.shareID or ""))
    return out


def by_resource(held: Iterable[Held], resources: Collection[str]) -> dict[str, list[str]]:
    """The device ids of ``resources`` among ``held``, by resource, each once."""
    out: dict[str, list[str]] = {}
    for h in held:
        if h.resource in resources and h.device_id not in out.get(h.resource, []):
            out.setdefault(h.resource, []).append(h.device_id)
    return out


def network_data(att: Attachment) -> dict[str, Any]:
    """KEP-4817's ``networkData`` of an attachment, from its CNI result: the interface,
    its addresses (CIDR form), its hardware address."""
    result = att.result or {}
    interfaces = [i if isinstance(i, dict) else {} for i in result.get("interfaces") or []]
    index_ = next((n for n, i in enumerate(interfaces)
                   if i.get("name") == att.ifname and i.get("sandbox")), None)
    ips = []
    for ip in result.get("ips") or []:
        if not isinstance(ip, dict):
            continue
        if index_ is not None and ip.get("interface") not in (None, index_):
            continue
        try:
            ips.append(str(ipaddress.ip_interface(str(ip.get("address")))))
        except ValueError:
            continue
    data: dict[str, Any] = {"interfaceName": att.ifname, "ips": ips}
    mac = interfaces[index_].get("mac") if index_ is not None else None
    if mac:
        data["hardwareAddress"] = str(mac)
    return data


def _key_of(entry: Mapping[str, Any]) -> DeviceKey:
    return (str(entry.get("driver", "")), str(entry.get("pool", "")),
            str(entry.get("device", "")), str(entry.get("shareID") or ""))


def merged(current: Sequence[dict[str, Any]], entries: Mapping[DeviceKey, Attachment],
           now: str) -> list[dict[str, Any]]:
    """``status.devices`` with each of ``entries``' devices given its network data and a
    Ready condition; other devices' entries, and other conditions, kept. The Ready
    condition's ``lastTransitionTime`` is ``now`` only when its status changes (it was not
    ``True``, or there was none): a write that finds the device ready already keeps it."""
    out = [dict(d) for d in current]
    for key, att in entries.items():
        entry = next((d for d in out if _key_of(d) == key), None)
        if entry is None:
            driver, pool, device, share = key
            entry = {"driver": driver, "pool": pool, "device": device}
            if share:
                entry["shareID"] = share
            out.append(entry)
        entry["networkData"] = network_data(att)
        conditions = [c for c in entry.get("conditions") or [] if isinstance(c, dict)]
        before = next((c for c in conditions if c.get("type") == READY), None)
        since = before.get("lastTransitionTime") if before is not None and \
            before.get("status") == "True" and before.get("lastTransitionTime") else now
        ready = {"type": READY, "status": "True", "reason": READY_REASON,
                 "message": f"attached as {att.ifname} by netctl (network {att.network})",
                 "lastTransitionTime": since}
        entry["conditions"] = [c for c in conditions if c.get("type") != READY] + [ready]
    return out


def refusal_note(namespace: str, name: str, reason: str) -> str:
    """The Event's message for a claim whose networkData was not written: why, and for an
    authorization the API server wants, which grant netctl's ClusterRole lacks."""
    note = f"the networkData of ResourceClaim {namespace}/{name} was not written: {reason}"
    resource, verb = DRIVER_GRANT
    if resource in reason:
        note += (f" (netctl's ClusterRole needs {verb} on {resource} in resource.k8s.io: "
                 "deploy/kubernetes/rbac.yaml)")
    return note


# -- the API ---------------------------------------------------------------------------------


class ClaimDevices:
    """A pod's network devices from its claims; their status written back. ``events``:
    where the Event of a write not taken goes; ``on_failure``: counted at each such write."""

    def __init__(self, api: Api, node: str, wait: float = 2.0, *,
                 events: EventRecorder | None = None,
                 on_failure: Callable[[], None] | None = None) -> None:
        self.api, self.node, self.wait = api, node, wait
        self.events = events if events is not None else EventRecorder(api, node)
        self.on_failure = on_failure
        self.slices: Informer[Slice] = Informer(api, Slice, SLICES,
                                                [("fieldSelector", f"spec.nodeName={node}")])
        self._nursery: trio.Nursery | None = None
        self._watching = False

    async def run(self) -> None:
        """Hold the nursery the slices' watch starts in (when first needed)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await trio.sleep_forever()

    async def _published(self) -> Index:
        """The node's slices' devices (:func:`index`), watched from the first call on
        (code 11 when their first list does not come within ``wait``)."""
        if not self._watching and self._nursery is not None:
            self._watching = True
            self._nursery.start_soon(self.slices.run)
        if not self.slices.synced.is_set():
            await self.slices.wait_synced(self.wait)
        if not self.slices.synced.is_set():
            raise CNIError(TRY_AGAIN_LATER, f"the ResourceSlices of node {self.node} are not "
                           f"listed yet ({self.slices.state}); try again later")
        return index(self.slices.cache.values())

    async def _claim(self, namespace: str, name: str) -> Claim | None:
        """The claim (None: there is none); ApiError when it cannot be read."""
        raw = await self.api.get(claim_path(namespace, name))
        return None if raw is None else msgspec.json.decode(raw, type=Claim)

    async def held(self, pod: Pod) -> list[Held]:
        """The network devices allocated to ``pod`` through its claims, in claim and result
        order (each claim read once); :class:`ClaimUnread` when one cannot be read."""
        if not pod.claims:
            return []
        published = await self._published()
        namespace, out = pod.metadata.namespace, []
        for name in pod.claims:
            try:
                claim = await self._claim(namespace, name)
            except ApiError as exc:
                raise ClaimUnread(TRY_AGAIN_LATER, f"ResourceClaim {namespace}/{name}: "
                                  f"{exc.reason}") from None
            if claim is not None and claim.status.allocation is not None:
                out += held_in(name, claim.status.allocation.devices.results, published,
                               pod.extended_requests)
        return out

    async def allocated(self, pod: Pod, resources: Collection[str]) -> dict[str, list[str]]:
        """The device ids of ``resources`` the pod's claims hold, by resource."""
        return by_resource(await self.held(pod), resources)

    async def prepared(self, claimed: Sequence[ClaimedDevice], resources: Collection[str]
                       ) -> dict[str, list[str]]:
        """The device ids of ``resources`` among the DRA devices the kubelet prepared for
        a pod (its PodResources answer), by resource — their slices say which network's
        each is. The claims themselves are not read."""
        if not claimed:
            return {}
        published = await self._published()
        held = [Held(c.claim, c.driver, c.pool, c.device, *published.get(
            (c.driver, c.pool, c.device), ("", ""))) for c in claimed]
        return by_resource((h for h in held if h.resource and h.device_id), resources)

    async def report(self, pod: Pod, atts: Sequence[Attachment]) -> str:
        """Each attached device's claim status: ``networkData`` and ``Ready``; "" or what
        could not be written (a warning: the ADD stands), each such claim also told in a
        Warning Event on the pod and counted (``on_failure``)."""
        devices = {a.device: a for a in atts if a.device and a.result is not None}
        if not devices:
            return ""
        failures = []
        namespace = pod.metadata.namespace
        for name in pod.claims:
            try:
                await self._write(namespace, name, devices, pod.extended_requests)
            except (ApiError, CNIError) as exc:
                reason = exc.reason if isinstance(exc, ApiError) else exc.msg
                failures.append(f"ResourceClaim {namespace}/{name}: {reason}")
                if self.on_failure is not None:
                    self.on_failure()
                with trio.move_on_after(self.api.settings.api_timeout):
                    await self.events.warn(pod.ref, REASON_NETWORK_DATA_REFUSED,
                                           refusal_note(namespace, name, reason))
        return "; ".join(failures)

    async def _write(self, namespace: str, name: str, devices: Mapping[str, Attachment],
                     extended: Mapping[str, str]) -> None:
        """The claim's status with each of its devices ``devices`` names (by device id)
        given its network data; nothing when it has none of them, or they have it
        already."""
        for _ in range(CONFLICT_TRIES):
            claim = await self._claim(namespace, name)
            if claim is None or claim.status.allocation is None:
                return  # deleted (or deallocated) meanwhile: nothing to say
            published = await self._published()
            entries = {h.key: devices[h.device_id] for h in held_in(
                name, claim.status.allocation.devices.results, published, extended)
                if h.device_id in devices}
            if not entries:
                return
            new = merged(claim.status.devices, entries, timestamp(time.time()))
            if new == claim.status.devices:
                return
            body = {"metadata": {"resourceVersion": claim.metadata.resourceVersion},
                    "status": {"devices": new}}
            try:
                await self.api.request("patch", "PATCH", f"{claim_path(namespace, name)}/status",
                                       body=msgspec.json.encode(body),
                                       content_type=PATCH_MERGE)
            except ApiError as exc:
                if exc.status == 409:
                    continue
                raise
            return
        raise CNIError(TRY_AGAIN_LATER, f"ResourceClaim {namespace}/{name}: the status kept "
                       f"changing ({CONFLICT_TRIES} conflicts)")
