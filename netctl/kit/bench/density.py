"""``netctl bench node-density``: N pods created at once on a real node, create → Ready, with
the primary CNI alone (the floor) and with netctl in front of it at 0, 1 and 3 NADs — the
shape of kube-burner's node-density-cni that Multus runs on every change.

The cluster is :class:`netctl_kit.realnode.RealCluster`: a control plane and ``--nodes``
real nodes (one by default) of the Kubernetes version ``--kube`` names
(:mod:`netctl_kit.kubebins`; the newest found by default) (kubelet, Debian's containerd
1.6, runc) on this machine, each in its own network namespace, its primary CNI a bridge
with host-local (a /24 of :data:`~netctl_kit.realnode.PRIMARY_SUBNET` a node), kubelet's
``maxPods`` raised to hold the pods and the DaemonSet's; the pods go where the scheduler
puts them. With ``--ipam-backend kubernetes`` netctl's daemon config says so (the NADs'
pools shared by the nodes, blocks claimed through the API). The order of one run:

1. **the floor**: N pods on the node *before netctl is installed* (the primary CNI alone);
2. netctl installed as docs/kubernetes.md says (``make image``, the image imported, the CRD,
   rbac.yaml, daemonset.yaml); with ``--cpu-limit`` the DaemonSet's daemon container is
   patched (``X``: its CPU request and limit ``X``; ``0``: its CPU limit removed, the request
   kept) and rolled out; then the NADs (bridge + netctl-ipam, a /22 each, in the pods'
   namespace) and 20 s of the daemon idle (its probes' CPU);
3. for each count K of ``--nads``: the same N pods, each selecting K NADs by its
   ``k8s.v1.cni.cncf.io/networks`` annotation (none at K = 0: netctl runs the cluster
   network alone).

Each run: N pods POSTed concurrently (one thread each, released together by a barrier; bare
pods, no controller: no ReplicaSet's creation rate in the figure), all Ready, then deleted
(one deletecollection by label, the pods' 5 s grace) until every pod is gone and nothing is
held. A watch kept by the bench on the pods gives the times at ms resolution: created = when
that pod's POST returned; scheduled, podIP and Ready = when the watch delivered the pod
with its node, its address, its Ready condition True; gone = its DELETED event. Beside them,
the API's own figure: the Ready condition's ``lastTransitionTime`` minus
``creationTimestamp`` (1 s resolution in v1.24).

The daemon's container cgroup (cgroup v1, found through the daemon's PID in
``/proc/PID/cgroup``) holds the daemon, the delegates it execs and its probes (exec probes before
2026-11-29, HTTP since): per run
its CPU (``cpuacct.usage``), CFS periods and throttled periods and time (``cpu.stat``), the
peak of ``memory.max_usage_in_bytes`` (reset to the usage at the start of each run; page
cache included) and of ``memory.stat``'s ``total_rss`` (sampled every 100 ms). The
machine's busy CPU (``/proc/stat``), kubelet's and containerd's own are given beside it.
netctl's ADD and DEL time per pod is the journal's (each runtime operation's start to
finish, read from the node's ``/var/lib/netctl/journal.db``). After each run:
``RealNode.held()`` (``netctl ipam pools`` in the daemon's container) must be ``{}``, the
primary's host-local must hold no lease, the node no pod netns, no bridge a port.

The audit log gives netctl's requests to the API server in each run (its ServiceAccount's,
every node's daemon): per pod, and the IPAM writes among them (create, update, patch, delete
of ``ipamblocks``). With several nodes the daemons' figures are summed (CPU) or the largest
(memory peaks), the journals read on every node.

Anything wrong is a problem (exit 1). The cluster is removed at the end, also after a
failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import re
import socket
import sqlite3
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from netctl_kit import journaldb, kubebins, realnode
from netctl_kit.bench import render
from netctl_kit.bench.common import (
    Bench,
    Measured,
    _signals_ignored,
    drive,
    pick_subnets,
    progress,
    summary_ms,
)
from netctl_kit.harness import HarnessError, host_local_leases, wait_for
from netctl_kit.kubebins import KubeVersion
from netctl_kit.kubefake.real import RealKube
from netctl_kit.realnode import BUSYBOX_IMAGE, NETWORKS, PRIMARY_SUBNET, RealCluster, RealNode
from rich.console import RenderableType

from netctl.journal import query

NAMESPACE = "default"
LABEL = "netctl-bench"  # every pod of the bench carries LABEL=node-density
SELECTOR = f"{LABEL}=node-density"
NAD_RANGES = ipaddress.IPv4Network("10.219.0.0/16")  # a /22 per NAD
NAD_ADDRESSES = 1000  # → /22
IDLE_S = 30.0  # the daemon idle, its probes' CPU
SAMPLE_S = 0.1
MAX_PODS = 240  # the primary's /24 a node (253 addresses): the pods may all go to one
MAX_NODES = 5
MAX_NADS = 8
CGROUP = Path("/sys/fs/cgroup")
CREATION = ("N bare pods POSTed concurrently, one thread each released together (no "
            "controller)")


# -- the watch --------------------------------------------------------------------------------


@dataclass
class PodTimes:
    """When the bench saw one pod's steps (``time.monotonic``), and the API's timestamps."""

    name: str
    created: float | None = None  # its POST returned
    seen: float | None = None  # first in the watch
    scheduled: float | None = None  # with spec.nodeName
    ip: float | None = None  # with status.podIP
    ready: float | None = None  # with its Ready condition True
    deleted: float | None = None  # its DELETED event
    created_ts: float | None = None  # metadata.creationTimestamp (UNIX s, 1 s resolution)
    ready_ts: float | None = None  # the Ready condition's lastTransitionTime


def _rfc3339(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class PodWatch(threading.Thread):
    """The bench's pods (:data:`SELECTOR` in :data:`NAMESPACE`), listed once, then watched
    (re-listed only when the watch's resourceVersion is gone: counted in ``relists``); the
    arrival time of each step of each pod in :attr:`pods`."""

    def __init__(self, kube: RealKube) -> None:
        super().__init__(name="pod-watch", daemon=True)
        self.kube = kube
        self.ssl = ssl.create_default_context(cafile=str(kube.ca_file))
        self.lock = threading.Lock()
        self.pods: dict[str, PodTimes] = {}
        self.stopping = threading.Event()
        self.synced = threading.Event()
        self.relists = -1  # the first list is not a re-list
        self.errors: list[str] = []
        self._conn: http.client.HTTPSConnection | None = None

    def path(self, **extra: str) -> str:
        q = urllib.parse.urlencode({"labelSelector": SELECTOR, **extra})
        return f"/api/v1/namespaces/{NAMESPACE}/pods?{q}"

    def run(self) -> None:
        rv = ""
        while not self.stopping.is_set():
            try:
                if not rv:
                    listed = self.kube.request("GET", self.path())
                    now = time.monotonic()
                    self.relists += 1
                    for obj in listed["items"]:
                        self.saw("MODIFIED", obj, now)
                    rv = str(listed["metadata"]["resourceVersion"])
                    self.synced.set()
                rv = self.stream(rv)
            except Exception as exc:  # a broken stream: listed again
                if not self.stopping.is_set():
                    self.errors.append(repr(exc))
                    rv = ""
                    time.sleep(0.2)

    def stream(self, rv: str) -> str:
        """One watch request from ``rv``, its events applied; the resourceVersion to go on
        from ("" to list again)."""
        conn = self._conn = http.client.HTTPSConnection(self.kube.address, self.kube.port,
                                                        context=self.ssl, timeout=120)
        try:
            conn.request("GET", self.path(watch="1", resourceVersion=rv,
                                          allowWatchBookmarks="true", timeoutSeconds="60"),
                         headers={"Authorization": f"Bearer {self.kube.admin_token}",
                                  "Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch: HTTP {resp.status}: {resp.read()[:300]!r}")
            while not self.stopping.is_set():
                line = resp.readline()
                now = time.monotonic()
                if not line:
                    return rv
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":  # 410 Gone: its resourceVersion is too old
                    return ""
                rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                if event.get("type") != "BOOKMARK":
                    self.saw(str(event.get("type")), obj, now)
            return rv
        finally:
            conn.close()

    def saw(self, kind: str, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        with self.lock:
            t = self.pods.setdefault(str(meta.get("name")), PodTimes(str(meta.get("name"))))
            if t.seen is None:
                t.seen, t.created_ts = now, _rfc3339(meta.get("creationTimestamp"))
            if kind == "DELETED":
                t.deleted = t.deleted or now
                return
            if t.scheduled is None and spec.get("nodeName"):
                t.scheduled = now
            if t.ip is None and status.get("podIP"):
                t.ip = now
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
                         None)
            if t.ready is None and ready and ready.get("status") == "True":
                t.ready, t.ready_ts = now, _rfc3339(ready.get("lastTransitionTime"))

    def created(self, name: str, when: float) -> None:
        with self.lock:
            self.pods.setdefault(name, PodTimes(name)).created = when

    def times(self, names: Sequence[str]) -> list[PodTimes]:
        with self.lock:
            return [PodTimes(**vars(self.pods.get(n, PodTimes(n)))) for n in names]

    def count(self, names: Sequence[str], what: str) -> int:
        with self.lock:
            return sum(1 for n in names if getattr(self.pods.get(n), what, None) is not None)

    def stop(self) -> None:
        self.stopping.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.join(10)


# -- the daemon's container cgroup, the machine's CPU ------------------------------------------


def cgroups_of(pid: int) -> dict[str, Path]:
    """controller → the dir of ``pid``'s cgroup (v1) of each hierarchy."""
    out: dict[str, Path] = {}
    with open(f"/proc/{pid}/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(","):
                if c:
                    out[c] = CGROUP / controllers / path.lstrip("/")
    return out


def _read(path: Path) -> str:
    return path.read_text()


def _kv(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in _read(path).splitlines() if line)}


@dataclass
class Cgroup:
    """The daemon container's cgroup: CPU, CFS throttling and memory."""

    pid: int
    cpu: Path  # cpu.stat, the CFS quota (the cpu hierarchy)
    cpuacct: Path  # cpuacct.usage (its own hierarchy here, or the same as cpu's)
    memory: Path
    peak_rss: int = 0
    sampling: threading.Event = field(default_factory=threading.Event)
    sampler: threading.Thread | None = None

    @classmethod
    def of(cls, pid: int) -> Cgroup:
        groups = cgroups_of(pid)
        if not {"cpu", "cpuacct", "memory"} <= set(groups):
            raise RuntimeError(f"daemon {pid}: no cgroup v1 cpu, cpuacct and memory: {groups}")
        return cls(pid, groups["cpu"], groups["cpuacct"], groups["memory"])

    def cpu_now(self) -> dict[str, float]:
        stat = _kv(self.cpu / "cpu.stat")
        return {"cpu_s": int(_read(self.cpuacct / "cpuacct.usage")) / 1e9,
                "periods": stat.get("nr_periods", 0), "throttled": stat.get("nr_throttled", 0),
                "throttled_s": stat.get("throttled_time", 0) / 1e9}

    def limits(self) -> dict[str, Any]:
        quota = int(_read(self.cpu / "cpu.cfs_quota_us"))
        period = int(_read(self.cpu / "cpu.cfs_period_us"))
        return {"cpu_cfs_quota_us": quota, "cpu_cfs_period_us": period,
                "cpu_limit_cores": round(quota / period, 3) if quota > 0 else None,
                "cpu_shares": int(_read(self.cpu / "cpu.shares")),
                "memory_limit_mib": round(int(_read(self.memory / "memory.limit_in_bytes"))
                                          / 2**20, 1),
                "cgroups": sorted({str(self.cpu), str(self.cpuacct), str(self.memory)})}

    def start_peaks(self) -> None:
        """``memory.max_usage_in_bytes`` reset (to the usage now), the RSS sampler
        started."""
        (self.memory / "memory.max_usage_in_bytes").write_text("0")
        self.peak_rss = 0
        self.sampling.clear()

        def sample() -> None:
            while not self.sampling.wait(SAMPLE_S):
                try:
                    rss = _kv(self.memory / "memory.stat").get("total_rss", 0)
                except OSError:  # the container went: its restart is reported
                    return
                self.peak_rss = max(self.peak_rss, rss)
        self.sampler = threading.Thread(target=sample, name="rss-sampler", daemon=True)
        self.sampler.start()

    def peaks(self, stop: bool = False) -> dict[str, float]:
        if stop and self.sampler is not None:
            self.sampling.set()
            self.sampler.join(5)
        return {"peak_usage_mib": round(int(_read(self.memory / "memory.max_usage_in_bytes"))
                                        / 2**20, 1),
                "peak_rss_mib": round(self.peak_rss / 2**20, 1)}


@dataclass
class Daemons:
    """The daemons' cgroups, one a node: CPU and throttling summed, memory peaks the
    largest daemon's, the limits the first one's (the DaemonSet gives each the same)."""

    groups: list[Cgroup]

    @property
    def pids(self) -> list[int]:
        return [g.pid for g in self.groups]

    def cpu_now(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for g in self.groups:
            for k, v in g.cpu_now().items():
                out[k] = out.get(k, 0.0) + v
        return out

    def limits(self) -> dict[str, Any]:
        return self.groups[0].limits()

    def start_peaks(self) -> None:
        for g in self.groups:
            g.start_peaks()

    def peaks(self, stop: bool = False) -> dict[str, float]:
        out: dict[str, float] = {}
        for g in self.groups:
            for k, v in g.peaks(stop).items():
                out[k] = max(out.get(k, 0.0), v)
        return out


def machine_busy_s() -> float:
    """CPU seconds the machine has been busy (every CPU: /proc/stat, idle and iowait
    aside)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _proc_own_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _named(node: RealNode, name: str) -> int:
    """The PID of the node's process whose program is ``name`` (0: none)."""
    for pid in node.node_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv0 = fh.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if os.path.basename(argv0) == name:
            return pid
    return 0


# -- the bench --------------------------------------------------------------------------------


def nad(name: str, bridge: str, subnet: ipaddress.IPv4Network) -> dict[str, Any]:
    """A NAD as tests/integration/test_realnode.py makes them: bridge + netctl-ipam."""
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "bridge", "bridge": bridge, "isGateway": False,
        "ipam": {"type": "netctl-ipam", "range": str(subnet)}}]}
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"config": json.dumps(config)}}


