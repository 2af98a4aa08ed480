"""DELs for containers netctl never saw: pods created before the switch from Multus.

After a node switches from Multus (thick or thin) to netctl, the pods created before
the switch are still there, and when they are deleted their DEL reaches netctl — which
has no record of them. Answering "nothing to do" would leak what their delegates hold
(an IPAM reservation, a host veth) for ever. So a DEL for a container the journal has
never seen is carried out as Multus would have carried it out:

- **Multus' own record** of the container, when there is one: its scratch cache,
  ``<cniDir>/<containerID>`` (``cniDir`` defaults to ``/var/lib/cni/multus``), a JSON
  list of the delegates it ran, the cluster network first. Each entry holds the
  delegate's config as it ran it — ``Bytes`` (the raw conf or conflist, base64, as Go
  encodes a byte slice), else ``ConfList`` (when it has plugins) or ``Conf`` — and its
  interface: the cluster network on the DEL's CNI_IFNAME, each other on its
  ``ifnameRequest``, else ``net<position>``. (:func:`multus_cache`.)
- **Otherwise** the runtime's cluster network alone (the conf's ``clusterNetwork``, or
  its first delegate), on CNI_IFNAME: what Multus does when its cache is gone.

Each chain gets its DEL in reverse, with the result libcni cached for it
(``/var/lib/cni/results/<network>-<container>-<ifname>``) as ``prevResult`` when there
is one. A DEL of what is already gone succeeds, by the spec, so running these for a
container that in fact had nothing (an ADD netctl refused before it journaled anything)
costs an exec per plugin and harms nothing. Pure: the daemon's engine reads the files and
runs the chains (:meth:`netctl.engine.engine.Engine.delete`).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from typing import Any

DEFAULT_MULTUS_CACHE = "/var/lib/cni/multus"
DEFAULT_RESULTS_CACHE = "/var/lib/cni/results"


@dataclass(frozen=True)
class ForeignNet:
    """One network of a container netctl never saw: its config as it ran, its interface."""

    name: str
    ifname: str
    config: dict[str, Any]  # a conf or a conflist


def _config(item: dict[str, Any]) -> dict[str, Any] | None:
    raw = item.get("Bytes")
    if isinstance(raw, str) and raw:
        try:
            obj = json.loads(base64.b64decode(raw, validate=True))
        except (ValueError, binascii.Error):
            obj = None
        if isinstance(obj, dict) and (obj.get("type") or obj.get("plugins")):
            return obj
    conflist = item.get("ConfList")
    if isinstance(conflist, dict) and conflist.get("plugins"):
        return conflist
    conf = item.get("Conf")
    if isinstance(conf, dict) and conf.get("type"):
        return conf
    return None


def multus_cache(raw: bytes, ifname: str) -> list[ForeignNet]:
    """The delegates Multus recorded for a container (its scratch cache file's bytes),
    cluster network first, each with the interface Multus gave it. Raises ValueError
    when the file is not such a list (a truncated file: the caller falls back to the
    cluster network)."""
    items = json.loads(raw)
    if not isinstance(items, list) or not items:
        raise ValueError("not a non-empty JSON list of delegates")
    out = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"delegate {index} is not a JSON object")
        config = _config(item)
        if config is None:
            raise ValueError(f"delegate {index} has no config (Bytes, ConfList or Conf)")
        name = item.get("Name") or config.get("name") or f"delegate-{index}"
        request = item.get("ifnameRequest")
        wanted = ifname if index == 0 else (request if isinstance(request, str) and request
                                            else f"net{index}")
        out.append(ForeignNet(str(name), wanted, config))
    return out


def cache_path(directory: str, container_id: str) -> str | None:
    """Multus' scratch cache file of ``container_id`` (None for an id that is not a plain
    file name: never a path outside the directory)."""
    if not container_id or os.sep in container_id or container_id in (".", ".."):
        return None
    return os.path.join(directory, container_id)


def cached_result(directory: str, network: str, container_id: str,
                  ifname: str) -> dict[str, Any] | None:
    """The ADD result libcni cached for a network of a container, if it did (read-only;
    any problem reads as none)."""
    name = f"{network}-{container_id}-{ifname}"
    if os.sep in name:
        return None
    try:
        with open(os.path.join(directory, name), "rb") as fh:
            obj = json.load(fh)
    except (OSError, ValueError):
        return None
    result = obj.get("result") if isinstance(obj, dict) else None
    return result if isinstance(result, dict) else None
