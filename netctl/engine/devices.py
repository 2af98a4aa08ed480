"""Device networks (docs/networks.md, "Device networks"): before anything of an ADD runs,
:func:`give` hands each attachment of a NAD that names a resource one of the pod's devices
(:func:`assign`), and copies its device-info file for the CNI.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

import trio

from netctl.cni.hostroot import HostRoot
from netctl.cni.request import Pod
from netctl.devices import devinfo
from netctl.errors import INVALID_CONFIG, CNIError, Refusal
from netctl.journal.records import Attachment

REASON_NO_DEVICE = "NoDeviceAllocated"  # the Event on a pod refused for want of a device
DEVICE_ID = "deviceID"  # the capability (and conf key) delegates read the device from
DEVICE_INFO_FILE = "CNIDeviceInfoFile"  # the capability naming the device-info file


class DeviceSource(Protocol):
    async def allocated(self, pod: Pod, resources: Collection[str]) -> Mapping[str, list[str]]:
        """The device ids of each of ``resources`` allocated to ``pod`` (one it has none of
        may be missing); code 11 when the source cannot be asked."""
        ...


def assign(wanted: Sequence[tuple[str, str]], allocated: Mapping[str, Sequence[str]],
           held: Collection[str], pod: str) -> list[str]:
    """For each (network, resource) in ``wanted``, in order, a device of its resource from
    ``allocated``, each at most once and none of ``held``; code 7 (a
    :class:`~netctl.errors.Refusal`) when a resource has too few."""
    taken = set(held)
    out = []
    for network, resource in wanted:
        free = [d for d in allocated.get(resource, ()) if d not in taken]
        if not free:
            have = list(allocated.get(resource, ()))
            need = sum(1 for _, r in wanted if r == resource)
            if not have:
                why = (f"the pod was allocated no device of {resource} (does it request "
                       f"{resource} in its containers' resources, or hold a ResourceClaim "
                       "for it?)")
            else:
                why = (f"the pod was allocated {len(have)} device(s) of {resource} "
                       f"({', '.join(have)}) and its networks need {need}"
                       + (f", {len(set(have) & set(held))} already held by its other "
                          "networks" if set(have) & set(held) else ""))
            msg = f"network {network!r} needs a device of resource {resource}: {why}"
            raise Refusal(f"pod {pod}: {msg}", REASON_NO_DEVICE, msg, INVALID_CONFIG, named=True)
        taken.add(free[0])
        out.append(free[0])
    return out


def cni_file(att: Attachment) -> str:
    """The device-info file for the CNI of a device attachment."""
    given = att.capability_args.get(DEVICE_INFO_FILE)
    if isinstance(given, str) and given:
        return given
    return devinfo.cni_path(att.chain.name, att.container_id, att.ifname)


async def give(atts: Sequence[Attachment], source: DeviceSource | None, root: HostRoot,
               held: Collection[str] = ()) -> None:
    """Give every device network of ``atts`` its device (module doc), or refuse the ADD;
    ``held``: devices the container's other live attachments hold."""
    devices = [a for a in atts if a.resource]
    if not devices:
        return
    pod = devices[0].pod
    if source is None:
        raise CNIError(INVALID_CONFIG, f"network {devices[0].network!r} needs a device of "
                       f"resource {devices[0].resource}: device networks need Kubernetes "
                       "mode (the kubelet allocates the devices)")
    if not pod.namespace or not pod.name:
        raise CNIError(INVALID_CONFIG, f"network {devices[0].network!r} needs a device of "
                       f"resource {devices[0].resource}, and the runtime named no pod "
                       "(K8S_POD_NAMESPACE, K8S_POD_NAME) to find the pod's devices by")
    allocated = await source.allocated(pod, {a.resource for a in devices})
    chosen = assign([(a.network, a.resource) for a in devices], allocated, held, pod.key)
    for att, device in zip(devices, chosen, strict=True):
        att.device = device
        att.capability_args = {**att.capability_args, DEVICE_ID: device,
                               DEVICE_INFO_FILE: cni_file(att)}
    await trio.to_thread.run_sync(_copy_device_info, devices, root)


def _copy_device_info(atts: Sequence[Attachment], root: HostRoot) -> None:
    for att in atts:
        devinfo.copy_for_cni(att.resource, att.device, cni_file(att), root)


def device_info(atts: Sequence[Attachment], root: HostRoot
                ) -> dict[str, dict[str, object]]:
    """The device-info of each device attachment that has one, by interface name."""
    out: dict[str, dict[str, object]] = {}
    for att in atts:
        if att.device:
            info, _ = devinfo.read(cni_file(att), root)
            if info is not None:
                out[att.ifname] = info
    return out


def remove_device_info(att: Attachment, root: HostRoot) -> None:
    """Remove the CNI's copy of a device attachment's device-info file."""
    if att.device:
        devinfo.remove(cni_file(att), root)
