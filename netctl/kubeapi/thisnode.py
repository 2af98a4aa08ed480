"""Whether the API server has a Node of the daemon's name (``--node-name``).

The node's name selects everything in Kubernetes mode: the pods watched (field selector
``spec.nodeName``), the pods an ADD may serve, the blocks of the cluster IPAM. A wrong
name — the short hostname where kubelet registered the FQDN, the usual mistake — watches
no pod and says nothing: every ADD then waits ``pod-wait`` for a pod that never comes,
and a pod deleted through the API is never cleaned. So the daemon watches its own Node:

- one :class:`~netctl.kubeapi.informer.Informer` over ``/api/v1/nodes`` with the field
  selector ``metadata.name=<node>`` — one LIST, then one watch that the API server
  answers only when that Node changes: no polling, no other node's object ever read;
- :attr:`NodeCheck.exists` is None until the first list, then whether the Node is
  there; the daemon is not ready (``netctl status``, the STATUS verb's code 50) while it
  is not (:func:`netctl.engine.readiness.daemon_reasons` says why);
- the first list without the Node logs a warning naming the setting to fix; the Node
  appearing later (the name fixed by recreating it, or kubelet registering late) logs
  that the daemon is ready for it, and the Node deleted while the daemon runs logs a
  warning (and makes the daemon not ready again).
"""

from __future__ import annotations

import logging

import trio

from netctl.kubeapi.api import Api
from netctl.kubeapi.blocks import NODES
from netctl.kubeapi.informer import Informer
from netctl.kubeapi.objects import Node

log = logging.getLogger("netctl.kube")


class NodeCheck:
    def __init__(self, api: Api, node: str) -> None:
        self.node = node
        self.informer: Informer[Node] = Informer(
            api, Node, NODES, [("fieldSelector", f"metadata.name={node}")],
            on_delete=self._deleted, on_put=self._found, metadata_only=True)
        self._missing = False  # the last thing logged: that the Node is missing

    @property
    def exists(self) -> bool | None:
        """Whether the API server has the Node; None before the first list."""
        if not self.informer.synced.is_set():
            return None
        return ("", self.node) in self.informer.cache

    def status(self) -> dict[str, object]:
        return {"name": self.node, "exists": self.exists, "state": self.informer.state}

    def _found(self, obj: Node) -> None:
        if obj.metadata.name == self.node and self._missing:
            self._missing = False
            log.info("Node %s is in the API server now: this node's pods are watched", self.node)

    def _deleted(self, obj: Node) -> None:
        if obj.metadata.name == self.node:
            self._missing = True
            log.warning("Node %s was deleted from the API server: not ready until it is back",
                        self.node)

    async def run(self) -> None:
        """Watch the Node (for ever: cancel to stop); warn when the first list lacks it."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.informer.run)
            await self.informer.synced.wait()
            if self.exists is False and not self._missing:
                self._missing = True
                log.warning("the API server has no Node named %s: is --node-name (or NODE_NAME) "
                            "the name kubelet registered (kubectl get nodes; often the FQDN)? "
                            "Not ready, and no pod of this node is watched, until it is",
                            self.node)
