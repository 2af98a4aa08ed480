"""From one invocation to the list of attachments it needs. Pure but for network lookup.

The netctl conf names the pod's cluster network (``clusterNetwork`` on
CNI_IFNAME), networks every pod gets (``defaultNetworks``), or Multus-style
inline ``delegates`` (the first on CNI_IFNAME); the pod's own selection adds
more. The selection comes in as data — from CNI_ARGS in standalone mode
(:class:`ArgsSelector`), from the pod in Kubernetes mode — and each network
becomes an :class:`~netctl.journal.records.Attachment` with its interface
name, chain and arguments, ready to be journaled.
"""

from __future__ import annotations

from typing import Any, Protocol

from netctl.cni.request import GCList, Invocation, conf_as
from netctl.engine import selection
from netctl.engine.networks import Network, inline
from netctl.errors import INVALID_CONFIG, CNIError
from netctl.journal.records import Attachment

SELECTION_ARG = "NETCTL_NETWORKS"


class NetctlConf(GCList, kw_only=True, forbid_unknown_fields=False):
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


def decode_conf(inv: Invocation) -> NetctlConf:
    conf = conf_as(inv, NetctlConf, "netctl config")
    if conf.delegates and (conf.clusterNetwork or conf.defaultNetworks):
        raise CNIError(INVALID_CONFIG, "netctl config: 'delegates' cannot be combined with "
                       "'clusterNetwork' or 'defaultNetworks'")
    if not conf.delegates and not conf.clusterNetwork:
        raise CNIError(INVALID_CONFIG, "netctl config: set 'clusterNetwork' or 'delegates'")
    return conf


class Resolver(Protocol):
    def resolve(self, ref: str, namespace: str) -> Network: ...


class Selector(Protocol):
    """Where a pod's network selection comes from."""

    async def select(self, inv: Invocation) -> list[selection.Selection]: ...


class ArgsSelector:
    """Standalone mode: ``NETCTL_NETWORKS=<annotation syntax>`` in CNI_ARGS."""

    async def select(self, inv: Invocation) -> list[selection.Selection]:
        return selection.parse(inv.args.get(SELECTION_ARG, ""))


def plan(conf: NetctlConf, inv: Invocation, chosen: list[selection.Selection],
         networks: Resolver) -> list[Attachment]:
    namespace = inv.pod.namespace or "default"
    planned: list[tuple[Network, bool, dict[str, Any], dict[str, Any], str | None]] = []
    extra: list[tuple[Network, selection.Selection | None]]
    if conf.delegates:
        first, *rest = [inline(d, i) for i, d in enumerate(conf.delegates)]
        planned.append((first, True, dict(conf.runtimeConfig), {}, inv.ifname))
        extra = [(net, None) for net in rest]
    else:
        cluster = networks.resolve(conf.clusterNetwork, namespace)
        planned.append((cluster, True, dict(conf.runtimeConfig), {}, inv.ifname))
        extra = [(networks.resolve(ref, namespace), None) for ref in conf.defaultNetworks]
    for chose in chosen:
        ref = f"{chose.namespace}/{chose.name}" if chose.namespace else chose.name
        extra.append((networks.resolve(ref, namespace), chose))
    names = selection.assign_ifnames(inv.ifname, [s.interface if s else None for _, s in extra])
    for (net, sel), name in zip(extra, names, strict=True):
        planned.append((net, False, sel.capability_args() if sel else {},
                        dict(sel.cni_args) if sel and sel.cni_args else {}, name))
    return [Attachment(container_id=inv.container_id, ifname=str(ifname), network=net.key,
                       chain=net.chain, is_default=default, caller_network=conf.name,
                       caller_ifname=inv.ifname, netns=inv.netns, pod=inv.pod,
                       capability_args=caps, cni_args=cni_args)
            for net, default, caps, cni_args, ifname in planned]
