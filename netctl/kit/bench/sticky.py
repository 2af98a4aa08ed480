"""``netctl bench sticky``: how long a pod with a sticky address (``sticky: true``), deleted
and recreated, waits for its address back — on the same node, on another node, and on a
third one — beside the first ADD of a new pod, with the cluster IPAM.

Three ``netctl daemon`` processes in Kubernetes mode with ``ipam-backend: kubernetes``
(:meth:`~netctl_kit.bench.cluster.ClusterBench.start_daemons`: node-1…3, one fake API
server with the ``ipamblocks`` CRD). An allocation is ``netctl-ipam`` exec'd as a plain IPAM
plugin with ``{"range": POOL, "sticky": true, "sticky_for": "1h"}`` and the node's socket;
the pod's identity is its namespace and name (``K8S_POD_NAMESPACE``/``K8S_POD_NAME``, as a
StatefulSet's pod keeps them), each incarnation a new container and UID.

Each of ``--runs`` pods (``apps/db-N``, a new identity each):

1. **first ADD** on node-1: an ordinary allocation (the baseline), then its DEL (node-1
   keeps the address reserved for the identity and publishes the reservation on its block);
2. **same node**: ADD again on node-1 (its journal hands the address back), then DEL;
3. **another node**: once node-2's block cache has the published reservation, ADD on
   node-2: it borrows the address from node-1 naming the identity; then DEL;
4. **a third node**: once node-3's cache has node-2's reservation, ADD on node-3: the
   borrow object is handed over from node-2; then DEL.

Each ADD is timed from exec to exit (the waits for the caches are not); every recreated
pod must get the first address, or the run fails. Reported: p50 and max of each kind, and
each kind's p50 over the first ADD's. Everything is removed at the end, also after Ctrl-C.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from netctl_kit import harness
from netctl_kit.bench import render
from netctl_kit.bench.cluster import ClusterBench
from netctl_kit.bench.common import DELEGATE_VERSION, Measured, drive, progress, summary_ms
from netctl_kit.kubefake import IPAMBLOCKS, IPPOOLS, FakeKube
from rich.console import RenderableType

NAMESPACE = "apps"
KINDS = ("first", "same_node", "other_node", "third_node")
LABELS = {"first": "first ADD (a new pod: the baseline)",
          "same_node": "recreated on the same node",
          "other_node": "recreated on another node (borrowed)",
          "third_node": "recreated on a third node (handed over)"}
CACHE_WAIT = 30.0  # seconds for a node's block cache to have another's reservation


class StickyBench(ClusterBench):
    def __init__(self, runs: int, pool: str, latency_ms: float) -> None:
        super().__init__(3, runs, latency_ms, pool, 1, "kubernetes")
        self.runs = runs
        self.times: dict[str, list[float]] = {k: [] for k in KINDS}
        self.confs: list[bytes] = []

    def exec(self, node: int, command: str, pod: str, container: str) -> harness.CNIResult:
        res = harness.exec_plugin(
            self.daemon.ipam_plugin, command, self.confs[node], container=container,
            netns=self.netns, args=harness.cni_args(f"{NAMESPACE}/{pod}", "", "IgnoreUnknown=1",
                                                   f"K8S_POD_UID={container}"))
        if res.rc != 0:
            raise RuntimeError(f"netctl-ipam {command} of {pod} on node-{node + 1} "
                               f"{res.describe()}")
        return res

    def timed_add(self, kind: str, node: int, pod: str, container: str) -> str:
        t0 = time.perf_counter()
        res = self.exec(node, "ADD", pod, container)
        self.times[kind].append(time.perf_counter() - t0)
        ips = (res.out or {}).get("ips") or [{}]
        return str(ipaddress.ip_interface(str(ips[0].get("address", ""))).ip)

    def wait_published(self, kube: FakeKube, node: int, identity: str) -> None:
        """Until the fake's blocks of the other nodes hold a reservation for ``identity``
        (``node`` reads them when its ADD looks for the identity's address)."""
        name = f"node-{node + 1}"

        def published() -> bool:
            return f"pod:{NAMESPACE}/{identity}" in [
                str(e.get("identity")) for b in kube.list("ipamblocks")
                if b["spec"]["node"] != name for e in b["spec"].get("reserved") or []]
        harness.wait_for(published, CACHE_WAIT, f"the reservation of {identity} published "
                         f"on another node's block than {name}'s")

    def one(self, kube: FakeKube, i: int) -> None:
        pod = f"db-{i}"
        first = self.timed_add("first", 0, pod, f"{pod}-a")
        self.exec(0, "DEL", pod, f"{pod}-a")
        steps: list[tuple[str, int, Callable[[], None]]] = [
            ("same_node", 0, lambda: None),
            ("other_node", 1, lambda: self.wait_published(kube, 1, pod)),
            ("third_node", 2, lambda: self.wait_published(kube, 2, pod))]
        for kind, node, before in steps:
            before()
            container = f"{pod}-{kind}"
            got = self.timed_add(kind, node, pod, container)
            if got != first:
                raise RuntimeError(f"{NAMESPACE}/{pod} recreated ({kind.replace('_', ' ')}) "
                                   f"got {got}, not its sticky {first}")
            self.exec(node, "DEL", pod, container)

    def measure(self) -> Measured:
        self.daemon.install_plugin()  # one plugin; each node's config names its socket
        kube = FakeKube(crds=[IPAMBLOCKS, IPPOOLS], latency_ms=self.latency_ms,
                        bookmark_interval=0.5)
        self.fakes.append(kube)
        kube.open()
        daemons = self.start_daemons(kube, 3, "sticky")
        self.netns = harness.netns_add(f"{self.prefix}-s")
        self.confs = [json.dumps({
            "cniVersion": DELEGATE_VERSION, "name": "sticky", "type": "bridge",
            "ipam": {"type": "netctl-ipam", "range": str(self.pool), "socket": d.socket,
                     "sticky": True, "sticky_for": "1h"}}).encode() for d in daemons]
        progress(f"{self.runs} pods, each deleted and recreated on node-1, node-2, node-3")
        with render.steps("pods", self.runs) as step:
            for i in range(self.runs):
                if self.stop.is_set():
                    break
                self.one(kube, i)
                step("")
        stopped = self.stop_daemons(daemons)
        base = summary_ms(self.times["first"])["p50"]
        parts: dict[str, Any] = {"add_ms": {k: summary_ms(v) for k, v in self.times.items()}}
        parts["ratio_p50"] = {k: round(parts["add_ms"][k]["p50"] / base, 2) if base else None
                              for k in KINDS}
        parts["daemons"] = stopped
        return Measured(params={"runs": self.runs, "pool": str(self.pool), "nodes": 3,
                                "api_latency_ms": self.latency_ms},
                        parts=parts, problems=self.problems)


def render_sticky(report: dict[str, Any]) -> list[RenderableType]:
    p, add = report["params"], report["add_ms"]
    rows = [(LABELS[k], str(add[k]["n"]), render.num(add[k]["p50"], "{:.1f}"),
             render.num(add[k]["max"], "{:.1f}"),
             render.num(report["ratio_p50"][k], "{:.2f}x")) for k in KINDS]
    return [
        f"netctl bench sticky: {p['runs']} pods with a sticky address in {p['pool']}, three "
        f"nodes with the cluster IPAM (+{p['api_latency_ms']:g} ms per API request), "
        f"{p['cpus']} CPUs, prefix {report['prefix']}",
        render.load_line(p), "",
        render.table(("netctl-ipam ADD (ms, exec to exit)", "n", "p50", "max", "p50 / first"),
                     rows),
        "", *render.verdict(report["problems"], "every recreated pod got its address back")]


def run_sticky(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.api_latency_ms < 0:
        print("netctl bench sticky: --runs must be ≥ 1, --api-latency-ms ≥ 0", file=sys.stderr)
        return 2
    bench = StickyBench(args.runs, args.pool, args.api_latency_ms)
    return drive(bench, "sticky", bench.measure, render_sticky, args.json)
