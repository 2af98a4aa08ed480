"""Kubernetes mode: the API, this node's Node, its pods, the cluster's NADs, and what
netctl does there on its own: the network-status written after an ADD (retried in the
background, or failing the ADD with ``network-status-required``), the Events on refused
pods, the attachments of pods deleted (while the daemon ran, or while it was down)
DELeted, the cluster-wide IPAM's caches and maintenance (``ipam-backend:
kubernetes``), and the hot-plug of running pods whose networks annotation changes
(:mod:`netctl.kube.hotplug`, handed over with :meth:`KubeMode.use_hotplug`, run here). The
daemon builds :class:`KubeMode` once and hands it the journal; the Kubernetes client is
imported only here, in Kubernetes mode: it costs ≈ 50 MiB."""

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
from netctl.kube.client.netstatus import annotation_value, network_status
from netctl.metrics import Metrics, Snapshot
from netctl.reconcile.leaks import Reconciler
from netctl.settings import DaemonConfig

if TYPE_CHECKING:  # the client is imported in Kubernetes mode only
    from netctl.ipam.cluster import ClusterStore
    from netctl.kube.client.api import Api
    from netctl.kube.client.devices import PodDevices
    from netctl.kube.client.events import EventRecorder
    from netctl.kube.client.informer import Informer
    from netctl.kube.client.pods import NadSource, PodSource
    from netctl.kube.client.statuswrites import StatusWrites
    from netctl.kube.client.thisnode import NodeCheck
    from netctl.kube.hotplug import KubeHotplug

log = logging.getLogger("netctl.daemon")


