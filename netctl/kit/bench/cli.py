"""The command line of ``netctl bench``: its parsers, added to ``netctl``'s through the
``netctl.commands`` entry point (pyproject). Small on purpose: ``netctl`` loads it at every
start; the benches themselves are imported when one runs (:func:`run`)."""

from __future__ import annotations

import argparse

from netctl.commands.cli import Commands


def run(args: argparse.Namespace) -> int:
    from netctl_kit import bench

    return bench.main(args)


def add_parser(sub: Commands) -> None:
    """``netctl bench BENCH``: on one node, with an API server, and with podman."""
    p = sub.add_parser("bench", help="benchmarks on real namespaces and real plugins")
    bsub = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    _add_node_benches(bsub)
    _add_kube_benches(bsub)
    b = bsub.add_parser("podman", help="podman run --rm on a netctl network vs podman's own "
                        "bridge network (Debian's podman, CNI backend)")
    b.add_argument("--runs", type=int, default=10, help="runs per side (default 10)")
    b.add_argument("--json", action="store_true")
    p.set_defaults(fn=run)


def _add_node_benches(bsub: Commands) -> None:
    """The benches of one node's daemon: churn, ipam, journal, crash, events."""
    b = bsub.add_parser("churn", help="pod ADD/DEL churn: netctl vs direct sequential exec")
    b.add_argument("--pods", type=int, default=100)
    b.add_argument("--concurrency", type=int, default=8)
    b.add_argument("--networks", type=int, default=1)
    b.add_argument("--ipam", choices=["netctl-ipam", "host-local"], default="host-local")
    b.add_argument("--plugin-binary", metavar="FILE", help="the thin plugin to install and "
                   "exec (netctl install-cni --plugin-binary; default: the build), e.g. "
                   "another version's to compare")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("ipam", help="netctl-ipam as a plain IPAM plugin vs host-local")
    b.add_argument("--allocations", type=int, default=500)
    b.add_argument("--concurrency", type=int, default=8)
    b.add_argument("--fill", type=int, default=20000, metavar="N",
                   help="also fill a pool with N allocations on the engine's allocator path "
                   "(no exec) and compare the first and last tenth; 0 skips it")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("journal", help="latency of the journal's read paths on N rows")
    b.add_argument("--rows", type=int, default=100000)
    b.add_argument("--lifecycles", type=int, default=0,
                   help="instead: N pod lifecycles over simulated time with retention on; "
                   "the journal's size over time")
    b.add_argument("--retention", default="7d", help="journal-retention for --lifecycles")
    b.add_argument("--allocation-retention", default="",
                   help="allocation-retention for --lifecycles (default: twice --retention)")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("crash", help="SIGKILL the daemon mid-churn: replay, reconcile, "
                        "nothing left")
    b.add_argument("--iterations", type=int, default=10)
    b.add_argument("--pods", type=int, default=30, help="pods churned per iteration")
    b.add_argument("--seed", type=int, default=None, help="the random choices' seed "
                   "(kill moments, faults, GCs, reboots); printed, random by default")
    b.add_argument("--reboot-pods", type=int, default=0, metavar="N",
                   help="after the iterations, time the start-up after a node reboot with "
                   "N attachments whose netns vanished (0: skip)")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("events", help="netns deleted without a DEL → address released, on "
                        "kernel events vs the periodic round")
    b.add_argument("--rounds", type=int, default=10)
    b.add_argument("--interval", type=float, default=60.0, metavar="S",
                   help="the periodic round's interval to compare with (reconcile-interval)")
    b.add_argument("--json", action="store_true")


