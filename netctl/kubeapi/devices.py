"""A pod's allocated devices in Kubernetes mode: its claims', then the kubelet's.

:class:`PodDevices` is the engine's :class:`~netctl.engine.devices.DeviceSource` here. For
the resources an ADD's device networks name, it asks the pod's ResourceClaims
(:class:`~netctl.kubeapi.dra.ClaimDevices`) when the pod has any — the claim is what the
scheduler decided and where networkData is written — then the kubelet's PodResources API
(:class:`~netctl.devices.podresources.PodResources`) for the resources the claims did not
cover: its device plugins' devices, then the DRA devices it prepared. A claim that cannot
be read (:class:`~netctl.kubeapi.dra.ClaimUnread`) does not fail the ADD while the kubelet
can stand in for it; both failing is code 11. docs/networks.md has the whole story.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from netctl.cni.request import Pod as PodRef
from netctl.devices.podresources import Allocated, PodResources
from netctl.errors import CNIError
from netctl.kubeapi.dra import ClaimDevices, ClaimUnread
from netctl.kubeapi.objects import Pod


class Cached(Protocol):
    """The pod cache (:class:`netctl.kubeapi.pods.PodSource`) as seen here."""

    def cached(self, namespace: str, name: str) -> Pod | None: ...


@dataclass
class PodDevices:
    kubelet: PodResources
    claims: ClaimDevices
    pods: Cached

    async def allocated(self, pod: PodRef, resources: Collection[str]
                        ) -> dict[str, list[str]]:
        found = self.pods.cached(pod.namespace, pod.name)
        out: dict[str, list[str]] = {}
        asked: Allocated | None = None
        if found is not None and found.claims:
            try:
                out = await self.claims.allocated(found, resources)
            except ClaimUnread as unread:
                try:
                    asked = await self.kubelet.of_pod(pod.namespace, pod.name)
                except CNIError as exc:
                    raise CNIError(exc.code, f"{unread.msg}; and {exc.msg}") from None
                out = await self.claims.prepared(asked.claimed, resources)
        rest = [r for r in resources if not out.get(r)]
        if rest:
            if asked is None:
                asked = await self.kubelet.of_pod(pod.namespace, pod.name)
            out.update({r: asked.devices[r] for r in rest if asked.devices.get(r)})
            rest = [r for r in rest if not out.get(r)]
            if rest and asked.claimed:
                out.update(await self.claims.prepared(asked.claimed, rest))
        return out
