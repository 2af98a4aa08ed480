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

    def attachment(net: Network, ifname: str, sel: selection.Selection | None,
                   caps: dict[str, Any] | None = None) -> Attachment:
        """``caps``: the cluster network's (the runtime's requests), else the selection's."""
        return Attachment(
            container_id=inv.container_id, ifname=ifname, network=net.key, chain=net.chain,
            resource=net.resource, is_default=caps is not None, caller_network=conf.name,
            caller_ifname=inv.ifname, netns=inv.netns, pod=inv.pod,
            capability_args=caps if caps is not None else sel.capability_args() if sel else {},
            cni_args=dict(sel.cni_args or {}) if sel else {},
            identity=choice.identity or sticky.identity(inv.pod),
            default_route=list(sel.default_route or []) if sel else [])

    cluster_caps = runtime_requests(conf.runtimeConfig, inv.args)
    override = resolve(ref(choice.cluster), home) if choice.cluster else None
    delegates = [inline(d, i) for i, d in enumerate(conf.delegates)]
    extra: list[tuple[Network, selection.Selection | None]]
    if delegates:
        cluster, extra = override or delegates[0], [(net, None) for net in delegates[1:]]
    else:
        cluster = override or resolve(conf.clusterNetwork, home)
        extra = [] if choice.skip_defaults else [
            (resolve(ref, home), None) for ref in conf.defaultNetworks]
    extra += [(resolve(ref(chose), namespace), chose) for chose in choice.networks]
    try:
        names = selection.assign_ifnames(inv.ifname,
                                         [s.interface if s else None for _, s in extra])
    except CNIError as exc:
        raise _as_pods(exc, choice) from None
    return [attachment(cluster, inv.ifname, choice.cluster, cluster_caps),
            *(attachment(net, name, sel) for (net, sel), name in zip(extra, names, strict=True))]


def _as_pods(exc: CNIError, choice: Choice) -> CNIError:
    """In Kubernetes mode a network the pod cannot have is refused as the pod's (its
    message names the pod, the pod gets an Event)."""
    if choice.pod is None or isinstance(exc, NotListedYet):  # not the pod's fault: no Event
        return exc
    if isinstance(exc, Refusal):
        return exc.for_pod(choice.pod.key)
    return Refusal(exc.msg, REASON_BAD_ANNOTATION, exc.msg, exc.code).for_pod(choice.pod.key)
