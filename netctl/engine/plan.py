"""From one invocation to the list of attachments it needs. Pure but for network lookup.

The netctl conf names the pod's cluster network (``clusterNetwork`` on CNI_IFNAME),
networks every pod gets (``defaultNetworks``) or inline ``delegates`` (the first on
CNI_IFNAME); the pod's own selection (a :class:`~netctl.engine.choice.Choice`) adds more,
and may replace the cluster network or skip ``defaultNetworks``.
"""

from __future__ import annotations

from typing import Any

from netctl.cni.request import Invocation
from netctl.engine import selection
from netctl.engine.choice import Choice, Resolver, ref
from netctl.engine.conf import NetctlConf
from netctl.engine.networks import Network, inline
from netctl.engine.requests import runtime_requests
from netctl.errors import CNIError, NotListedYet, Refusal
from netctl.ipam import sticky
from netctl.journal.records import Attachment
from netctl.kubeapi.objects import REASON_BAD_ANNOTATION


def plan(conf: NetctlConf, inv: Invocation, choice: Choice,
         networks: Resolver) -> list[Attachment]:
    namespace = inv.pod.namespace or "default"
    home = choice.home or namespace

    def resolve(ref: str, where: str) -> Network:
        try:
            return networks.resolve(ref, where)
        except CNIError as exc:
            raise _as_pods(exc, choice) from None

    # each: the network, is it the cluster network, its capability and CNI args, its
    # interface, the default-route it asks for
    planned: list[tuple[Network, bool, dict[str, Any], dict[str, Any], str | None,
                        list[str] | None]] = []
    extra: list[tuple[Network, selection.Selection | None]]
    cluster_caps = runtime_requests(conf.runtimeConfig, inv.args)
    override = resolve(ref(choice.cluster), home) if choice.cluster else None
    cluster_args = dict(choice.cluster.cni_args or {}) if choice.cluster else {}
    cluster_route = choice.cluster.default_route if choice.cluster else None
    if conf.delegates:
        first, *rest = [inline(d, i) for i, d in enumerate(conf.delegates)]
        planned.append((override or first, True, cluster_caps, cluster_args, inv.ifname,
                        cluster_route))
        extra = [(net, None) for net in rest]
    else:
        cluster = override or resolve(conf.clusterNetwork, home)
        planned.append((cluster, True, cluster_caps, cluster_args, inv.ifname,
                        cluster_route))
        extra = [] if choice.skip_defaults else [
            (resolve(ref, home), None) for ref in conf.defaultNetworks]
    for chose in choice.networks:
        extra.append((resolve(ref(chose), namespace), chose))
    try:
        names = selection.assign_ifnames(inv.ifname,
                                         [s.interface if s else None for _, s in extra])
    except CNIError as exc:
        raise _as_pods(exc, choice) from None
    for (net, sel), name in zip(extra, names, strict=True):
        planned.append((net, False, sel.capability_args() if sel else {},
                        dict(sel.cni_args) if sel and sel.cni_args else {}, name,
                        sel.default_route if sel else None))
    return [Attachment(container_id=inv.container_id, ifname=str(ifname), network=net.key,
                       chain=net.chain, resource=net.resource, is_default=default,
                       caller_network=conf.name,
                       caller_ifname=inv.ifname, netns=inv.netns, pod=inv.pod,
                       capability_args=caps, cni_args=cni_args,
                       identity=choice.identity or sticky.identity(inv.pod),
                       default_route=list(gateways or []))
            for net, default, caps, cni_args, ifname, gateways in planned]


def _as_pods(exc: CNIError, choice: Choice) -> CNIError:
    """In Kubernetes mode a network the pod cannot have is refused as the pod's (its
    message names the pod, the pod gets an Event)."""
    if choice.pod is None or isinstance(exc, NotListedYet):  # not the pod's fault: no Event
        return exc
    if isinstance(exc, Refusal):
        return exc.for_pod(choice.pod.key)
    return Refusal(exc.msg, REASON_BAD_ANNOTATION, exc.msg, exc.code).for_pod(choice.pod.key)