def pod(name: str, app: str, networks: str) -> dict[str, Any]:
    """A bare pod as test_realnode's: busybox sleeping, exiting at once on SIGTERM."""
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE,
                            "labels": {"app": app, LABEL: "node-density"}}
    if networks:
        meta["annotations"] = {NETWORKS: networks}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "automountServiceAccountToken": False, "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]}]}}


def daemonset_docs(ipam_backend: str) -> list[dict[str, Any]]:
    """deploy/kubernetes/daemonset.yaml's documents, its daemon config saying
    ``ipam-backend``."""
    docs = [d for d in yaml.safe_load_all((realnode.MANIFESTS / "daemonset.yaml").read_text())
            if d]
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "netctl-config":
            doc["data"]["daemon.yaml"] += f"ipam-backend: {ipam_backend}\n"
    return docs


def manifest_resources() -> dict[str, Any]:
    """The daemon container's resources in deploy/kubernetes/daemonset.yaml."""
    for doc in yaml.safe_load_all((realnode.MANIFESTS / "daemonset.yaml").read_text()):
        if doc and doc.get("kind") == "DaemonSet":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "netctl":
                    return dict(c.get("resources") or {})
    raise RuntimeError("deploy/kubernetes/daemonset.yaml: no netctl container")


def _seconds(summary: dict[str, float]) -> dict[str, float]:
    return {k: (round(v / 1000, 3) if k != "n" else v) for k, v in summary.items()}


