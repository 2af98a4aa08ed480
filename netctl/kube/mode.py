"""Kubernetes mode, built in one pass: :func:`connect` makes the :class:`KubeClient` (the
API and every part over it), :func:`cluster_store` the cluster-wide IPAM store over it,
:class:`KubeHealth` says from both whether ADDs can be served, :class:`NetworkStatus` is
the engine's after-ADD hook, and :class:`KubeMode` runs it all.

The Kubernetes client is imported only here, in Kubernetes mode: it costs ≈ 50 MiB.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from netctl.cni.hostroot import HostRoot
from netctl.cni.request import Invocation, Pod
from netctl.engine.devices import device_info
from netctl.engine.readiness import daemon_reasons
from netctl.errors import INVALID_CONFIG, TRY_AGAIN_LATER, CNIError, Refusal
from netctl.ipam.store import Loaded
from netctl.journal.records import Attachment, OpStart
from netctl.journal.store import Journal
from netctl.kubeapi.netstatus import annotation_value, network_status
from netctl.metrics import CacheState, Metrics, Snapshot
from netctl.reconcile.leaks import Reconciler
from netctl.settings import DaemonConfig

if TYPE_CHECKING:  # the client is imported in Kubernetes mode only
    from netctl.ipam.cluster import ClusterStore
    from netctl.kube.hotplug import KubeHotplug
    from netctl.kubeapi.api import Api
    from netctl.kubeapi.devices import PodDevices
    from netctl.kubeapi.events import EventRecorder
    from netctl.kubeapi.informer import Informer
    from netctl.kubeapi.objects import PodEvent
    from netctl.kubeapi.pods import NadSource, PodSource
    from netctl.kubeapi.statuswrites import StatusWrites
    from netctl.kubeapi.thisnode import NodeCheck

log = logging.getLogger("netctl.daemon")


@dataclass(frozen=True)
class KubeClient:
    """Kubernetes mode's connected parts (:func:`connect`), each made once."""

    api: Api
    node: str
    pods: PodSource
    nads: NadSource
    this_node: NodeCheck
    writes: StatusWrites
    events: EventRecorder
    devices: PodDevices
    root: HostRoot  # where the host's files are read (device-info)
    deleted: trio.MemoryReceiveChannel[Pod]  # pods deleted, as the pod watch sees them
    pod_events: trio.MemoryReceiveChannel[PodEvent]  # for the hot-plug, in order

    async def close(self) -> None:
        """Close the API client (its connections), shielded and bounded: also on the
        way out of a failure or a cancellation."""
        with trio.move_on_after(5) as closing:
            closing.shield = True
            await self.api.close()


async def connect(cfg: DaemonConfig, metrics: Metrics) -> KubeClient:
    """The API client and every part over it, for this node (``--node-name`` or
    ``NODE_NAME``); code 7 when the API cannot be configured."""
    node = cfg.node_name or os.environ.get("NODE_NAME", "")
    if not node:
        raise CNIError(INVALID_CONFIG, "Kubernetes mode needs the node's name: "
                       "--node-name, or NODE_NAME in the environment")
    from netctl.devices.podresources import PodResources
    from netctl.kubeapi.api import Api, ApiError, KubeSettings
    from netctl.kubeapi.devices import PodDevices
    from netctl.kubeapi.dra import ClaimDevices
    from netctl.kubeapi.events import EventRecorder
    from netctl.kubeapi.objects import PodEvent
    from netctl.kubeapi.pods import NadSource, PodSource
    from netctl.kubeapi.statuswrites import StatusWrites
    from netctl.kubeapi.thisnode import NodeCheck

    try:
        api = await Api.connect(KubeSettings(cfg.kubeconfig, cfg.in_cluster, cfg.api_timeout))
    except ApiError as exc:
        raise CNIError(INVALID_CONFIG, exc.reason) from None
    deleted, deletions = trio.open_memory_channel[Pod](math.inf)
    events, events_in = trio.open_memory_channel[PodEvent](math.inf)
    writes = StatusWrites(api, on_failure=metrics.network_status_write_failed,
                          last_try=cfg.api_timeout + 1)
    pods = PodSource(api, node, cfg.pod_wait, deleted.send_nowait, events.send_nowait)
    root = HostRoot.at(cfg.host_root)
    kubelet = PodResources(root.resolve(cfg.pod_resources_socket),
                           root.describe(cfg.pod_resources_socket), cfg.api_timeout)
    return KubeClient(api, node, pods, NadSource(api, cfg.pod_wait), NodeCheck(api, node),
                      writes, EventRecorder(api, node),
                      PodDevices(kubelet, ClaimDevices(
                          api, node, cfg.pod_wait,
                          on_failure=metrics.network_data_write_failed), pods), root,
                      deletions, events_in)


