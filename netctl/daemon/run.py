"""``netctl daemon``: every part built once and handed what it needs (:func:`run`), then
orphans killed, the replay, the reconcile rounds, serving, and the drain on SIGTERM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from netctl.cni import mounts
from netctl.cni.hostroot import HostRoot, resolve
from netctl.cni.invoke import kill_orphans, owned_processes
from netctl.daemon.admin import AdminHandlers
from netctl.daemon.server import Handlers, Server, ServerConfig
from netctl.daemon.status import Health, StatusDocument
from netctl.engine.admission import Admission
from netctl.engine.chains import Chains, Delegates
from netctl.engine.choice import ArgsSelector
from netctl.engine.cutover import Cutover
from netctl.engine.engine import Engine, Limits
from netctl.engine.hotplug import Hotplug
from netctl.engine.ipam_plugin import IpamPlugin
from netctl.engine.networks import NetworkDir
from netctl.errors import INVALID_CONFIG, CNIError
from netctl.httpserver import HttpServer
from netctl.ipam.store import IndexStore, Store
from netctl.journal.events import EventLog, node_name
from netctl.journal.pruner import Pruner
from netctl.journal.retention import Retention
from netctl.journal.store import Journal, open_journal
from netctl.kube import mode as kube_mode
from netctl.kube.hotplug import KubeHotplug
from netctl.kube.mode import KubeMode
from netctl.kube.nads import NadResolver
from netctl.kube.queryserver import QueryServer, tls_context
from netctl.kube.select import KubeSelector
from netctl.metrics import Metrics, metrics_server
from netctl.reconcile.leaks import PARALLEL as RECONCILE_PARALLEL
from netctl.reconcile.leaks import Reconciler
from netctl.reconcile.pending import finish_pending, pending_dir
from netctl.reconcile.replay import replay
from netctl.reconcile.watch import EventWatcher
from netctl.settings import DaemonConfig

if TYPE_CHECKING:  # the cluster IPAM is imported in Kubernetes mode only
    from netctl.ipam.cluster import ClusterStore

log = logging.getLogger("netctl.daemon")


async def run(cfg: DaemonConfig, *,
              task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
    root = HostRoot.at(cfg.host_root)  # checked before anything is opened
    async with open_journal(cfg.state_dir) as journal, contextlib.AsyncExitStack() as stack:
        if cfg.journal_log:
            journal.event_log = EventLog(node_name(cfg.node_name))
        metrics = Metrics()
        client = await kube_mode.connect(cfg, metrics) \
            if cfg.kubeconfig or cfg.in_cluster else None
        if client is not None:
            stack.push_async_callback(client.close)
        elif cfg.query_addr:
            raise CNIError(INVALID_CONFIG, "query-addr serves Kubernetes mode only (its "
                           "callers are checked by the API server): add --kubeconfig or "
                           "--in-cluster, or drop query-addr")
        if client is not None and "whereabouts" in cfg.ipam_takeover and \
                cfg.ipam_backend != "kubernetes":
            raise CNIError(INVALID_CONFIG, "ipam-takeover: [whereabouts] in Kubernetes mode "
                           "needs ipam-backend: kubernetes: whereabouts' addresses are "
                           "cluster-wide, and a node's own pools (ipam-backend: sqlite) "
                           "would hand out again what whereabouts gave pods on this and "
                           "other nodes (docs/migrating.md)")
        await _kill_orphans(journal.path)
        ipam, cluster = await _ipam_store(cfg, journal, client)
        ipam_types = frozenset({"netctl-ipam", *cfg.ipam_takeover})
        delegates = Delegates(cfg.bin_dirs, cfg.plugin_timeout, owner=journal.path,
                              cancel_grace=cfg.cancel_grace, ipam_types=ipam_types,
                              root=root)
        admission = Admission(cfg.max_concurrent, cfg.max_queue)
        chains = Chains(journal, delegates, ipam, metrics)
        unseen = _mount_propagation(cfg, root)
        kube_health = kube_mode.KubeHealth(client, cluster) if client is not None else None
        health = Health(journal, ipam, admission, kube_health, cfg.pool_degraded_at, unseen)
        statuses = kube_mode.NetworkStatus(client, journal, cfg.network_status_required) \
            if client is not None else None
        engine = _engine(cfg, root, journal, chains, admission, client, statuses, health,
                         metrics)
        kube = None
        if client is not None and kube_health is not None and statuses is not None:
            kube = KubeMode(client, journal, kube_health, statuses, KubeHotplug(
                Hotplug(engine), client.pods.informer, client.events,
                statuses.write_pod_status, client.pod_events), cfg.block_check,
                "whereabouts" in cfg.ipam_takeover)
        ipam_plugin = IpamPlugin(journal, ipam, admission, ipam_types,
                                 gc_grace=cfg.reconcile_grace)
        recorded = pending_dir(cfg.socket)
        reconciler = Reconciler(journal, admission, engine, ipam, cfg.reconcile_grace,
                                pending=recorded,
                                parallel=max(1, min(RECONCILE_PARALLEL,
                                                    cfg.max_concurrent // 2)),
                                metrics=metrics)
        events = EventWatcher(reconciler, cfg.netns_dirs) if cfg.reconcile_events else None
        started = await _replay(journal, engine, admission, recorded, metrics)
        if cfg.exit_after_replay:
            log.info("start-up replay done; exiting (exit-after-replay)")
            return
        metrics.watch(health.snapshot)
        pruner = Pruner(journal, Retention(cfg.journal_retention, cfg.allocation_retention))
        status = StatusDocument(health, kube, cfg.networks_dir, pruner, events, started)
        handlers = _handlers(cfg, engine, ipam_plugin, reconciler, kube, status, metrics)
        server = Server(handlers, ServerConfig(cfg.socket, cfg.allowed_uids,
                                               cfg.max_request_bytes,
                                               drain_timeout=cfg.drain_timeout))
        await Serving(server, reconciler, pruner, events, kube,
                      metrics_server(metrics, cfg.metrics_addr) if cfg.metrics_addr else None,
                      _query_server(cfg, client, status)).serve(cfg, journal.path, task_status)
    log.info("netctl daemon stopped")


def _query_server(cfg: DaemonConfig, client: kube_mode.KubeClient | None,
                  status: StatusDocument) -> QueryServer | None:
    """``query-addr``: the read-only endpoint kubectl netctl asks (Kubernetes mode only)."""
    if not cfg.query_addr or client is None:
        return None
    from netctl.kubeapi.review import Reviews

    try:
        tls = tls_context(cfg.query_tls_cert, cfg.query_tls_key) \
            if cfg.query_tls_cert and cfg.query_tls_key else None
    except (OSError, ValueError) as exc:
        raise CNIError(INVALID_CONFIG, f"query-tls-cert/query-tls-key: {exc}") from exc
    return QueryServer(cfg.query_addr, client.node, cfg.state_dir,
                       Reviews(client.api, client.node).check, status.read, tls)


async def _kill_orphans(owner: str) -> None:
    """The delegate processes a previous run left behind, killed, and waited for (up to
    5 s, polling /proc: nothing notifies us)."""
    orphans = await trio.to_thread.run_sync(kill_orphans, owner)
    if orphans:
        log.warning("killed %d delegate processes a previous run left behind: %s",
                    len(orphans), orphans)
        with trio.move_on_after(5.0):
            while owned_processes(owner):  # noqa: ASYNC110
                await trio.sleep(0.01)


async def _ipam_store(cfg: DaemonConfig, journal: Journal,
                      client: kube_mode.KubeClient | None
                      ) -> tuple[Store, ClusterStore | None]:
    """The store of ``ipam-backend``, loaded with the journal's live allocations; and the
    cluster store, when that is what it is."""
    live = await journal.ipam.live_allocations()
    cluster = None
    if cfg.ipam_backend == "kubernetes":
        if client is None:
            raise CNIError(INVALID_CONFIG, "ipam-backend: kubernetes needs Kubernetes mode "
                           "(--kubeconfig or --in-cluster)")
        cluster = kube_mode.cluster_store(client, cfg, journal, live)
        ipam: Store = cluster
    elif cfg.ipam_backend == "sqlite":
        ipam = IndexStore.of(*live)
    else:
        raise CNIError(INVALID_CONFIG, f"ipam-backend {cfg.ipam_backend!r}: sqlite or "
                       "kubernetes")
    ipam.index.know_pools(await journal.ipam.pool_sizes())
    journal.ipam.follower = ipam  # told of each committed allocation and release
    return ipam, cluster


def _mount_propagation(cfg: DaemonConfig, root: HostRoot) -> list[str]:
    """In a container (``host-root`` set): the problems that keep pods' netns mounted on the
    host from appearing in the netns dirs (:mod:`netctl.cni.mounts`), each logged."""
    if not root.path:
        return []
    found = mounts.check([*(os.path.realpath(d) for d in cfg.netns_dirs),
                          *(resolve(root.path, d) for d in cfg.netns_dirs)])
    for problem in found:
        log.error("mount propagation: %s", problem)
    return found


def _engine(cfg: DaemonConfig, root: HostRoot, journal: Journal, chains: Chains,
            admission: Admission, client: kube_mode.KubeClient | None,
            statuses: kube_mode.NetworkStatus | None, health: Health,
            metrics: Metrics) -> Engine:
    """netctl-cni's engine, standalone or in Kubernetes mode."""
    limits = Limits(cfg.compensate_timeout, gc_grace=cfg.reconcile_grace,
                    readiness_wait=cfg.readiness_wait)
    cutover = Cutover(cfg.cutover_dels, root.host(cfg.multus_cache_dir),
                      root.host(cfg.cni_results_dir))
    unseen = "; ".join(health.mounts)
    if client is None or statuses is None:
        return Engine(journal, chains, root, NetworkDir(cfg.networks_dir, root),
                      ArgsSelector(), admission, limits, health=health.not_ready, metrics=metrics,
                      cutover=cutover, netns_unseen=unseen)
    return Engine(journal, chains, root,
                  NadResolver(client.nads, root.host(cfg.multus_conf_dir), root),
                  KubeSelector(client.pods), admission, limits,
                  after_add=statuses.after_add, health=health.not_ready, metrics=metrics,
                  cutover=cutover, netns_unseen=unseen, devices=client.devices,
                  refused=partial(kube_mode.tell_refused, client.events, cfg.api_timeout))