class DensityBench(Bench):
    def __init__(self, pods: int, nads: list[int], cpu_limit: str | None,
                 kube: KubeVersion, *, nodes: int = 1, ipam_backend: str = "sqlite",
                 idle: float = IDLE_S) -> None:
        super().__init__(1)
        self.pods, self.nads, self.cpu_limit = pods, nads, cpu_limit
        self.kube = kube
        self.node_count, self.ipam_backend, self.idle = nodes, ipam_backend, idle
        self.cluster: RealCluster | None = None
        self.watch: PodWatch | None = None
        self.subnets: list[ipaddress.IPv4Network] = []
        self.problems: list[str] = []
        self.tag = self.prefix[3:]

    # -- one run ----------------------------------------------------------------------------

    def run(self, label: str, nads: int | None) -> dict[str, Any]:
        """N pods at once (``nads`` None: the floor, before netctl), Ready, deleted, gone;
        the run's figures."""
        cluster, watch = self.cluster, self.watch
        assert cluster is not None and cluster.kube is not None and watch is not None
        kube = cluster.kube
        app = f"nd{self.tag}-{label}"
        names = [f"{app}-{i:03d}" for i in range(self.pods)]
        networks = ",".join(f"nd{j + 1}" for j in range(nads or 0))
        daemon = self.daemon_cgroup() if nads is not None else None
        restarts0 = self.daemon_restarts() if daemon else 0
        kubelets = [_named(n, "kubelet") for n in cluster.nodes]
        containerds = [_named(n, "containerd") for n in cluster.nodes]

        def cpu() -> dict[str, Any]:
            out: dict[str, Any] = {
                "machine_s": machine_busy_s(),
                "kubelet_s": sum(_proc_own_s(p) for p in kubelets),
                "containerd_s": sum(_proc_own_s(p) for p in containerds)}
            if daemon is not None:
                out.update({f"daemon_{k}": v for k, v in daemon.cpu_now().items()})
            return out

        def spent(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
            d = {k: round(b[k] - a[k], 3) for k in a}
            d["rest_s"] = round(d["machine_s"] - d["kubelet_s"] - d["containerd_s"]
                                - d.get("daemon_cpu_s", 0.0), 3)
            return d

        progress(f"{label}: {self.pods} pods at once" +
                 (f", {nads} NAD(s) each" if nads else ""))
        if daemon is not None:
            daemon.start_peaks()
        kube.reset_counts()  # netctl's requests in the audit log from here
        cpu0, wall0 = cpu(), time.time()
        started = time.monotonic()
        failed: list[str] = []
        barrier = threading.Barrier(self.pods)

        def post(name: str) -> None:
            body = pod(name, app, networks)
            try:
                barrier.wait(60)
                kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)
                watch.created(name, time.monotonic())
            except Exception as exc:
                failed.append(f"{name}: POST: {exc}")

        threads = [threading.Thread(target=post, args=(n,), daemon=True) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        posted = time.monotonic()
        ready_timeout = max(300.0, self.pods * 6.0)
        try:
            self.wait(lambda: watch.count(names, "ready") == len(names), ready_timeout,
                      f"{label}: every pod Ready", lambda: watch.count(names, "ready"))
        except HarnessError as exc:
            failed.append(str(exc))
        all_ready = time.monotonic()
        cpu1, wall1 = cpu(), time.time()
        add_peaks = daemon.peaks() if daemon else {}
        times = watch.times(names)

        # deleted: one deletecollection; every pod gone, nothing held
        progress(f"{label}: deleting the pods")
        kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods?" +
                            urllib.parse.urlencode({"labelSelector": f"app={app}"}))
        deleting = time.monotonic()
        try:
            self.wait(lambda: watch.count(names, "deleted") == len(names),
                      max(300.0, self.pods * 3.0), f"{label}: every pod gone",
                      lambda: watch.count(names, "deleted"))
        except HarnessError as exc:
            failed.append(str(exc))
        gone = time.monotonic()
        left: list[str] = []
        try:
            wait_for(lambda: not self.leftovers(nads), 120, "nothing held", interval=0.25)
        except HarnessError:
            left = self.leftovers(nads)
        released = time.monotonic()
        cpu2, wall2 = cpu(), time.time()
        run_peaks = daemon.peaks(stop=True) if daemon else {}
        gone_times = watch.times(names)
        requests = kube.request_counts  # netctl's, from the audit log

        report: dict[str, Any] = {
            "label": label, "nads": nads, "pods": self.pods, "networks": networks,
            **summarize(times, started, posted, all_ready),
            "delete": {
                "gone_ms": summary_ms([t.deleted - deleting for t in gone_times
                                       if t.deleted is not None]),
                "all_gone_s": round(gone - deleting, 3),
                "released_s": round(released - deleting, 3)},
            "cpu": {"add": spent(cpu0, cpu1), "del": spent(cpu1, cpu2)},
            "failures": failed[:20], "failed": len(failed), "left": left}
        if daemon is not None:
            report["memory"] = {"add": add_peaks, "run": run_peaks}
            report["journal"] = self.journal_times(wall0, wall1, wall2)
            report["daemon_pids"] = daemon.pids
            report["daemon_restarts"] = self.daemon_restarts() - restarts0
            # netctl ipam pools, in each daemon's container
            report["held"] = {n.name: h for n in cluster.nodes if (h := n.held())}
            total = sum(requests.values())
            writes = sum(v for (verb, res), v in requests.items()
                         if res == "ipamblocks" and verb in ("create", "update", "patch",
                                                              "delete"))
            report["api"] = {
                "requests": total, "per_pod": round(total / self.pods, 2),
                "ipam_writes": writes, "ipam_writes_per_pod": round(writes / self.pods, 2),
                "by_request": {f"{verb} {res}": v for (verb, res), v in
                               sorted(requests.items(), key=lambda kv: -kv[1])}}
            if report["held"]:
                self.problems.append(f"{label}: netctl holds {report['held']} after the "
                                     "pods are gone")
            if report["daemon_restarts"]:
                self.problems.append(f"{label}: the daemon's container restarted "
                                     f"{report['daemon_restarts']} time(s)")
            ops = report["journal"]
            if ops["add_count"] != self.pods or ops["not_done"]:
                self.problems.append(f"{label}: the journal has {ops['add_count']} runtime "
                                     f"ADDs for {self.pods} pods, not done: {ops['not_done']}")
        self.problems += [f"{label}: {msg}" for msg in failed[:20]]
        self.problems += [f"{label}: left: {msg}" for msg in left]
        return report

    def wait(self, cond: Callable[[], bool], timeout: float, what: str,
             count: Callable[[], int]) -> None:
        """``cond`` polled (the nodes' processes checked alive), progress every 10 s."""
        assert self.cluster is not None
        deadline, said = time.monotonic() + timeout, time.monotonic()
        while not cond():
            if self.stop.is_set():
                raise HarnessError(f"{what}: interrupted")
            self.cluster.alive()
            if time.monotonic() > deadline:
                raise HarnessError(f"{what}: {count()} of {self.pods} after {timeout:g} s")
            if time.monotonic() - said > 10:
                progress(f"  {what}: {count()} of {self.pods}")
                said = time.monotonic()
            time.sleep(0.05)

    def leftovers(self, nads: int | None) -> list[str]:
        """What the nodes still hold: the primary's host-local leases, pod netns, ports on
        the bridges, and (netctl) live allocations in the journals."""
        assert self.cluster is not None
        left: list[str] = []
        for node in self.cluster.nodes:
            at = f" ({node.name})" if len(self.cluster.nodes) > 1 else ""
            left += [f"host-local lease {lease}{at}" for lease in
                     host_local_leases(node.node_path("/var/lib/cni/networks"))]
            left += [f"netns {n}{at}" for n in node.sandbox_netns()]
            for bridge in [node.primary_bridge, *(f"{self.prefix}d{j + 1}" for j in
                                                  range(len(self.subnets)))]:
                left += [f"port {p} on {bridge}{at}" for p in node.bridge_ports(bridge)]
            if nads is not None:
                with self.journal(node) as conn:
                    live = journaldb.live_counts(conn)[1]
                if live:
                    left.append(f"{live} live allocations in the journal{at}")
        return left

    def journal(self, node: RealNode) -> contextlib.closing[sqlite3.Connection]:
        """A read-only connection to a node's daemon's journal (the node's state dir)."""
        # the node's /var/lib/netctl is this dir bound there (RealNode's FRESH dirs): SQLite
        # resolves the symlink /proc/PID/root of node_path() to the machine's / instead
        state = node.dir / "node" / "fresh-var-lib-netctl"
        return contextlib.closing(query.open_read_only(state / query.JOURNAL_FILE))

    def journal_times(self, t0: float, t1: float, t2: float) -> dict[str, Any]:
        """netctl's runtime ADDs started in [t0, t1] and DELs in [t1, t2] (UNIX s): their
        time, start to finish, from the journals."""
        assert self.cluster is not None
        rows = []
        for node in self.cluster.nodes:
            with self.journal(node) as conn:
                rows += journaldb.operations_of_origin(conn, "runtime")
        adds = [r for r in rows if r["verb"] == "ADD" and t0 - 1 <= r["started_at"] <= t1]
        dels = [r for r in rows if r["verb"] == "DEL" and t1 <= r["started_at"] <= t2]
        return {
            "add_ms": summary_ms([r["finished_at"] - r["started_at"] for r in adds
                                  if r["state"] == "done" and r["finished_at"]]),
            "del_ms": summary_ms([r["finished_at"] - r["started_at"] for r in dels
                                  if r["state"] == "done" and r["finished_at"]]),
            "add_count": len(adds), "del_count": len(dels),
            "not_done": [f"{r['verb']} {r['container_id'][:12]}: {r['state']}"
                         for r in adds + dels if r["state"] != "done"][:20]}

    # -- the daemon --------------------------------------------------------------------------

    def daemon_cgroup(self) -> Daemons:
        assert self.cluster is not None
        groups = []
        for node in self.cluster.nodes:
            def one(node: RealNode = node) -> list[int]:
                pids = node.daemon_pids()
                return pids if len(pids) == 1 else []
            pid = wait_for(one, 120, f"one netctl daemon on {node.name}", interval=0.5)[0]
            groups.append(Cgroup.of(pid))
        return Daemons(groups)

    def daemon_pids(self) -> set[int]:
        assert self.cluster is not None
        return {p for n in self.cluster.nodes for p in n.daemon_pids()}

    def daemon_restarts(self) -> int:
        assert self.cluster is not None
        pods = self.cluster.kube_list("pods", "kube-system", "app.kubernetes.io/name=netctl")
        return sum(int(s.get("restartCount", 0)) for p in pods
                   if not p["metadata"].get("deletionTimestamp")
                   for s in (p.get("status") or {}).get("containerStatuses") or []
                   if s.get("name") == "netctl")

    def patch_cpu(self) -> dict[str, Any]:
        """``--cpu-limit`` applied to the DaemonSet's daemon container, rolled out; the
        container's resources as the API server has them after."""
        assert self.cluster is not None
        cluster = self.cluster
        ds = cluster.get("daemonsets", "netctl", "kube-system")
        assert ds is not None
        containers = ds["spec"]["template"]["spec"]["containers"]
        i = next(i for i, c in enumerate(containers) if c["name"] == "netctl")
        base = f"/spec/template/spec/containers/{i}/resources"
        has_limit = "cpu" in (containers[i].get("resources") or {}).get("limits", {})
        ops: list[dict[str, Any]] = []
        if self.cpu_limit is not None and _cores(self.cpu_limit) == 0:
            if has_limit:  # none there (the manifest's own): nothing to take away
                ops = [{"op": "remove", "path": f"{base}/limits/cpu"}]
        elif self.cpu_limit is not None:  # "add" sets a member whether or not it is there
            ops = [{"op": "add", "path": f"{base}/limits/cpu", "value": self.cpu_limit},
                   {"op": "add", "path": f"{base}/requests/cpu", "value": self.cpu_limit}]
        if ops:
            progress(f"the DaemonSet patched: {json.dumps(ops)}")
            old = self.daemon_pids()
            cluster.kubectl("-n", "kube-system", "patch", "daemonset", "netctl",
                            "--type=json", "-p", json.dumps(ops))
            wait_for(lambda: not (self.daemon_pids() & old), 180,
                     "the old daemons gone", interval=0.5)
            cluster.wait_ready("daemonset", "netctl", "kube-system", timeout=300)
            ds = cluster.get("daemonsets", "netctl", "kube-system")
            assert ds is not None
        return dict(ds["spec"]["template"]["spec"]["containers"][i].get("resources") or {})

    # -- the whole ----------------------------------------------------------------------------

    def measure(self) -> Measured:
        t0 = time.monotonic()
        progress("make image")
        realnode.build_image()
        build_s = time.monotonic() - t0
        self.subnets = pick_subnets(max(self.nads), NAD_ADDRESSES, NAD_RANGES) \
            if max(self.nads) else []
        progress(f"starting the cluster (control plane; {self.node_count} node(s): "
                 "containerd, kubelet)")
        self.cluster = cluster = RealCluster(self.node_count, kube=self.kube,
                                             max_pods=self.pods + 10)
        cluster.open()
        assert cluster.kube is not None
        self.watch = PodWatch(cluster.kube)
        self.watch.start()
        if not self.watch.synced.wait(30):
            raise RuntimeError(f"the pod watch did not start: {self.watch.errors}")
        runs = [self.run("floor", None)]

        progress("installing netctl (docs/kubernetes.md)")
        cluster.install_netctl(build=False, daemonset=daemonset_docs(self.ipam_backend))
        resources = self.patch_cpu()
        if self.subnets:
            cluster.apply([nad(f"nd{j + 1}", f"{self.prefix}d{j + 1}", s)
                        for j, s in enumerate(self.subnets)])
        daemon = self.daemon_cgroup()
        limits = daemon.limits()
        progress(f"the daemons idle for {self.idle:g} s (their probes)")
        idle0 = daemon.cpu_now()
        time.sleep(self.idle)
        idle1 = daemon.cpu_now()
        idle = {k: round(idle1[k] - idle0[k], 4) for k in idle0}
        idle["cpu_per_s"] = round(idle["cpu_s"] / max(self.idle, 0.001), 4)
        for k in self.nads:
            runs.append(self.run(f"{k}nad", k))
        self.problems += [f"pod watch: {e}" for e in self.watch.errors[:5]]
        first = cluster.nodes[0]
        kubelet_conf = yaml.safe_load((first.dir / "kubelet.yaml").read_text())
        return Measured(
            params={"pods": self.pods, "nads": self.nads, "cpu_limit": self.cpu_limit,
                    "kubernetes": self.kube.version, "nodes": self.node_count,
                    "ipam_backend": self.ipam_backend,
                    "creation": CREATION, "namespace": NAMESPACE,
                    "manifest_resources": manifest_resources(),
                    "daemon_resources": resources, "daemon_cgroup": limits,
                    "kubelet": {k: kubelet_conf.get(k) for k in
                                ("maxPods", "kubeAPIQPS", "kubeAPIBurst")},
                    "primary": f"bridge + host-local {PRIMARY_SUBNET}",
                    "nad_subnets": [str(s) for s in self.subnets],
                    "node_timings_s": {k: round(v, 1) for k, v in
                                       {**cluster.control.timings, **first.timings}.items()},
                    "make_image_s": round(build_s, 1), "idle_s": self.idle},
            parts={"runs": runs, "idle": idle, "watch_relists": self.watch.relists,
                   "wall_s": round(time.monotonic() - t0, 1)},
            problems=self.problems)

    def cleanup(self) -> list[str]:
        problems: list[str] = []
        with _signals_ignored():
            if self.watch is not None:
                self.watch.stop()
            if self.cluster is not None:
                progress("removing the cluster")
                try:
                    self.cluster.close()
                except Exception as exc:
                    problems.append(f"the cluster: {exc}")
                self.cluster = None
        return problems + super().cleanup()


