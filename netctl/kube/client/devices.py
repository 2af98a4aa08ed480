"""A pod's allocated devices in Kubernetes mode: the kubelet's, then its claims'.

:class:`PodDevices` is the engine's :class:`~netctl.engine.devices.DeviceSource` here. For
the resources an ADD's device networks name, it asks:

- the pod's ResourceClaims (:class:`~netctl.kube.client.dra.ClaimDevices`), when the pod has
  any (``status.resourceClaimStatuses``, from the pod cache) — DRA;
- the kubelet's PodResources API (:class:`~netctl.devices.podresources.PodResources`)
  for the resources the claims did not cover — device plugins.

So a pod whose devices all come through DRA never needs the PodResources socket, and a
node without DRA never reads a claim. Either source failing is code 11.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from netctl.cni.request import Pod as PodRef
from netctl.devices.podresources import PodResources
from netctl.kube.client.dra import ClaimDevices
from netctl.kube.client.objects import Pod


class Cached(Protocol):
    """The pod cache (:class:`netctl.kube.client.pods.PodSource`) as seen here."""

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
        if found is not None and found.claims:
            out = await self.claims.allocated(found, resources)
        rest = [r for r in resources if not out.get(r)]
        if rest:
            from_kubelet = await self.kubelet.of_pod(pod.namespace, pod.name)
            out.update({r: from_kubelet[r] for r in rest if from_kubelet.get(r)})
        return out