def cluster_store(client: KubeClient, cfg: DaemonConfig, journal: Journal,
                  live: Loaded) -> ClusterStore:
    """The cluster-wide IPAM store (``ipam-backend: kubernetes``) over the client's API,
    loaded with ``live``; :class:`KubeMode` runs its caches and maintenance."""
    from netctl.ipam.cluster import ClusterSettings
    from netctl.ipam.cluster import cluster_store as make

    pods = client.pods

    def live_pods() -> set[str] | None:
        if not pods.informer.synced.is_set():
            return None
        return {p.metadata.uid for p in pods.informer.cache.values()}

    return make(client.api, journal, ClusterSettings(
        client.node, cfg.block_idle, cfg.node_gone_grace,
        ready_wait=max(cfg.api_timeout, cfg.pod_wait), fill_read=30 * cfg.block_check),
        live, live_pods)


@dataclass(frozen=True)
class KubeHealth:
    """Whether Kubernetes mode can serve ADDs, and its numbers for the scrape: from the
    client's caches and the cluster IPAM store (None: ``ipam-backend: sqlite``)."""

    client: KubeClient
    ipam: ClusterStore | None

    def not_ready(self, journal_writable: bool) -> list[str]:
        """Why ADDs cannot be served: the caches not listed yet, the cluster IPAM not
        started (and the journal, which the caller checked)."""
        c = self.client
        return daemon_reasons(journal_writable=journal_writable,
                              pods_synced=c.pods.informer.synced.is_set(),
                              nads_synced=c.nads.informer.synced.is_set(),
                              ipam_ready=self.ipam.ready.is_set() if self.ipam else None,
                              node=c.node, node_exists=c.this_node.exists,
                              unreachable=c.api.unreachable)

    def watches(self) -> dict[str, CacheState]:
        """Each cache's resource: whether it is watching, its age, what it received (the
        metrics). Every Node is watched only by the holder of the gone-nodes Lease."""
        informers: list[tuple[str, Informer[Any]]] = [
            ("pods", self.client.pods.informer),
            ("network-attachment-definitions", self.client.nads.informer)]
        if self.ipam is not None:
            informers.append(("ipamblocks", self.ipam.blocks))
            if self.ipam.maintenance.gone.lease.held:
                informers.append(("nodes", self.ipam.nodes))
        out = {}
        for name, inf in informers:
            c = inf.counters()
            out[name] = CacheState(inf.state == "watching", inf.age(), c["events"],
                                   c["bytes"], c["lists"], c["list_bytes"])
        return out

    def snapshot(self, local: Snapshot) -> Snapshot:
        """The scrape's ``local`` numbers with this mode's: the blocks per node, the
        watches, the API calls and their answers."""
        api = self.client.api
        return dataclasses.replace(
            local, blocks=self.ipam.blocks_by_node() if self.ipam is not None else None,
            watches=self.watches(), api_calls=api.calls, api_answers=api.answers)