def summarize(times: Sequence[PodTimes], started: float, posted: float,
              all_ready: float) -> dict[str, Any]:
    """create → Ready per pod (the watch's ms; the API's conditions, s), the steps between,
    the run's wall time. Pure."""
    def between(a: str, b: str) -> dict[str, float]:
        return summary_ms([getattr(t, b) - getattr(t, a) for t in times
                           if getattr(t, a) is not None and getattr(t, b) is not None])

    api = [t.ready_ts - t.created_ts for t in times
           if t.ready_ts is not None and t.created_ts is not None]
    ready = [t.ready for t in times if t.ready is not None]
    return {
        "ready_ms": between("created", "ready"),
        "api_ready_s": _seconds(summary_ms(api)),
        "steps_ms": {"scheduled": between("created", "scheduled"),
                     "ip": between("scheduled", "ip"), "ready": between("ip", "ready")},
        "posted_s": round(posted - started, 3),
        "wall_s": round((max(ready) if ready else all_ready) - started, 3),
        "pods_per_s": round(len(ready) / (max(ready) - started), 2) if ready else 0.0,
        "ready": len(ready)}


# -- the report ---------------------------------------------------------------------------------


def _cores(value: str) -> float:
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _res(r: dict[str, Any]) -> str:
    def part(kind: str) -> str:
        d = r.get(kind) or {}
        return f"{kind} " + (", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none")
    return f"{part('requests')}; {part('limits')}"


