"""``netctl bench scale``: what the cluster pays as it grows — N nodes on one real API server.

The API server is the real kube-apiserver of ``../shared/kube`` with one etcd
(:class:`netctl_kit.kubefake.real.RealKube`: the project's CRDs and RBAC, an audit log). For
each size of ``--nodes`` (``100,300`` runs both, the smallest first: its per-node rates are
the baseline the larger ones are compared with):

1. **The nodes**: N Node objects, each with a kubelet-like status (conditions, addresses,
   capacity, node info, a list of images: about 4 KB, as a small real node's), created with
   the test's admin token. A **kubelet stand-in** updates one node's status every
   ``--status-every``/N seconds — every node once per ``--status-every`` (a real kubelet
   reports at least every 5 minutes, and on every condition or image change).
2. **A simulated netctl per node**, all in this process (so that 1,000 fit on 2 cores): its
   own journal (a state dir on tmpfs), its own :class:`~netctl.kubeapi.api.Api` under
   netctl's ServiceAccount token, and the **daemon's own cluster IPAM**:
   :func:`netctl.ipam.cluster.cluster_store`, run by :meth:`ClusterStore.run` with its
   informers and maintenance rounds (``--block-check``), allocations served by
   :class:`netctl.engine.ipam_plugin.IpamPlugin` — the classes the daemon runs, fed the
   frames a ``netctl-ipam`` plugin would send. Every node shares one pool
   (``{"type": "netctl-ipam", "range": POOL}``).
3. **Pods**: each node ADDs ``--pods`` pods; then, during the measured window
   (``--measure`` seconds), every node replaces one of its pods (DEL, then ADD of a new
   container) every ``--churn-every`` seconds, spread out.
4. **Measured**, over the window: per node, the watch events and bytes its informers received
   (by resource), its lists and their bytes, its API requests (its own count); in total, the
   API requests by verb and resource from the server's audit log (netctl's ServiceAccount
   only: the stand-ins' status updates are not counted); the API server's CPU (seconds per
   second) and peak RSS. Rates are given per second and per hour.
5. **IPAM writes per pod** (creates, updates and deletes of ``ipamblocks`` over the whole
   run, per pod ADDed) and **duplicates** (an address live on two nodes at once, from every
   node's store at the end: must be 0).
6. **The relist storm**: kube-apiserver restarted (etcd kept); the time until every node's
   informers are watching again and its store answers, and the objects and bytes listed
   meanwhile.

The JSON report has all of it per size; the tables show the per-node rates beside the
smallest size's (ratio 1.0: it does not grow with N). Everything is removed at the end
(the API server, etcd, the state dirs), also after Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import signal
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import trio
from netctl_kit.bench.common import Bench, Interrupted, Measured, drive, proc_cpu, progress
from netctl_kit.bench.render import num, table
from netctl_kit.kubefake.real import RealKube
from netctl_kit.kubefake.real import unavailable as real_unavailable
from rich.console import RenderableType

POOL = "10.64.0.0/12"  # 1M addresses: 16,384 blocks of /26
STICKY_POOL = "10.80.0.0/16"  # the sticky pod's
GONE_GRACE = 10.0  # the simulated nodes' node-gone-grace by default (the Lease: 2 s)
NETWORK = "scale"
NAMESPACE = "bench"
DEFAULT_SIZES = "100,300"
HOUR = 3600.0


def node_object(name: str, index: int) -> dict[str, Any]:
    """A Node as a small real kubelet reports it (about 4 KB of JSON)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [{"type": t, "status": s, "reason": f"Kubelet{r}", "message": f"kubelet {m}",
                   "lastHeartbeatTime": now, "lastTransitionTime": now}
                  for t, s, r, m in (
                      ("MemoryPressure", "False", "HasSufficientMemory", "has sufficient memory"),
                      ("DiskPressure", "False", "HasNoDiskPressure", "has no disk pressure"),
                      ("PIDPressure", "False", "HasSufficientPID", "has sufficient PID"),
                      ("Ready", "True", "Ready", "is posting ready status"))]
    images = [{"names": [f"registry.example/team-{i}/service-{i}@sha256:"
                         f"{index * 31 + i:064x}",
                         f"registry.example/team-{i}/service-{i}:v1.{i}.0"],
               "sizeBytes": 10_000_000 + i * 1_234_567} for i in range(16)]
    return {
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.xlarge",
            "topology.kubernetes.io/zone": f"zone-{index % 3}"}},
        "spec": {"podCIDR": f"10.{index // 256 % 256}.{index % 256}.0/24"},
        "status": {
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"192.0.2.{index % 250 + 1}"},
                          {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110",
                         "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "110",
                            "ephemeral-storage": "90Gi"},
            "nodeInfo": {"machineID": uuid.uuid4().hex, "systemUUID": str(uuid.uuid4()),
                         "bootID": str(uuid.uuid4()), "kernelVersion": "6.1.0-13-amd64",
                         "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "containerRuntimeVersion": "containerd://1.6.20",
                         "kubeletVersion": "v1.24.0", "kubeProxyVersion": "v1.24.0",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
        },
    }


