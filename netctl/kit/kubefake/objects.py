"""Builders of the smallest objects the real API server accepts, for tests to create:
a pod needs a container with a name and an image (the server says 422 otherwise, and
kubernetes-asyncio's models refuse a pod without containers when they read one).
"""

from __future__ import annotations

import json
from typing import Any


def pod(name: str, namespace: str = "default", *, node: str | None = None,
        annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        ) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.k8s.io/pause"}]}
    if node is not None:
        spec["nodeName"] = node
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