def render_density(report: dict[str, Any]) -> list[RenderableType]:
    p, runs = report["params"], report["runs"]
    floor = runs[0]
    nets = runs[1:]

    def fig(run: dict[str, Any], path: str) -> float | None:
        v: Any = run
        for key in path.split("."):
            if not isinstance(v, dict) or key not in v:
                return None
            v = v[key]
        return float(v) if isinstance(v, int | float) else None

    def row(label: str, path: str, fmt: str = "{:.1f}", floor_too: bool = True) -> render.Row:
        base = fig(floor, path) if floor_too else None
        cells = [label, render.num(base, fmt)]
        for run in nets:
            v = fig(run, path)
            cells += [render.num(v, fmt),
                      render.num(render.ratio(v, base)) if v is not None and base else ""]
        return cells

    def head(first: str) -> list[str]:
        cols = [first, "floor"]
        for run in nets:
            cols += [f"{run['nads']} NAD{'s' if run['nads'] != 1 else ''}", "ratio"]
        return cols

    def throttled(run: dict[str, Any], phase: str) -> str:
        c = run["cpu"][phase]
        if "daemon_periods" not in c:
            return "-"
        return f"{c['daemon_throttled']:.0f}/{c['daemon_periods']:.0f}"

    cg, idle = p["daemon_cgroup"], report["idle"]
    limit = f"{cg['cpu_limit_cores']:g} CPU" if cg["cpu_limit_cores"] else "none"
    lines: list[RenderableType] = [
        f"netctl bench node-density: {p['pods']} pods at once on a real "
        f"{p.get('nodes', 1)}-node {p.get('kubernetes', 'v1.24.0')} "
        f"cluster (kubelet, containerd 1.6, runc), {p['cpus']} CPUs, prefix {report['prefix']}, "
        f"ipam-backend {p.get('ipam_backend', 'sqlite')}",
        f"creation: {p['creation']}; the floor: the primary CNI alone ({p['primary']}) before "
        "netctl is installed; netctl's runs: each pod's annotation selects K NADs (bridge + "
        f"netctl-ipam, {', '.join(p['nad_subnets']) or 'none'})",
        f"kubelet: maxPods {p['kubelet']['maxPods']}, kubeAPIQPS {p['kubelet']['kubeAPIQPS']} "
        f"(burst {p['kubelet']['kubeAPIBurst']})",
        f"the daemon's resources in the manifest: {_res(p['manifest_resources'])}",
        f"in this run (--cpu-limit {p['cpu_limit'] or 'not given'}): "
        f"{_res(p['daemon_resources'])}; its cgroup: CPU limit {limit} (cfs quota "
        f"{cg['cpu_cfs_quota_us']} us per {cg['cpu_cfs_period_us']} us), cpu.shares "
        f"{cg['cpu_shares']}, memory limit {cg['memory_limit_mib']:g} MiB",
        f"the daemon idle ({p['idle_s']:g} s, its probes): "
        f"{idle['cpu_per_s'] * 1000:.1f} ms of CPU per s, throttled "
        f"{idle['throttled']:.0f} of {idle['periods']:.0f} periods",
        render.load_line(p), "",
        render.table(head("create → Ready"), [
            row("watch p50 (ms)", "ready_ms.p50", "{:.0f}"),
            row("watch p99 (ms)", "ready_ms.p99", "{:.0f}"),
            row("watch max (ms)", "ready_ms.max", "{:.0f}"),
            row("API p50 (s)", "api_ready_s.p50", "{:.0f}"),
            row("API p99 (s)", "api_ready_s.p99", "{:.0f}"),
            row("API max (s)", "api_ready_s.max", "{:.0f}"),
            row("→ scheduled p50 (ms)", "steps_ms.scheduled.p50", "{:.0f}"),
            row("scheduled → IP p50 (ms)", "steps_ms.ip.p50", "{:.0f}"),
            row("IP → Ready p50 (ms)", "steps_ms.ready.p50", "{:.0f}"),
            row("first POST → last Ready (s)", "wall_s"),
            row("pods Ready per s", "pods_per_s"),
            row("POSTs answered (s)", "posted_s", "{:.2f}"),
        ], "create → Ready per pod (K NADs: netctl in front, each pod selecting K NADs; ratio: "
           "over the floor). watch: from its POST returned to the bench's watch delivering it "
           "Ready (ms); API: its Ready condition's lastTransitionTime - its creationTimestamp "
           "(1 s resolution); the steps (scheduled, podIP, Ready) from the watch"),
        "",
        render.table(head("CPU and memory"), [
            row("ADD: machine (CPU-s)", "cpu.add.machine_s", "{:.2f}"),
            row("  kubelet", "cpu.add.kubelet_s", "{:.2f}"),
            row("  containerd", "cpu.add.containerd_s", "{:.2f}"),
            row("  daemon's cgroup", "cpu.add.daemon_cpu_s", "{:.2f}", False),
            row("  the rest", "cpu.add.rest_s", "{:.2f}"),
            ("  throttled/periods", "-",
             *[c for run in nets for c in (throttled(run, "add"), "")]),
            row("  throttled (s)", "cpu.add.daemon_throttled_s", "{:.2f}", False),
            row("DEL: machine (CPU-s)", "cpu.del.machine_s", "{:.2f}"),
            row("  daemon's cgroup", "cpu.del.daemon_cpu_s", "{:.2f}", False),
            ("  throttled/periods", "-",
             *[c for run in nets for c in (throttled(run, "del"), "")]),
            row("cgroup peak usage (MiB)", "memory.run.peak_usage_mib", "{:.1f}",
                False),
            row("cgroup peak RSS (MiB)", "memory.run.peak_rss_mib", "{:.1f}", False),
            row("netctl ADD p50 (ms)", "journal.add_ms.p50", "{:.0f}", False),
            row("netctl ADD p99 (ms)", "journal.add_ms.p99", "{:.0f}", False),
            row("netctl DEL p50 (ms)", "journal.del_ms.p50", "{:.0f}", False),
            row("netctl DEL p99 (ms)", "journal.del_ms.p99", "{:.0f}", False),
            row("API requests per pod", "api.per_pod", "{:.2f}", False),
            row("IPAM writes per pod", "api.ipam_writes_per_pod", "{:.2f}", False),
        ], "CPU in each phase (ADD: first POST → every pod Ready; DEL: the delete → nothing "
           "held): the machine's busy time, kubelet's, containerd's, the daemon container's "
           "cgroup (the daemon, the delegates it execs, its probes) and its CFS "
           "throttling. Its memory over the run: memory.max_usage_in_bytes (page cache "
           "included) and memory.stat total_rss sampled every 100 ms. netctl's ADD and DEL: "
           "the journal's runtime operations, start to finish. API requests: netctl's (its "
           "ServiceAccount's, every daemon's) from the audit log, from the first POST to "
           "nothing held; IPAM writes: those creating, updating or deleting ipamblocks"),
        "",
        render.table(head("after the delete"), [
            row("pod gone p50 (ms)", "delete.gone_ms.p50", "{:.0f}"),
            row("pod gone p99 (ms)", "delete.gone_ms.p99", "{:.0f}"),
            row("every pod gone (s)", "delete.all_gone_s"),
            row("nothing held (s)", "delete.released_s"),
        ], "from the deletecollection to each pod's DELETED event (watch), to the last one, "
           "and to nothing held: no host-local lease, pod netns, bridge port, nor live "
           "allocation in netctl's journal"),
        "nothing held afterwards (RealNode.held(), `netctl ipam pools` in each daemon's "
        "container): " + "; ".join(f"{run['label']} {run.get('held', {}) or '{}'}"
                                   for run in nets),
        f"run in {report['wall_s']:.0f} s (a node up {p['node_timings_s'].get('open', 0):.0f} s, "
        f"netctl's DaemonSet Ready {p['node_timings_s'].get('daemonset ready', 0):.0f} s)",
        "", *render.verdict(report["problems"], "every pod Ready and gone, nothing held")]
    return lines