def _add_kube_benches(bsub: Commands) -> None:
    """The benches against an API server: one node's Kubernetes mode, a cluster of nodes."""
    b = bsub.add_parser("kube", help="Kubernetes mode against the fake API server: API "
                        "requests per ADD/DEL, ADD latency vs standalone, memory")
    b.add_argument("--pods", type=int, default=1000, help="pods of the node in the fake, "
                   "cached by the daemon (default 1000)")
    b.add_argument("--nads", type=int, default=100, help="NADs in the fake (default 100)")
    b.add_argument("--churn", type=int, default=200, metavar="N", help="pods of the cache "
                   "ADDed and DELed per side, kube and standalone (default 200)")
    b.add_argument("--misses", type=int, default=20, metavar="N", help="pods created with "
                   "their ADD, with the watch healthy, then lagging (default 20)")
    b.add_argument("--concurrency", type=int, default=8)
    b.add_argument("--burst", type=int, default=100, metavar="N",
                   help="ADDs at the same moment, for the peak memory (default 100)")
    b.add_argument("--api-latency", type=float, default=0.0, metavar="MS",
                   help="added to every API request by the fake (default 0)")
    b.add_argument("--standing", type=int, default=0, metavar="N", help="pods ADDed on "
                   "each side before the churn and kept until after it (default 0)")
    b.add_argument("--networks", type=int, default=1, metavar="N",
                   help="networks each pod selects by its annotation, beside the cluster "
                   "network (default 1)")
    b.add_argument("--delete-pods", action="store_true", help="each kube churn round's ADDs "
                   "run while the last round's DELed pods are deleted through the API "
                   "(pod-deleted-grace 0)")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("hotplug", help="Kubernetes mode's hot-plug against the fake API "
                        "server: a running pod's networks annotation changed N times, the "
                        "latency to the interface and to network-status, API requests per "
                        "hot-plug")
    b.add_argument("--changes", type=int, default=100, help="changes, alternately adding and "
                   "removing one network (default 100)")
    b.add_argument("--api-latency", type=float, default=0.0, metavar="MS",
                   help="added to every API request by the fake (default 0)")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("devices", help="Kubernetes mode against the fake API server: the ADD "
                        "of a device network (the kubelet's PodResources stand-in, devmove) "
                        "beside a veth network's, and the gRPC client's RSS")
    b.add_argument("--pods", type=int, default=30, help="pods of each kind, one at a time "
                   "(default 30)")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("sticky", help="cluster IPAM, three nodes: a pod with a sticky "
                        "address recreated on the same node, another and a third; ms until "
                        "its address is back, beside a new pod's first ADD")
    b.add_argument("--runs", type=int, default=20, help="pods, each recreated three times "
                   "(default 20)")
    b.add_argument("--pool", default="10.185.96.0/22", help="the range (default "
                   "10.185.96.0/22)")
    b.add_argument("--api-latency-ms", type=float, default=0.0, metavar="MS",
                   help="added to every API request by the fake (default 0)")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("cluster", help="N nodes sharing one pool through the fake API server: "
                        "API requests per pod, allocation latency, duplicates; netctl's cluster "
                        "IPAM vs whereabouts' protocol")
    b.add_argument("--nodes", type=int, default=8, help="netctl daemons, one per simulated "
                   "node (default 8)")
    b.add_argument("--pods", type=int, default=250, help="ADDs per node; then half as many "
                   "DEL + ADD (default 250)")
    b.add_argument("--api-latency-ms", "--api-latency", dest="api_latency_ms", type=float,
                   default=5.0, metavar="MS", help="added to every API request by the fake "
                   "(default 5)")
    b.add_argument("--pool", default="10.96.0.0/16", help="the range every node shares "
                   "(default 10.96.0.0/16)")
    b.add_argument("--api-server", choices=["fake", "real"], default="fake",
                   help="the project's fake API server (default), or a real kube-apiserver "
                   "and etcd started for the run (/opt/netctl-kube, NETCTL_KUBE_APISERVER, "
                   "NETCTL_ETCD; docs/testing.md, \"Against a real API server\"); "
                   "--api-latency-ms applies to the fake")
    b.add_argument("--concurrency", type=int, default=4, help="allocations in flight per "
                   "node (default 4)")
    b.add_argument("--backend", choices=["kubernetes", "sqlite"], default="kubernetes",
                   help="the daemons' ipam-backend (default kubernetes: blocks per node; "
                   "sqlite: pools per node, duplicates across nodes)")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("node-density", help="N pods at once on a real cluster of one or "
                        "more nodes (RealCluster): create → Ready with the primary CNI alone, "
                        "then with netctl at 0, 1, 3 NADs; the daemons' cgroup CPU, throttling "
                        "and memory, their ADD time, their API requests and IPAM writes per "
                        "pod; nothing held after")
    b.add_argument("--pods", type=int, default=100, metavar="N", help="pods created at once "
                   "per run (default 100; kubelet's maxPods is raised to N + 10)")
    b.add_argument("--nads", default="0,1,3", metavar="K,K,…", help="the netctl runs: NADs "
                   "each pod selects (default 0,1,3); the floor runs first, before netctl")
    b.add_argument("--cpu-limit", metavar="CPU", default=None, help="the daemon container's "
                   "CPU request and limit patched into the DaemonSet before the runs (e.g. "
                   "500m, the former manifest's, or 1); 0: no CPU limit (the request kept); "
                   "default: the manifest's (500m requested, no limit)")
    b.add_argument("--nodes", type=int, default=1, metavar="N", help="real nodes in the "
                   "cluster, each in its own network namespace (default 1; at most 5); the "
                   "pods go where the scheduler puts them")
    b.add_argument("--ipam-backend", choices=("sqlite", "kubernetes"), default="sqlite",
                   help="netctl's ipam-backend (default sqlite: pools per node; kubernetes: "
                   "the NADs' pools shared by the nodes, blocks claimed through the API)")
    b.add_argument("--idle", type=float, default=30.0, metavar="SECONDS", help="how long "
                   "the daemons are left idle before the runs, their probes' CPU measured "
                   "(default 30)")
    b.add_argument("--kube", default="newest", metavar="VERSION", help="the Kubernetes "
                   "version of the nodes, by prefix (v1.24, v1.36.2) among those built "
                   "(NETCTL_KUBE_ROOT, default /opt/netctl-kube; docs/testing.md); default: "
                   "the newest")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("scale", help="N simulated nodes, each running netctl's cluster IPAM "
                        "and informers, on the real API server: per-node watch events and "
                        "requests, IPAM writes per pod, duplicates, the relist after a restart")
    b.add_argument("--nodes", default="100,300", metavar="N[,N…]",
                   help="cluster sizes, run one after the other (default 100,300)")
    b.add_argument("--pods", type=int, default=4, help="pods each node ADDs first (default 4)")
    b.add_argument("--status-every", type=float, default=300.0, metavar="S",
                   help="each Node's status is updated every S seconds (default 300)")
    b.add_argument("--measure", type=float, default=60.0, metavar="S",
                   help="the measured window (default 60)")
    b.add_argument("--churn-every", type=float, default=30.0, metavar="S",
                   help="each node replaces one pod every S seconds in the window (default 30)")
    b.add_argument("--block-check", type=float, default=10.0, metavar="S",
                   help="the cluster IPAM's maintenance round (block-check, default 10)")
    b.add_argument("--gone-grace", type=float, default=10.0, metavar="S",
                   help="the simulated nodes' node-gone-grace: a stopped node's blocks are "
                   "taken over after it (default 10)")
    b.add_argument("--no-restart", action="store_true",
                   help="skip the API server restart (the relist storm)")
    b.add_argument("--json", action="store_true")
    b = bsub.add_parser("query", help="a cluster-wide kubectl netctl journal --ip --at over "
                        "N nodes' query endpoints vs one node's local netctl journal")
    b.add_argument("--nodes", type=int, default=4, help="netctl daemons (default 4)")
    b.add_argument("--pods", type=int, default=50, help="ADDs per node (default 50)")
    b.add_argument("--queries", type=int, default=50, help="queries per side (default 50)")
    b.add_argument("--cli-runs", type=int, default=5, help="kubectl-netctl processes run "
                   "(default 5)")
    b.add_argument("--api-latency-ms", type=float, default=5.0, metavar="MS",
                   help="added to every API request by the fake (default 5)")
    b.add_argument("--json", action="store_true")
