"""``netctl daemon``: configuration, and the composition of the parts.

:func:`run` builds every part once and hands each what it needs — the journal,
the IPAM store loaded from it, the delegates, the engine, the plain IPAM
plugin, the reconciler, the server — then kills orphans, replays, reconciles,
serves, and drains on SIGTERM. Nothing else reaches through one part to another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import msgspec.yaml
import trio

from netctl import __version__
from netctl.cni.hostroot import HostRoot
from netctl.cni.invoke import kill_orphans, owned_processes
from netctl.cni.request import AdminRequest, Invocation, Pod
from netctl.engine.admission import Admission
from netctl.engine.chains import Chains, Delegates
from netctl.engine.degraded import (
    DEFAULT_POOL_DEGRADED_AT,
    full_pools,
    is_degraded,
    parse_threshold,
    pool_fills,
)
from netctl.engine.degraded import reasons as degraded_reasons
from netctl.engine.engine import Cutover, Engine, Limits
from netctl.engine.foreign import DEFAULT_MULTUS_CACHE, DEFAULT_RESULTS_CACHE
from netctl.engine.ipam_plugin import IpamPlugin
from netctl.engine.kubeselect import KubeSelector
from netctl.engine.nads import NadResolver
from netctl.engine.networks import NetworkDir
from netctl.engine.plan import ArgsSelector
from netctl.engine.readiness import daemon_reasons
from netctl.engine.verbs import Reply
from netctl.errors import (
    CANCELLED,
    INVALID_CONFIG,
    IO_FAILURE,
    TRY_AGAIN_LATER,
    CNIError,
    Refusal,
)
from netctl.ipam.planner import Allocation
from netctl.ipam.store import IndexStore, Store
from netctl.journal.pruner import Pruner
from netctl.journal.records import Attachment, OpStart
from netctl.journal.retention import (
    DEFAULT_ALLOCATIONS,
    DEFAULT_JOURNAL,
    Retention,
    parse_duration,
)
from netctl.journal.store import Journal, open_journal
from netctl.kube.netstatus import annotation_value, network_status
from netctl.metrics import Metrics, MetricsServer, Snapshot, parse_addr
from netctl.reconcile.leaks import PARALLEL as RECONCILE_PARALLEL
from netctl.reconcile.leaks import Reconciler
from netctl.reconcile.pending import finish_pending, pending_dir
from netctl.reconcile.replay import replay
from netctl.reconcile.watch import EventWatcher
from netctl.server import Handlers, Server, ServerConfig

if TYPE_CHECKING:  # the client is imported in Kubernetes mode only: it costs ≈ 50 MiB
    from netctl.ipam.cluster import ClusterStore
    from netctl.kube.api import Api
    from netctl.kube.events import EventRecorder
    from netctl.kube.informer import Informer
    from netctl.kube.pods import NadSource, PodSource
    from netctl.kube.statuswrites import StatusWrites
    from netctl.kube.thisnode import NodeCheck

log = logging.getLogger("netctl.daemon")


@dataclass
class DaemonConfig:
    """Every daemon setting; ``--config`` files use the same keys as the flags
    (``state-dir``, ``stateDir`` and ``state_dir`` are all accepted)."""

    state_dir: str = "/var/lib/netctl"
    socket: str = "/run/netctl/netctl.sock"
    cni_bin_dir: str = "/opt/cni/bin:/usr/lib/cni"
    networks_dir: str = "/etc/netctl/networks.d"
    kubeconfig: str | None = None
    in_cluster: bool = False
    node_name: str | None = None
    metrics_addr: str | None = None
    log_level: str = "info"  # LEVEL[,LOGGER=LEVEL…]: netctl's, then other loggers' (logs.py)
    log_format: Literal["text", "json", "logfmt"] = "text"
    plugin_timeout: float = 60.0
    max_concurrent: int = 32
    max_queue: int = 256
    compensate_timeout: float = 30.0
    cancel_grace: float = 5.0
    drain_timeout: float = 30.0
    max_request_bytes: int = 4 << 20
    allowed_uids: tuple[int, ...] = (0,)
    ipam_takeover: tuple[str, ...] = ()  # IPAM types served by netctl-ipam, e.g. whereabouts
    reconcile_interval: float = 60.0  # seconds between reconcile rounds; 0: the first only
    reconcile_grace: float = 30.0  # allocations younger than this are never released
    reconcile_events: bool = True  # reconcile on kernel and netns-dir events (watch.py)
    netns_dirs: tuple[str, ...] = ("/run/netns", "/var/run/netns")  # watched for deletions
    # a DEL for a container netctl never saw (a pod from before the switch) runs what ran
    # for it: Multus' cache of it, else the cluster network (netctl/engine/foreign.py)
    cutover_dels: bool = True
    multus_cache_dir: str = DEFAULT_MULTUS_CACHE  # Multus' cniDir
    cni_results_dir: str = DEFAULT_RESULTS_CACHE  # libcni's cached ADD results
    # where the host's / is mounted when the daemon runs in a container ("" : run as is):
    # delegates run chrooted into it, host files are read there (netctl/cni/hostroot.py)
    host_root: str = ""
    exit_after_replay: bool = False  # the start-up replay, then exit without serving
    # Kubernetes mode
    api_timeout: float = 10.0  # one API request (watches are renewed every 5 min)
    pod_wait: float = 2.0  # an ADD waits this long for the watch to bring an unseen pod
    pod_deleted_grace: float = 10.0  # a deleted pod's attachments are DELeted after this
    multus_conf_dir: str = "/etc/cni/multus/net.d"  # NADs with an empty spec.config
    readiness_wait: float = 45.0  # an ADD waits this long for readinessindicatorfile
    network_status_required: bool = False  # a network-status not written fails the ADD
    ipam_backend: str = "sqlite"  # sqlite: pools per node; kubernetes: blocks per node
    block_idle: float = 600.0  # a block empty this long is released (one per pool kept)
    node_gone_grace: float = 300.0  # a deleted Node's blocks are taken over after this
    block_check: float = 10.0  # seconds between rounds of block maintenance
    # what the journal forgets (netctl/journal/retention.py): seconds, 0 keeps all; the
    # config file takes durations (7d, 12h, 30m, 90s), plain seconds, 0 or off
    journal_retention: float = DEFAULT_JOURNAL
    allocation_retention: float = DEFAULT_ALLOCATIONS
    # `netctl status` says degraded once a pool is this full (netctl/engine/degraded.py): a
    # fraction of its assignable addresses, 0 (off) to 1 (full); the config file takes 90%
    pool_degraded_at: float = DEFAULT_POOL_DEGRADED_AT

    @property
    def bin_dirs(self) -> list[str]:
        return [d for d in self.cni_bin_dir.split(":") if d]


def _normalize(key: str) -> str:
    out = []
    for ch in key.replace("-", "_"):
        if ch.isupper():
            out.append("_" + ch.lower())
        else:
            out.append(ch)
    return "".join(out)


def load_config(path: str | None, overrides: dict[str, Any]) -> DaemonConfig:
    """Defaults, then the ``--config`` file, then the flags given on the command line."""
    values: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(DaemonConfig)}
    if path:
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
            data = msgspec.yaml.decode(raw) if not path.endswith(".json") \
                else msgspec.json.decode(raw)
        except (OSError, msgspec.MsgspecError) as exc:
            raise CNIError(INVALID_CONFIG, f"daemon config {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise CNIError(INVALID_CONFIG, f"daemon config {path}: not a mapping")
        for key, value in data.items():
            name = _normalize(str(key))
            if name not in fields:
                raise CNIError(INVALID_CONFIG, f"daemon config {path}: unknown key {key!r}")
            values[name] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    if "allowed_uids" in values:
        values["allowed_uids"] = tuple(int(u) for u in values["allowed_uids"])
    if "ipam_takeover" in values:
        values["ipam_takeover"] = tuple(str(t) for t in values["ipam_takeover"])
    for name in ("journal_retention", "allocation_retention"):
        if name in values:
            try:
                values[name] = parse_duration(values[name])
            except (ValueError, TypeError) as exc:
                raise CNIError(INVALID_CONFIG, f"daemon config: {name.replace('_', '-')}: "
                               f"{exc}") from exc
    if "pool_degraded_at" in values:
        try:
            values["pool_degraded_at"] = parse_threshold(values["pool_degraded_at"])
        except ValueError as exc:
            raise CNIError(INVALID_CONFIG, f"daemon config: pool-degraded-at: {exc}") from exc
    try:
        cfg = msgspec.convert(values, DaemonConfig, strict=False)
        if cfg.metrics_addr:
            parse_addr(cfg.metrics_addr)
    except (msgspec.ValidationError, ValueError) as exc:
        raise CNIError(INVALID_CONFIG, f"daemon config: {exc}") from exc
    return cfg


async def _wait_gone(owner: str, timeout: float = 5.0) -> None:
    """Wait until killed orphans have stopped (nothing to notify us: poll /proc)."""
    with trio.move_on_after(timeout):
        while owned_processes(owner):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def _in_scope(scope: trio.CancelScope, fn: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await fn()


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

    @classmethod
    async def connect(cls, cfg: DaemonConfig, journal: Journal, metrics: Metrics) -> KubeMode:
        node = cfg.node_name or os.environ.get("NODE_NAME", "")
        if not node:
            raise CNIError(INVALID_CONFIG, "Kubernetes mode needs the node's name: "
                           "--node-name, or NODE_NAME in the environment")
        from netctl.kube.api import Api, ApiError, KubeSettings
        from netctl.kube.events import EventRecorder
        from netctl.kube.pods import NadSource, PodSource
        from netctl.kube.statuswrites import StatusWrites
        from netctl.kube.thisnode import NodeCheck

        try:
            api = await Api.connect(KubeSettings(cfg.kubeconfig, cfg.in_cluster,
                                                 cfg.api_timeout))
        except ApiError as exc:
            raise CNIError(INVALID_CONFIG, exc.reason) from None
        send, receive = trio.open_memory_channel[Pod](math.inf)
        writes = StatusWrites(api, on_failure=metrics.network_status_write_failed,
                              last_try=cfg.api_timeout + 1)
        return cls(api, node, PodSource(api, node, cfg.pod_wait, send.send_nowait),
                   NadSource(api, cfg.pod_wait), NodeCheck(api, node), writes,
                   EventRecorder(api, node), journal, send, receive,
                   cfg.network_status_required)

    def cluster_store(self, cfg: DaemonConfig, journal: Journal,
                      live: tuple[list[Allocation], dict[str, int]]) -> ClusterStore:
        """The cluster-wide IPAM store (``ipam-backend: kubernetes``) over this API."""
        from netctl.ipam.cluster import ClusterSettings, cluster_store

        def live_pods() -> set[str] | None:
            if not self.pods.informer.synced.is_set():
                return None
            return {p.metadata.uid for p in self.pods.informer.cache.values()}

        store = cluster_store(self.api, journal, ClusterSettings(
            self.node, cfg.block_idle, cfg.node_gone_grace,
            ready_wait=max(cfg.api_timeout, cfg.pod_wait)), live, live_pods)
        self.ipam, self.block_check = store, cfg.block_check
        self.takeover = "whereabouts" in cfg.ipam_takeover
        return store

    async def _cluster_ipam(self, store: ClusterStore) -> None:
        """The cluster store's caches, its start, and its maintenance rounds."""
        from netctl.kube.api import ApiError

        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.blocks.run)
            nursery.start_soon(store.nodes.run)
            nursery.start_soon(store.answer_borrows)
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
        (:mod:`netctl.kube.statuswrites`) until the pod has it, is gone or replaced, or the
        attachments are DELeted; with ``network-status-required`` it fails the ADD instead
        (code 11: the engine undoes it and the runtime retries)."""
        if not inv.pod.name:
            return ""
        from netctl.kube.objects import is_static
        from netctl.kube.statuswrites import Write, patch_status

        namespace, name = inv.pod.namespace, inv.pod.name
        cached = self.pods.informer.cache.get((namespace, name))
        uid = cached.metadata.uid if cached is not None and (is_static(cached) or not
                                                             inv.pod.uid) else inv.pod.uid
        ids = {a.id for a in atts}

        async def current() -> bool:
            """The ADD's attachments are all still live (no DEL, no newer ADD meanwhile)."""
            return ids <= {a.id for a in await self.journal.live_attachments(inv.container_id)}

        async def written() -> None:
            await self.journal.one_transaction(OpStart(
                verb="ANNOTATE", container_id=inv.container_id, netns=inv.netns,
                ifname=inv.ifname, caller_network=inv.conf_name, pod=inv.pod,
                origin="kubernetes"))

        write = Write(Pod(namespace=namespace, name=name, uid=uid),
                      annotation_value(network_status(atts)), current, written)
        if await patch_status(self.api, write) != "failed":
            return ""  # written, or the pod is gone or replaced: nothing to annotate
        self.writes.on_failure()
        self.status_failures += 1
        self.last_status_failure = warning = write.warning
        if self.required:
            log.warning("%s", warning)
            raise CNIError(TRY_AGAIN_LATER, f"{warning} (network-status-required)")
        if self.writes.retry(write):
            warning += "; retried in the background until the pod has it"
        log.warning("%s", warning)
        return warning

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
        async def later(pod: Pod) -> None:
            await trio.sleep(grace)
            done = await reconciler.pod_deleted(pod)
            if done:
                log.info("pod %s deleted: DELeted the attachments of %s", pod.key,
                         ", ".join(done))

        async def gone_while_down() -> None:
            """Pods the journal has attachments of that the first list does not have (or
            has with another UID) were deleted while the daemon was down."""
            await self.pods.informer.synced.wait()
            present = {p.ref for p in self.pods.informer.cache.values()}
            missing = {a.pod for a in await reconciler.journal.live_attachments()
                       if a.pod.uid and a.pod.name} - present
            for pod in sorted(missing):
                log.info("pod %s (uid %s) is gone from the API", pod.key, pod.uid)
                self.deleted.send_nowait(pod)

        async with trio.open_nursery() as outer:
            await outer.start(self.writes.run)  # until stop(), then their last attempts
            with self.watching:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.this_node.run)
                    nursery.start_soon(self.pods.informer.run)
                    nursery.start_soon(self.nads.informer.run)
                    nursery.start_soon(gone_while_down)
                    if self.ipam is not None:
                        nursery.start_soon(self._cluster_ipam, self.ipam)
                    task_status.started()
                    async for pod in self.deletions:
                        nursery.start_soon(later, pod)

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
                              node=self.node, node_exists=self.this_node.exists)

    def watches(self) -> dict[str, tuple[bool, float | None]]:
        """Each cache's resource: whether it is watching, and its age (the metrics)."""
        informers: list[tuple[str, Informer[Any]]] = [
            ("pods", self.pods.informer), ("network-attachment-definitions", self.nads.informer)]
        if self.ipam is not None:
            informers += [("ipamblocks", self.ipam.blocks), ("nodes", self.ipam.nodes)]
        return {name: (inf.state == "watching", inf.age()) for name, inf in informers}

    def status(self) -> dict[str, Any]:
        return {"node": self.node, "node_object": self.this_node.status(),
                "api_server": self.api.host,
                "pods": self.pods.informer.status(), "nads": self.nads.informer.status(),
                "credential_reloads": self.api.credential_reloads,
                "ipam": self.ipam.status() if self.ipam is not None else None,
                "network_status_required": self.required,
                "network_status_failures": self.status_failures,
                "last_network_status_failure": self.last_status_failure,
                "network_status_retries": self.writes.status(),
                "api_calls": {f"{verb} {res}": n for (verb, res), n
                              in sorted(self.api.calls.items())}}


