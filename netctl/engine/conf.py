"""The meta-plugin's own network config (:class:`NetctlConf`: Multus' keys with Multus'
names and defaults), decoded once per invocation (:class:`Call`). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from netctl.cni.request import GCList, Invocation, conf_as
from netctl.errors import INVALID_CONFIG, CNIError

SYSTEM_NAMESPACES = ["kube-system"]  # Multus' default (copied for each conf)


class NetctlConf(GCList, kw_only=True, forbid_unknown_fields=False):
    """The meta-plugin's own network config. Multus' keys keep Multus' names and defaults
    and match in any letter case (:data:`MULTUS_KEYS`)."""

    cniVersion: str
    name: str
    type: str = "netctl-cni"
    socket: str = ""
    clusterNetwork: str = ""
    defaultNetworks: list[str] = []
    delegates: list[dict[str, Any]] = []
    runtimeConfig: dict[str, Any] = {}
    prevResult: dict[str, Any] | None = None
    # Kubernetes mode (Multus' keys):
    multusNamespace: str = "kube-system"  # where clusterNetwork/defaultNetworks NADs live
    systemNamespaces: list[str] = msgspec.field(  # their pods get no defaultNetworks
        default_factory=SYSTEM_NAMESPACES.copy)
    namespaceIsolation: bool = False  # a pod may use NADs of its namespace (and global ones)
    globalNamespaces: str | list[str] = ""  # Multus: comma-separated; "" means ["default"]
    readinessindicatorfile: str = ""  # ADD waits for this file; STATUS not ready without it

    def global_namespaces(self) -> list[str]:
        """The namespaces any pod may take NADs from under ``namespaceIsolation``:
        ``globalNamespaces`` (comma-separated, or a list), else ``default``."""
        raw = self.globalNamespaces
        names = raw.split(",") if isinstance(raw, str) else raw
        names = [n.strip() for n in names if n.strip()]
        return names or ["default"]


MULTUS_KEYS = ("clusterNetwork", "defaultNetworks", "delegates", "multusNamespace",
               "systemNamespaces", "namespaceIsolation", "globalNamespaces",
               "readinessindicatorfile")


def decode_conf(inv: Invocation) -> NetctlConf:
    conf = conf_as(inv, NetctlConf, "netctl config", any_case=MULTUS_KEYS)
    if conf.delegates and (conf.clusterNetwork or conf.defaultNetworks):
        raise CNIError(INVALID_CONFIG, "netctl config: 'delegates' cannot be combined with "
                       "'clusterNetwork' or 'defaultNetworks'")
    if not conf.delegates and not conf.clusterNetwork:
        raise CNIError(INVALID_CONFIG, "netctl config: set 'clusterNetwork' or 'delegates'")
    return conf


@dataclass
class Call:
    """One invocation of netctl-cni and its netctl conf, decoded when first asked for (by
    the version gate, for every verb that has one); a DEL never asks unless its container
    is unknown (:mod:`netctl.engine.foreign`)."""

    inv: Invocation
    _conf: NetctlConf | None = None

    @property
    def conf(self) -> NetctlConf:
        if self._conf is None:
            self._conf = decode_conf(self.inv)
        return self._conf