async def _replay(journal: Journal, engine: Engine, admission: Admission, recorded: str,
                  metrics: Metrics) -> dict[str, Any]:
    """The start-up replay, then the DELs the plugin recorded in ``recorded``: logged,
    counted in the metrics, and its report for the status document."""
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
    metrics.replayed({
        "unfinished_operation": report.operations, "attachment_undone": report.attachments,
        "replay_failure": len(report.failed), "recorded_del_finished": dels.finished,
        "recorded_del_dropped": dels.dropped, "recorded_del_corrupt": dels.corrupt,
        "recorded_del_failed": len(dels.failed)})
    return dataclasses.asdict(report) | {"recorded_dels": dataclasses.asdict(dels)}


def _handlers(cfg: DaemonConfig, engine: Engine, ipam_plugin: IpamPlugin,
              reconciler: Reconciler, kube: KubeMode | None, status: StatusDocument,
              metrics: Metrics) -> Handlers:
    """What the server hands each request to; the CNI requests counted in the metrics."""
    admission = status.health.admission
    hotplug = Hotplug(engine) if kube is None else None
    admin = AdminHandlers(
        status=lambda req: status.read(),
        reconcile=lambda req: reconciler.run(dry_run=req.dry_run),
        forget=lambda req: reconciler.forget(req.container, ifname=req.ifname,
                                             network=req.network, force=req.force,
                                             who=req.who, why=req.why),
        attach=lambda req: _hotplugging(hotplug).attach(req.container, req.network,
                                                        ifname=req.ifname, ips=req.ips),
        detach=lambda req: _hotplugging(hotplug).detach(req.container, ifname=req.ifname,
                                                        network=req.network))
    return Handlers(cni=engine.handle, ipam=ipam_plugin.handle, served=metrics.request,
                    admin=admin, in_flight=lambda: admission.in_flight)


