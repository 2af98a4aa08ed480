"""Builders of the smallest objects the real API server accepts, for tests to create:
a pod needs a container with a name and an image (the server says 422 otherwise, and
kubernetes-asyncio's models refuse a pod without containers when they read one).
"""

from __future__ import annotations

import json
from typing import Any


def pod(name: str, namespace: str = "default", *, node: str | None = None,
        annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        resource_claims: list[dict[str, str]] | None = None,
        requests: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod of one container ``main``; ``resource_claims``: its ``spec.resourceClaims``
    (:func:`claim_ref`); ``requests``: its container's resource requests (and limits: an
    extended resource needs both, equal)."""
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause"}
    if requests:
        container["resources"] = {"requests": dict(requests), "limits": dict(requests)}
    spec: dict[str, Any] = {"containers": [container]}
    if node is not None:
        spec["nodeName"] = node
    if resource_claims:
        spec["resourceClaims"] = [dict(c) for c in resource_claims]
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": _meta(name, namespace, annotations, labels)}


def nad(name: str, namespace: str = "default", config: dict[str, Any] | str = "",
        *, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A NetworkAttachmentDefinition; ``config`` is the CNI config (a dict is dumped as
    JSON; "" means the on-disk conf of that name)."""
    text = config if isinstance(config, str) else json.dumps(config)
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": _meta(name, namespace, annotations, None), "spec": {"config": text}}


def node(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": _meta(name, None, None, labels)}


def resource_slice(name: str, node: str, driver: str, devices: dict[str, dict[str, str]],
                   *, pool: str = "") -> dict[str, Any]:
    """A DRA ResourceSlice (``resource.k8s.io/v1``) of ``node``: ``devices`` by name, each
    with its string attributes (``k8s.cni.cncf.io/resourceName``, …)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": _meta(name, None, None, None),
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": dev, "attributes": {
                         k: {"string": v} for k, v in attrs.items()}}
                         for dev, attrs in devices.items()]}}


def resource_claim(name: str, namespace: str, device_class: str, count: int = 1, *,
                   request: str = "net") -> dict[str, Any]:
    """A DRA ResourceClaim asking for ``count`` devices of ``device_class``; its
    allocation is status (:func:`claim_allocation`), written as the scheduler does it."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": _meta(name, namespace, None, None),
            "spec": {"devices": {"requests": [{"name": request, "exactly": {
                "deviceClassName": device_class, "count": count}}]}}}


def claim_allocation(driver: str, pool: str, devices: list[str],
                     request: str = "net", *, node: str | None = None) -> dict[str, Any]:
    """A claim's ``status`` with ``devices`` of ``driver``'s ``pool`` allocated; on
    ``node``, its allocation's node selector names it as the scheduler writes it for a
    node's devices (``matchFields`` ``metadata.name`` ``In`` ``[node]``)."""
    allocation: dict[str, Any] = {"devices": {"results": [
        {"request": request, "driver": driver, "pool": pool, "device": d}
        for d in devices]}}
    if node is not None:
        allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    return {"allocation": allocation}


def claim_ref(name: str, *, claim: str | None = None,
              template: str | None = None) -> dict[str, str]:
    """A pod's ``spec.resourceClaims`` entry: its name for the claim, and the claim it
    names directly or the template its claim is made from."""
    ref = {"name": name}
    if claim is not None:
        ref["resourceClaimName"] = claim
    if template is not None:
        ref["resourceClaimTemplateName"] = template
    return ref


def template_claim_status(name: str, claim: str) -> dict[str, Any]:
    """A pod's ``status`` naming the claim made from the template of its entry ``name``,
    as the resourceclaim controller writes it."""
    return {"resourceClaimStatuses": [{"name": name, "resourceClaimName": claim}]}


def extended_claim_status(claim: str, resource: str, request: str,
                          container: str = "main") -> dict[str, Any]:
    """A pod's ``status`` naming the claim the scheduler made for its container's extended
    resource ``resource`` (served by a DeviceClass with that ``extendedResourceName``),
    ``request`` the claim's request for it."""
    return {"extendedResourceClaimStatus": {"resourceClaimName": claim, "requestMappings": [
        {"containerName": container, "resourceName": resource, "requestName": request}]}}


def _meta(name: str, namespace: str | None, annotations: dict[str, str] | None,
          labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    return meta
