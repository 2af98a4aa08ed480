"""``netctl bench kube``: what Kubernetes mode costs a node — API requests per ADD and DEL,
ADD latency beside standalone mode, the daemon's memory with full caches and in a burst of
ADDs — the figures behind the DaemonSet's resources.

The cluster is :class:`netctl_kit.kubefake.FakeKube` (real HTTP; requests counted per verb and
resource; ``--api-latency`` added to each request) holding:

- bridge networks with netctl-ipam, as NADs: the cluster network (``kube-system``, the
  conf's ``clusterNetwork``) and ``--networks`` extra ones (default 1: ``net2``; in the
  pods' namespace, ``bench``); then ``--nads`` minus those NADs no pod selects, bridge
  configs spread over ten namespaces;
- ``--pods`` pods of this node, each selecting the extra networks by its annotation, shaped
  like a Deployment's pod: labels, an owner, a few annotations, and the network-status an
  earlier ADD wrote (a daemon that restarts finds every running pod with one).

Two daemons on this host, on the same two networks (the same bridges, one after the other):

- **kube**: ``netctl daemon`` with a kubeconfig for the fake and ``node-name``; every other
  setting its default (``pod-wait`` 2 s, ``max-concurrent`` 32);
- **standalone**: the same networks as NAD files, the extra ones named in
  ``NETCTL_NETWORKS``.

In order:

1. **memory**: the kube daemon's RSS on an empty fake (its caches synced and empty); after
   the NADs and pods are created (its watches bring them, one event each); after a
   restart (one list brings them all), with that start's peak. Not ADDed: the caches only.
2. **churn, warm cache**: ``--churn`` pods of the cache in :data:`ROUNDS` rounds, each round
   the kube side then the standalone side (the load on a shared machine drifts): ADD a
   round's pods, at most C at a time, each result checked (on the kube side also the
   network-status written on the pod), then DEL them. The fake's counts around the kube
   side's ADDs and DELs give the requests per pod, by verb; each exec is timed (start to
   exit); the daemons' CPU (their own, and their delegates') is read around each batch:
   per pod lifecycle (ADD + DEL) and per attachment (a pod's networks).
   With ``--standing N``, N more pods are ADDed on each side before the churn and DELed
   after it (a node's running pods: live attachments the churn runs beside). With
   ``--delete-pods``, each kube round's ADDs run while the pods of the round before (DELed
   already, as kubelet does first) are deleted through the API, the daemon's
   ``pod-deleted-grace`` 0 so its clean-up of each deletion runs right then (a rollout's
   old pods going away while new ones start); the deleted pods are created again after
   the churn for the phases below.
3. **cache misses**: ``--misses`` new pods, each created in the fake just before its ADD
   (kubelet has the pod before it runs the sandbox): with the watch healthy (the daemon's
   cache has the pod when the request arrives, or the daemon waits for the watch), then
   with the watch lagging (:meth:`~netctl_kit.kubefake.FakeKube.watches_held`: the daemon
   waits ``pod-wait`` for it, then reads it with one GET).
4. **a burst**: ``--burst`` pods of the cache ADDed at the same moment (the daemon runs
   ``max-concurrent`` at once; the rest wait their turn), then DELed. The daemon's peak
   RSS over the burst (``VmHWM``, reset just before), and every :data:`SAMPLE_EVERY`
   seconds the RSS of the daemon and of every process under it (bridge, and the
   ``static`` IPAM bridge execs) from ``/proc``: what the DaemonSet's container holds.
5. **one delegate**: bridge ADD with the ``static`` IPAM section the daemon gives it, its
   DEL, and ``static`` alone, exec'd here under GNU time :data:`DELEGATE_RUNS` times; the
   peak RSS of each (``wait4``: a process's or the largest of the children it waited for).

Every ADD and DEL must succeed, no request may fail, nothing may be left live in either
journal or on the bridges; any failure makes the run exit 1. Everything it makes on the
host starts with one prefix and is removed at the end, also after Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netctl_kit import harness
from netctl_kit.bench import render
from netctl_kit.bench.churn import side_report
from netctl_kit.bench.common import (
    DELEGATE_VERSION,
    POD_NAMESPACE,
    Bench,
    BenchNet,
    Measured,
    PodRun,
    Side,
    check_result,
    drive,
    from_journal,
    outside_delegates,
    pick_subnets,
    proc_cpu,
    progress,
    ratios,
    summary_ms,
)
from netctl_kit.bench.render import steps
from netctl_kit.harness import SYSTEM_CNI, CNIResult
from netctl_kit.kubefake import FakeKube, nad, node, pod
from rich.console import RenderableType

from netctl.cni.config import parse_chain
from netctl.kubeapi.objects import NETWORK_STATUS, NETWORKS
from netctl.settings import DaemonConfig

NODE = "bench-node"
CLUSTER_NAMESPACE = "kube-system"  # multusNamespace's default: where clusterNetwork is
ROUNDS = 4  # the churn alternates the sides this many times
TARGET_OWN_MS = 3.0  # the daemon's own CPU per attachment (issue 36)
TARGET_OUTSIDE_MS = 15.0  # an ADD's time outside its delegates, p99 (issue 36)
SAMPLE_EVERY = 0.025  # seconds between two reads of the burst's processes
DELEGATE_RUNS = 5
READS = ("get", "list")  # a watch is a stream, counted apart
WRITES = ("create", "update", "patch", "delete", "deletecollection")
GNU_TIME = "/usr/bin/time"  # the delegates' peak RSS (see exec_measured)
MAX_CONCURRENT = DaemonConfig().max_concurrent  # the daemon's default, which it runs with


# -- pure helpers -----------------------------------------------------------------------------


def bench_pod(name: str, extra: list[str], index: int, status: str | None) -> dict[str, Any]:
    """A pod of :data:`NODE` selecting the ``extra`` networks, shaped like a Deployment's:
    labels, an owner, a container with ports, env and resources, a few annotations, and
    ``status`` as its network-status (None: a new pod, never ADDed)."""
    annotations = {NETWORKS: ",".join(extra), "prometheus.io/scrape": "true",
                   "prometheus.io/port": "9090",
                   "kubectl.kubernetes.io/restartedAt": "2026-11-20T10:00:00Z"}
    if status is not None:
        annotations[NETWORK_STATUS] = status
    obj = pod(name, POD_NAMESPACE, node=NODE, annotations=annotations, labels={
        "app": "shop", "app.kubernetes.io/name": "shop", "app.kubernetes.io/instance": "shop",
        "app.kubernetes.io/version": "1.4.2", "pod-template-hash": "5d8c7b9f6"})
    obj["metadata"]["generateName"] = "shop-5d8c7b9f6-"
    obj["metadata"]["ownerReferences"] = [{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "shop-5d8c7b9f6",
        "uid": f"00000000-0000-4000-8000-{index:012d}", "controller": True,
        "blockOwnerDeletion": True}]
    obj["spec"]["containers"][0].update({
        "ports": [{"containerPort": 8080, "protocol": "TCP"},
                  {"containerPort": 9090, "name": "metrics", "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": {
            "fieldRef": {"fieldPath": "metadata.name"}}}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "128Mi"}}})
    obj["spec"].update({"serviceAccountName": "shop", "restartPolicy": "Always",
                        "terminationGracePeriodSeconds": 30})
    return obj


def earlier_status(cluster: str, extra: list[str], index: int) -> str:
    """The network-status an earlier ADD of pod ``index`` wrote (Multus' layout)."""
    host, low = divmod(index, 250)
    return json.dumps([
        {"name": f"{CLUSTER_NAMESPACE}/{cluster}", "interface": "eth0",
         "ips": [f"10.244.{host}.{low + 2}"], "mac": f"0a:58:0a:f4:{host:02x}:{low + 2:02x}",
         "default": True, "dns": {}, "gateway": [f"10.244.{host}.1"]},
        *({"name": f"{POD_NAMESPACE}/{name}", "interface": f"net{n}",
           "ips": [f"10.{20 + n}.{host}.{low + 2}"],
           "mac": f"0a:58:0a:{20 + n:02x}:{host:02x}:{low + 2:02x}", "dns": {}}
          for n, name in enumerate(extra, 1))], indent=4)


def made(before: Counter[tuple[str, str]], after: Counter[tuple[str, str]]) -> Counter[str]:
    """The requests made between two of the fake's counts, as ``"verb resource"``."""
    return Counter({f"{verb} {res}": n - before.get((verb, res), 0)
                    for (verb, res), n in after.items() if n > before.get((verb, res), 0)})


def requests_report(pods: int, counts: Counter[str]) -> dict[str, Any]:
    """Requests per pod, by verb and resource, and the reads, writes and watches among
    them."""
    def per_pod(verbs: tuple[str, ...]) -> float:
        total = sum(n for key, n in counts.items() if key.split()[0] in verbs)
        return round(total / pods, 3) if pods else 0.0
    return {"pods": pods, "requests": dict(sorted(counts.items())),
            "per_pod": {k: round(n / pods, 3) for k, n in sorted(counts.items())} if pods else {},
            "reads_per_pod": per_pod(READS), "writes_per_pod": per_pod(WRITES),
            "watches_per_pod": per_pod(("watch",))}


Proc = tuple[int, int, str]  # ppid, RSS (KiB), command name


def descendants(table: dict[int, Proc], root: int) -> list[int]:
    """From ``pid → (ppid, RSS KiB, comm)``: every process under ``root``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def process_table() -> dict[int, Proc]:
    """``pid → (ppid, RSS KiB, comm)`` of every process, from ``/proc/<pid>/stat``."""
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                head, _, tail = fh.read().rpartition(")")
            fields = tail.split()
            table[int(entry)] = (int(fields[1]), int(fields[21]) * page_kib,
                                 head.partition("(")[2])
        except (OSError, IndexError, ValueError):
            continue
    return table


def rollup_kib(pid: int) -> tuple[int, int, int]:
    """(Rss, Pss, Anonymous) of a process in KiB, from ``/proc/<pid>/smaps_rollup``: every
    page it maps, its share of them (a page mapped by n processes counts 1/n in each), and
    its anonymous memory; zeros once it is gone."""
    found = {"Rss": 0, "Pss": 0, "Anonymous": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in found:
                    found[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return found["Rss"], found["Pss"], found["Anonymous"]


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def exec_measured(path: str, command: str, conf: dict[str, Any], netns: str,
                  container: str) -> tuple[int, int]:
    """Exec a plugin as the daemon execs a delegate (CNI_PATH the system's plugins), under
    GNU time; its exit status and its peak RSS in KiB (``wait4``'s ``ru_maxrss``: its own,
    or that of the largest child it waited for; 0 when time did not say). Under time and
    not straight from here: ``ru_maxrss`` keeps the high-water mark of the image a child
    was forked from, and this Python process is far larger than a plugin."""
    env = {"PATH": harness.PATH, "CNI_COMMAND": command, "CNI_CONTAINERID": container,
           "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_ARGS": "IgnoreUnknown=1",
           "CNI_PATH": SYSTEM_CNI}
    proc = harness.run([GNU_TIME, "-f", "maxrss %M", path], data=json.dumps(conf).encode(),
                       env=env)
    lines = proc.stderr.decode(errors="replace").strip().splitlines()
    last = lines[-1].split() if lines else []
    kib = int(last[1]) if len(last) == 2 and last[0] == "maxrss" and last[1].isdigit() else 0
    return proc.returncode, kib


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Sandbox:
    """One pod's sandbox on one side: its record, netns, pod name and UID."""

    run: PodRun
    netns: str
    pod: str
    uid: str = ""


@dataclass
class Sample:
    at: float  # seconds into the burst
    daemon_kib: int
    under_kib: int  # RSS of every process under the daemon (its delegates, their children)
    under_pss_kib: int  # their Pss: a page they share (their binaries) counted once in all
    under_anon_kib: int  # their anonymous memory
    processes: Counter[str]  # those, by command name
    unexeced: int  # children the daemon has forked (vfork) that have not exec'd yet: its
    # own memory (its mm, shared), left out of the sums


@dataclass
class Sampler:
    """Reads the process table every :data:`SAMPLE_EVERY` seconds while running: the
    daemon's RSS, and the RSS, Pss and anonymous memory of every process under it that
    runs another program (a child not yet exec'd shares the daemon's memory: Python's
    subprocess forks with vfork)."""

    pid: int
    samples: list[Sample] = field(default_factory=list)
    max_anon_kib: Counter[str] = field(default_factory=Counter)  # by command name
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self, at: float) -> Sample:
        table = process_table()
        under = descendants(table, self.pid)
        rss = pss = anon = unexeced = 0
        names: Counter[str] = Counter()
        exe = _exe(self.pid)
        for pid in under:  # each read once: one that has exited meanwhile counts nowhere
            if _exe(pid) == exe:
                unexeced += 1
                continue
            whole, share, own = rollup_kib(pid)
            if not whole:
                continue
            name = table[pid][2]
            rss, pss, anon = rss + whole, pss + share, anon + own
            names[name] += 1
            self.max_anon_kib[name] = max(self.max_anon_kib[name], own)
        return Sample(at, table.get(self.pid, (0, 0, ""))[1], rss, pss, anon, names, unexeced)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        started = time.perf_counter()

        def loop() -> None:
            while not self.stop.is_set():
                self.samples.append(self.sample(time.perf_counter() - started))
                self.stop.wait(SAMPLE_EVERY)

        thread = threading.Thread(target=loop, name="sampler", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self.stop.set()
            thread.join()

    def report(self) -> dict[str, Any]:
        top = max(self.samples, key=lambda s: s.daemon_kib + s.under_kib, default=None)
        charged = max(self.samples, key=lambda s: s.daemon_kib + s.under_pss_kib, default=None)
        return {"samples": len(self.samples), "every_s": SAMPLE_EVERY,
                "max_processes_under_daemon": max((s.processes.total() for s in self.samples),
                                                  default=0),
                "max_under_daemon_kib": max((s.under_kib for s in self.samples), default=0),
                "max_total_kib": top.daemon_kib + top.under_kib if top else 0,
                "at_max_total": {"at_s": round(top.at, 3), "daemon_kib": top.daemon_kib,
                                 "under_kib": top.under_kib, "under_pss_kib": top.under_pss_kib,
                                 "under_anon_kib": top.under_anon_kib,
                                 "processes": dict(top.processes)} if top else {},
                # the daemon's RSS and its delegates' Pss: each page once, as a cgroup
                # charges it (the daemon's own shared pages counted whole)
                "max_charged_kib": charged.daemon_kib + charged.under_pss_kib
                if charged else 0,
                "max_anon_kib_by_command": dict(self.max_anon_kib),
                "max_unexeced_children": max((s.unexeced for s in self.samples), default=0)}


class KubeBench(Bench):
    def __init__(self, pods: int, nads: int, churn: int, misses: int, concurrency: int,
                 burst: int, api_latency_ms: float, *, standing: int = 0,
                 delete_pods: bool = False, networks: int = 1) -> None:
        super().__init__(concurrency)
        self.extra_networks = networks  # selected by each pod beside the cluster network
        self.pods, self.nads, self.churn_pods, self.misses = pods, nads, churn, misses
        self.burst_pods, self.api_latency_ms = burst, api_latency_ms
        self.standing, self.delete_pods = standing, delete_pods
        self.deleted_through_api = 0
        self.kube = FakeKube(latency_ms=api_latency_ms)
        self.standalone = harness.Daemon(self.root / "standalone", self.prefix,
                                         settings={"log-level": "info"})
        self.uids: dict[str, str] = {}  # pod name → UID in the fake
        self.problems: list[str] = []

    # -- set-up ------------------------------------------------------------------

    @property
    def cluster(self) -> BenchNet:
        return self.nets[0]

    @property
    def extra(self) -> list[BenchNet]:
        """The networks each pod selects by its annotation."""
        return self.nets[1:]

    @property
    def extra_names(self) -> list[str]:
        return [n.name for n in self.extra]

    @property
    def networks_per_pod(self) -> int:
        return 1 + self.extra_networks

    def add_networks(self) -> None:
        """The cluster network and the extra ones: NADs for the fake (created later), files
        for standalone."""
        live = max(self.churn_pods // ROUNDS + 1, self.burst_pods, self.misses) + 8 + \
            self.standing
        for subnet in pick_subnets(self.networks_per_pod, live):
            i = len(self.nets) + 1
            name, bridge = f"{self.prefix}-{i}", f"{self.prefix}b{i}"
            conf = harness.bridge_conf(name, bridge, {
                "type": "netctl-ipam", "range": str(subnet),
                "gateway": str(subnet.network_address + 1)}, DELEGATE_VERSION)
            self.standalone.add_network(name, conf)
            # the floor: the same bridge exec'd directly, with host-local (all a runtime
            # without netctl has), its leases apart from everything else
            direct = harness.bridge_conf(name, bridge, harness.host_local(
                str(subnet), str(self.root / "direct-ipam")), DELEGATE_VERSION)
            self.nets.append(BenchNet(name, bridge, subnet,
                                      parse_chain(json.dumps(direct), name), conf))

    def nad_objects(self) -> list[dict[str, Any]]:
        """The cluster's NADs: the pods' networks, then the ones no pod selects."""
        out = [nad(self.cluster.name, CLUSTER_NAMESPACE, self.cluster.conf),
               *(nad(n.name, POD_NAMESPACE, n.conf) for n in self.extra)]
        for i in range(self.nads - len(out)):
            name = f"{self.prefix}-other-{i}"
            ipam = {"type": "netctl-ipam", "range": f"172.{16 + i // 256 % 16}.{i % 256}.0/24"}
            conf = harness.bridge_conf(name, f"{self.prefix}o{i}", ipam, DELEGATE_VERSION)
            out.append(nad(name, f"team-{i % 10}", conf))
        return out

    def cached_pod(self, index: int) -> str:
        return f"shop-{index}"

    def create_pod(self, name: str, index: int, status: str | None) -> str:
        uid = str(self.kube.create("pods", bench_pod(name, self.extra_names, index, status))
                  ["metadata"]["uid"])
        self.uids[name] = uid
        return uid

    def wait_caches(self, daemon: harness.Daemon, pods: int, nads: int) -> None:
        def filled() -> bool:
            k = daemon.status()["kubernetes"]
            return bool(k["pods"]["synced"] and k["nads"]["synced"] and
                        k["pods"]["objects"] == pods and k["nads"]["objects"] == nads)
        harness.wait_for(filled, 120, f"the daemon's caches to hold {pods} pods, {nads} NADs")

    # -- one sandbox ---------------------------------------------------------------

    def sandbox(self, side: str, tag: str, index: int, pod_name: str) -> Sandbox:
        run = PodRun(index, f"{self.prefix}-{side[0]}{tag}-{index}")
        return Sandbox(run, f"{self.prefix}-{side[0]}{tag}{index}", pod_name,
                       self.uids.get(pod_name, ""))

    def exec_cni(self, side: str, verb: str, sb: Sandbox) -> CNIResult:
        args = ("IgnoreUnknown=1", f"K8S_POD_UID={sb.uid}")
        ref = f"{POD_NAMESPACE}/{sb.pod}"
        if side == "kube":
            return self.daemon.cni(verb, sb.run.container, sb.netns,
                                   self.daemon.conf(self.cluster.name, DELEGATE_VERSION),
                                   pod=ref, args=args)
        return self.standalone.cni(verb, sb.run.container, sb.netns,
                                   self.standalone.conf(self.cluster.name, DELEGATE_VERSION),
                                   pod=ref, networks=",".join(self.extra_names),
                                   args=args)

    def add(self, side: str, rec: Side, sb: Sandbox, make_netns: bool = True) -> None:
        if make_netns:
            harness.netns_add(sb.netns)
        res = sb.run.timed("ADD", lambda: self.exec_cni(side, "ADD", sb))
        ok = rec.exited_ok(f"pod {sb.pod}: ADD", res)
        if ok and res is not None:
            problem = check_result(res.out, self.cluster)
            if problem:
                ok = False
                rec.fail(f"pod {sb.pod}: ADD result: {problem}")
            else:
                sb.run.address = str((res.out or {})["ips"][0]["address"]).split("/")[0]
        sb.run.ok = ok

    def delete(self, side: str, rec: Side, sb: Sandbox) -> None:
        try:
            res = sb.run.timed("DEL", lambda: self.exec_cni(side, "DEL", sb))
            sb.run.ok = rec.exited_ok(f"pod {sb.pod}: DEL", res) and sb.run.ok
        finally:
            harness.netns_del(sb.netns)
        with rec.lock:
            rec.pods.append(sb.run)

    def check_status(self, rec: Side, sb: Sandbox) -> None:
        """The network-status the ADD wrote on the pod: every network, eth0's address."""
        obj = self.kube.get("pods", POD_NAMESPACE, sb.pod) or {}
        try:
            entries = json.loads(obj["metadata"]["annotations"][NETWORK_STATUS])
            names = [e["name"] for e in entries]
            eth0 = next(e for e in entries if e["interface"] == "eth0")["ips"]
        except (KeyError, ValueError, StopIteration) as exc:
            rec.fail(f"pod {sb.pod}: no network-status written ({exc!r})")
            return
        want = [f"{CLUSTER_NAMESPACE}/{self.cluster.name}",
                *(f"{POD_NAMESPACE}/{name}" for name in self.extra_names)]
        if names != want or eth0 != [sb.run.address]:
            rec.fail(f"pod {sb.pod}: network-status {names} {eth0}, not {want} "
                     f"[{sb.run.address}]")

    # -- batches -------------------------------------------------------------------

    def batch(self, side: str, rec: Side, verb: str, sandboxes: list[Sandbox],
              requests: Counter[str] | None = None, parallel: bool = True) -> float:
        """``verb`` for every sandbox, at most C at a time; its wall time, added to the
        side's, with the daemon's CPU (own, delegates') added to the side's and the API
        requests made meanwhile added to ``requests``."""
        daemon = self.daemon if side == "kube" else self.standalone
        work: Callable[[Sandbox], None] = (
            (lambda sb: self.add(side, rec, sb)) if verb == "ADD" else
            (lambda sb: self.delete(side, rec, sb)))
        counts0 = self.kube.request_counts
        cpu0 = proc_cpu(daemon.pid)
        wall, _ = self.parallel(rec, len(sandboxes), lambda i: work(sandboxes[i]))
        cpu1 = proc_cpu(daemon.pid)
        if requests is not None:
            requests.update(made(counts0, self.kube.request_counts))
        rec.wall_s += wall
        rec.phase_s[verb] = rec.phase_s.get(verb, 0.0) + wall
        for key, a, b in (("daemon", cpu0[0], cpu1[0]), ("daemon_delegates", cpu0[1], cpu1[1])):
            rec.cpu_s[key] = round(rec.cpu_s.get(key, 0.0) + b - a, 3)
        return wall

    def churn(self) -> tuple[dict[str, Side], dict[str, Counter[str]]]:
        """The warm-cache churn, the sides alternating by round (beside ``--standing``
        pods, and with ``--delete-pods`` the kube side's pods deleted through the API)."""
        sides = {"kube": Side("kube"), "standalone": Side("standalone"), "direct": Side("direct")}
        requests: dict[str, Counter[str]] = {"ADD": Counter(), "DEL": Counter()}
        per_round = -(-self.churn_pods // ROUNDS)
        standing = Side("standing")
        kept = [(side, self.sandbox(side, "s", i, self.cached_pod(self.pods - 1 - i)))
                for side in sides for i in range(self.standing)]

        def everyone(work: Callable[[str, Side, Sandbox], None]) -> None:
            self.parallel(standing, len(kept), lambda i: work(kept[i][0], standing, kept[i][1]))

        everyone(self.add)
        deleted: list[str] = []  # the kube side's last round, DELed: deleted next round
        for r in range(ROUNDS):
            indices = range(r * per_round, min((r + 1) * per_round, self.churn_pods))
            for side, rec in sides.items():
                if side == "direct":
                    self.floor(rec, indices)
                    continue
                sbs = [self.sandbox(side, "c", i, self.cached_pod(i)) for i in indices]
                deleter = None
                if side == "kube" and deleted:
                    deleter = threading.Thread(target=self.delete_from_api,
                                               args=(list(deleted),), daemon=True)
                    deleter.start()
                self.batch(side, rec, "ADD", sbs, requests["ADD"] if side == "kube" else None)
                if deleter is not None:
                    deleter.join()
                    deleted = []
                if side == "kube":
                    for sb in sbs:
                        if sb.run.ok:
                            self.check_status(rec, sb)
                self.batch(side, rec, "DEL", sbs, requests["DEL"] if side == "kube" else None)
                if side == "kube" and self.delete_pods:
                    deleted = [sb.pod for sb in sbs]
        if self.delete_pods:
            self.delete_from_api(deleted)
            for i in range(self.churn_pods):  # the later phases ADD them again
                self.create_pod(self.cached_pod(i), i, earlier_status(
                    self.cluster.name, self.extra_names, i))
            self.wait_caches(self.daemon, self.pods + 1, self.nads)  # and the warm-up's pod
        everyone(self.delete)
        self.problems += [f"standing pods: {m}" for m in standing.failures]
        return sides, requests

    def floor(self, rec: Side, indices: range) -> None:
        """The round's pods without netctl: each pod's networks exec'd directly, the libcni
        way (:meth:`Bench.pod_direct`), at most C pods at a time; the CPU of what the bench
        exec'd (the delegates, and ``ip netns``) added to the side's."""
        def one(i: int) -> None:
            run = self.pod_direct(rec, indices[i], tag="dc")
            with rec.lock:
                rec.pods.append(run)

        wall, cpu = self.parallel(rec, len(indices), one)
        rec.wall_s += wall
        rec.cpu_s["delegates"] = round(rec.cpu_s.get("delegates", 0.0) + cpu["execs"], 3)

    def delete_from_api(self, names: list[str]) -> None:
        """Delete pods through the API, one request each, as a controller would."""
        for name in names:
            self.kube.delete("pods", POD_NAMESPACE, name)
            self.deleted_through_api += 1

    def miss(self, tag: str, held: bool) -> dict[str, Any]:
        """``--misses`` new pods, each created just before its ADD; with ``held``, the
        watch lagging meanwhile."""
        rec = Side(tag)
        adds: Counter[str] = Counter()
        dels: Counter[str] = Counter()
        names = [f"{tag}-{i}" for i in range(self.misses)]
        sbs = [self.sandbox("kube", tag[0], i, name) for i, name in enumerate(names)]

        def add(i: int) -> None:
            sbs[i].uid = self.create_pod(names[i], self.pods + i, None)
            self.add("kube", rec, sbs[i])

        counts0 = self.kube.request_counts
        with self.kube.watches_held() if held else contextlib.nullcontext():
            wall, _ = self.parallel(rec, len(sbs), add)
        adds.update(made(counts0, self.kube.request_counts))
        for sb in sbs:
            if sb.run.ok:
                self.check_status(rec, sb)
        self.batch("kube", rec, "DEL", sbs, dels)
        self.problems += [f"{tag}: {m}" for m in rec.failures]
        return {"pods": len(sbs), "held_watch": held, "add_wall_s": round(wall, 3),
                "add_ms": summary_ms([sb.run.add_s for sb in sbs]),
                "ADD": requests_report(len(sbs), adds), "DEL": requests_report(len(sbs), dels),
                "failures": len(rec.failures)}

    def burst(self) -> dict[str, Any]:
        """``--burst`` pods of the cache ADDed at the same moment, then DELed."""
        rec = Side("burst")
        sbs = [self.sandbox("kube", "b", i, self.cached_pod(i)) for i in range(self.burst_pods)]
        for sb in sbs:
            harness.netns_add(sb.netns)
        gate = threading.Barrier(len(sbs) + 1)

        def add(sb: Sandbox) -> None:
            with contextlib.suppress(threading.BrokenBarrierError):  # interrupted: no ADD
                gate.wait()
                self.add("kube", rec, sb, make_netns=False)

        threads = [threading.Thread(target=add, args=(sb,), daemon=True) for sb in sbs]
        for t in threads:
            t.start()
        sampler = Sampler(self.daemon.pid)
        before = self.daemon.peak_rss_kib()
        self.daemon.reset_peak_rss()
        cpu0 = proc_cpu(self.daemon.pid)
        try:
            with sampler.running():
                gate.wait()
                started = time.perf_counter()
                for t in threads:
                    while t.is_alive():
                        t.join(0.2)
                wall = time.perf_counter() - started
        finally:
            gate.abort()
            self.stop_workers_if_interrupted(threads)
        peak = self.daemon.peak_rss_kib()
        cpu1 = proc_cpu(self.daemon.pid)
        del_wall, _ = self.parallel(rec, len(sbs), lambda i: self.delete("kube", rec, sbs[i]))
        self.problems += [f"burst: {m}" for m in rec.failures]
        return {"pods": len(sbs), "add_wall_s": round(wall, 3),
                "adds_per_s": round(len(sbs) / wall, 2) if wall else 0.0,
                "add_ms": summary_ms([sb.run.add_s for sb in sbs]),
                "del_wall_s": round(del_wall, 3), "daemon_peak_rss_kib": peak,
                "daemon_peak_before_kib": before,
                "daemon_cpu_s": round(cpu1[0] - cpu0[0], 3),
                "delegates_cpu_s": round(cpu1[1] - cpu0[1], 3),
                "sampled": sampler.report(), "failures": len(rec.failures)}

    def delegate_rss(self) -> dict[str, Any]:
        """bridge ADD (with the ``static`` IPAM the daemon gives it) and DEL, and
        ``static`` alone, exec'd here; the peak RSS of each (KiB), the largest of the
        runs."""
        net = self.cluster
        out: dict[str, int] = {"bridge_add_kib": 0, "bridge_del_kib": 0, "static_kib": 0}
        for r in range(DELEGATE_RUNS):
            address = net.subnet.broadcast_address - 1 - r
            conf = {"cniVersion": DELEGATE_VERSION, "name": net.name, "type": "bridge",
                    "bridge": net.bridge, "isGateway": True, "ipam": {
                        "type": "static", "addresses": [{
                            "address": f"{address}/{net.subnet.prefixlen}",
                            "gateway": str(net.subnet.network_address + 1)}]}}
            ns = f"{self.prefix}-x{r}"
            path = harness.netns_add(ns)
            try:
                for key, ptype, verb in (("bridge_add_kib", "bridge", "ADD"),
                                         ("static_kib", "static", "ADD"),
                                         ("bridge_del_kib", "bridge", "DEL")):
                    rc, kib = exec_measured(os.path.join(SYSTEM_CNI, ptype), verb, conf, path,
                                            f"{self.prefix}-x{r}")
                    if rc != 0:
                        self.problems.append(f"{ptype} {verb} exec'd directly exited {rc}")
                    out[key] = max(out[key], kib)
            finally:
                harness.netns_del(ns)
        sizes = {f"{ptype}_binary_kib": os.path.getsize(os.path.join(SYSTEM_CNI, ptype)) // 1024
                 for ptype in ("bridge", "static")}
        return {**out, **sizes, "runs": DELEGATE_RUNS}

    # -- the whole run ---------------------------------------------------------------

    def memory(self) -> dict[str, Any]:
        """The kube daemon started on the empty fake, then filled, then restarted."""
        self.daemon.start()
        self.kube.wait_watches(3)  # its Node, its pods, the NADs
        self.wait_caches(self.daemon, 0, 0)
        empty = self.daemon.rss_kib()
        progress(f"kube daemon on an empty fake: RSS {empty} KiB; creating {self.nads} NADs "
                 f"and {self.pods} pods")
        for obj in self.nad_objects():
            self.kube.create("network-attachment-definitions", obj)
        with steps("pods created", self.pods) as step:
            for i in range(self.pods):
                name = self.cached_pod(i)
                self.create_pod(name, i, earlier_status(self.cluster.name, self.extra_names, i))
                step("")
        self.wait_caches(self.daemon, self.pods, self.nads)
        by_watch = self.daemon.rss_kib()
        progress(f"caches filled by the watches: RSS {by_watch} KiB; restarting the daemon")
        code = self.daemon.stop()
        if code != 0:
            self.problems.append(f"kube daemon exited with {code} on SIGTERM (restart)")
        self.daemon.start()
        self.wait_caches(self.daemon, self.pods, self.nads)
        listed, start_peak = self.daemon.rss_kib(), self.daemon.peak_rss_kib()
        return {"empty_kib": empty, "filled_by_watch_kib": by_watch,
                "filled_by_list_kib": listed, "restart_peak_kib": start_peak,
                "caches_kib": max(by_watch, listed) - empty}

    def warm_up(self) -> Side:
        """One pod per side, not timed: the delegates' VERSION caches, the bridges."""
        warm = Side("warm-up")
        self.create_pod("warm", self.pods + 2 * self.misses, None)
        for side in ("kube", "standalone"):
            sb = self.sandbox(side, "w", 0, "warm")
            self.add(side, warm, sb)
            self.delete(side, warm, sb)
        return warm

    def measure(self) -> Measured:
        self.kube.open()
        self.kube.create("nodes", node(NODE))  # the daemon is not ready without its Node
        self.daemon.settings.update({
            "kubeconfig": str(self.kube.kubeconfig(self.root / "kubeconfig")),
            "node-name": NODE})
        if self.delete_pods:
            self.daemon.settings["pod-deleted-grace"] = 0
        self.add_networks()
        self.daemon.install_plugin()
        self.standalone.install_plugin()
        mem = self.memory()
        self.standalone.start()
        warm = self.warm_up()
        progress(f"churn: {self.churn_pods} pods per side in {ROUNDS} rounds, concurrency "
                 f"{self.concurrency}")
        sides, churn_requests = self.churn()
        progress(f"cache misses: {self.misses} pods created with their ADD, then as many with "
                 "the watch lagging")
        misses = {"created_with_add": self.miss("new", held=False),
                  "watch_lagging": self.miss("lag", held=True)}
        progress(f"burst: {self.burst_pods} ADDs at once")
        burst = self.burst()
        delegate = self.delegate_rss()
        left = {side: self.leftovers(d) for side, d in
                (("kube", self.daemon), ("standalone", self.standalone))}
        left["direct"] = harness.describe_leftovers({"host_local_leases": harness.host_local_leases(
            self.root / "direct-ipam")})
        std_peak = self.standalone.peak_rss_kib()
        std_code = self.standalone.stop()
        since_burst, code = self.finish_daemon()
        kube_runs = sides["kube"].pods

        def read_outside(conn: sqlite3.Connection) -> dict[str, Any]:
            return {verb.lower(): outside_delegates(conn, kube_runs, verb)
                    for verb in ("ADD", "DEL")}

        outside = {verb: summary_ms(seconds) for verb, seconds in
                   from_journal(Path(self.daemon.journal_path), read_outside).items()
                   if verb in ("add", "del")}
        lifetime_peak = max(burst["daemon_peak_before_kib"], since_burst)
        reports = {side: side_report(rec, self.churn_pods) for side, rec in sides.items()}
        for side, rec in sides.items():
            reports[side]["add_wall_s"] = round(rec.phase_s.get("ADD", 0.0), 3)
            reports[side]["del_wall_s"] = round(rec.phase_s.get("DEL", 0.0), 3)
            reports[side]["leftovers"] = left[side]
            self.problems += [f"{side}: {m}" for m in rec.failures + left[side]]
        reports["standalone"]["daemon_peak_rss_kib"] = std_peak
        reports["standalone"]["daemon_pid"] = self.standalone.pid
        if std_code != 0:
            self.problems.append(f"standalone daemon exited with {std_code} on SIGTERM")
        server_errors = list(self.kube.server_errors)
        self.problems += [f"fake API server: {e.splitlines()[-1]}" for e in server_errors]
        requests = {"warm_cache": {verb: requests_report(self.churn_pods, c)
                                   for verb, c in churn_requests.items()},
                    **{k: {"ADD": m["ADD"], "DEL": m["DEL"]} for k, m in misses.items()}}
        return Measured(
            params={"pods": self.pods, "nads": self.nads, "churn": self.churn_pods,
                    "misses": self.misses, "concurrency": self.concurrency,
                    "burst": self.burst_pods, "api_latency_ms": self.api_latency_ms,
                    "rounds": ROUNDS, "max_concurrent": MAX_CONCURRENT, "node": NODE,
                    "standing": self.standing, "delete_pods": self.delete_pods,
                    "networks_per_pod": self.networks_per_pod,
                    "deleted_through_api": self.deleted_through_api},
            parts={"subnets": [str(n.subnet) for n in self.nets], "requests": requests,
                   "kube": reports["kube"], "standalone": reports["standalone"],
                   "direct": reports["direct"], "outside_delegates_ms": outside,
                   "ratio": ratios(reports["kube"], reports["standalone"],
                                   ("pods_per_s", "cpu_ms_per_pod")),
                   "ratio_direct": ratios(reports["kube"], reports["direct"]),
                   "misses": misses, "burst": burst,
                   "memory": {**mem, "burst_peak_kib": burst["daemon_peak_rss_kib"],
                              "lifetime_peak_kib": lifetime_peak, "delegate": delegate,
                              "container": container_estimate(burst, delegate,
                                                              lifetime_peak,
                                                              self.networks_per_pod)}},
            peak_rss_kib=lifetime_peak, exit_code=code, warm_up=warm, problems=self.problems)

    def leftovers(self, daemon: harness.Daemon) -> list[str]:
        return harness.describe_leftovers(harness.leftovers(
            daemon, bridges=[n.bridge for n in self.nets], netns_prefix=self.prefix))

    def cleanup(self) -> list[str]:
        problems: list[str] = []
        try:
            self.standalone.shut_down()
        except Exception as exc:
            problems.append(f"standalone daemon: {exc!r}")
        problems += super().cleanup()
        self.kube.close()
        return problems


def container_estimate(burst: dict[str, Any], delegate: dict[str, Any],
                       daemon_peak_kib: int, networks_per_pod: int) -> dict[str, Any]:
    """What the DaemonSet's container holds at most: the daemon's peak over the run plus a
    delegate for each network of ``max-concurrent`` pods (a request runs its networks'
    chains side by side), each a bridge with the ``static`` it execs, both resident at
    once. Two ways: every page of each process counted (``bound``: their binaries' pages,
    shared, counted in each), and each page once (``once``: the anonymous memory of each,
    the largest sampled, plus the two binaries; kernel memory left out); beside them what
    was sampled."""
    sampled = burst["sampled"]
    anon = sampled["max_anon_kib_by_command"]
    bridge_anon = int(anon.get("bridge", 0))
    static_anon = int(anon.get("static", 0)) or bridge_anon  # too short-lived to sample
    per_delegate = delegate["bridge_add_kib"] + delegate["static_kib"]
    at_once = MAX_CONCURRENT * networks_per_pod
    peak = daemon_peak_kib
    return {"max_concurrent": MAX_CONCURRENT, "networks_per_pod": networks_per_pod,
            "delegates_at_once": at_once, "per_delegate_kib": per_delegate,
            "bound_kib": peak + at_once * per_delegate,
            "per_delegate_anon_kib": bridge_anon + static_anon,
            "once_kib": peak + at_once * (bridge_anon + static_anon)
            + delegate["bridge_binary_kib"] + delegate["static_binary_kib"],
            "sampled_max_kib": sampled["max_total_kib"],
            "sampled_max_charged_kib": sampled["max_charged_kib"]}


# -- the report ---------------------------------------------------------------------------


CASES = (("warm cache", "warm_cache"), ("pod created with its ADD", "created_with_add"),
         ("  … the watch lagging", "watch_lagging"))


def _mib(kib: float | None) -> str:
    return render.num(kib / 1024 if kib else None, "{:.1f}")


def _per_pod(r: dict[str, Any]) -> str:
    return ", ".join(f"{key} {n:g}" for key, n in r["per_pod"].items()) or "none"


def render_kube(report: dict[str, Any]) -> list[RenderableType]:
    p, k, s = report["params"], report["kube"], report["standalone"]
    req, mem, burst = report["requests"], report["memory"], report["burst"]
    rows = [(f"{label}: {verb}", str(req[key][verb]["pods"]),
             render.num(req[key][verb]["reads_per_pod"]),
             render.num(req[key][verb]["writes_per_pod"]), _per_pod(req[key][verb]))
            for label, key in CASES for verb in ("ADD", "DEL")]

    def cpu(side: dict[str, Any], key: str, per: int = 1) -> float:
        return float(side["cpu_s"].get(key, 0.0)) * 1000 / max(int(side["pods"]) * per, 1)

    nets = int(p.get("networks_per_pod", 2))

    out: list[RenderableType] = [
        f"netctl bench kube: {p['pods']} pods of node {p['node']} and {p['nads']} NADs in the "
        f"fake API server (+{p['api_latency_ms']:g} ms per request), {nets} networks per pod, "
        f"{p['cpus']} CPUs, prefix {report['prefix']}",
        render.load_line(p), "",
        render.table(("", "pods", "reads/pod", "writes/pod", "requests per pod"), rows,
                     "API requests of the kube daemon (the fake's counts; reads: get, list)"),
        "",
        render.table(("", "kube", "standalone", "ratio"), [
            render.compare("pods/s (ADD + DEL)", k, s, "pods_per_s"),
            *render.latency_rows(k, s, report["ratio"]),
            render.compare("daemon + delegates CPU per pod (ms)", k, s, "cpu_ms_per_pod"),
            ("  the daemon's own (ms)", render.num(cpu(k, "daemon")),
             render.num(cpu(s, "daemon")), ""),
            (f"  the daemon's own per attachment ({nets} per pod; ms)",
             render.num(cpu(k, "daemon", nets)), render.num(cpu(s, "daemon", nets)), ""),
            ("  its delegates' per attachment (ms)",
             render.num(cpu(k, "daemon_delegates", nets)),
             render.num(cpu(s, "daemon_delegates", nets)), ""),
            ("failures", str(k["failures"]), str(s["failures"]), ""),
            ("leftovers after the run", str(len(k["leftovers"])), str(len(s["leftovers"])), ""),
        ], f"warm cache: {p['churn']} pods per side, {p['rounds']} rounds alternating the "
           f"sides, concurrency {p['concurrency']}; each exec timed start to exit"
           + (f"; beside {p['standing']} standing pods" if p.get("standing") else "")
           + (f"; {p['deleted_through_api']} DELed pods deleted through the API during the "
              "kube side's ADDs (pod-deleted-grace 0)" if p.get("delete_pods") else "")),
        "",
        *floor_rows(p, k, report.get("direct"), report.get("outside_delegates_ms"),
                    report.get("ratio_direct")),
        render.table(("", "pods", "GETs/pod", "ADD p50 (ms)", "ADD p99 (ms)"), [
            (label.strip(" …"), str(m["pods"]),
             render.num(m["ADD"]["per_pod"].get("get pods", 0.0)),
             render.num(m["add_ms"]["p50"]), render.num(m["add_ms"]["p99"]))
            for (label, _), m in zip(CASES[1:], report["misses"].values(), strict=True)],
            "cache misses: each pod created in the fake just before its ADD"),
        "",
        f"burst: {burst['pods']} ADDs at once (the daemon runs {p['max_concurrent']} at a "
        f"time): {burst['add_wall_s']:.2f} s, {burst['adds_per_s']:.1f} ADDs/s, ADD p50 "
        f"{burst['add_ms']['p50']:.0f} ms, p99 {burst['add_ms']['p99']:.0f} ms; daemon CPU "
        f"{burst['daemon_cpu_s']:.2f} s, its delegates' {burst['delegates_cpu_s']:.2f} s",
        "",
        render.table(("", "MiB"), memory_rows(p, mem, burst, s), "memory (RSS)"),
        "", *render.verdict(report["problems"], "every ADD and DEL succeeded; nothing left "
                                                "behind")]
    return out


def floor_rows(p: dict[str, Any], k: dict[str, Any], d: dict[str, Any] | None,
               outside: dict[str, Any] | None,
               ratio: dict[str, Any] | None) -> list[RenderableType]:
    """The kube side beside the floor, the same pods' delegates exec'd directly, and what
    netctl adds to an ADD and a DEL: the exec less its delegates' critical path (the
    journal's step times), with the issue's targets."""
    if d is None or not outside or "add" not in outside or ratio is None:
        return []  # a report from before the floor
    nets = int(p.get("networks_per_pod", 2))
    own = float(k["cpu_s"].get("daemon", 0.0)) * 1000 / max(int(k["pods"]) * nets, 1)
    return [render.table(("", "kube", "direct", "ratio"), [
        render.compare("pods/s (ADD + DEL)", k, d, "pods_per_s"),
        *render.latency_rows(k, d, ratio),
        ("delegates CPU per pod (ms; direct: with ip netns)",
         render.num(float(k["cpu_s"].get("daemon_delegates", 0.0)) * 1000 / max(k["pods"], 1)),
         render.num(float(d["cpu_s"].get("delegates", 0.0)) * 1000 / max(d["pods"], 1)), ""),
        (f"the daemon's own CPU per attachment (ms; target <= {TARGET_OWN_MS:g})",
         render.num(own), "-", ""),
        *((f"{verb.upper()} outside its delegates p50 / p99 (ms; target p99 <= "
           f"{TARGET_OUTSIDE_MS:g} for ADD)",
           f"{render.num(outside[verb]['p50'])} / {render.num(outside[verb]['p99'])}", "-", "")
          for verb in ("add", "del")),
    ], f"the floor: the same {d['pods']} pods' networks exec'd directly (bridge with "
       "host-local, each pod's chains one after the other, the libcni way), in the same "
       "rounds; outside its delegates: the exec, start to exit, less the delegates' "
       "critical path from the journal"), ""]


def memory_rows(p: dict[str, Any], mem: dict[str, Any], burst: dict[str, Any],
                standalone: dict[str, Any]) -> list[render.Row]:
    d, c, sampled = mem["delegate"], mem["container"], burst["sampled"]
    return [
        ("standalone daemon, peak over its run", _mib(standalone["daemon_peak_rss_kib"])),
        ("daemon, empty caches", _mib(mem["empty_kib"])),
        (f"daemon, {p['pods']} pods + {p['nads']} NADs cached (by the watches)",
         _mib(mem["filled_by_watch_kib"])),
        ("  … after a restart (one list each)", _mib(mem["filled_by_list_kib"])),
        ("  … that start's peak", _mib(mem["restart_peak_kib"])),
        (f"daemon, peak in the burst of {burst['pods']} ADDs", _mib(mem["burst_peak_kib"])),
        ("daemon, peak over the run", _mib(mem["lifetime_peak_kib"])),
        (f"sampled: daemon + processes under it, max ({sampled['samples']} samples, at most "
         f"{sampled['max_processes_under_daemon']} processes)", _mib(sampled["max_total_kib"])),
        ("  … their pages once (the daemon's RSS + the others' Pss)",
         _mib(sampled["max_charged_kib"])),
        ("one delegate: bridge ADD (its static IPAM child included)", _mib(d["bridge_add_kib"])),
        ("one delegate: static alone", _mib(d["static_kib"])),
        ("one delegate: bridge DEL", _mib(d["bridge_del_kib"])),
        ("  … anonymous memory of bridge + static (the largest sampled)",
         _mib(c["per_delegate_anon_kib"])),
        (f"bound: peak over the run + {c['max_concurrent']} pods x {c['networks_per_pod']} "
         "networks x (bridge + static)", _mib(c["bound_kib"])),
        ("  … their pages once (anonymous memory each, the binaries once)",
         _mib(c["once_kib"])),
    ]


# -- entry point ---------------------------------------------------------------------------


def run_kube(args: argparse.Namespace) -> int:
    bad = [f"--{name.replace('_', '-')} must be ≥ {low}" for name, low in (
        ("pods", 1), ("networks", 1), ("nads", args.networks + 1), ("churn", 1),
        ("misses", 1), ("concurrency", 1), ("burst", 1), ("api_latency", 0), ("standing", 0))
        if getattr(args, name) < low]
    bad += [f"--{name} + --standing must be ≤ --pods" for name in ("churn", "burst")
            if getattr(args, name) + args.standing > args.pods]
    if bad:
        print(f"netctl bench kube: {'; '.join(bad)}", file=sys.stderr)
        return 2
    why = harness.preflight(("bridge", "static"))
    if why is None and not os.access(GNU_TIME, os.X_OK):
        why = f"needs GNU time ({GNU_TIME}, Debian's package time) for the delegates' RSS"
    if why:
        print(f"netctl bench kube: {why}", file=sys.stderr)
        return 2
    bench = KubeBench(args.pods, args.nads, args.churn, args.misses, args.concurrency,
                      args.burst, args.api_latency, standing=args.standing,
                      delete_pods=args.delete_pods, networks=args.networks)
    return drive(bench, "kube", bench.measure, render_kube, args.json)
