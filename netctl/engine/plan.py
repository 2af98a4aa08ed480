"""From one request to the list of attachments it needs. Pure but for network lookup.

The netctl conf names the pod's cluster network (``clusterNetwork`` on
CNI_IFNAME), networks every pod gets (``defaultNetworks``), or Multus-style
inline ``delegates`` (the first on CNI_IFNAME); the pod's own selection
(``NETCTL_NETWORKS`` in CNI_ARGS) adds more. Each becomes an
:class:`AttachmentPlan` with its interface name, chain and arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from netctl.cni import versions
from netctl.cni.config import Chain
from netctl.cni.validate import parse_cni_args
from netctl.engine import selection
from netctl.engine.networks import Network, inline
from netctl.errors import DECODE_FAILURE, INVALID_CONFIG, CNIError

SELECTION_ARG = "NETCTL_NETWORKS"


class NetctlConf(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """The meta-plugin's own network config, as the runtime passes it."""

    cniVersion: str
    name: str
    type: str = "netctl-cni"
    socket: str = ""
    clusterNetwork: str = ""
    defaultNetworks: list[str] = []
    delegates: list[dict[str, Any]] = []
    runtimeConfig: dict[str, Any] = {}
    prevResult: dict[str, Any] | None = None
    valid_attachments: list[dict[str, Any]] | None = msgspec.field(
        default=None, name="cni.dev/valid-attachments")


def decode_conf(raw: str) -> NetctlConf:
    try:
        conf = msgspec.json.decode(raw.encode(), type=NetctlConf)
    except msgspec.ValidationError as exc:
        raise CNIError(INVALID_CONFIG, f"netctl config: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise CNIError(DECODE_FAILURE, f"netctl config on stdin is not valid JSON: {exc}") from exc
    versions.check_supported(conf.cniVersion)
    if conf.delegates and (conf.clusterNetwork or conf.defaultNetworks):
        raise CNIError(INVALID_CONFIG, "netctl config: 'delegates' cannot be combined with "
                       "'clusterNetwork' or 'defaultNetworks'")
    if not conf.delegates and not conf.clusterNetwork:
        raise CNIError(INVALID_CONFIG, "netctl config: set 'clusterNetwork' or 'delegates'")
    return conf


class Resolver(Protocol):
    def resolve(self, ref: str, namespace: str) -> Network: ...


@dataclass(frozen=True)
class Pod:
    namespace: str = ""
    name: str = ""
    uid: str = ""

    @classmethod
    def from_args(cls, args: dict[str, str]) -> Pod:
        return cls(args.get("K8S_POD_NAMESPACE", ""), args.get("K8S_POD_NAME", ""),
                   args.get("K8S_POD_UID", ""))


@dataclass(frozen=True)
class AttachmentPlan:
    network: str
    ifname: str
    chain: Chain
    is_default: bool
    capability_args: dict[str, Any] = field(default_factory=dict)
    cni_args: dict[str, Any] = field(default_factory=dict)


def plan(conf: NetctlConf, ifname: str, cni_args: str, networks: Resolver) -> list[AttachmentPlan]:
    args = parse_cni_args(cni_args)
    pod = Pod.from_args(args)
    namespace = pod.namespace or "default"
    out: list[AttachmentPlan] = []
    extra: list[tuple[Network, selection.Selection | None]] = []
    if conf.delegates:
        first, *rest = [inline(d, i) for i, d in enumerate(conf.delegates)]
        out.append(AttachmentPlan(first.key, ifname, first.chain, True,
                                  dict(conf.runtimeConfig)))
        extra.extend((net, None) for net in rest)
    else:
        cluster = networks.resolve(conf.clusterNetwork, namespace)
        out.append(AttachmentPlan(cluster.key, ifname, cluster.chain, True,
                                  dict(conf.runtimeConfig)))
        extra.extend((networks.resolve(ref, namespace), None) for ref in conf.defaultNetworks)
    for chosen in selection.parse(args.get(SELECTION_ARG, "")):
        ref = f"{chosen.namespace}/{chosen.name}" if chosen.namespace else chosen.name
        extra.append((networks.resolve(ref, namespace), chosen))
    names = selection.assign_ifnames(ifname, [s.interface if s else None for _, s in extra])
    for (net, sel), name in zip(extra, names, strict=True):
        out.append(AttachmentPlan(
            net.key, name, net.chain, False,
            sel.capability_args() if sel else {},
            dict(sel.cni_args) if sel and sel.cni_args else {},
        ))
    return out
