"""``netctl bench cluster``: what IPAM costs the API server and the pods of a cluster when
``--nodes`` nodes allocate from one shared pool, netctl's cluster IPAM beside whereabouts'
protocol, on the same fake API server with the same latency.

The API server is :class:`netctl_kit.kubefake.FakeKube` (real HTTP; requests counted per verb
and resource; ``--api-latency-ms`` added to each), serving the ``ipamblocks`` CRD
(``ipam.netctl.dev/v1``, cluster-scoped), whereabouts' ``ippools`` and the built-in
``leases``, with one Node object per simulated node.

A **round** is the same on every side: each node ADDs ``--pods`` containers, at most
``--concurrency`` at a time on each node, every node at once (the ADD phase); then each node
DELs every other one of them, half of ``--pods``, each DEL followed by an ADD of a new
container (the churn). Each ADD and DEL is timed, start to end; every address handed out is
kept with its node and container. The fake's counts before, between and after the two
phases give the API requests per pod, by verb and resource.

1. **netctl, one node**: one daemon on its own fake: the same round, for the latency a node
   sees alone (the cluster's p99 over it).
2. **netctl, the cluster**: ``--nodes`` real ``netctl daemon`` processes, each with its own
   state dir and socket, in Kubernetes mode (a kubeconfig for the fake, ``node-name``
   node-1…N) with ``ipam-backend`` ``--backend``, all started (their sockets accepting)
   before the round. An allocation is ``netctl-ipam`` exec'd as a plain IPAM plugin, as a
   main plugin execs it, with a config whose ``ipam`` is ``{"type": "netctl-ipam",
   "range": POOL}`` and the node's socket. At the end the ``ipamblocks`` are listed: the
   blocks claimed, per node. The daemons are then stopped.
3. **the baseline, whereabouts' protocol** (:mod:`netctl_kit.bench.whereabouts`): the same round
   on the same fake, each node simulated by ``--concurrency`` threads of this process, each
   invocation its own HTTP client: the cluster-wide Lease, the IPPool read and written back.

Reported per side: requests per pod by verb (the ADD phase per ADD; the churn per DEL +
ADD), the writes among them and the IPAM writes (on ``ipamblocks``; whereabouts': on
``leases`` and ``ippools``), ADD and DEL latency, wall time, and the live addresses held
twice across the cluster. Duplicates are a failure for whereabouts and for the kubernetes
backend; with ``--backend sqlite`` each node keeps its own pool, so nodes sharing a range do
hand out the same addresses: the count says how many. Every ADD and DEL must succeed; the
daemons must exit 0; anything else exits 1. The temporary dir, the daemons and the netns are
removed at the end, also after Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from netctl_kit import harness
from netctl_kit.bench import render
from netctl_kit.bench.common import (
    DELEGATE_VERSION,
    POD_NAMESPACE,
    Bench,
    Interrupted,
    Measured,
    Side,
    drive,
    progress,
    summary_ms,
)
from netctl_kit.bench.kube import READS, WRITES, made
from netctl_kit.bench.render import steps
from netctl_kit.bench.whereabouts import NAMESPACE, Endpoint, Tally, Whereabouts, pool_name
from netctl_kit.kubefake import IPAMBLOCKS, IPPOOLS, FakeKube, node
from netctl_kit.kubefake.real import RealKube
from netctl_kit.kubefake.real import unavailable as real_unavailable
from rich.console import RenderableType

Kube = FakeKube | RealKube

BACKENDS = ("kubernetes", "sqlite")
DEFAULT_BACKEND = "kubernetes"
NODE = "node-{}"
IPAM_RESOURCES = {"netctl": ("ipamblocks",), "whereabouts": ("leases", "ippools")}
SIDES = ("netctl", "whereabouts")
DEL_EXEC_TIMEOUT = 60.0


# -- pure helpers -------------------------------------------------------------------------------


@dataclass
class Alloc:
    """One container of one node: its ADD (and DEL) timed, the address it got."""

    node: str
    container: str
    phase: str  # "add": the ADD phase; "churn": an ADD of the churn
    address: str = ""
    add_s: float = 0.0
    del_s: float = 0.0
    deleted: bool = False


def churn_victims(allocs: list[Alloc], count: int) -> list[Alloc]:
    """The containers a node DELs in the churn: every other one, ``count`` of them."""
    return allocs[0::2][:count]


def duplicates(allocs: Iterable[Alloc]) -> dict[str, Any]:
    """The live addresses (ADDed, not DELed) held by more than one container, across nodes."""
    holders: dict[str, list[str]] = defaultdict(list)
    for a in allocs:
        if a.address and not a.deleted:
            holders[a.address].append(f"{a.node}/{a.container}")
    twice = {addr: who for addr, who in holders.items() if len(who) > 1}
    return {"live": sum(len(who) for who in holders.values()), "distinct": len(holders),
            "held_twice": len(twice),
            "extra_holders": sum(len(who) - 1 for who in twice.values()),
            "examples": [{"address": addr, "holders": who}
                         for addr, who in sorted(twice.items())[:10]]}


def requests_report(pods: int, counts: Counter[str],
                    ipam_resources: Iterable[str]) -> dict[str, Any]:
    """Requests per pod (``"verb resource"``), by verb, and the reads, writes and IPAM writes
    (writes on ``ipam_resources``) among them."""
    ipam = set(ipam_resources)

    def per_pod(keep: Callable[[str, str], bool]) -> float:
        total = sum(n for key, n in counts.items() if keep(*key.split(" ", 1)))
        return round(total / pods, 3) if pods else 0.0

    by_verb: Counter[str] = Counter()
    for key, n in counts.items():
        by_verb[key.split(" ", 1)[0]] += n
    return {"pods": pods, "requests": dict(sorted(counts.items())),
            "per_pod": {k: round(n / pods, 3) for k, n in sorted(counts.items())} if pods else {},
            "by_verb_per_pod": {v: round(n / pods, 3) for v, n in sorted(by_verb.items())}
            if pods else {},
            "reads_per_pod": per_pod(lambda verb, _: verb in READS),
            "writes_per_pod": per_pod(lambda verb, _: verb in WRITES),
            "ipam_writes_per_pod": per_pod(lambda verb, res: verb in WRITES and res in ipam)}


def blocks_report(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The IPAMBlocks listed, by the node that holds each (``spec.node``)."""
    per_node = Counter(str((o.get("spec") or {}).get("node") or "?") for o in objs)
    return {"total": len(objs), "per_node": dict(sorted(per_node.items()))}


