"""DELs for containers netctl never saw (pods created before the switch from Multus), run as
Multus would have (docs/migrating.md, step 3). Pure: :mod:`netctl.engine.cutover` reads the
files and runs the chains. Multus' cache of a container lists the delegates it ran, cluster
network first; each config is read from the first of (:func:`_config`): the
``CNINetworkConfigList`` libcni ran (Multus v4.2.1+; its ``Bytes`` alone keep only the keys
every config has, which host-local cannot release by), ``Bytes`` (the raw conf or
conflist), ``ConfList`` or ``Conf`` (Multus' parsed forms).
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


def _go_bytes(raw: Any) -> dict[str, Any] | None:
    """A JSON object held in a Go byte slice as Go encodes it (base64), else None."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        obj = json.loads(base64.b64decode(raw, validate=True))
    except (ValueError, binascii.Error):
        return None
    return obj if isinstance(obj, dict) else None


def _network_config_list(item: dict[str, Any]) -> dict[str, Any] | None:
    """The conflist libcni ran, from a delegate's ``CNINetworkConfigList`` (module doc), or
    None when it holds none or a plugin's config is unreadable."""
    ncl = item.get("CNINetworkConfigList")
    if not isinstance(ncl, dict) or not isinstance(ncl.get("Plugins"), list):
        return None
    plugins = [_go_bytes(p.get("Bytes")) if isinstance(p, dict) else None
               for p in ncl["Plugins"]]
    if not plugins or not all(p and p.get("type") for p in plugins):
        return None
    conflist = {**(_go_bytes(ncl.get("Bytes")) or {}), "plugins": plugins}
    for key, field in (("name", "Name"), ("cniVersion", "CNIVersion")):
        if isinstance(ncl.get(field), str) and ncl[field]:
            conflist[key] = ncl[field]
    return conflist


def _config(item: dict[str, Any]) -> dict[str, Any] | None:
    full = _network_config_list(item)
    if full is not None:
        return full
    obj = _go_bytes(item.get("Bytes"))
    if obj is not None and (obj.get("type") or obj.get("plugins")):
        return obj
    conflist = item.get("ConfList")
    if isinstance(conflist, dict) and conflist.get("plugins"):
        return conflist
    conf = item.get("Conf")
    if isinstance(conf, dict) and conf.get("type"):
        return conf
    return None


def multus_cache(raw: bytes, ifname: str) -> list[ForeignNet]:
    """The delegates Multus recorded for a container (its cache file's bytes), cluster
    network first, each with the interface Multus gave it; ValueError when the file is not
    such a list (the caller falls back to the cluster network)."""
    items = json.loads(raw)
    if not isinstance(items, list) or not items:
        raise ValueError("not a non-empty JSON list of delegates")
    out = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"delegate {index} is not a JSON object")
        config = _config(item)
        if config is None:
            raise ValueError(f"delegate {index} has no config (CNINetworkConfigList, Bytes, "
                             "ConfList or Conf)")
        name = item.get("Name") or config.get("name") or f"delegate-{index}"
        request = item.get("ifnameRequest")
        wanted = ifname if index == 0 else (request if isinstance(request, str) and request
                                            else f"net{index}")
        out.append(ForeignNet(str(name), wanted, config))
    return out


def cache_path(directory: str, container_id: str) -> str | None:
    """Multus' cache file of ``container_id`` (None for an id that is not a plain file name)."""
    if not container_id or os.sep in container_id or container_id in (".", ".."):
        return None
    return os.path.join(directory, container_id)


def cached_result(directory: str, network: str, container_id: str,
                  ifname: str) -> dict[str, Any] | None:
    """The ADD result libcni cached for a network of a container (any problem: None)."""
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