@dataclass
class KubeMode:
    """Kubernetes mode's parts: the API, this node's Node, its pods, the cluster's NADs, the
    network-status writes retried in the background, the Events on refused pods.

    :meth:`run` carries the watches and the deletions until :meth:`stop` (SIGTERM), which
    cancels them first — a deletion the API server sends meanwhile is dropped with them
    (the next start's relist finds the pod gone) — and lets the network-status writes
    still pending make their last attempt."""

    api: Api
    node: str
    pods: PodSource
    nads: NadSource
    this_node: NodeCheck
    writes: StatusWrites
    events: EventRecorder
    journal: Journal
    deleted: trio.MemorySendChannel[Pod]
    deletions: trio.MemoryReceiveChannel[Pod]
    required: bool = False  # network-status-required
    ipam: ClusterStore | None = None  # ipam-backend: kubernetes
    block_check: float = 10.0
    takeover: bool = False  # ipam-takeover names whereabouts: its holds count as taken
    status_failures: int = 0
    last_status_failure: str = ""
    watching: trio.CancelScope = dataclasses.field(default_factory=trio.CancelScope)
    hotplug: KubeHotplug | None = None  # the pods' annotations followed (use_hotplug)
    devices: PodDevices | None = None  # device networks: the pods' devices, claims' status
    root: HostRoot = dataclasses.field(default_factory=HostRoot)  # device-info files read

    @classmethod
    async def connect(cls, cfg: DaemonConfig, journal: Journal, metrics: Metrics) -> KubeMode:
        node = cfg.node_name or os.environ.get("NODE_NAME", "")
        if not node:
            raise CNIError(INVALID_CONFIG, "Kubernetes mode needs the node's name: "
                           "--node-name, or NODE_NAME in the environment")
        from netctl.devices.podresources import PodResources
        from netctl.kube.client.api import Api, ApiError, KubeSettings
        from netctl.kube.client.devices import PodDevices
        from netctl.kube.client.dra import ClaimDevices
        from netctl.kube.client.events import EventRecorder
        from netctl.kube.client.pods import NadSource, PodSource
        from netctl.kube.client.statuswrites import StatusWrites
        from netctl.kube.client.thisnode import NodeCheck

        try:
            api = await Api.connect(KubeSettings(cfg.kubeconfig, cfg.in_cluster,
                                                 cfg.api_timeout))
        except ApiError as exc:
            raise CNIError(INVALID_CONFIG, exc.reason) from None
        send, receive = trio.open_memory_channel[Pod](math.inf)
        writes = StatusWrites(api, on_failure=metrics.network_status_write_failed,
                              last_try=cfg.api_timeout + 1)
        pods = PodSource(api, node, cfg.pod_wait, send.send_nowait)
        root = HostRoot.at(cfg.host_root)
        kubelet = PodResources(root.resolve(cfg.pod_resources_socket),
                               root.describe(cfg.pod_resources_socket), cfg.api_timeout)
        devices = PodDevices(kubelet, ClaimDevices(api, node, cfg.pod_wait), pods)
        return cls(api, node, pods, NadSource(api, cfg.pod_wait), NodeCheck(api, node),
                   writes, EventRecorder(api, node), journal, send, receive,
                   cfg.network_status_required, devices=devices, root=root)

    def cluster_store(self, cfg: DaemonConfig,
                      live: Loaded) -> ClusterStore:
        """The cluster-wide IPAM store (``ipam-backend: kubernetes``) over this API: this
        mode runs its caches and its maintenance (:meth:`run`)."""
        store = _cluster_store(self.api, self.node, self.pods, cfg, self.journal, live)
        self.ipam, self.block_check = store, cfg.block_check
        self.takeover = "whereabouts" in cfg.ipam_takeover
        return store

    async def _cluster_ipam(self, store: ClusterStore) -> None:
        """The cluster store's caches, its start, and its maintenance rounds."""
        from netctl.kube.client.api import ApiError

        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.blocks.run)
            nursery.start_soon(store.nodes.run)
            nursery.start_soon(store.answer_borrows)
            nursery.start_soon(store.publish_reservations)
            while True:
                try:
                    if not store.ready.is_set():
                        if self.takeover:
                            await store.take_over_whereabouts()
                        await store.start()
                    else:
                        await store.maintain()
                except (ApiError, CNIError) as exc:
                    log.warning("cluster IPAM: %s; retrying", exc)
                await trio.sleep(self.block_check if store.ready.is_set() else 1.0)

    async def write_status(self, inv: Invocation, atts: list[Attachment]) -> str:
        """After a successful ADD: the pod's network-status (guarded by the pod's UID). A
        failure is a warning the engine journals, and the write goes on in the background
        (:mod:`netctl.kube.client.statuswrites`) until the pod has it, is gone or replaced, or the
        attachments are DELeted; with ``network-status-required`` it fails the ADD instead
        (code 11: the engine undoes it and the runtime retries). The pod's annotation is
        then looked at again by the hot-plug (it may have changed during the ADD)."""
        if not inv.pod.name:
            return ""
        from netctl.kube.client.objects import is_static

        if self.hotplug is not None:
            self.hotplug.added(inv.pod, inv.container_id)
        namespace, name = inv.pod.namespace, inv.pod.name
        cached = self.pods.informer.cache.get((namespace, name))
        uid = cached.metadata.uid if cached is not None and (is_static(cached) or not
                                                             inv.pod.uid) else inv.pod.uid
        warning = await self.write_pod_status(
            Pod(namespace=namespace, name=name, uid=uid), OpStart(
                verb="ANNOTATE", container_id=inv.container_id, netns=inv.netns,
                ifname=inv.ifname, caller_network=inv.conf_name, pod=inv.pod,
                origin="kubernetes"), atts, self.required)
        if self.devices is not None and cached is not None and cached.claims \
                and any(a.device for a in atts):  # DRA: the claims' networkData
            unwritten = await self.devices.claims.report(cached, atts)
            if unwritten:
                log.warning("pod %s: %s", inv.pod.key, unwritten)
                warning = f"{warning}; {unwritten}" if warning else unwritten
        return warning

    async def write_pod_status(self, pod: Pod, annotate: OpStart, atts: list[Attachment],
                               required: bool = False, resumed: bool = False) -> str:
        """The network-status of ``pod`` (its UID the precondition) from ``atts``, all live
        attachments of the container ``annotate`` names (journaled as that done ANNOTATE
        when a background retry writes it, or at once when ``resumed``: a write after a
        failed one); "" or the warning (:meth:`write_status`)."""
        from netctl.kube.client.statuswrites import Write, patch_status

        ids = {a.id for a in atts}

        async def current() -> bool:
            """The attachments are all still live (no DEL, no newer ADD meanwhile): the
            journal's index, no read."""
            return ids <= self.journal.live.of_container(annotate.container_id)

        async def written() -> None:
            await self.journal.one_transaction(annotate)

        info = await trio.to_thread.run_sync(device_info, atts, self.root) \
            if any(a.device for a in atts) else None
        write = Write(pod, annotation_value(network_status(atts, info)), current, written)
        outcome = await patch_status(self.api, write)
        if outcome == "written" and resumed:
            await written()
        if outcome != "failed":
            return ""  # written, or the pod is gone or replaced: nothing to annotate
        self.writes.on_failure()
        self.status_failures += 1
        self.last_status_failure = warning = write.warning
        if required:
            log.warning("%s", warning)
            raise CNIError(TRY_AGAIN_LATER, f"{warning} (network-status-required)")
        if self.writes.retry(write):
            warning += "; retried in the background until the pod has it"
        log.warning("%s", warning)
        return warning

    def use_hotplug(self, hotplug: KubeHotplug) -> None:
        """Follow the pods' networks annotations (:mod:`netctl.kube.hotplug`): every pod the
        watch lists or changes is handed to ``hotplug``, which :meth:`run` runs."""
        self.hotplug = hotplug
        self.pods.informer.on_put = hotplug.changed
        self.pods.on_chosen = hotplug.chosen

    async def refused(self, inv: Invocation, exc: Refusal) -> None:
        """A Warning Event on the refused pod, or one more count of the same one."""
        namespace, _, name = exc.pod.partition("/")
        await self.events.warn(Pod(namespace=namespace or inv.pod.namespace,
                                   name=name or inv.pod.name, uid=inv.pod.uid),
                               exc.reason, exc.note or exc.msg)

    async def run(self, reconciler: Reconciler, grace: float,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The watches, and a deleted pod's attachments DELeted ``grace`` seconds later
        (kubelet's own DEL normally comes first). Ends when :attr:`deleted` is closed (the
        daemon stops): the watches and the deletions still waiting out their grace are
        cancelled (the next start's relist finds those pods gone)."""
        async with trio.open_nursery() as outer:
            await outer.start(self.writes.run)  # until stop(), then their last attempts
            outer.start_soon(self._resume_status_writes)
            with self.watching:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.this_node.run)
                    nursery.start_soon(self.pods.informer.run)
                    nursery.start_soon(self.nads.informer.run)
                    if self.devices is not None:
                        nursery.start_soon(self.devices.claims.run)
                    nursery.start_soon(self._gone_while_down)
                    if self.ipam is not None:
                        nursery.start_soon(self._cluster_ipam, self.ipam)
                    if self.hotplug is not None:
                        await nursery.start(self.hotplug.run)
                    task_status.started()
                    async for pod in self.deletions:
                        if self.hotplug is not None:
                            self.hotplug.forget(pod.uid)
                        nursery.start_soon(self._delete_later, reconciler, grace, pod)

    async def _resume_status_writes(self) -> None:
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

    async def _delete_later(self, reconciler: Reconciler, grace: float, pod: Pod) -> None:
        """A deleted pod's attachments DELeted ``grace`` seconds later."""
        await trio.sleep(grace)
        done = await reconciler.pod_deleted(pod)
        if done:
            log.info("pod %s deleted: DELeted the attachments of %s", pod.key,
                     ", ".join(done))

    async def _gone_while_down(self) -> None:
        """Pods the journal has attachments of that the first list does not have (or
        has with another UID) were deleted while the daemon was down."""
        await self.pods.informer.synced.wait()
        present = {p.ref for p in self.pods.informer.cache.values()}
        missing = {a.pod for a in await self.journal.live_attachments()
                   if a.pod.uid and a.pod.name} - present
        for pod in sorted(missing):
            log.info("pod %s (uid %s) is gone from the API", pod.key, pod.uid)
            self.deleted.send_nowait(pod)

    def stop(self) -> None:
        """End :meth:`run`: the watches and the deletions waiting out their grace are
        cancelled at once (the channel of deletions stays open: a deletion the informer
        is handing over right now is dropped, not an error; the next start's relist finds
        that pod gone), and the network-status writes still pending try once more."""
        self.watching.cancel()
        self.writes.stop()

    async def close(self) -> None:
        """Close the API client (its connections), shielded and bounded: also on the
        way out of a failure or a cancellation."""
        with trio.move_on_after(5) as closing:
            closing.shield = True
            await self.api.close()

    def not_ready(self, journal_writable: bool) -> list[str]:
        """Why ADDs cannot be served: the caches not listed yet, the cluster IPAM not
        started (and the journal, which the caller checked)."""
        return daemon_reasons(journal_writable=journal_writable,
                              pods_synced=self.pods.informer.synced.is_set(),
                              nads_synced=self.nads.informer.synced.is_set(),
                              ipam_ready=self.ipam.ready.is_set() if self.ipam else None,
                              node=self.node, node_exists=self.this_node.exists,
                              unreachable=self.api.unreachable)

    def watches(self) -> dict[str, tuple[bool, float | None]]:
        """Each cache's resource: whether it is watching, and its age (the metrics)."""
        informers: list[tuple[str, Informer[Any]]] = [
            ("pods", self.pods.informer), ("network-attachment-definitions", self.nads.informer)]
        if self.ipam is not None:
            informers += [("ipamblocks", self.ipam.blocks), ("nodes", self.ipam.nodes)]
        return {name: (inf.state == "watching", inf.age()) for name, inf in informers}

    def snapshot(self, local: Snapshot) -> Snapshot:
        """The scrape's ``local`` numbers with this mode's: the blocks per node, the
        watches, the API calls and their answers."""
        return dataclasses.replace(
            local, blocks=self.ipam.blocks_by_node() if self.ipam is not None else None,
            watches=self.watches(), api_calls=self.api.calls, api_answers=self.api.answers)

    def status(self) -> dict[str, Any]:
        return {"node": self.node, "node_object": self.this_node.status(),
                "api_server": self.api.host,
                "pods": self.pods.informer.status(), "nads": self.nads.informer.status(),
                "credential_reloads": self.api.credential_reloads,
                # netctl's own HTTP (kube/client/wire.py), or the client's session (a proxy…)
                "api_transport": "netctl" if self.api.wire is not None else "client-session",
                "api_connections": self.api.wire.opened if self.api.wire is not None
                else None,
                "ipam": self.ipam.status() if self.ipam is not None else None,
                "network_status_required": self.required,
                "network_status_failures": self.status_failures,
                "last_network_status_failure": self.last_status_failure,
                "network_status_retries": self.writes.status(),
                "hotplug": self.hotplug.status() if self.hotplug is not None else None,
                "api_calls": {f"{verb} {res}": n for (verb, res), n
                              in sorted(self.api.calls.items())}}


def _cluster_store(api: Api, node: str, pods: PodSource, cfg: DaemonConfig, journal: Journal,
                   live: Loaded) -> ClusterStore:
    """The cluster store over ``api``, loaded with ``live``."""
    from netctl.ipam.cluster import ClusterSettings, cluster_store

    def live_pods() -> set[str] | None:
        if not pods.informer.synced.is_set():
            return None
        return {p.metadata.uid for p in pods.informer.cache.values()}

    return cluster_store(api, journal, ClusterSettings(
        node, cfg.block_idle, cfg.node_gone_grace,
        ready_wait=max(cfg.api_timeout, cfg.pod_wait)), live, live_pods)
