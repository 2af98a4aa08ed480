"""Whether the API server has a Node of the daemon's name (``--node-name``).

A wrong name — the short hostname where kubelet registered the FQDN, the usual mistake —
watches no pod and says nothing: every ADD would wait ``pod-wait`` for a pod that never
comes. So the daemon watches its own Node (field selector ``metadata.name=<node>``: one
LIST, then a watch answered only when that Node changes), is not ready while it is missing
(:func:`netctl.engine.readiness.daemon_reasons`), and logs when it is missing, appears or
is deleted.
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