def parse_nads(value: str) -> list[int]:
    counts = [int(x) for x in value.split(",") if x.strip()]
    if not counts or any(k < 0 or k > MAX_NADS for k in counts):
        raise ValueError(f"--nads: counts between 0 and {MAX_NADS}, comma-separated")
    return counts


def run_density(args: argparse.Namespace) -> int:
    try:
        nads = parse_nads(args.nads)
    except ValueError as exc:
        print(f"netctl bench node-density: {exc}", file=sys.stderr)
        return 2
    if not 1 <= args.pods <= MAX_PODS:
        print(f"netctl bench node-density: --pods between 1 and {MAX_PODS} (the primary's "
              f"{PRIMARY_SUBNET})", file=sys.stderr)
        return 2
    if args.cpu_limit is not None and not re.fullmatch(r"\d+(\.\d+)?m?", args.cpu_limit):
        print("netctl bench node-density: --cpu-limit is a CPU quantity (500m, 1, 0: no "
              "limit)", file=sys.stderr)
        return 2
    kube = kubebins.named([v for v in kubebins.found() if not v.lacks()], args.kube)
    found = ", ".join(str(v) for v in kubebins.found()) or "none"
    why = realnode.unavailable(kube=kube[-1]) if kube else \
        f"no Kubernetes {args.kube} with every node binary in {kubebins.where()} (found: {found})"
    if why:
        print(f"netctl bench node-density: {why}", file=sys.stderr)
        return 2
    if not 1 <= args.nodes <= MAX_NODES:
        print(f"netctl bench node-density: --nodes between 1 and {MAX_NODES}",
              file=sys.stderr)
        return 2
    if args.idle < 0:
        print("netctl bench node-density: --idle is 0 or more seconds", file=sys.stderr)
        return 2
    bench = DensityBench(args.pods, nads, args.cpu_limit, kube[-1], nodes=args.nodes,
                         ipam_backend=args.ipam_backend, idle=args.idle)
    return drive(bench, "node-density", bench.measure, render_density, args.json)