@dataclass
class NetworkStatus:
    """A pod's network-status after an ADD (and its claims' ``networkData``): the engine's
    after-ADD hook (:meth:`after_add`), and the hot-plug's writer
    (:meth:`write_pod_status`)."""

    client: KubeClient
    journal: Journal
    required: bool = False  # network-status-required
    failures: int = 0
    last_failure: str = ""

    async def after_add(self, inv: Invocation, atts: list[Attachment]) -> str:
        """After a successful ADD: the pod's network-status (:meth:`write_pod_status`) and
        its claims' ``networkData``; the hot-plug is told the ADD is done (the annotation
        may have changed during it). "" or the warning the engine journals."""
        if not inv.pod.name:
            return ""
        from netctl.kubeapi.objects import is_static

        self.client.pods.added(inv.pod, inv.container_id)
        namespace, name = inv.pod.namespace, inv.pod.name
        cached = self.client.pods.informer.cache.get((namespace, name))
        uid = cached.metadata.uid if cached is not None and (is_static(cached) or not
                                                             inv.pod.uid) else inv.pod.uid
        warning = await self.write_pod_status(
            Pod(namespace=namespace, name=name, uid=uid), OpStart(
                verb="ANNOTATE", container_id=inv.container_id, netns=inv.netns,
                ifname=inv.ifname, caller_network=inv.conf_name, pod=inv.pod,
                origin="kubernetes"), atts, self.required)
        if cached is not None and cached.claims and any(a.device for a in atts):
            unwritten = await self.client.devices.claims.report(cached, atts)  # DRA
            if unwritten:
                log.warning("pod %s: %s", inv.pod.key, unwritten)
                warning = f"{warning}; {unwritten}" if warning else unwritten
        return warning

    async def write_pod_status(self, pod: Pod, annotate: OpStart, atts: list[Attachment],
                               required: bool = False, resumed: bool = False) -> str:
        """The network-status of ``pod`` (its UID the precondition) from ``atts``, all live
        attachments of the container ``annotate`` names; "" or the warning.

        A failed write goes on in the background (:mod:`netctl.kubeapi.statuswrites`) until
        the pod has it, is gone or replaced, or the attachments are DELeted; ``required``
        fails the ADD instead (code 11: undone, and the runtime retries). ``annotate`` is
        journaled when a background retry writes it, or at once when ``resumed``."""
        from netctl.kubeapi.statuswrites import Write, patch_status

        ids = {a.id for a in atts}
        writes = self.client.writes

        async def current() -> bool:
            """No DEL and no newer ADD meanwhile (the journal's index, no read)."""
            return ids <= self.journal.live.of_container(annotate.container_id)

        async def written() -> None:
            await self.journal.one_transaction(annotate)

        info = await trio.to_thread.run_sync(device_info, atts, self.client.root) \
            if any(a.device for a in atts) else None
        write = Write(pod, annotation_value(network_status(atts, info)), current, written)
        outcome = await patch_status(self.client.api, write)
        if outcome == "written" and resumed:
            await written()
        if outcome != "failed":
            return ""  # written, or the pod is gone or replaced: nothing to annotate
        writes.on_failure()
        self.failures += 1
        self.last_failure = warning = write.warning
        if required:
            log.warning("%s", warning)
            raise CNIError(TRY_AGAIN_LATER, f"{warning} (network-status-required)")
        if writes.retry(write):
            warning += "; retried in the background until the pod has it"
        log.warning("%s", warning)
        return warning

    async def resume(self) -> None:
        """The network-status writes a previous daemon could not finish (its background
        retries ended with it; the pod's runtime sends no second ADD): every container
        whose last ANNOTATE failed is written again from its live attachments, retried in
        the background like any failed write, and journaled once written."""
        for annotate in await self.journal.unannotated():
            atts = await self.journal.live_attachments(annotate.container_id)
            if atts and annotate.pod.name:
                log.info("network-status of pod %s: the last write failed before this "
                         "start; writing it again", annotate.pod.key)
                await self.write_pod_status(annotate.pod, annotate, atts, resumed=True)


async def tell_refused(events: EventRecorder, timeout: float, inv: Invocation,
                       exc: Refusal) -> None:
    """A Warning Event on the refused pod, or one more count of the same one, within
    ``timeout`` (the engine's ``refused`` hook: the CNI error is the answer either way)."""
    with trio.move_on_after(timeout):
        await events.warn(inv.pod, exc.reason, exc.note or exc.msg)


