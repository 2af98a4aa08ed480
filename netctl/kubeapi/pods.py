"""The node's pods and the cluster's NetworkAttachmentDefinitions, as Kubernetes mode reads
them: watched caches, and a pod lookup that costs no API read in steady state.

:class:`PodSource` watches the pods of one node; a pod the watch has not delivered yet
(kubelet often runs the sandbox before the watch brings its pod) is waited for up to
``pod-wait`` seconds, then read with at most one GET. A pod bound to another node is
refused (:func:`check_node`): its network-status is not this node's to write, and its
deletion would never reach this node's watch. An API server that cannot be reached is code
11 for an ADD that needs the pod (a DEL never does), and no wait happens while it is known
unreachable (:attr:`~netctl.kubeapi.api.Api.unreachable`, the watch backing off).

:class:`NadSource` watches every NetworkAttachmentDefinition; a lookup before its first
list raises :class:`~netctl.errors.NotListedYet`, and the engine waits for that list as
for a pod.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from netctl.cni import request
from netctl.errors import TRY_AGAIN_LATER, CNIError, NotListedYet, Refusal
from netctl.kubeapi.api import Api, ApiError
from netctl.kubeapi.informer import Informer
from netctl.kubeapi.objects import (
    REASON_OTHER_NODE,
    Nad,
    Pod,
    PodAdded,
    PodChanged,
    PodChosen,
    PodEvent,
    PodWithStatus,
)

PODS = "/api/v1/pods"
NADS = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


class _PodList(msgspec.Struct, forbid_unknown_fields=False):
    items: list[PodWithStatus] = []


async def pods_on(api: Api, node: str, limit: int | None = None) -> list[PodWithStatus]:
    """The pods bound to ``node`` (at most ``limit``), with their network-status, from one
    LIST (the cluster IPAM's: who holds a block's addresses, whether a gone node has pods)."""
    params = [("fieldSelector", f"spec.nodeName={node}")]
    if limit is not None:
        params.append(("limit", str(limit)))
    return msgspec.json.decode(await api.list(PODS, params), type=_PodList).items


class PodSource:
    """This node's pods, watched (``fieldSelector=spec.nodeName=<node>``). What happens to
    them is told, as it happens, to ``on_deleted`` (a pod deleted: the reconciler's) and
    ``on_event`` (:data:`PodEvent`: the hot-plug's), both given when it is made."""

    def __init__(self, api: Api, node: str, wait: float = 2.0,
                 on_deleted: Callable[[request.Pod], None] | None = None,
                 on_event: Callable[[PodEvent], None] | None = None) -> None:
        self.api, self.node, self.wait = api, node, wait
        self._on_deleted, self._on_event = on_deleted, on_event
        self.informer: Informer[Pod] = Informer(
            api, Pod, PODS, [("fieldSelector", f"spec.nodeName={node}")],
            None if on_deleted is None else lambda pod: on_deleted(pod.ref),
            None if on_event is None else lambda pod: on_event(PodChanged(pod)))
        api.on_unreachable(self.informer.wake_waiters)

    def added(self, pod: request.Pod, container_id: str) -> None:
        """A runtime's ADD of the pod's sandbox ``container_id`` succeeded: told as a
        :class:`PodAdded` (the hot-plug looks at the pod again: it may have changed)."""
        if self._on_event is not None:
            self._on_event(PodAdded(pod, container_id))

    def deleted(self, pod: request.Pod) -> None:
        """``pod`` is gone (found so at start: deleted while the daemon was down)."""
        if self._on_deleted is not None:
            self._on_deleted(pod)

    async def lookup(self, namespace: str, name: str) -> Pod | None:
        """The pod, from the cache, or after a short wait for the watch, or from one GET;
        None when the API server says it does not exist. No wait while the server is known
        unreachable: no event would come, and the GET says why at once."""
        live = self.informer.state == "watching" and not self.api.unreachable
        found = await self.informer.wait_for((namespace, name), self.wait if live else 0)
        if found is not None:
            return found
        try:
            data = await self.api.get(pod_path(namespace, name))
        except ApiError as exc:
            if exc.unreachable:
                raise CNIError(TRY_AGAIN_LATER, f"pod {namespace}/{name}: the API server "
                               f"{self.api.host} cannot be reached ({exc.reason}); try again "
                               "later") from None
            raise CNIError(TRY_AGAIN_LATER, f"pod {namespace}/{name}: the API server "
                           f"{self.api.host} answered {exc}") from None
        if data is None:
            return None
        found = msgspec.json.decode(data, type=Pod)
        check_node(found, self.node)
        return found

    def cached(self, namespace: str, name: str) -> Pod | None:
        """The pod as the cache has it now, or None (no wait, no request)."""
        return self.informer.cache.get((namespace, name))

    def chosen_for_add(self, container_id: str, pod: Pod) -> None:
        """An ADD chose its networks from ``pod``: told as a :class:`PodChosen` (the
        hot-plug then need not look at the pod again after the ADD unless it changed)."""
        if self._on_event is not None:
            self._on_event(PodChosen(container_id, pod))


def check_node(pod: Pod, node: str) -> None:
    """Refuse (code 7, a :class:`~netctl.errors.Refusal` with its Event) a pod that the API
    server binds to another node than ``node``, naming both. A pod not bound yet (no
    ``spec.nodeName``: no kubelet runs it) is left to the other checks."""
    bound = pod.spec.nodeName
    if not bound or bound == node:
        return
    ref = f"{pod.metadata.namespace}/{pod.metadata.name}"
    raise Refusal(f"pod {ref} is bound to node {bound!r}, but this is node {node!r} "
                  "(--node-name or NODE_NAME): refused; if both are this machine, set "
                  f"--node-name to {bound!r}, the name kubelet registered",
                  REASON_OTHER_NODE, f"its sandbox was ADDed on node {node!r}, not on its "
                  f"node {bound!r}: is that node's --node-name wrong?", named=True)


class NadSource:
    """Every NetworkAttachmentDefinition of the cluster, watched."""

    def __init__(self, api: Api, wait: float = 2.0) -> None:
        self.api, self.wait = api, wait
        self.informer: Informer[Nad] = Informer(api, Nad, NADS, [])
        api.on_unreachable(self.informer.wake_waiters)

    def get(self, namespace: str, name: str) -> Nad | None:
        """The NAD; before the first list has filled the cache, :class:`NotListedYet`
        (code 11: an unknown network then is not yet known to be unknown), saying why."""
        if self.informer.synced.is_set():
            return self.informer.cache.get((namespace, name))
        if self.api.unreachable:
            why = f"the API server {self.api.host} cannot be reached ({self.api.unreachable})"
        else:
            why = (f"their first list from the API server {self.api.host} has not come "
                   f"({self.informer.state}; an ADD waits for it up to {self.wait:g} s, "
                   "pod-wait)")
        raise NotListedYet(f"NetworkAttachmentDefinition {namespace}/{name}: the cache of "
                           f"NetworkAttachmentDefinitions is not filled yet: {why}; try "
                           "again later")

    async def wait_listed(self) -> None:
        """Wait up to ``wait`` seconds for the first list; not while the API server is
        known unreachable."""
        if not self.api.unreachable:
            await self.informer.wait_synced(self.wait)