def backend_setting(backend: str) -> dict[str, str]:
    """The daemons' ``ipam-backend`` setting."""
    return {"ipam-backend": backend}


def synced(daemon: harness.Daemon) -> int:
    """The watches a Kubernetes-mode daemon has opened once it is set up: every cache its
    status reports (the pods', the NADs', the cluster IPAM's) synced and watching, its
    Node watched, its cluster IPAM (when it has one) ready; 0 until then."""
    kube = daemon.status().get("kubernetes") or {}
    ipam = kube.get("ipam")
    if ipam is not None and not ipam.get("ready"):
        return 0
    caches = [v for doc in (kube, ipam or {}) for v in doc.values()
              if isinstance(v, dict) and "synced" in v]
    watching = [c for c in caches if c["synced"] and c["state"] == "watching"]
    if not caches or watching != caches or (kube.get("node_object") or {}).get(
            "state") != "watching":
        return 0
    return sum(int(c["watches"]) for c in caches) + 1  # and the Node's


def watches_made(kube: Kube) -> int:
    """The watch requests ``kube`` has had (since its counts were reset)."""
    return sum(n for (verb, _), n in kube.request_counts.items() if verb == "watch")


def ratio_of(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


# -- the two allocators ----------------------------------------------------------------------


class Ipam(Protocol):
    """How a side allocates on node ``index`` (0-based) for ``container``."""

    def add(self, index: int, container: str) -> str: ...

    def delete(self, index: int, container: str) -> None: ...


@dataclass
class NetctlIpam:
    """``netctl-ipam`` exec'd as a plain IPAM plugin, each node's config naming its daemon's
    socket; the shared ``pool`` its ``range``."""

    plugin: str
    sockets: list[str]
    pool: ipaddress.IPv4Network | ipaddress.IPv6Network
    netns: str
    confs: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.confs = [json.dumps({
            "cniVersion": DELEGATE_VERSION, "name": "cluster", "type": "bridge",
            "ipam": {"type": "netctl-ipam", "range": str(self.pool), "socket": sock}}).encode()
            for sock in self.sockets]

    def exec(self, index: int, command: str, container: str,
             timeout: float = harness.EXEC_TIMEOUT) -> harness.CNIResult:
        res = harness.exec_plugin(self.plugin, command, self.confs[index], container=container,
                                  netns=self.netns, timeout=timeout, args=harness.cni_args(
                                      f"{POD_NAMESPACE}/{container}", "", "IgnoreUnknown=1"))
        if res.rc != 0:
            raise RuntimeError(f"netctl-ipam {command} {res.describe()}")
        return res

    def add(self, index: int, container: str) -> str:
        res = self.exec(index, "ADD", container)
        ips = res.out.get("ips") if res.out else None
        if not isinstance(ips, list) or len(ips) != 1 or not isinstance(ips[0], dict):
            raise RuntimeError(f"netctl-ipam ADD: not one address: {harness.tail(res.stdout)}")
        addr = ipaddress.ip_interface(str(ips[0].get("address", ""))).ip
        if addr not in self.pool:
            raise RuntimeError(f"netctl-ipam ADD: {addr} is not in {self.pool}")
        return str(addr)

    def delete(self, index: int, container: str) -> None:
        self.exec(index, "DEL", container, DEL_EXEC_TIMEOUT)


@dataclass
class WhereaboutsIpam:
    """whereabouts' protocol, one :class:`~netctl_kit.bench.whereabouts.Whereabouts` per
    invocation (its identity the pod, as whereabouts' is)."""

    api: Endpoint
    pool: ipaddress.IPv4Network | ipaddress.IPv6Network
    stop: threading.Event
    tallies: list[Tally] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def invocation(self, container: str) -> Whereabouts:
        return Whereabouts(self.api, self.pool, f"{POD_NAMESPACE}/{container}", self.stop)

    def kept(self, w: Whereabouts) -> None:
        with self.lock:
            self.tallies.append(w.tally)

    def add(self, index: int, container: str) -> str:
        w = self.invocation(container)
        try:
            return w.add(container, f"{POD_NAMESPACE}/{container}")
        finally:
            self.kept(w)

    def delete(self, index: int, container: str) -> None:
        w = self.invocation(container)
        try:
            w.delete(container)
        finally:
            self.kept(w)

    def report(self) -> dict[str, Any]:
        tries = [t.lease_tries for t in self.tallies]
        return {"invocations": len(tries),
                "lease_tries_mean": round(sum(tries) / len(tries), 2) if tries else 0.0,
                "lease_tries_max": max(tries, default=0),
                "lease_wait_s": round(sum(t.waited_s for t in self.tallies), 2),
                "pool_conflicts": sum(t.pool_conflicts for t in self.tallies)}


# -- a round --------------------------------------------------------------------------------


@dataclass
class Round:
    nodes: list[str]
    allocs: list[Alloc]
    add_wall_s: float
    churn_wall_s: float
    add_requests: Counter[str]
    churn_requests: Counter[str]
    churned: int  # containers DELed (and as many ADDed) per node
    failures: list[str]


class ClusterBench(Bench):
    """The three rounds (see the module's docstring) and their clean-up."""

    def __init__(self, nodes: int, pods: int, latency_ms: float, pool: str, concurrency: int,
                 backend: str, api_server: str = "fake") -> None:
        self.settings = backend_setting(backend)  # before the base makes its temporary dir
        super().__init__(concurrency)
        self.nodes = nodes
        self.pods = pods
        self.latency_ms = latency_ms
        self.pool = ipaddress.ip_network(pool)
        self.backend = backend
        self.api_server = api_server
        if api_server == "real":
            self.latency_ms = 0.0  # the real server's own
        self.fakes: list[FakeKube] = []
        self.real: RealKube | None = None
        self.daemons: list[harness.Daemon] = []
        self.netns = ""
        self.problems: list[str] = []

    # -- set-up ------------------------------------------------------------------------

    def fake(self) -> Kube:
        """A new fake API server for a round; or the real one (started for the first
        round), emptied of the last round's blocks, pools, nodes and counts."""
        if self.api_server == "real":
            if self.real is None:
                self.real = RealKube()
                self.real.open()
            self.real.clean()
            self.real.reset_counts()
            return self.real
        kube = FakeKube(crds=[IPAMBLOCKS, IPPOOLS], latency_ms=self.latency_ms)
        self.fakes.append(kube)
        kube.open()
        return kube

    def endpoint(self, kube: Kube) -> Endpoint:
        """How the baseline reaches ``kube``: the real one with the bench's own token."""
        if isinstance(kube, RealKube):
            return Endpoint(kube.url, kube.bench_token, str(kube.ca_file))
        return Endpoint(kube.url)

    def done_with(self, kube: Kube) -> None:
        if isinstance(kube, FakeKube):
            kube.close()

    def start_daemons(self, kube: Kube, count: int, name: str) -> list[harness.Daemon]:
        """``count`` daemons in Kubernetes mode on ``kube``, node-1…count (their Node objects
        created first), each under its own dir; returns once every socket accepts and every
        daemon's caches have synced (its lists and watches are made before anything is
        counted)."""
        kubeconfig = str(kube.kubeconfig(self.root / f"{name}.kubeconfig"))
        daemons = []
        for i in range(1, count + 1):
            kube.create("nodes", node(NODE.format(i)))
            daemons.append(harness.Daemon(
                self.root / name / NODE.format(i), self.prefix, settings={
                    "log-level": "info", "kubeconfig": kubeconfig,
                    "node-name": NODE.format(i), **self.settings}))
        self.daemons += daemons
        for d in daemons:
            d.start(wait=False)
        for d in daemons:
            d.wait_ready(60)
        watches = sum(harness.wait_for(partial(synced, d), 60,
                                       f"the caches of the daemon in {d.root}")
                      for d in daemons)
        # a daemon says it watches before its request reaches the server, where it would
        # be counted in the round: wait for the server to have every one
        harness.wait_for(lambda: watches_made(kube) >= watches, 60,
                         f"the {watches} watches of the daemons at the API server")
        return daemons

    def stop_daemons(self, daemons: list[harness.Daemon]) -> list[dict[str, Any]]:
        out = []
        for d, name in zip(daemons, self.node_names(len(daemons)), strict=True):
            peak = d.peak_rss_kib()
            code = d.stop()
            if code != 0:
                self.problems.append(f"netctl daemon of {name} exited with {code} on SIGTERM")
            out.append({"node": name, "pid": d.pid, "exit_code": code, "peak_rss_kib": peak})
        return out

    @staticmethod
    def node_names(count: int) -> list[str]:
        return [NODE.format(i) for i in range(1, count + 1)]

    # -- the work, at most C at a time on each node -------------------------------------

    def per_node(self, side: Side, counts: list[int], work: Callable[[int, int], None],
                 concurrency: int) -> float:
        """``work(node, i)`` for i in 0..counts[node]-1, ``concurrency`` workers per node,
        every node at once; stops early when asked. Returns the wall time."""
        locks = [threading.Lock() for _ in counts]
        todo = [iter(range(n)) for n in counts]

        def worker(index: int, step: Callable[[str], None]) -> None:
            while not self.stop.is_set():
                with locks[index]:
                    i = next(todo[index], None)
                if i is None:
                    return
                try:
                    work(index, i)
                except Exception as exc:  # a bench bug: count it, go on
                    side.fail(f"node {index + 1} item {i}: {exc!r}")
                step("")

        with steps(side.name, sum(counts)) as step:
            threads = [threading.Thread(target=worker, args=(index, step), daemon=True,
                                        name=f"{side.name}-{index + 1}-{k}")
                       for index in range(len(counts)) for k in range(concurrency)]
            return self.run_threads(threads)

    @staticmethod
    def add(side: Side, ipam: Ipam, index: int, a: Alloc) -> None:
        t0 = time.perf_counter()
        try:
            address = ipam.add(index, a.container)
        except Exception as exc:
            side.fail(f"{a.node}: ADD {a.container}: {exc}")
            return
        a.add_s, a.address = time.perf_counter() - t0, address

    @staticmethod
    def delete(side: Side, ipam: Ipam, index: int, a: Alloc) -> None:
        t0 = time.perf_counter()
        try:
            ipam.delete(index, a.container)
        except Exception as exc:
            side.fail(f"{a.node}: DEL {a.container}: {exc}")
            return
        a.del_s, a.deleted = time.perf_counter() - t0, True

    def run_round(self, name: str, ipam: Ipam, kube: Kube, nodes: int,
                  pods: int | None = None, concurrency: int | None = None) -> Round:
        """The ADD phase, then the churn, on ``nodes`` nodes (``pods`` each, ``concurrency``
        in flight on each: by default the bench's); the fake's counts around each."""
        side = Side(name)
        pods = self.pods if pods is None else pods
        concurrency = self.concurrency if concurrency is None else concurrency
        names = self.node_names(nodes)
        tag = name[0]
        allocs = [[Alloc(n, f"{self.prefix}-{tag}{i + 1}-{k}", "add") for k in range(pods)]
                  for i, n in enumerate(names)]
        churned = pods // 2
        fresh = [[Alloc(n, f"{self.prefix}-{tag}{i + 1}-c{k}", "churn") for k in range(churned)]
                 for i, n in enumerate(names)]
        victims = [churn_victims(a, churned) for a in allocs]

        def add_phase(index: int, k: int) -> None:
            self.add(side, ipam, index, allocs[index][k])

        def churn(index: int, k: int) -> None:
            self.delete(side, ipam, index, victims[index][k])
            self.add(side, ipam, index, fresh[index][k])

        c0 = kube.request_counts
        add_wall = self.per_node(side, [pods] * nodes, add_phase, concurrency)
        c1 = kube.request_counts
        churn_wall = self.per_node(side, [churned] * nodes, churn, concurrency)
        c2 = kube.request_counts
        return Round(names, [a for per in allocs + fresh for a in per], add_wall, churn_wall,
                     made(c0, c1), made(c1, c2), churned, side.failures)

    # -- the whole run -------------------------------------------------------------------

    def netctl_round(self, name: str, nodes: int, pods: int | None = None,
                     concurrency: int | None = None
                     ) -> tuple[Round, dict[str, Any], Kube]:
        """A round of ``nodes`` netctl daemons on a new fake; the blocks and the daemons'
        figures (they are stopped after it)."""
        kube = self.fake()
        daemons = self.start_daemons(kube, nodes, name)
        ipam = NetctlIpam(self.daemon.ipam_plugin, [d.socket for d in daemons], self.pool,
                          self.netns)
        rnd = self.run_round(name, ipam, kube, nodes, pods, concurrency)
        extra = {"blocks": blocks_report(kube.list("ipamblocks")),
                 "daemons": self.stop_daemons(daemons)}
        return rnd, extra, kube

    def measure(self) -> Measured:
        self.daemon.install_plugin()  # one thin plugin; each node's config names its socket
        self.netns = harness.netns_add(f"{self.prefix}-c")
        try:
            return self._measure()
        except Interrupted:
            raise
        except Exception:  # the daemons' logs go with the temporary dir: show their ends
            for d in self.daemons:
                if d.pid:
                    print(f"-- {d.root}: {d.log()[-2000:]}", file=sys.stderr)
            raise

    def _measure(self) -> Measured:
        progress(f"netctl, one node: {self.pods} ADDs, then {self.pods // 2} DEL + ADD, "
                 f"concurrency {self.concurrency}, backend {self.backend}")
        single, single_extra, single_kube = self.netctl_round("single", 1)
        self.done_with(single_kube)
        progress(f"netctl, one node under the cluster's load: {self.nodes * self.pods} ADDs, "
                 f"then {self.nodes * self.pods // 2} DEL + ADD, concurrency "
                 f"{self.nodes * self.concurrency}")
        loaded, loaded_extra, loaded_kube = self.netctl_round(
            "loaded", 1, self.nodes * self.pods, self.nodes * self.concurrency)
        self.done_with(loaded_kube)
        progress(f"netctl, {self.nodes} nodes: {self.pods} ADDs each, then {self.pods // 2} "
                 "DEL + ADD each, every node at once")
        cluster, extra, kube = self.netctl_round("netctl", self.nodes)
        progress(f"whereabouts' protocol, {self.nodes} nodes x {self.concurrency} threads: the "
                 "same round")
        baseline = WhereaboutsIpam(self.endpoint(kube), self.pool, self.stop)
        base = self.run_round("whereabouts", baseline, kube, self.nodes)
        stored = kube.get("ippools", NAMESPACE, pool_name(self.pool))
        in_pool = len(((stored or {}).get("spec") or {}).get("allocations") or {})

        n_rep = side_report(cluster, IPAM_RESOURCES["netctl"])
        s_rep = side_report(single, IPAM_RESOURCES["netctl"])
        w_rep = side_report(base, IPAM_RESOURCES["whereabouts"])
        n_rep.update(extra)
        n_rep["backend"] = self.backend
        n_rep["single_node"] = {**s_rep, **single_extra}
        n_rep["cluster_over_single"] = {
            q: ratio_of(n_rep["add_ms"][q], s_rep["add_ms"][q]) for q in ("p50", "p99")}
        l_rep = side_report(loaded, IPAM_RESOURCES["netctl"])
        n_rep["single_node_same_load"] = {**l_rep, **loaded_extra}
        n_rep["cluster_over_same_load"] = {
            q: ratio_of(n_rep["add_ms"][q], l_rep["add_ms"][q]) for q in ("p50", "p99")}
        w_rep.update(baseline.report())
        w_rep["ippool_allocations"] = in_pool
        self.check(n_rep, w_rep, s_rep, kube, l_rep)
        ratios = {
            "writes_per_pod_add": ratio_of(n_rep["requests"]["add"]["writes_per_pod"],
                                           w_rep["requests"]["add"]["writes_per_pod"]),
            "writes_per_pod_churn": ratio_of(n_rep["requests"]["churn"]["writes_per_pod"],
                                             w_rep["requests"]["churn"]["writes_per_pod"]),
            "requests_per_pod_add": ratio_of(n_rep["requests"]["add"]["total_per_pod"],
                                             w_rep["requests"]["add"]["total_per_pod"]),
            **{f"add_{q}": ratio_of(n_rep["add_ms"][q], w_rep["add_ms"][q])
               for q in ("p50", "p99")},
            "wall_s": ratio_of(n_rep["wall_s"]["total"], w_rep["wall_s"]["total"])}
        return Measured(
            params={"nodes": self.nodes, "pods": self.pods, "churn": self.pods // 2,
                    "concurrency": self.concurrency, "api_latency_ms": self.latency_ms,
                    "api_server": self.api_server,
                    "pool": str(self.pool), "backend": self.backend},
            parts={"netctl": n_rep, "whereabouts": w_rep, "ratio": ratios},
            problems=self.problems)

    def check(self, n: dict[str, Any], w: dict[str, Any], s: dict[str, Any],
              kube: Kube, loaded: dict[str, Any]) -> None:
        for label, rep in (("netctl", n), ("netctl one node", s),
                           ("netctl one node, the cluster's load", loaded),
                           ("whereabouts", w)):
            self.problems += [f"{label}: {m}" for m in rep["errors"]]
            if rep["adds"] != rep["adds_planned"]:
                self.problems.append(f"{label}: {rep['adds']} of {rep['adds_planned']} ADDs "
                                     "succeeded")
            dup = rep["addresses"]
            if dup["held_twice"] and (label == "whereabouts" or self.backend != "sqlite"):
                self.problems.append(f"{label}: {dup['held_twice']} live addresses held twice, "
                                     f"e.g. {dup['examples'][:3]}")
        if w["ippool_allocations"] != w["addresses"]["live"]:
            self.problems.append(f"whereabouts: the IPPool holds {w['ippool_allocations']} "
                                 f"allocations, {w['addresses']['live']} are live")
        self.problems += [f"fake API server: {e.splitlines()[-1]}" for e in kube.server_errors]

    def cleanup(self) -> list[str]:
        problems: list[str] = []
        self.stop.set()
        for d in self.daemons:
            try:
                d.shut_down()
            except Exception as exc:
                problems.append(f"daemon {d.root}: {exc!r}")
        servers: list[Kube] = [*self.fakes, *([self.real] if self.real else [])]
        for kube in servers:
            try:
                kube.close()
            except Exception as exc:
                problems.append(f"API server: {exc!r}")
        return problems + super().cleanup()


def side_report(rnd: Round, ipam_resources: Iterable[str]) -> dict[str, Any]:
    adds = [a for a in rnd.allocs if a.address]
    deleted = [a for a in rnd.allocs if a.deleted]
    nodes, pods = len(rnd.nodes), len([a for a in rnd.allocs if a.phase == "add"])
    requests = {"add": requests_report(pods, rnd.add_requests, ipam_resources),
                "churn": requests_report(nodes * rnd.churned, rnd.churn_requests,
                                         ipam_resources)}
    for rep in requests.values():
        rep["total_per_pod"] = round(sum(rep["per_pod"].values()), 3)
    return {
        "nodes": nodes,
        "adds": len(adds),
        "adds_planned": len(rnd.allocs),
        "dels": len(deleted),
        "add_ms": summary_ms([a.add_s for a in adds]),
        "add_phase_ms": summary_ms([a.add_s for a in adds if a.phase == "add"]),
        "churn_add_ms": summary_ms([a.add_s for a in adds if a.phase == "churn"]),
        "del_ms": summary_ms([a.del_s for a in deleted]),
        "wall_s": {"add": round(rnd.add_wall_s, 3), "churn": round(rnd.churn_wall_s, 3),
                   "total": round(rnd.add_wall_s + rnd.churn_wall_s, 3)},
        "requests": requests,
        "addresses": duplicates(rnd.allocs),
        "failures": len(rnd.failures),
        "errors": rnd.failures[:50],
    }


# -- the report ---------------------------------------------------------------------------


def _per_pod(rep: dict[str, Any]) -> str:
    return ", ".join(f"{key} {n:g}" for key, n in rep["per_pod"].items()) or "none"


def render_cluster(report: dict[str, Any]) -> list[RenderableType]:
    p, n, w, r = report["params"], report["netctl"], report["whereabouts"], report["ratio"]
    s = n["single_node"]
    num = render.num

    def row(label: str, get: Callable[[dict[str, Any]], Any], key: str | None = None,
            fmt: str = "{:.2f}") -> render.Row:
        a, b = get(n), get(w)
        return (label, num(a, fmt), num(b, fmt),
                num(r[key] if key else ratio_of(a, b)))

    def req(phase: str, what: str) -> Callable[[dict[str, Any]], Any]:
        return lambda rep: rep["requests"][phase][what]

    def lat(key: str, q: str) -> Callable[[dict[str, Any]], Any]:
        return lambda rep: rep[key][q]

    ipam = {"sqlite": "per node (sqlite)", "kubernetes": "cluster blocks (kubernetes)"}
    out: list[RenderableType] = [
        f"netctl bench cluster: {p['nodes']} nodes x {p['pods']} ADDs, then {p['churn']} DEL + "
        f"ADD each; concurrency {p['concurrency']} per node, every node at once; pool "
        f"{p['pool']}; {api_line(p)}; {p['cpus']} CPUs, prefix "
        f"{report['prefix']}",
        f"netctl: {p['nodes']} netctl daemons (Kubernetes mode, ipam-backend {p['backend']}: "
        f"pools {ipam.get(p['backend'], p['backend'])}), netctl-ipam exec'd as a plain IPAM "
        "plugin; baseline: whereabouts' protocol (one Lease, one IPPool) from threads of this "
        "process, no exec",
        render.load_line(p), "",
        render.table(("", "netctl", "whereabouts", "ratio"), [
            row("API writes per pod, ADD phase", req("add", "writes_per_pod"),
                "writes_per_pod_add"),
            row("API writes per pod, churn (DEL + ADD)", req("churn", "writes_per_pod"),
                "writes_per_pod_churn"),
            row("  IPAM writes per pod, ADD phase", req("add", "ipam_writes_per_pod")),
            row("  IPAM writes per pod, churn", req("churn", "ipam_writes_per_pod")),
            row("API requests per pod, ADD phase", req("add", "total_per_pod"),
                "requests_per_pod_add"),
            row("API requests per pod, churn", req("churn", "total_per_pod")),
            row("ADD p50 (ms)", lat("add_ms", "p50"), "add_p50"),
            row("ADD p99 (ms)", lat("add_ms", "p99"), "add_p99"),
            row("DEL p50 (ms)", lat("del_ms", "p50")),
            row("DEL p99 (ms)", lat("del_ms", "p99")),
            row("wall time, ADD phase (s)", lambda rep: rep["wall_s"]["add"]),
            row("wall time, churn (s)", lambda rep: rep["wall_s"]["churn"]),
            row("wall time (s)", lambda rep: rep["wall_s"]["total"], "wall_s"),
            ("ADDs / DELs failed", str(n["failures"]), str(w["failures"]), ""),
            ("live addresses (distinct)",
             f"{n['addresses']['live']} ({n['addresses']['distinct']})",
             f"{w['addresses']['live']} ({w['addresses']['distinct']})", ""),
            ("live addresses held twice", str(n["addresses"]["held_twice"]),
             str(w["addresses"]["held_twice"]), ""),
        ], "ADD and DEL timed start to end (netctl: the plugin's exec; whereabouts: lease, pool, "
           "release); requests counted by "
           + ("the real server's audit log" if p.get("api_server") == "real" else "the fake")),
        "",
        render.table(("", "one node", f"{p['nodes']} nodes", "ratio"), [
            (f"ADD {q} (ms)", num(s["add_ms"][q]), num(n["add_ms"][q]),
             num(n["cluster_over_single"][q])) for q in ("p50", "p99")]
            + [(f"ADD {q} (ms), one node under the cluster's load",
                num(n["single_node_same_load"]["add_ms"][q]), num(n["add_ms"][q]),
                num(n["cluster_over_same_load"][q])) for q in ("p50", "p99")]
            + [("API writes per pod, ADD phase", num(s["requests"]["add"]["writes_per_pod"]),
                num(n["requests"]["add"]["writes_per_pod"]), "")],
            "netctl alone on one node vs the cluster (the same round, its own fake); 'the "
            "cluster's load': one node doing all the nodes' pods at all their concurrency, "
            "so the machine's CPUs are as busy as in the cluster round"),
        "",
        "requests per pod by verb:",
    ]
    for label, rep in (("netctl", n), ("whereabouts", w)):
        for phase in ("add", "churn"):
            out.append(f"  {label}, {'ADD phase' if phase == 'add' else 'churn'}: "
                       f"{_per_pod(rep['requests'][phase])}")
    blocks = n["blocks"]
    out += ["", f"IPAM blocks at the end: {blocks['total']}"
            + (" (" + ", ".join(f"{k} {v}" for k, v in blocks["per_node"].items()) + ")"
               if blocks["per_node"] else ""),
            f"whereabouts: {w['invocations']} invocations, lease tries per invocation mean "
            f"{w['lease_tries_mean']:.2f} (max {w['lease_tries_max']}), "
            f"{w['lease_wait_s']:.1f} s asleep waiting for the lease in all, "
            f"{w['pool_conflicts']} pool writes refused (409)"]
    if p["backend"] == "sqlite" and n["addresses"]["held_twice"]:
        out.append("(sqlite: each node keeps its own pool, so nodes sharing a range hand out "
                   "the same addresses: expected)")
    return [*out, "", *render.verdict(report["problems"], "every ADD and DEL succeeded")]


def api_line(p: dict[str, Any]) -> str:
    if p.get("api_server") == "real":
        return "a real kube-apiserver and etcd (requests counted from its audit log)"
    return f"the fake API server, +{p['api_latency_ms']:g} ms per API request"


# -- entry point ---------------------------------------------------------------------------


def run_cluster(args: argparse.Namespace) -> int:
    bad = [f"--{name.replace('_', '-')} must be ≥ {low}" for name, low in (
        ("nodes", 1), ("pods", 2), ("concurrency", 1), ("api_latency_ms", 0))
        if getattr(args, name) < low]
    try:
        pool = ipaddress.ip_network(args.pool)
        if pool.num_addresses - 2 < args.nodes * args.pods:
            bad.append(f"--pool {pool} has fewer than {args.nodes * args.pods} addresses")
    except ValueError as exc:
        bad.append(f"--pool: {exc}")
    if bad:
        print(f"netctl bench cluster: {'; '.join(bad)}", file=sys.stderr)
        return 2
    why = harness.preflight(())
    if why:
        print(f"netctl bench cluster: {why}", file=sys.stderr)
        return 2
    try:
        if args.api_server == "real" and (reason := real_unavailable()):
            raise ValueError(f"--api-server real: {reason}")
        bench = ClusterBench(args.nodes, args.pods, args.api_latency_ms, args.pool,
                             args.concurrency, args.backend, args.api_server)
    except ValueError as exc:
        print(f"netctl bench cluster: {exc}", file=sys.stderr)
        return 2
    return drive(bench, "cluster", bench.measure, render_cluster, args.json)
