"""DRA: a pod's network devices from its ResourceClaims, and the network data written back.

With Dynamic Resource Allocation (``resource.k8s.io/v1``, Kubernetes 1.34 and later) a
pod names ResourceClaims; the scheduler allocates devices a DRA driver publishes in
ResourceSlices, and the pod's ``status.resourceClaimStatuses`` names the claim each of
its references became. A device meant for a CNI network carries, in its slice, the
attributes Multus reads (v4.3.1):

- ``k8s.cni.cncf.io/resourceName``: the resource a NAD's
  ``k8s.v1.cni.cncf.io/resourceName`` names — how a device is matched to a network;
- ``k8s.cni.cncf.io/deviceID``: the id its delegate gets (a PCI address for SR-IOV).

A device without them (a GPU in the same claim) is no network's and is left alone.

:class:`ClaimDevices` answers :meth:`allocated` for an ADD: each claim of the pod read
with one GET (a pod's claims are its own: few, and read only for a pod that has some and
a network that names a resource — no daemon watches every claim of the cluster), each
allocated device looked up in the node's slices, which are watched (list, then watch,
``fieldSelector=spec.nodeName=<node>``: this node's only), from the first pod with claims
on. After the ADD, :meth:`report` writes, for each attached device, the claim's
``status.devices[]`` entry (KEP-4817): ``networkData`` (interface name, addresses,
hardware address) and a ``Ready`` condition, other entries — a driver's own — kept; a
merge patch of the ``status`` subresource with the claim's resourceVersion as its
precondition, read again and retried on a conflict. The RBAC it needs: ``get`` on
resourceclaims, ``patch`` on resourceclaims/status, ``list`` and ``watch`` on
resourceslices.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec
import trio

from netctl.errors import TRY_AGAIN_LATER, CNIError
from netctl.journal.records import Attachment
from netctl.kube.client.api import PATCH_MERGE, Api, ApiError
from netctl.kube.client.informer import Informer
from netctl.kube.client.objects import Meta, Pod, Slice

log = logging.getLogger("netctl.kube")

DRA = "/apis/resource.k8s.io/v1"
SLICES = f"{DRA}/resourceslices"
RESOURCE_ATTR = "k8s.cni.cncf.io/resourceName"
DEVICE_ATTR = "k8s.cni.cncf.io/deviceID"
CONFLICT_TRIES = 5


def claim_path(namespace: str, name: str) -> str:
    return f"{DRA}/namespaces/{namespace}/resourceclaims/{name}"


class Result(msgspec.Struct, forbid_unknown_fields=False):
    """One allocated device of a claim (``status.allocation.devices.results[]``)."""

    driver: str = ""
    pool: str = ""
    device: str = ""
    request: str = ""


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


class Held(msgspec.Struct, frozen=True):
    """A network device allocated through a claim: the claim, where the device is
    published, and what a network knows it by."""

    claim: str
    driver: str
    pool: str
    device: str
    resource: str
    device_id: str


def network_data(att: Attachment) -> dict[str, Any]:
    """KEP-4817's ``networkData`` of an attachment, from its CNI result: the interface,
    its addresses (CIDR form), its hardware address."""
    result = att.result or {}
    interfaces = [i if isinstance(i, dict) else {} for i in result.get("interfaces") or []]
    index = next((n for n, i in enumerate(interfaces)
                  if i.get("name") == att.ifname and i.get("sandbox")), None)
    ips = []
    for ip in result.get("ips") or []:
        if not isinstance(ip, dict):
            continue
        if index is not None and ip.get("interface") not in (None, index):
            continue
        try:
            ips.append(str(ipaddress.ip_interface(str(ip.get("address")))))
        except ValueError:
            continue
    data: dict[str, Any] = {"interfaceName": att.ifname, "ips": ips}
    mac = interfaces[index].get("mac") if index is not None else None
    if mac:
        data["hardwareAddress"] = str(mac)
    return data


class ClaimDevices:
    """A pod's network devices from its claims; their status written back (module doc)."""

    def __init__(self, api: Api, node: str, wait: float = 2.0) -> None:
        self.api, self.node, self.wait = api, node, wait
        self.slices: Informer[Slice] = Informer(api, Slice, SLICES,
                                                [("fieldSelector", f"spec.nodeName={node}")])
        self._nursery: trio.Nursery | None = None
        self._watching = False
        self.writes = self.conflicts = 0

    async def run(self) -> None:
        """Hold the nursery the slices' watch starts in (when first needed)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await trio.sleep_forever()

    def _attribute(self, driver: str, pool: str, device: str, name: str) -> str:
        for sl in self.slices.cache.values():
            if sl.spec.driver != driver or sl.spec.pool.name != pool:
                continue
            for dev in sl.spec.devices:
                if dev.name == device:
                    value = dev.attributes.get(name)
                    return value.text() if value is not None else ""
        return ""

    async def _slices(self) -> None:
        """The node's slices, watched from the first call on (code 11 when their first
        list does not come within ``wait``)."""
        if not self._watching and self._nursery is not None:
            self._watching = True
            self._nursery.start_soon(self.slices.run)
        if not self.slices.synced.is_set():
            await self.slices.wait_synced(self.wait)
        if not self.slices.synced.is_set():
            raise CNIError(TRY_AGAIN_LATER, f"the ResourceSlices of node {self.node} are not "
                           f"listed yet ({self.slices.state}); try again later")

    async def _claim(self, namespace: str, name: str) -> Claim | None:
        try:
            raw = await self.api.get(claim_path(namespace, name))
        except ApiError as exc:
            raise CNIError(TRY_AGAIN_LATER, f"ResourceClaim {namespace}/{name}: {exc.reason}"
                           ) from None
        return None if raw is None else msgspec.json.decode(raw, type=Claim)

    def _held_in(self, name: str, claim: Claim) -> list[Held]:
        """The network devices (those with a resourceName attribute) allocated through
        ``claim`` (named ``name``), in result order."""
        if claim.status.allocation is None:
            return []  # not allocated (yet): the pod has no device from it
        out = []
        for r in claim.status.allocation.devices.results:
            resource = self._attribute(r.driver, r.pool, r.device, RESOURCE_ATTR)
            device_id = self._attribute(r.driver, r.pool, r.device, DEVICE_ATTR)
            if resource and device_id:
                out.append(Held(name, r.driver, r.pool, r.device, resource, device_id))
        return out

    async def held(self, pod: Pod) -> list[Held]:
        """The network devices allocated to ``pod`` through its claims, in claim and result
        order (each claim read once)."""
        if not pod.claims:
            return []
        await self._slices()
        out = []
        for name in pod.claims:
            claim = await self._claim(pod.metadata.namespace, name)
            if claim is not None:
                out += self._held_in(name, claim)
        return out

    async def allocated(self, pod: Pod, resources: Collection[str]) -> dict[str, list[str]]:
        """The device ids of ``resources`` the pod's claims hold, by resource."""
        out: dict[str, list[str]] = {}
        for h in await self.held(pod):
            if h.resource in resources and h.device_id not in out.get(h.resource, []):
                out.setdefault(h.resource, []).append(h.device_id)
        return out

    async def report(self, pod: Pod, atts: Sequence[Attachment]) -> str:
        """Each attached device's claim status: ``networkData`` and ``Ready``; "" or what
        could not be written (a warning: the ADD stands). Each claim is read once, for the
        write's precondition (the ADD's own read found its devices)."""
        devices = {a.device: a for a in atts if a.device and a.result is not None}
        if not devices:
            return ""
        failures = []
        for name in pod.claims:
            try:
                await self._write(pod.metadata.namespace, name, devices)
            except (ApiError, CNIError) as exc:
                failures.append(f"ResourceClaim {pod.metadata.namespace}/{name}: "
                                f"{getattr(exc, 'reason', None) or getattr(exc, 'msg', exc)}")
        return "; ".join(failures)

    async def _write(self, namespace: str, name: str,
                     devices: Mapping[str, Attachment]) -> None:
        """The claim's status with each of its devices ``devices`` names (by device id)
        given its network data; nothing when it has none of them."""
        for _ in range(CONFLICT_TRIES):
            claim = await self._claim(namespace, name)
            if claim is None:
                return  # deleted meanwhile: nothing to say
            entries = {(h.driver, h.pool, h.device): devices[h.device_id]
                       for h in self._held_in(name, claim) if h.device_id in devices}
            if not entries:
                return
            body = {"metadata": {"resourceVersion": claim.metadata.resourceVersion},
                    "status": {"devices": _merged(claim.status.devices, entries)}}
            try:
                await self.api.request("patch", "PATCH", f"{claim_path(namespace, name)}/status",
                                       body=msgspec.json.encode(body),
                                       content_type=PATCH_MERGE)
            except ApiError as exc:
                if exc.status == 409:
                    self.conflicts += 1
                    continue
                raise
            self.writes += 1
            return
        raise CNIError(TRY_AGAIN_LATER, f"ResourceClaim {namespace}/{name}: the status kept "
                       f"changing ({CONFLICT_TRIES} conflicts)")


def _merged(current: Sequence[dict[str, Any]],
            entries: Mapping[tuple[str, str, str], Attachment]) -> list[dict[str, Any]]:
    """``status.devices`` with each of ``entries``' devices given its network data and
    a Ready condition; other devices' entries, and other conditions, kept."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = [dict(d) for d in current]
    for (driver, pool, device), att in entries.items():
        entry = next((d for d in out if (d.get("driver"), d.get("pool"), d.get("device"))
                      == (driver, pool, device)), None)
        if entry is None:
            entry = {"driver": driver, "pool": pool, "device": device}
            out.append(entry)
        entry["networkData"] = network_data(att)
        conditions = [c for c in entry.get("conditions") or []
                      if isinstance(c, dict) and c.get("type") != "Ready"]
        conditions.append({"type": "Ready", "status": "True", "reason": "NetworkReady",
                           "message": f"attached as {att.ifname} by netctl "
                                      f"(network {att.network})",
                           "lastTransitionTime": now})
        entry["conditions"] = conditions
    return out
