"""``netctl bench query``: the latency of a cluster-wide ``kubectl netctl journal --ip ADDR
--at T`` over ``--nodes`` simulated nodes, beside one node's local ``netctl journal``.

The cluster: :class:`~netctl_kit.kubefake.FakeKube` (``--api-latency-ms`` added to each
request) with the ``ipamblocks`` CRD, a reader's token and its ``nodes/netctl-journal``
grant, and ``--nodes`` real ``netctl daemon`` processes in Kubernetes mode (cluster IPAM),
each serving ``query-addr`` on a loopback port that its DaemonSet pod's
``netctl.dev/query-addr`` annotation names. Each node ADDs ``--pods`` containers through
``netctl-ipam`` (a pod named in CNI_ARGS each), so that every journal holds history; the
address asked for is node 1's first, at a time it was held.

Timed, ``--queries`` times each:

- **local**: :func:`netctl.reconcile.readonly.journal` on node 1's state dir, in this process: what
  ``netctl journal --ip --at`` does on the node (the baseline: no network, no review);
- **cluster**: :func:`netctl.kube.clusterquery.query` in this process, as ``kubectl netctl``
  does once its modules are loaded: the kubeconfig loaded, the daemons' pods and the
  IPAMBlocks listed, every node asked at once, the answers merged; the reviews are kept a
  minute by each daemon, so after the first query none is made (the first is counted);
- **cli**: ``kubectl-netctl journal --ip --at --json`` as a process, ``--cli-runs`` times:
  the same plus Python's start-up and imports.

Every answer must name the holder and every node must answer; else exit 1. The daemons and
the temporary dir are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from netctl_kit import harness
from netctl_kit.bench.common import progress, summary_ms
from netctl_kit.kubefake import IPAMBLOCKS, FakeKube, node, pod
from netctl_kit.kubefake.real import free_port

POOL = "10.187.0.0/16"
TOKEN = "bench-reader-token"


def _daemon(root: Path, i: int, kubeconfig: Path, kube: FakeKube) -> harness.Daemon:
    name, port = f"node-{i}", free_port()
    d = harness.Daemon(root / name, f"nbq{i}", [harness.SYSTEM_CNI], {
        "kubeconfig": str(kubeconfig), "node-name": name, "ipam-backend": "kubernetes",
        "reconcile-interval": 0, "query-addr": f"127.0.0.1:{port}", "log-level": "info"})
    (root / name).mkdir()
    d.install_plugin()
    kube.create("nodes", node(name))
    obj = pod(f"netctl-{name}", "kube-system", node=name,
              labels={"app.kubernetes.io/name": "netctl"},
              annotations={"netctl.dev/query-addr": f"127.0.0.1:{port}"})
    obj["status"] = {"phase": "Running", "podIP": "127.0.0.1"}
    kube.create("pods", obj)
    return d


def _ready(d: harness.Daemon) -> bool:
    return bool(((d.status().get("kubernetes") or {}).get("ipam") or {}).get("ready"))


def _add(d: harness.Daemon, container: str, who: str) -> str:
    conf = {"cniVersion": "1.0.0", "name": "bench", "type": "bridge", "ipam": {
        "type": "netctl-ipam", "socket": d.socket, "range": POOL}}
    res = harness.exec_plugin(d.ipam_plugin, "ADD", conf, container=container,
                              args=harness.cni_args(who), timeout=60)
    if res.rc != 0 or res.out is None:
        raise harness.HarnessError(f"ADD {container}: {res.describe()}")
    return str(res.out["ips"][0]["address"]).split("/")[0]


def _holders(doc: dict[str, Any]) -> list[str]:
    return [str(a["pod"]) for a in doc["allocations"]]


def run_query(args: argparse.Namespace) -> int:
    from netctl.journal.query import Filters
    from netctl.kube import clusterquery
    from netctl.reconcile import readonly

    root = Path(tempfile.mkdtemp(prefix="netctl-bench-query-"))
    daemons: list[harness.Daemon] = []
    failures: list[str] = []
    try:
        with FakeKube(crds=[IPAMBLOCKS], latency_ms=args.api_latency_ms) as kube:
            kube.add_token(TOKEN, "reader", ["platform"])
            kube.grant("group:platform", "get", "nodes/netctl-journal")
            config = kube.kubeconfig(root / "kubeconfig")
            reader = kube.kubeconfig(root / "reader", token=TOKEN)
            progress(f"starting {args.nodes} daemons")
            daemons = [_daemon(root, i + 1, config, kube) for i in range(args.nodes)]
            for d in daemons:
                d.start()
            for d in daemons:
                harness.wait_for(partial(_ready, d), 30, "cluster IPAM ready")
            progress(f"{args.pods} ADDs per node")
            first = ""
            for i, d in enumerate(daemons):
                for j in range(args.pods):
                    got = _add(d, f"n{i}-c{j}", f"bench/pod-{i}-{j}")
                    first = first or got
            at = time.time()
            want = ["bench/pod-0-0"]
            f = Filters(ip=first, at=at)
            path = f"{clusterquery.PATHS['journal']}?{clusterquery.journal_query(f)}"
            opts = clusterquery.Options(str(reader), timeout=10)

            progress(f"{args.queries} local queries, {args.queries} cluster queries")
            local, cluster = [], []
            for _ in range(args.queries):
                began = time.perf_counter()
                doc = readonly.journal(daemons[0].state_dir, f)
                local.append(time.perf_counter() - began)
                if _holders(doc) != want:
                    failures.append(f"local: {_holders(doc)}")
            reviews = kube.count("create", "tokenreviews")
            for _ in range(args.queries):
                began = time.perf_counter()
                doc = clusterquery.query(opts, "journal", path, ip=first, at=at)
                cluster.append(time.perf_counter() - began)
                if _holders(doc) != want or doc["unanswered"]:
                    failures.append(f"cluster: {_holders(doc)} {doc['unanswered']}")
            reviews = kube.count("create", "tokenreviews") - reviews
            cli = []
            for _ in range(args.cli_runs):
                began = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-c", "import sys; from netctl.commands.cli import "
                     "kubectl_main; sys.exit(kubectl_main())", "journal", "--ip", first,
                     "--at", str(at), "--kubeconfig", str(reader), "--json"],
                    capture_output=True, text=True, timeout=60)
                cli.append(time.perf_counter() - began)
                if proc.returncode != 0 or _holders(json.loads(proc.stdout)) != want:
                    failures.append(f"cli: exit {proc.returncode} {proc.stderr[-300:]}")
    finally:
        for d in daemons:
            d.shut_down()
        shutil.rmtree(root, ignore_errors=True)
    report = {"nodes": args.nodes, "pods_per_node": args.pods,
              "api_latency_ms": args.api_latency_ms, "queries": args.queries,
              "local_ms": summary_ms(local), "cluster_ms": summary_ms(cluster),
              "cli_ms": summary_ms(cli), "token_reviews": reviews, "failures": failures,
              "root": str(root), "daemon_pids": [d.pid for d in daemons]}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"journal --ip --at over {args.nodes} nodes ({args.pods} pods each, API latency "
              f"{args.api_latency_ms:g} ms), {args.queries} queries:")
        for key, what in (("local_ms", "local: netctl journal on one node"),
                          ("cluster_ms", "cluster: kubectl netctl, every node asked"),
                          ("cli_ms", f"cli: kubectl-netctl as a process ({args.cli_runs})")):
            s = report[key]
            print(f"  {what:48} p50 {s['p50']:8.2f} ms  p99 {s['p99']:8.2f} ms  "
                  f"max {s['max']:8.2f} ms")
        print(f"  TokenReviews made during the cluster queries: {reviews} (kept a minute)")
        for line in failures:
            print(f"  FAILED: {line}")
    return 1 if failures else 0