def _hotplugging(hotplug: Hotplug | None) -> Hotplug:
    """``netctl attach``/``detach`` serve standalone mode only."""
    if hotplug is None:
        raise CNIError(INVALID_CONFIG, "netctl attach/detach serve standalone mode only: in "
                       "Kubernetes mode the pod's k8s.v1.cni.cncf.io/networks annotation is "
                       "the source of truth: change it (kubectl annotate --overwrite) and "
                       "the daemon attaches and detaches the networks")
    return hotplug


@dataclass
class Serving:
    """The server and what runs beside it, until SIGTERM or SIGINT."""

    server: Server
    reconciler: Reconciler
    pruner: Pruner
    events: EventWatcher | None  # reconcile-events
    kube: KubeMode | None  # Kubernetes mode
    metrics: HttpServer | None  # metrics-addr
    query: QueryServer | None = None  # query-addr
    pruning: trio.CancelScope = dataclasses.field(default_factory=trio.CancelScope)
    periodic: trio.CancelScope = dataclasses.field(default_factory=trio.CancelScope)

    async def serve(self, cfg: DaemonConfig, journal: str,
                    task_status: trio.TaskStatus[Server]) -> None:
        """Start every part, tell ``task_status`` once the socket listens, and on the
        first signal stop them and wait for them to end."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await self._start(nursery, cfg)
                log.info("netctl daemon %d listening on %s (journal %s)", os.getpid(),
                         cfg.socket, journal)
                collect_less()
                task_status.started(self.server)
                async for signum in signals:
                    log.info("signal %s: draining", signal.Signals(signum).name)
                    self.stop()
                    break

    async def _start(self, nursery: trio.Nursery, cfg: DaemonConfig) -> None:
        if self.events is not None:
            await nursery.start(self.events.run)
        if self.kube is not None:
            await nursery.start(self.kube.run, self.reconciler, cfg.pod_deleted_grace)
        endpoints: list[tuple[Any, str, str | None]] = [
            (self.metrics, "metrics-addr", cfg.metrics_addr),
            (self.query, "query-addr", cfg.query_addr)]
        for endpoint, setting, addr in endpoints:
            try:
                if endpoint is not None:
                    await nursery.start(endpoint.serve)
            except OSError as exc:
                raise CNIError(INVALID_CONFIG, f"{setting} {addr}: {exc}") from exc
        await nursery.start(self.server.serve)
        nursery.start_soon(_in_scope, self.pruning, self.pruner.run)
        nursery.start_soon(_in_scope, self.periodic, partial(
            self.reconciler.every, cfg.reconcile_interval))

    def stop(self) -> None:
        """Drain: the server stops accepting and finishes what it has; the rest stop."""
        self.server.stop()
        self.periodic.cancel()  # an interrupted round is finished by the next start
        self.pruning.cancel()  # a batch is one write: it completes or never began
        for part in (self.metrics, self.query, self.events, self.kube):
            if part is not None:
                part.stop()  # kube's ends kube.run; the server drains meanwhile


def collect_less() -> None:
    """Once started: what start-up made lives as long as the daemon, so it is kept out of
    the cyclic collector's passes (``gc.freeze``), and young objects are looked at after
    7,000 allocations, not 700 (a request's garbage goes by reference counts). The
    collector's CPU in ``netctl bench kube --networks 3``: 0.27 s, then 0.17 s."""
    gc.freeze()
    gc.set_threshold(7000, 10, 10)


async def _in_scope(scope: trio.CancelScope, fn: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await fn()
