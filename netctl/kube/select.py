"""Kubernetes mode: which networks a pod gets, read from its annotations as Multus reads them
(``pkg/k8sclient/k8sclient.go``, ``pkg/types/conf.go``); the rules are in docs/networks.md
("Kubernetes mode").

:class:`KubeSelector` is the engine's :class:`~netctl.engine.choice.Selector` in this mode.
The pod's annotations come from the runtime when it passes them (then no API read at all),
else from the pod cache (:class:`PodLookup`), whose pod must carry the runtime's UID
(:func:`check_pod`). The decision is the pure :func:`choose`; what it refuses is a
:class:`~netctl.errors.Refusal` (code 7) naming the pod and the bad part.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

import msgspec

from netctl.cni.request import Invocation
from netctl.cni.request import Pod as PodRef
from netctl.engine import selection
from netctl.engine.choice import Choice
from netctl.engine.conf import NetctlConf
from netctl.engine.requests import requested_ips, requested_mac
from netctl.errors import INVALID_CONFIG, INVALID_ENVIRONMENT, CNIError, Refusal
from netctl.ipam import sticky
from netctl.kubeapi.objects import (
    DEFAULT_NETWORK,
    NETWORKS,
    REASON_BAD_ANNOTATION,
    REASON_FORBIDDEN,
    RUNTIME_ANNOTATIONS,
    Pod,
    is_static,
)

_OCTET_RE = re.compile(r"^[0-9A-Fa-f]{2}$")


class PodLookup(Protocol):
    """The Kubernetes client's pod cache (:class:`netctl.kubeapi.pods.PodSource`)."""

    async def lookup(self, namespace: str, name: str) -> Pod | None:
        """The pod, or None when the API server has no pod of that name: from the cache,
        else after a short wait for the watch, else from one GET.
        ``CNIError(TRY_AGAIN_LATER)`` naming the API server when it cannot be asked."""
        ...

    def cached(self, namespace: str, name: str) -> Pod | None:
        """The pod as the cache has it now, or None (no wait, no request)."""
        ...

    def chosen_for_add(self, container_id: str, pod: Pod) -> None:
        """An ADD of ``container_id`` chose its networks from ``pod``'s annotations."""
        ...


class KubeSelector:
    """The pod's networks from its annotations: the runtime's copy, else the API's."""

    def __init__(self, pods: PodLookup) -> None:
        self.pods = pods

    async def select(self, conf: NetctlConf, inv: Invocation) -> Choice:
        pod = inv.pod
        if not pod.namespace or not pod.name:
            return choose(conf, pod, {}, inv.ifname)  # no pod named: the config alone
        annotations = runtime_annotations(conf)
        if annotations is None:
            found = await self.pods.lookup(pod.namespace, pod.name)
            check_pod(inv.verb, pod, found)  # refuses an ADD for a pod the API lacks
            annotations = found.metadata.annotations if found is not None else {}
            if inv.verb == "ADD" and found is not None:
                self.pods.chosen_for_add(inv.container_id, found)
        else:  # the labels (a VM's name) from the cache only: no wait, no request
            found = self.pods.cached(pod.namespace, pod.name)
        return replace(choose(conf, pod, annotations, inv.ifname), identity=sticky.identity(
            pod, annotations, found.metadata.labels if found is not None else None))


def runtime_annotations(conf: NetctlConf) -> Mapping[str, Any] | None:
    """The pod's annotations as the runtime passed them; None when it did not."""
    value = conf.runtimeConfig.get(RUNTIME_ANNOTATIONS)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise CNIError(INVALID_CONFIG, f"runtimeConfig {RUNTIME_ANNOTATIONS!r} is not an "
                       "object of annotations")
    return value


def check_pod(verb: str, pod: PodRef, found: Pod | None) -> str:
    """Whether the API's pod is the one the runtime names (``K8S_POD_UID``): "" when it
    is (or either UID is unknown, or it is a static pod, whose mirror has its own UID).
    Otherwise the pod was deleted or replaced under the same name (a StatefulSet's):
    an ADD is refused with code 4 naming both UIDs; any other verb gets the warning.
    (A cache still holding the replaced pod refuses the same way; kubelet's retry of the
    sandbox finds the new pod once the watch has brought it.)"""
    ref = pod.key
    if found is None:
        msg = f"pod {ref} (uid {pod.uid or 'not given'}) is not in the API server: deleted?"
    elif pod.uid and found.metadata.uid and pod.uid != found.metadata.uid \
            and not is_static(found):
        msg = (f"pod {ref}: the runtime's K8S_POD_UID is {pod.uid} but the API server's "
               f"pod of that name has uid {found.metadata.uid}: the pod was replaced")
    else:
        return ""
    if verb == "ADD":
        raise CNIError(INVALID_ENVIRONMENT, msg)
    return msg