async def run(cfg: DaemonConfig, *,
              task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
    root = HostRoot.at(cfg.host_root)  # checked before anything is opened
    async with open_journal(cfg.state_dir) as journal, contextlib.AsyncExitStack() as stack:
        metrics = Metrics()
        kube = await KubeMode.connect(cfg, journal, metrics) \
            if cfg.kubeconfig or cfg.in_cluster else None
        if kube is not None:
            stack.push_async_callback(kube.close)
        orphans = await trio.to_thread.run_sync(kill_orphans, journal.path)
        if orphans:
            log.warning("killed %d delegate processes a previous run left behind: %s",
                        len(orphans), orphans)
            await _wait_gone(journal.path)
        live = await journal.live_allocations()
        if cfg.ipam_backend == "kubernetes":
            if kube is None:
                raise CNIError(INVALID_CONFIG, "ipam-backend: kubernetes needs Kubernetes mode "
                               "(--kubeconfig or --in-cluster)")
            ipam: Store = kube.cluster_store(cfg, journal, live)
        elif cfg.ipam_backend == "sqlite":
            ipam = IndexStore.of(*live)
        else:
            raise CNIError(INVALID_CONFIG, f"ipam-backend {cfg.ipam_backend!r}: sqlite or "
                           "kubernetes")
        ipam.know_pools(await journal.pool_sizes())
        ipam_types = frozenset({"netctl-ipam", *cfg.ipam_takeover})
        delegates = Delegates(cfg.bin_dirs, cfg.plugin_timeout, owner=journal.path,
                              cancel_grace=cfg.cancel_grace, ipam_types=ipam_types,
                              root=root)
        admission = Admission(cfg.max_concurrent, cfg.max_queue)
        limits = Limits(cfg.compensate_timeout, gc_grace=cfg.reconcile_grace,
                        readiness_wait=cfg.readiness_wait)
        chains = Chains(journal, delegates, ipam, metrics)

        def not_ready() -> list[str]:
            """Why the daemon cannot serve ADDs now: ``netctl status`` and STATUS."""
            writable = os.access(journal.path, os.W_OK) and \
                os.access(os.path.dirname(journal.path), os.W_OK)
            return daemon_reasons(journal_writable=writable) if kube is None \
                else kube.not_ready(writable)

        cutover = Cutover(cfg.cutover_dels, root.host(cfg.multus_cache_dir),
                          root.host(cfg.cni_results_dir))
        if kube is None:
            engine = Engine(journal, chains, root, NetworkDir(cfg.networks_dir, root),
                            ArgsSelector(), admission, limits, health=not_ready,
                            metrics=metrics, cutover=cutover)
        else:
            engine = Engine(journal, chains, root,
                            NadResolver(kube.nads, root.host(cfg.multus_conf_dir), root),
                            KubeSelector(kube.pods), admission, limits,
                            after_add=kube.write_status, health=not_ready, metrics=metrics,
                            cutover=cutover)
        ipam_plugin = IpamPlugin(journal, ipam, admission, ipam_types,
                                 gc_grace=cfg.reconcile_grace)
        recorded = pending_dir(cfg.socket)
        reconciler = Reconciler(journal, admission, engine, ipam, cfg.reconcile_grace,
                                pending=recorded,
                                parallel=max(1, min(RECONCILE_PARALLEL,
                                                    cfg.max_concurrent // 2)),
                                metrics=metrics)
        events = EventWatcher(reconciler, cfg.netns_dirs) if cfg.reconcile_events else None
        report = await replay(journal, engine)
        log.info("start-up replay: %d unfinished operations, %d attachments of %d containers "
                 "undone, %d failures", report.operations, report.attachments,
                 report.containers, len(report.failed))
        dels = await finish_pending(engine, admission, recorded)
        log.info("start-up replay: %d DELs recorded by the plugin while the daemon was down "
                 "finished, %d for containers with nothing live dropped, %d corrupt records "
                 "removed, %d failed (kept for the next round)", dels.finished, dels.dropped,
                 dels.corrupt, len(dels.failed))
        for failure in report.failed + dels.failed:
            log.warning("replay: %s", failure)
        if cfg.exit_after_replay:
            log.info("start-up replay done; exiting (exit-after-replay)")
            return
        started = dataclasses.asdict(report) | {"recorded_dels": dataclasses.asdict(dels)}
        metrics.replayed({
            "unfinished_operation": report.operations, "attachment_undone": report.attachments,
            "replay_failure": len(report.failed), "recorded_del_finished": dels.finished,
            "recorded_del_dropped": dels.dropped, "recorded_del_corrupt": dels.corrupt,
            "recorded_del_failed": len(dels.failed)})

        def snapshot() -> Snapshot:
            """The scrape's state, from memory: counters, caches, two stat calls."""
            size = 0
            for path in (journal.path, journal.path + "-wal"):
                with contextlib.suppress(OSError):
                    size += os.stat(path).st_size
            cluster = kube.ipam if kube is not None else None
            stuck = len(journal.live.failing)
            return Snapshot(
                in_flight=admission.in_flight, queued=admission.queued,
                ready=not not_ready(),
                degraded=is_degraded(stuck, ipam.pool_fill(), cfg.pool_degraded_at),
                stuck=stuck, pools=ipam.pool_usage(),
                blocks=cluster.blocks_by_node() if cluster is not None else None,
                journal_bytes=size, journal_writes=journal.writes,
                journal_commits=journal.commits,
                watches=kube.watches() if kube is not None else None,
                api_calls=kube.api.calls if kube is not None else None,
                api_answers=kube.api.answers if kube is not None else None)

        metrics.watch(snapshot)
        pruner = Pruner(journal, Retention(cfg.journal_retention, cfg.allocation_retention))

        async def status() -> dict[str, Any]:
            """The status document: ready (ADDs can be served) or not and why; degraded
            (ready, but stuck attachments or full pools) and why; then the numbers."""
            reasons = not_ready()
            stuck = await journal.stuck_attachments()
            fill = ipam.pool_fill()
            full = full_pools(fill, cfg.pool_degraded_at)
            degraded = degraded_reasons(stuck, full, cfg.pool_degraded_at)
            return {
                "ready": not reasons, "reasons": reasons,
                "state": "not ready" if reasons else "degraded" if degraded else "ready",
                "degraded": bool(degraded), "degraded_reasons": degraded,
                "pools": [p.to_json() for p in pool_fills(fill)],
                "pool_degraded_at": cfg.pool_degraded_at,
                "version": __version__, "pid": os.getpid(),
                "networks_dir": cfg.networks_dir,  # where `netctl status` checks names
                "in_flight": admission.in_flight, "queued": admission.queued,
                "journal": journal.path, "journal_writes": journal.writes,
                "journal_commits": journal.commits,  # fewer than writes: group commit
                "journal_trips": journal.trips,  # calls on the database thread
                "journal_size": (await journal.size()).as_dict(),
                "retention": pruner.status(),
                "replay": started,
                "stuck": stuck,
                "events": events.status() if events is not None else None,
                "kubernetes": kube.status() if kube is not None else None,
            }

        async def counted(handler: Callable[[Invocation], Awaitable[Reply]],
                          inv: Invocation) -> Reply:
            """A request answered: its verb, its code (0: success), its time."""
            began, code = time.monotonic(), IO_FAILURE  # a bug: the server answers 5
            try:
                reply = await handler(inv)
                code = 0
                return reply
            except CNIError as exc:
                code = exc.code
                raise
            except trio.Cancelled:
                code = CANCELLED
                raise
            finally:
                metrics.request(inv.verb, code, time.monotonic() - began)

        async def cni(inv: Invocation) -> Reply:
            try:
                return await engine.handle(inv)
            except Refusal as exc:
                if kube is not None and inv.pod.name:
                    with trio.move_on_after(cfg.api_timeout):
                        await kube.refused(inv, exc)
                raise

        async def reconcile(dry_run: bool) -> dict[str, Any]:
            return await reconciler.run(dry_run=dry_run)

        async def forget(req: AdminRequest) -> dict[str, Any]:
            return await reconciler.forget(req.container, ifname=req.ifname,
                                           network=req.network, force=req.force,
                                           who=req.who, why=req.why)

        metrics_server = MetricsServer(metrics, cfg.metrics_addr) if cfg.metrics_addr else None
        server = Server(Handlers(cni=partial(counted, cni),
                                 ipam=partial(counted, ipam_plugin.handle), status=status,
                                 reconcile=reconcile, forget=forget,
                                 in_flight=lambda: admission.in_flight),
                        ServerConfig(cfg.socket, cfg.allowed_uids, cfg.max_request_bytes,
                                     drain_timeout=cfg.drain_timeout))
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                if events is not None:
                    await nursery.start(events.run)
                if kube is not None:
                    await nursery.start(kube.run, reconciler, cfg.pod_deleted_grace)
                if metrics_server is not None:
                    try:
                        await nursery.start(metrics_server.serve)
                    except OSError as exc:
                        raise CNIError(INVALID_CONFIG, f"metrics-addr {cfg.metrics_addr}: "
                                       f"{exc}") from exc
                await nursery.start(server.serve)
                pruning = trio.CancelScope()  # in the background, batch by batch
                nursery.start_soon(_in_scope, pruning, pruner.run)
                periodic = trio.CancelScope()  # the first round now, then periodic ones
                nursery.start_soon(_in_scope, periodic, partial(
                    reconciler.every, cfg.reconcile_interval))
                log.info("netctl daemon %d listening on %s (journal %s)", os.getpid(),
                         cfg.socket, journal.path)
                task_status.started(server)
                async for signum in signals:
                    log.info("signal %s: draining", signal.Signals(signum).name)
                    server.stop()
                    if metrics_server is not None:
                        metrics_server.stop()
                    periodic.cancel()  # an interrupted round is finished by the next start
                    pruning.cancel()  # a batch is one write: it completes or never began
                    if events is not None:
                        events.stop()
                    if kube is not None:
                        kube.stop()  # ends kube.run; the server drains meanwhile
                    break
    log.info("netctl daemon stopped")
