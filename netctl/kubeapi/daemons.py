"""Where the nodes' daemons answer queries, and which node's block holds an address: what
``kubectl netctl`` reads from the API with the user's kubeconfig before it asks the nodes
(:mod:`netctl.kube.clusterquery`).

The daemons are the DaemonSet's pods, found by label in its namespace (defaults as
``deploy/kubernetes/``: ``app.kubernetes.io/name=netctl`` in ``kube-system``); each is
asked at its pod IP (the host's: the DaemonSet runs with hostNetwork) on the query port
(``query-addr``'s, 9470 in the manifests), unless the pod's annotation
``netctl.dev/query-addr: HOST:PORT`` says where — the tests' daemons, several on one host,
each on its own loopback port. A pod with no address yet is kept, with why: the node is
named as not answering, never left out.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import msgspec

from netctl.kubeapi.blocks import BLOCKS
from netctl.kubeapi.errors import ApiError, Query
from netctl.kubeapi.objects import Block, Borrow, decode_blocks


class Lister(Protocol):
    """What the questions here ask of a client: a list (an
    :class:`~netctl.kubeapi.api.Api`, or a test's stand-in)."""

    async def list(self, path: str, query: Query) -> bytes: ...

NAMESPACE = "kube-system"
SELECTOR = "app.kubernetes.io/name=netctl"
PORT = 9470
ADDR_ANNOTATION = "netctl.dev/query-addr"


@dataclass(frozen=True)
class NodeDaemon:
    """One node's daemon: where to ask it, or why it cannot be asked (``missing``)."""

    node: str
    host: str = ""
    port: int = 0
    pod: str = ""
    missing: str = ""


def daemons_of(pods: list[dict[str, Any]], port: int) -> list[NodeDaemon]:
    """The DaemonSet's pods (as the API lists them) → one :class:`NodeDaemon` per node,
    sorted by node; a node with two pods (a rolling update) is asked at its running one.
    Pure."""
    found: dict[str, NodeDaemon] = {}
    for pod in pods:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, \
            pod.get("status") or {}
        node = str(spec.get("nodeName") or "")
        if not node:
            continue  # not scheduled: no node to name
        name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        addr = str((meta.get("annotations") or {}).get(ADDR_ANNOTATION) or "")
        host, _, given = addr.rpartition(":")
        if addr and host and given.isdigit():
            daemon = NodeDaemon(node, host.strip("[]"), int(given), name)
        elif status.get("podIP") or status.get("hostIP"):
            daemon = NodeDaemon(node, str(status.get("podIP") or status.get("hostIP")),
                                port, name)
        else:
            daemon = NodeDaemon(node, pod=name, missing=f"pod {name} has no address yet "
                                f"(phase {status.get('phase') or 'unknown'})")
        kept = found.get(node)
        if kept is None or (daemon.host and not kept.host) or status.get("phase") == "Running":
            found[node] = daemon
    return [found[n] for n in sorted(found)]


async def find_daemons(api: Lister, namespace: str = NAMESPACE, selector: str = SELECTOR,
                       port: int = PORT) -> list[NodeDaemon]:
    """The daemons of the DaemonSet's pods (:func:`daemons_of`)."""
    data = await api.list(f"/api/v1/namespaces/{namespace}/pods",
                          [("labelSelector", selector)])
    items = msgspec.json.decode(data).get("items") or []
    return daemons_of(items, port)


def _seconds(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def owners_at(blocks: list[Block], ip: str, at: float | None) -> list[dict[str, Any]]:
    """The blocks holding ``ip`` and the node each was claimed by at ``at`` (now without
    it; ``""`` when the block's records do not reach back that far). Pure."""
    try:
        addr = ipaddress.ip_interface(ip.strip()).ip
    except ValueError:
        return []
    out = []
    for b in blocks:
        try:
            if addr not in ipaddress.ip_network(b.spec.cidr):
                continue
        except ValueError:
            continue
        owner = b.spec.node
        claimed = _seconds(b.spec.claimedAt) if b.spec.claimedAt else None
        if at is not None and (claimed is None or claimed > at):
            owner = ""
            for h in b.spec.history:
                since, until = _seconds(h.since), _seconds(h.until)
                if since is not None and since <= at and (until is None or at < until):
                    owner = h.node
        out.append({"block": b.spec.cidr, "pool": b.spec.pool, "node": owner,
                    "borrowed": isinstance(b, Borrow)})
    return out


async def block_owners(api: Lister, ip: str, at: float | None) -> list[dict[str, Any]]:
    """:func:`owners_at` over the cluster's IPAMBlocks; none without the CRD (no cluster
    IPAM) or without the right to list them."""
    try:
        data = await api.list(BLOCKS, [])
    except ApiError as exc:
        if exc.status in (403, 404):
            return []
        raise
    return owners_at(decode_blocks(data), ip, at)
