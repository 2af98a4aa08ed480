"""What netctl keeps of the Kubernetes objects it watches. Pure: no I/O, no asyncio.

The kube client watches this node's pods and every NetworkAttachmentDefinition, and
keeps of each only what Kubernetes mode reads — a few strings per object — so a cache
of thousands of pods stays small: :class:`KubePod` (identity, node, the annotations
netctl reads, resourceVersion, deletionTimestamp) and :class:`KubeNad` (identity,
``spec.config``, resourceVersion). :func:`pod_from_api` and :func:`nad_from_api` take
an object as the API serves it (the JSON document as a dict; for a kubernetes-asyncio
model, ``ApiClient().sanitize_for_serialization(obj)`` gives that dict).

Like :mod:`netctl.journal.records`, this module is the pure part of its package: the
engine imports it, and it imports nothing that talks to the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

# The annotations Kubernetes mode reads and writes.
NETWORKS = "k8s.v1.cni.cncf.io/networks"  # the pod's network selection (both forms)
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"  # replaces the cluster network
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"  # written after a successful ADD
CONFIG_SOURCE = "kubernetes.io/config.source"  # "api", or "file"/"http" for static pods
KEPT_ANNOTATIONS = frozenset({NETWORKS, DEFAULT_NETWORK, CONFIG_SOURCE})
# the runtimeConfig capability under which CRI-O and containerd pass a pod's annotations
RUNTIME_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"

# The reasons of the Warning Events netctl posts on a pod whose networks it refuses
# (:class:`netctl.errors.Refusal`).
REASON_BAD_ANNOTATION = "InvalidNetworkAnnotation"  # a malformed selection
REASON_NOT_FOUND = "NoNetworkFound"  # no such NAD (Multus' reason)
REASON_FORBIDDEN = "NetworkNotAllowed"  # namespaceIsolation
REASON_BAD_NAD = "InvalidNetworkConfig"  # a NAD whose spec.config netctl cannot run


class KubePod(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One pod as the cache keeps it."""

    namespace: str
    name: str
    uid: str
    node_name: str = ""
    annotations: dict[str, str] = {}  # only those in KEPT_ANNOTATIONS
    resource_version: str = ""
    deletion_timestamp: str | None = None  # RFC 3339, as the API gives it

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_static(self) -> bool:
        """A static pod (from a kubelet manifest): the API holds its mirror, whose UID is
        not the one the kubelet gives the runtime."""
        source = self.annotations.get(CONFIG_SOURCE)
        return source is not None and source != "api"


class KubeNad(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One NetworkAttachmentDefinition as the cache keeps it."""

    namespace: str
    name: str
    config: str = ""  # spec.config; empty: the conf file of that name in the conf dir
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def pod_from_api(obj: Mapping[str, Any]) -> KubePod:
    """Keep of an API pod (its JSON document as a dict) what netctl reads."""
    meta = _section(obj, "metadata")
    annotations = _section(meta, "annotations")
    return KubePod(
        namespace=_text(meta.get("namespace")), name=_text(meta.get("name")),
        uid=_text(meta.get("uid")), node_name=_text(_section(obj, "spec").get("nodeName")),
        annotations={k: v for k, v in annotations.items()
                     if k in KEPT_ANNOTATIONS and isinstance(v, str)},
        resource_version=_text(meta.get("resourceVersion")),
        deletion_timestamp=_text(meta.get("deletionTimestamp")) or None)


def nad_from_api(obj: Mapping[str, Any]) -> KubeNad:
    """Keep of an API NetworkAttachmentDefinition what netctl reads."""
    meta = _section(obj, "metadata")
    return KubeNad(namespace=_text(meta.get("namespace")), name=_text(meta.get("name")),
                   config=_text(_section(obj, "spec").get("config")),
                   resource_version=_text(meta.get("resourceVersion")))