@dataclass
class KubeMode:
    """Kubernetes mode's parts, finished, and what runs them."""

    client: KubeClient
    journal: Journal
    health: KubeHealth
    status_writes: NetworkStatus
    hotplug: KubeHotplug  # the pods' networks annotations followed
    block_check: float = 10.0  # seconds between the cluster IPAM's maintenance rounds
    takeover: bool = False  # ipam-takeover names whereabouts: its holds count as taken
    watching: trio.CancelScope = dataclasses.field(default_factory=trio.CancelScope)

    @property
    def ipam(self) -> ClusterStore | None:
        return self.health.ipam

    async def run(self, reconciler: Reconciler, grace: float,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The watches, and a deleted pod's attachments DELeted ``grace`` seconds later
        (kubelet's own DEL normally comes first), until :meth:`stop`."""
        c = self.client
        async with trio.open_nursery() as outer:
            await outer.start(c.writes.run)  # until stop(), then their last attempts
            outer.start_soon(self.status_writes.resume)
            with self.watching:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(c.this_node.run)
                    nursery.start_soon(c.pods.informer.run)
                    nursery.start_soon(c.nads.informer.run)
                    nursery.start_soon(c.devices.claims.run)
                    nursery.start_soon(self._gone_while_down)
                    if self.ipam is not None:
                        nursery.start_soon(self.ipam.run, self.block_check, self.takeover)
                    await nursery.start(self.hotplug.run)
                    task_status.started()
                    async for pod in c.deleted:
                        self.hotplug.forget(pod.uid)
                        nursery.start_soon(self._delete_later, reconciler, grace, pod)

    async def _delete_later(self, reconciler: Reconciler, grace: float, pod: Pod) -> None:
        await trio.sleep(grace)
        done = await reconciler.pod_deleted(pod)
        if done:
            log.info("pod %s deleted: DELeted the attachments of %s", pod.key,
                     ", ".join(done))

    async def _gone_while_down(self) -> None:
        """Pods the journal has attachments of that the first list does not have (or
        has with another UID) were deleted while the daemon was down: DELeted like any
        deleted pod."""
        informer = self.client.pods.informer
        await informer.synced.wait()
        present = {p.ref for p in informer.cache.values()}
        missing = {a.pod for a in await self.journal.live_attachments()
                   if a.pod.uid and a.pod.name} - present
        for pod in sorted(missing):
            log.info("pod %s (uid %s) is gone from the API", pod.key, pod.uid)
            self.client.pods.deleted(pod)

    def stop(self) -> None:
        """End :meth:`run`: the watches and the deletions waiting out their grace are
        cancelled at once (the next start's relist finds those pods gone); the
        network-status writes still pending try once more."""
        self.watching.cancel()
        self.client.writes.stop()

    def status(self) -> dict[str, Any]:
        c, api = self.client, self.client.api
        return {"node": c.node, "node_object": c.this_node.status(),
                "api_server": api.host,
                "pods": c.pods.informer.status(), "nads": c.nads.informer.status(),
                "credential_reloads": api.credential_reloads,
                "api_connections": api.http.opened,  # (kubeapi/http.py)
                # who read the configuration: netctl (kubeapi/lite.py), or
                # kubernetes-asyncio (an exec plugin, OIDC, a proxy…: kubeapi/full.py)
                "api_configuration": "kubernetes-asyncio" if api.full else "netctl",
                "ipam": self.ipam.status() if self.ipam is not None else None,
                "network_status_required": self.status_writes.required,
                "network_status_failures": self.status_writes.failures,
                "last_network_status_failure": self.status_writes.last_failure,
                "network_status_retries": c.writes.status(),
                "hotplug": self.hotplug.status(),
                "api_calls": {f"{verb} {res}": n for (verb, res), n
                              in sorted(api.calls.items())}}