@dataclass
class SimNode:
    """One simulated node: netctl's cluster IPAM as the daemon runs it, and its pods."""

    name: str
    api: Any  # netctl.kubeapi.api.Api
    journal: Any  # netctl.journal.store.Journal
    store: Any  # netctl.ipam.cluster.ClusterStore
    plugin: Any  # netctl.engine.ipam_plugin.IpamPlugin
    pods: list[str] = field(default_factory=list)
    added: int = 0
    failures: list[str] = field(default_factory=list)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)  # stops the node
    stopped: bool = False

    def informers(self) -> dict[str, Any]:
        """Every cache of the node's cluster IPAM: its blocks; the borrow objects asking
        it (a later netctl's); every Node and every block's owner (a later netctl's: only
        the holder of the gone-nodes Lease runs them)."""
        store = self.store
        out = {"ipamblocks": store.blocks, "nodes": store.nodes}
        asking = getattr(store.cluster, "asking", None)
        gone = getattr(store.maintenance, "gone", None)
        if asking is not None:
            out["ipamblocks asking"] = asking
        if gone is not None:
            out["ipamblocks owners"] = gone.owners
        return out

    def counters(self) -> dict[str, dict[str, int]]:
        """Each informer's counts so far (events, bytes, lists, objects listed, …)."""
        return {res: inf.counters() for res, inf in self.informers().items()}


def _frame(command: str, container: str, pod: str = "") -> bytes:
    """What ``netctl-ipam`` sends the daemon for one pod of the pool; with ``pod``, a pod of
    that name in the sticky pool (its identity: the pod's name)."""
    from netctl.cni.request import Request

    ipam: dict[str, Any] = {"type": "netctl-ipam", "range": POOL}
    if pod:
        ipam = {"type": "netctl-ipam", "range": STICKY_POOL, "sticky": True}
    conf = {"cniVersion": "1.0.0", "name": NETWORK, "type": "bridge", "ipam": ipam}
    return msgspec.json.encode(Request(
        command=command, container_id=container, netns=f"/run/netns/{container[:12]}",
        ifname="eth0",
        args=f"K8S_POD_NAMESPACE={NAMESPACE};K8S_POD_NAME={pod or 'p-' + container[:8]}",
        config=msgspec.Raw(msgspec.json.encode(conf)), plugin="netctl-ipam"))


async def _serve(sim: SimNode, command: str, container: str,
                 pod: str = "") -> dict[str, Any] | None:
    from netctl.cni.request import Request, decode

    inv = decode(msgspec.json.decode(_frame(command, container, pod), type=Request))
    reply = await sim.plugin.handle(inv)
    result: dict[str, Any] | None = reply.result
    return result