def choose(conf: NetctlConf, pod: PodRef, annotations: Mapping[str, Any],
           ifname: str) -> Choice:
    """The pod's :class:`~netctl.engine.choice.Choice` from its annotations."""
    ref = pod.key
    home = conf.multusNamespace
    networks: list[selection.Selection] = []
    if NETWORKS in annotations:
        text = _annotation(annotations, NETWORKS, ref)
        for sel in _parse(text, NETWORKS, ref):
            sel = msgspec.structs.replace(sel, namespace=sel.namespace or pod.namespace)
            _check_fields(sel, NETWORKS, ref)
            _check_isolation(conf, pod, sel, NETWORKS, ())
            networks.append(sel)
    cluster = None
    if DEFAULT_NETWORK in annotations:
        text = _annotation(annotations, DEFAULT_NETWORK, ref)
        if not text.strip():
            raise _refusal(ref, DEFAULT_NETWORK, "is empty: name one network")
        found = _parse(text, DEFAULT_NETWORK, ref)
        if len(found) != 1:
            raise _refusal(ref, DEFAULT_NETWORK, f"names {len(found)} networks: the cluster "
                           "network is one")
        cluster = msgspec.structs.replace(found[0], namespace=found[0].namespace or home)
        if cluster.interface not in (None, ifname):
            raise _refusal(ref, DEFAULT_NETWORK, f"asks for interface {cluster.interface!r}: "
                           f"the cluster network is on the runtime's interface {ifname!r}")
        _check_fields(cluster, DEFAULT_NETWORK, ref)
        _check_isolation(conf, pod, cluster, DEFAULT_NETWORK, (home,))
    _check_gateways([*networks, *([cluster] if cluster else [])], ref)
    return Choice(networks=networks, cluster=cluster, home=home,
                  skip_defaults=pod.namespace in conf.systemNamespaces,
                  pod=pod if pod.namespace and pod.name else None)


def _refusal(ref: str, key: str, why: str, reason: str = REASON_BAD_ANNOTATION) -> Refusal:
    return Refusal(f"pod {ref}: annotation {key} {why}", reason, f"annotation {key} {why}",
                   named=True)


def _annotation(annotations: Mapping[str, Any], key: str, ref: str) -> str:
    value = annotations[key]
    if not isinstance(value, str):
        raise _refusal(ref, key, f"is not a string but {type(value).__name__}")
    return value


def _parse(text: str, key: str, ref: str) -> list[selection.Selection]:
    try:
        return selection.parse(text)
    except CNIError as exc:
        why = exc.msg.removeprefix("network selection: ")
        raise _refusal(ref, key, f"is malformed: {why}") from None


def _check_fields(sel: selection.Selection, key: str, ref: str) -> None:
    """The values Multus checks when it parses the annotation, checked before anything
    runs (the chains would refuse some of them only half-way through an ADD)."""
    where = f"network {sel.namespace}/{sel.name}"
    try:
        requested_ips(sel.ips, where)
        requested_mac(sel.mac, where)
    except CNIError as exc:
        raise _refusal(ref, key, f"is malformed: {exc.msg}") from None
    if sel.infiniband_guid is not None and not _hardware_address(sel.infiniband_guid):
        raise _refusal(ref, key, f"is malformed: {where}: infiniband-guid "
                       f"{sel.infiniband_guid[:60]!r} is not a hardware address")
    for gateway in sel.default_route or []:
        try:
            ipaddress.ip_address(gateway)
        except ValueError:
            raise _refusal(ref, key, f"is malformed: {where}: default-route "
                           f"{gateway[:60]!r} is not an IP address") from None


def _hardware_address(text: str) -> bool:
    """As Go's ``net.ParseMAC`` (Multus checks ``infiniband-guid`` with it): 6, 8 or 20
    hex octets separated by ``:`` or ``-``."""
    return any(len(parts) in (6, 8, 20) and all(map(_OCTET_RE.fullmatch, parts))
               for parts in (text.split(":"), text.split("-")))


def _check_gateways(chosen: list[selection.Selection], ref: str) -> None:
    """At most one default-route gateway per address family across the pod (Multus'
    ``CheckGatewayConfig``: no ECMP)."""
    for version in (4, 6):
        gateways = [f"{s.namespace}/{s.name}: {gw}" for s in chosen
                    for gw in s.default_route or []
                    if ipaddress.ip_address(gw).version == version]
        if len(gateways) > 1:
            raise _refusal(ref, NETWORKS, f"asks for {len(gateways)} IPv{version} default "
                           f"routes ({'; '.join(gateways)}): at most one (no ECMP)")


def _check_isolation(conf: NetctlConf, pod: PodRef, sel: selection.Selection, key: str,
                     also: tuple[str, ...]) -> None:
    """``namespaceIsolation``: a pod's NADs from its namespace, a global one, or ``also``."""
    allowed = [pod.namespace, *conf.global_namespaces(), *also]
    if not conf.namespaceIsolation or sel.namespace in allowed:
        return
    ref = pod.key
    raise _refusal(ref, key, f"refers to NetworkAttachmentDefinition "
                   f"{sel.namespace}/{sel.name}, outside the pod's namespace: with "
                   f"namespaceIsolation a pod may use those of "
                   f"{', '.join(dict.fromkeys(allowed))} only", REASON_FORBIDDEN)
