"""Device-info files, as the Network Plumbing WG's device-info spec lays them out
(docs/networks.md, "Device-info"): the device plugin's file for a device copied for the CNI
under the name Multus gives it, passed to the delegates (``runtimeConfig.CNIDeviceInfoFile``),
read back into the pod's network-status and removed at DEL. A device plugin that writes no
file is not a fault.

Paths here are the host's, reached through a :class:`~netctl.cni.hostroot.HostRoot`
(``/var/run`` is a link to ``/run`` on most hosts). The contents are JSON objects of at most
:data:`MAX_BYTES`; anything else is "no device-info", with the reason.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

import msgspec

from netctl.cni.hostroot import HostRoot

BASE = "/var/run/k8s.cni.cncf.io/devinfo"
MAX_BYTES = 64 * 1024


def dp_path(resource: str, device: str, base: str = BASE) -> str:
    """Where the device plugin's file for ``device`` of ``resource`` is."""
    name = f"{resource.replace('/', '-')}-{device.replace('/', '-')}-device.json"
    return posixpath.join(base, "dp", name)


def cni_path(network: str, container_id: str, ifname: str, base: str = BASE) -> str:
    """Where the copy for the CNI of one attachment goes (``network``: its CNI name)."""
    return posixpath.join(base, "cni", f"{network}-{container_id}_{ifname}".replace("/", "-"))


def read(path: str, root: HostRoot = HostRoot()) -> tuple[dict[str, Any] | None, str]:
    """The JSON object in the host's ``path``, or None and why not ("" : no such file)."""
    try:
        with open(root.resolve(path), "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{root.describe(path)}: {exc.strerror}"
    if len(raw) > MAX_BYTES:
        return None, f"{root.describe(path)} is larger than {MAX_BYTES} bytes"
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return None, f"{root.describe(path)} is not JSON: {exc}"
    if not isinstance(obj, dict):
        return None, f"{root.describe(path)} is not a JSON object"
    return obj, ""


def copy_for_cni(resource: str, device: str, target: str,
                 root: HostRoot = HostRoot(), base: str = BASE) -> str:
    """Copy the device plugin's file for ``device`` to ``target`` (made with its
    directory, written whole then renamed into place); "" when done or when the plugin
    wrote none, else why not (not a fault of the ADD)."""
    info, why = read(dp_path(resource, device, base), root)
    if info is None:
        return why
    seen = root.resolve(target)
    try:
        os.makedirs(os.path.dirname(seen), mode=0o755, exist_ok=True)
        temp = f"{seen}.{os.getpid()}.tmp"
        with open(temp, "wb") as fh:
            fh.write(msgspec.json.encode(info))
        os.replace(temp, seen)
    except OSError as exc:
        return f"{root.describe(target)}: {exc.strerror}"
    return ""


def remove(path: str, root: HostRoot = HostRoot()) -> None:
    """Remove the host's ``path`` if it is there."""
    try:
        os.unlink(root.resolve(path))
    except FileNotFoundError:
        pass