class ScaleBench(Bench):
    def __init__(self, sizes: list[int], pods: int, status_every: float, measure: float,
                 churn_every: float, block_check: float, restart: bool,
                 gone_grace: float = GONE_GRACE) -> None:
        super().__init__(concurrency=1)
        self.sizes, self.pods = sizes, pods
        self.status_every, self.measure_s = status_every, measure
        self.churn_every, self.block_check = churn_every, block_check
        self.restart, self.gone_grace = restart, gone_grace
        self.kube: RealKube | None = None
        self.problems: list[str] = []
        self.logged = _Counted()

    # -- one size ------------------------------------------------------------------------

    def measure(self) -> Measured:
        # the simulated nodes' log lines (a restart makes every one of them warn) are
        # counted, not printed
        logger = logging.getLogger("netctl")
        logger.addHandler(self.logged)
        logger.propagate = False
        why = real_unavailable()
        if why is not None:
            raise RuntimeError(f"the real API server is not available: {why}")
        out = []
        for n in self.sizes:
            progress(f"{n} nodes: starting the API server")
            with RealKube() as kube:
                self.kube = kube
                try:
                    out.append(trio.run(partial(self._guarded, kube, n)))
                except BaseExceptionGroup as group:  # a nursery groups it
                    stop, _ = group.split(Interrupted)
                    if stop is not None:
                        raise Interrupted("a signal") from None
                    raise
                self.kube = None
        logging.getLogger("netctl").removeHandler(self.logged)
        base = out[0]
        for rep in out:
            rep["per_node_vs_smallest"] = _growth(rep, base)
        return Measured(
            params={"nodes": self.sizes, "pods_per_node": self.pods,
                    "status_every_s": self.status_every, "measure_s": self.measure_s,
                    "churn_every_s": self.churn_every, "block_check_s": self.block_check,
                    "gone_grace_s": self.gone_grace,
                    "pool": POOL},
            parts={"sizes": out, "log_lines": dict(self.logged.counts)},
            problems=self.problems)

    async def _guarded(self, kube: RealKube, n: int) -> dict[str, Any]:
        """:meth:`_one_size`, ended cleanly by SIGTERM or Ctrl-C — the simulated nodes
        cancelled, their journals and clients closed — then :class:`Interrupted`."""
        signals: list[int] = []
        result: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:
            async def on_signal() -> None:
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
                    async for signum in received:
                        signals.append(signum)
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(on_signal)
            result = await self._one_size(kube, n)
            nursery.cancel_scope.cancel()
        if signals:
            raise Interrupted(signal.Signals(signals[0]).name)
        return result

    async def _one_size(self, kube: RealKube, n: int) -> dict[str, Any]:
        names = [f"node-{i}" for i in range(1, n + 1)]
        progress(f"{n} nodes: creating the Node objects")
        limiter = trio.CapacityLimiter(8)
        nodes: dict[str, dict[str, Any]] = {}

        async def create(i: int, name: str) -> None:
            async with limiter:
                nodes[name] = await trio.to_thread.run_sync(
                    kube.create, "nodes", node_object(name, i))

        async with trio.open_nursery() as nursery:
            for i, name in enumerate(names):
                nursery.start_soon(create, i, name)
        kube.ensure_namespace(NAMESPACE)
        kubeconfig = self.root / f"kubeconfig-{n}"
        kube.kubeconfig(kubeconfig)
        sims: list[SimNode] = []
        began = time.monotonic()
        async with trio.open_nursery() as nursery:
            progress(f"{n} nodes: starting {n} simulated netctl nodes")
            for name in names:
                sims.append(await nursery.start(self._sim_node, kubeconfig, name, n))
            await _all_ready(sims)
            started_s = time.monotonic() - began
            progress(f"{n} nodes: all ready in {started_s:.1f} s; {self.pods} pods each")
            await _each(sims, lambda sim: _add_pods(sim, self.pods))
            settle = await trio.to_thread.run_sync(kube.request_counts.copy)
            ipam_writes_adds = _ipam_writes(settle)
            # the measured window
            api_pid = kube.apiserver_pid
            before = {s.name: s.counters() for s in sims}
            calls_before = {s.name: Counter(s.api.calls) for s in sims}
            await trio.to_thread.run_sync(kube.reset_counts)
            cpu0, t0 = proc_cpu(api_pid)[0], time.monotonic()
            peak = [_rss_kib(api_pid)]
            progress(f"{n} nodes: measuring for {self.measure_s:g} s")
            with trio.move_on_after(self.measure_s):
                async with trio.open_nursery() as window:
                    window.start_soon(self._kubelets, kube, nodes, names)
                    window.start_soon(_sample_rss, api_pid, peak)
                    for i, sim in enumerate(sims):
                        window.start_soon(self._churn, sim, i / n * self.churn_every)
            window_s = time.monotonic() - t0
            api_cpu = proc_cpu(api_pid)[0] - cpu0
            counts = await trio.to_thread.run_sync(kube.request_counts.copy)
            per_node = _per_node(sims, before, calls_before, window_s)
            pods_added = sum(s.added for s in sims)
            dups = _duplicates(sims)
            failures = [f for s in sims for f in s.failures]
            ipam_writes = ipam_writes_adds + _ipam_writes(counts)
            report: dict[str, Any] = {
                "nodes": n, "start_s": round(started_s, 1), "window_s": round(window_s, 1),
                "pods_added": pods_added, "duplicates": dups,
                "ipam_writes": ipam_writes,
                "ipam_writes_per_pod": round(ipam_writes / pods_added, 4) if pods_added
                else None,
                "per_node": per_node,
                "requests": _requests(counts, window_s, n),
                "apiserver": {"cpu_cores": round(api_cpu / window_s, 3),
                              "peak_rss_mib": round(max(peak) / 1024, 1)},
                "failures": len(failures)}
            if failures:
                self.problems += [f"{n} nodes: {f}" for f in failures[:20]]
            if dups["addresses"]:
                self.problems.append(f"{n} nodes: {dups['addresses']} addresses held twice")
            report["sticky"] = await self._sticky(kube, sims)
            report["gone_node"] = await self._gone_node(kube, sims)
            if self.restart:
                report["relist"] = await self._relist_storm(kube, [s for s in sims
                                                                   if not s.stopped])
            nursery.cancel_scope.cancel()  # each node closes its client as it ends
        return report

    async def _sim_node(self, kubeconfig: Path, name: str, n: int,
                        task_status: trio.TaskStatus[SimNode] = trio.TASK_STATUS_IGNORED
                        ) -> None:
        """One node's netctl: journal, API, cluster store, netctl-ipam; runs until
        cancelled."""
        from netctl.engine.admission import Admission
        from netctl.engine.ipam_plugin import IpamPlugin
        from netctl.ipam.cluster import ClusterSettings, cluster_store
        from netctl.journal.store import open_journal
        from netctl.kubeapi.api import Api, KubeSettings

        state = Path("/dev/shm") / f"netctl-scale-{self.prefix}" / name
        async with open_journal(state) as journal:
            api = await Api.connect(KubeSettings(kubeconfig=str(kubeconfig)))
            try:
                live = await journal.ipam.live_allocations()
                store = cluster_store(api, journal, ClusterSettings(
                    name, node_gone_grace=self.gone_grace, ready_wait=60.0), live,
                    lambda: set())
                plugin = IpamPlugin(journal, store, Admission(), frozenset({"netctl-ipam"}))
                sim = SimNode(name, api, journal, store, plugin)
                task_status.started(sim)
                with sim.scope:
                    await store.run(self.block_check)
            finally:
                with trio.CancelScope(shield=True):
                    await api.close()

    async def _kubelets(self, kube: RealKube, nodes: dict[str, dict[str, Any]],
                        names: list[str]) -> None:
        """Every node's status updated once per ``status_every``, spread evenly: the
        Ready condition's heartbeat and one image changed, as a kubelet's report."""
        gap = self.status_every / len(names)
        order = names[:]
        random.Random(len(names)).shuffle(order)
        limiter = trio.CapacityLimiter(8)
        tick = 0

        async def update(name: str, tick: int) -> None:
            obj = nodes[name]
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for cond in obj["status"]["conditions"]:
                cond["lastHeartbeatTime"] = now
            obj["status"]["images"][tick % 16]["sizeBytes"] += 1
            async with limiter:
                try:
                    nodes[name] = await trio.to_thread.run_sync(
                        partial(kube.update, "nodes", obj, subresource="status"))
                except Exception as exc:  # a conflict: read it again next time
                    self.problems.append(f"status update of {name}: {exc}")

        async with trio.open_nursery() as nursery:
            next_at = trio.current_time()
            while True:
                for name in order:
                    next_at += gap
                    nursery.start_soon(update, name, tick)
                    await trio.sleep_until(next_at)
                tick += 1

    async def _churn(self, sim: SimNode, offset: float) -> None:
        """Replace one pod every ``churn_every`` seconds: DEL the oldest, ADD a new one."""
        await trio.sleep(offset)
        while True:
            if sim.pods:
                old = sim.pods.pop(0)
                try:
                    await _serve(sim, "DEL", old)
                except Exception as exc:
                    sim.failures.append(f"{sim.name}: DEL of {old[:12]}: {exc}")
            await _add_pods(sim, 1)
            await trio.sleep(self.churn_every)

    async def _sticky(self, kube: RealKube, sims: list[SimNode]) -> dict[str, Any]:
        """A sticky pod ADDed on one node, DELeted, then recreated on another node (the
        middle of the list): the same address, borrowed from the first node's block."""
        first, other = sims[0], sims[len(sims) // 2]
        if first is other:
            return {"skipped": "one node"}
        pod, container = "db-0", uuid.uuid4().hex
        got = await _serve(first, "ADD", container, pod) or {}
        address = str((got.get("ips") or [{}])[0].get("address", "")).split("/")[0]
        await _serve(first, "DEL", container, pod)
        began = time.monotonic()

        def published() -> bool:
            return any(e.get("address") == address
                       for b in kube.list("ipamblocks", None)
                       if b["spec"]["node"] == first.name
                       for e in b["spec"].get("reserved") or [])
        with trio.move_on_after(60):
            while not await trio.to_thread.run_sync(published):  # noqa: ASYNC110 - the API server, polled
                await trio.sleep(0.2)
        t0 = time.monotonic()
        again = await _serve(other, "ADD", uuid.uuid4().hex, pod) or {}
        back = str((again.get("ips") or [{}])[0].get("address", "")).split("/")[0]
        ok = bool(address) and back == address
        if not ok:
            self.problems.append(f"{len(sims)} nodes: the sticky pod got {back} on "
                                 f"{other.name}, not its {address}")
        return {"address": address, "same_on_another_node": ok,
                "published_s": round(t0 - began, 2),
                "add_on_another_node_ms": round((time.monotonic() - t0) * 1000, 1)}

    async def _gone_node(self, kube: RealKube, sims: list[SimNode]) -> dict[str, Any]:
        """A node that is not the Lease's holder stopped and its Node deleted: how long
        until its blocks are another node's (after ``GONE_GRACE``), and whose."""
        victims = [s for s in sims if not s.store.maintenance.gone.lease.held]
        if len(sims) < 2 or not victims:
            return {"skipped": "one node"}
        gone = victims[-1]
        gone.scope.cancel()
        gone.stopped = True
        held = await trio.to_thread.run_sync(partial(_blocks_of, kube, gone.name))
        t0 = time.monotonic()
        await trio.to_thread.run_sync(kube.delete, "nodes", None, gone.name)
        taken_s = None
        with trio.move_on_after(self.gone_grace + 120):
            while await trio.to_thread.run_sync(partial(_blocks_of, kube, gone.name)):  # noqa: ASYNC110
                await trio.sleep(0.5)
            taken_s = round(time.monotonic() - t0, 1)
        owners = await trio.to_thread.run_sync(partial(_owners_of, kube, held))
        holders = [s.name for s in sims if s.store.maintenance.gone.lease.held]
        if taken_s is None:
            self.problems.append(f"{len(sims)} nodes: {gone.name}'s blocks not taken over")
        return {"node": gone.name, "blocks": len(held), "grace_s": self.gone_grace,
                "taken_over_after_s": taken_s, "by": sorted(set(owners)),
                "lease_holder": holders}

    async def _relist_storm(self, kube: RealKube, sims: list[SimNode]) -> dict[str, Any]:
        """kube-apiserver restarted: how long until every node watches again, and what was
        listed meanwhile."""
        before = {s.name: s.counters() for s in sims}
        listed_at = {id(inf): inf.counters()["lists"] for s in sims
                     for inf in s.informers().values()}
        running = {id(inf) for s in sims for inf in s.informers().values()
                   if inf.state == "watching"}
        progress(f"{len(sims)} nodes: restarting kube-apiserver")
        t0 = time.monotonic()
        await trio.to_thread.run_sync(kube.stop)
        stopped = time.monotonic()
        await trio.to_thread.run_sync(kube.start)  # until /readyz, and RBAC answers
        up = time.monotonic()
        while True:
            # each cache watching again after the restart (a watch opened since, or a list)
            # (a cache stopped meanwhile — the Lease's holder changed hands — waits for
            # nothing)
            waiting = [s for s in sims for inf in s.informers().values()
                       if id(inf) in running and inf.state != "stopped" and (
                           inf.state != "watching" or inf.counters()["watches_opened"]
                           <= before[s.name][_res_of(s, inf)]["watches_opened"])]
            if not waiting:
                break
            if time.monotonic() - up > 600:
                self.problems.append(f"relist: {len(waiting)} caches not watching after 600 s")
                break
            await trio.sleep(0.2)
        done = time.monotonic()
        after = {s.name: s.counters() for s in sims}
        listed = Counter[str]()
        for s in sims:
            for res in after[s.name]:
                for key in ("lists", "list_bytes", "list_objects"):
                    listed[f"{res} {key}"] += after[s.name][res][key] - before[s.name][res][key]
        relisted = sum(1 for s in sims for inf in s.informers().values()
                       if inf.counters()["lists"] > listed_at[id(inf)])
        return {"down_s": round(stopped - t0, 1), "start_s": round(up - stopped, 1),
                "all_watching_after_start_s": round(done - stopped, 1),
                "all_watching_after_up_s": round(done - up, 1),
                "caches_relisted": relisted, "listed": dict(listed)}

    def cleanup(self) -> list[str]:
        problems = super().cleanup()
        shutil.rmtree(Path("/dev/shm") / f"netctl-scale-{self.prefix}", ignore_errors=True)
        return problems


def _blocks_of(kube: RealKube, node: str) -> list[str]:
    return [b["metadata"]["name"] for b in kube.list("ipamblocks", None)
            if b["spec"]["node"] == node]


def _owners_of(kube: RealKube, names: list[str]) -> list[str]:
    return [b["spec"]["node"] for b in kube.list("ipamblocks", None)
            if b["metadata"]["name"] in names]


class _Counted(logging.Handler):
    """Log records counted by level and logger, not printed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.levelname} {record.name}"] += 1


def _res_of(sim: SimNode, inf: Any) -> str:
    return next(res for res, i in sim.informers().items() if i is inf)


async def _each(sims: list[SimNode], fn: Any) -> None:
    async with trio.open_nursery() as nursery:
        for sim in sims:
            nursery.start_soon(fn, sim)


async def _all_ready(sims: list[SimNode]) -> None:
    for sim in sims:
        await sim.store.ready.wait()


async def _add_pods(sim: SimNode, count: int) -> None:
    for _ in range(count):
        container = uuid.uuid4().hex
        try:
            await _serve(sim, "ADD", container)
        except Exception as exc:
            sim.failures.append(f"{sim.name}: ADD: {exc}")
            continue
        sim.pods.append(container)
        sim.added += 1


async def _sample_rss(pid: int, peak: list[int]) -> None:
    while True:
        peak.append(_rss_kib(pid))
        await trio.sleep(1.0)


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _ipam_writes(counts: Counter[tuple[str, str]]) -> int:
    return sum(v for (verb, res), v in counts.items()
               if res.startswith("ipamblocks") and verb in ("create", "update", "patch",
                                                             "delete"))


def _requests(counts: Counter[tuple[str, str]], seconds: float, n: int) -> dict[str, Any]:
    """The audit log's requests of the window: per second in total, per hour per node."""
    out = {f"{verb} {res}": {"per_s": round(v / seconds, 3),
                             "per_node_per_h": round(v / seconds * HOUR / n, 1)}
           for (verb, res), v in sorted(counts.items())}
    total = sum(counts.values())
    out["total"] = {"per_s": round(total / seconds, 3),
                    "per_node_per_h": round(total / seconds * HOUR / n, 1)}
    return out


def _per_node(sims: list[SimNode], before: dict[str, dict[str, dict[str, int]]],
              calls_before: dict[str, Counter[tuple[str, str]]], seconds: float
              ) -> dict[str, Any]:
    """Each node's rates over the window, by resource: mean and max over the nodes."""
    rates: dict[str, list[float]] = defaultdict(list)
    for sim in sims:
        now = sim.counters()
        for res, c in now.items():
            b = before[sim.name][res]
            for key in ("events", "bytes", "lists", "list_bytes"):
                rates[f"{res} {key}"].append((c[key] - b[key]) / seconds * HOUR)
        calls = Counter(sim.api.calls) - calls_before[sim.name]
        rates["api requests (own count)"].append(sum(calls.values()) / seconds * HOUR)
    return {k: {"mean_per_h": round(sum(v) / len(v), 1), "max_per_h": round(max(v), 1)}
            for k, v in sorted(rates.items())}


def _duplicates(sims: list[SimNode]) -> dict[str, Any]:
    """Addresses live on more than one node, from every node's store."""
    holders: dict[str, set[str]] = defaultdict(set)
    for sim in sims:
        for alloc in sim.store.index.live():
            holders[alloc.address].add(sim.name)
    twice = {a: sorted(n) for a, n in holders.items() if len(n) > 1}
    return {"addresses": len(twice), "live": len(holders), "examples": dict(list(
        twice.items())[:5])}


def _growth(rep: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    """Each per-node mean rate beside the smallest size's (1.0: it does not grow with N)."""
    out: dict[str, float | None] = {}
    for key, v in rep["per_node"].items():
        b = base["per_node"].get(key, {}).get("mean_per_h")
        out[key] = round(v["mean_per_h"] / b, 2) if b else None
    return out


def render_scale(report: dict[str, Any]) -> list[RenderableType]:
    sizes = report.get("sizes") or []
    if not sizes:
        return []
    heads = ["per node, per hour"] + [f"{s['nodes']} nodes" for s in sizes] + \
        [f"{s['nodes']} / {sizes[0]['nodes']}" for s in sizes[1:]]
    rows = []
    keys = sorted({k for s in sizes for k in s["per_node"]})
    for key in keys:
        row = [key] + [num(s["per_node"].get(key, {}).get("mean_per_h")) for s in sizes]
        row += [num(s["per_node_vs_smallest"].get(key)) for s in sizes[1:]]
        rows.append(row)
    out: list[RenderableType] = [table(tuple(heads), [tuple(r) for r in rows],
                                       "what each node receives and asks (mean)")]
    total = ["cluster"] + [f"{s['nodes']} nodes" for s in sizes]
    trows = [
        ["API requests /s (audit)"] + [num(s["requests"]["total"]["per_s"]) for s in sizes],
        ["API server CPU (cores)"] + [num(s["apiserver"]["cpu_cores"]) for s in sizes],
        ["API server peak RSS (MiB)"] + [num(s["apiserver"]["peak_rss_mib"]) for s in sizes],
        ["pods ADDed"] + [str(s["pods_added"]) for s in sizes],
        ["IPAM writes per pod"] + [num(s["ipam_writes_per_pod"]) for s in sizes],
        ["addresses held twice"] + [str(s["duplicates"]["addresses"]) for s in sizes],
        ["all nodes ready after start (s)"] + [num(s["start_s"]) for s in sizes],
    ]
    trows += [
        ["sticky pod, same address on another node"]
        + [str((s.get("sticky") or {}).get("same_on_another_node", "-")) for s in sizes],
        ["gone node's blocks taken over after (s)"]
        + [num((s.get("gone_node") or {}).get("taken_over_after_s")) for s in sizes],
    ]
    if all("relist" in s for s in sizes):
        trows += [
            ["restart: API server start (s)"] + [num(s["relist"]["start_s"]) for s in sizes],
            ["restart: all watching, from start (s)"]
            + [num(s["relist"]["all_watching_after_start_s"]) for s in sizes],
            ["restart: caches relisted"] + [str(s["relist"]["caches_relisted"]) for s in sizes],
            ["restart: bytes listed (MiB)"] + [num(round(sum(
                v for k, v in s["relist"]["listed"].items() if k.endswith("list_bytes"))
                / 2**20, 2)) for s in sizes],
        ]
    out.append(table(tuple(total), [tuple(r) for r in trows], "the cluster"))
    return out


def run_scale(args: argparse.Namespace) -> int:
    sizes = sorted({int(x) for x in str(args.nodes).split(",") if x.strip()})
    if not sizes or sizes[0] < 1:
        print("netctl bench scale: --nodes must be one or more sizes ≥ 1 (100,300)")
        return 2
    bench = ScaleBench(sizes, args.pods, args.status_every, args.measure, args.churn_every,
                       args.block_check, not args.no_restart, args.gone_grace)
    return drive(bench, "scale", bench.measure, render_scale, args.json)

