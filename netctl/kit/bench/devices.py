"""``netctl bench devices``: what a device network costs beside a veth network, and what the
gRPC client costs the daemon.

The cluster is :class:`netctl_kit.kubefake.FakeKube` with three NADs: the cluster network
and ``veth`` (bridges, netctl-ipam), and ``vf`` — a device network
(``k8s.v1.cni.cncf.io/resourceName``) whose delegate is ``tests/plugins/devmove``, the
SR-IOV-like test delegate that moves the device named by ``deviceID`` (a host veth standing
in for a VF) into the pod. The kubelet's PodResources API is the kit's stand-in on a real
gRPC socket (:class:`netctl_kit.devices.PodResourcesServer`), answering one device per pod.
A Kubernetes-mode daemon (every setting its default) runs against it.

``--pods`` pods select ``veth``, one at a time (ADD, then the next); then ``--pods`` pods
select ``vf``. For each side: the ADD's time through the thin plugin, the extra network's
delegate time (its steps in the journal), and the ADD's time outside its slowest chain (the
cluster network and the extra one run concurrently): what netctl itself adds — for the
device side that includes the PodResources call and the device-info copy. The daemon's RSS
after the veth pods (the gRPC client not loaded: no network named a resource yet) and after
the device pods (loaded) gives the client's cost. Every pod is DELeted at the end; every
device must be back on the host and nothing left, or the run exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from netctl_kit import harness, journaldb
from netctl_kit.bench import render
from netctl_kit.bench.common import (
    POD_NAMESPACE,
    Bench,
    Measured,
    drive,
    pick_subnets,
    progress,
    summary_ms,
)
from netctl_kit.bench.kube import CLUSTER_NAMESPACE
from netctl_kit.devices import PodResourcesServer, device_veths, remove_device_veths
from netctl_kit.kubefake import FakeKube, nad, node, pod
from rich.console import RenderableType

from netctl.kubeapi.objects import NETWORKS

NODE = "bench-node"
RESOURCE = "netctl.bench/vf"
TEST_PLUGINS = Path(__file__).resolve().parents[3] / "tests" / "plugins"  # devmove


class DevicesBench(Bench):
    def __init__(self, pods: int) -> None:
        super().__init__(1)
        self.pods = pods
        self.kube = FakeKube()
        self.kubelet = PodResourcesServer(self.root / "pod-resources.sock")
        self.problems: list[str] = []
        self.vfs: list[str] = []
        self.sandboxes: list[tuple[str, str]] = []  # (pod, netns) of every ADD made

    def setup(self) -> None:
        self.kube.open()
        self.kube.create("nodes", node(NODE))
        cluster_net, veth_net, vf_net = pick_subnets(3, self.pods + 8)
        cluster = self.add_network(cluster_net, netctl_ipam=True)
        veth = self.add_network(veth_net, netctl_ipam=True)
        self.kube.create("network-attachment-definitions",
                         nad(cluster.name, CLUSTER_NAMESPACE, cluster.conf))
        self.kube.create("network-attachment-definitions", nad("veth", POD_NAMESPACE,
                                                               veth.conf))
        self.kube.create("network-attachment-definitions", nad("vf", POD_NAMESPACE, {
            "cniVersion": "1.0.0", "name": "vf", "plugins": [{
                "type": "devmove", "capabilities": {"deviceID": True},
                "ipam": {"type": "netctl-ipam", "range": str(vf_net)}}]},
            annotations={"k8s.v1.cni.cncf.io/resourceName": RESOURCE}))
        self.vfs = device_veths(f"{self.prefix}v", self.pods)
        self.kubelet.__enter__()
        self.daemon.bin_dirs = [str(TEST_PLUGINS), harness.SYSTEM_CNI]
        self.daemon.settings.update({
            "kubeconfig": str(self.kube.kubeconfig(self.root / "kubeconfig")),
            "node-name": NODE, "pod-resources-socket": str(self.kubelet.socket)})
        for side in ("veth", "vf"):
            for i in range(self.pods):
                self.kube.create("pods", pod(f"{side}-{i}", POD_NAMESPACE, node=NODE,
                                             annotations={NETWORKS: side}))
                if side == "vf":
                    self.kubelet.pods[(POD_NAMESPACE, f"vf-{i}")] = {RESOURCE: [self.vfs[i]]}
        self.daemon.install_plugin()
        self.daemon.start()
        self.kube.wait_watches(3)

        def cached() -> bool:
            return bool(self.daemon.status()["kubernetes"]["pods"]["objects"] == 2 * self.pods)
        harness.wait_for(cached, 60, "the daemon's pod cache")

    def cni(self, verb: str, name: str, netns: str) -> harness.CNIResult:
        uid = (self.kube.get("pods", POD_NAMESPACE, name) or {})["metadata"]["uid"]
        return self.daemon.cni(verb, name, netns, json.loads(self.netctl_conf()),
                               pod=f"{POD_NAMESPACE}/{name}",
                               args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))

    def side(self, name: str) -> dict[str, Any]:
        """``--pods`` ADDs of pods selecting network ``name``, one at a time."""
        adds: list[float] = []
        with render.steps(f"{name} pods", self.pods) as step:
            for i in range(self.pods):
                if self.stop.is_set():
                    break
                ns = f"{self.prefix}-{name}-{i}"
                harness.netns_add(ns)
                self.sandboxes.append((f"{name}-{i}", ns))
                t0 = time.perf_counter()
                res = self.cni("ADD", f"{name}-{i}", ns)
                adds.append(time.perf_counter() - t0)
                if res.rc != 0:
                    self.problems.append(f"ADD of {name}-{i} {res.describe()}")
                step("")
        chains = self.chain_times(name)
        return {"add_ms": summary_ms(adds),
                "delegate_ms": summary_ms(chains["extra"]),
                "outside_chains_ms": summary_ms([a - c for a, c in zip(
                    adds, chains["slowest"], strict=False)])}

    def chain_times(self, network: str) -> dict[str, list[float]]:
        """From the journal, per ADD of pods selecting ``network``: the extra network's
        delegate seconds, and the slowest chain's (the chains run concurrently)."""
        extra: list[float] = []
        slowest: list[float] = []
        with self.daemon.read_only() as conn:
            for per in journaldb.add_chain_seconds(conn, f"{network}-"):
                extra.append(sum(t for net, t in per.items() if net.endswith(f"/{network}")))
                slowest.append(max(per.values(), default=0.0))
        return {"extra": extra, "slowest": slowest}

    def measure(self) -> Measured:
        self.setup()
        progress(f"{self.pods} pods with a bridge (veth) network, then {self.pods} with a "
                 "device network")
        veth = self.side("veth")
        rss_before = self.daemon.rss_kib()
        calls_before = self.kubelet.calls
        vf = self.side("vf")
        rss_after = self.daemon.rss_kib()
        for name, ns in self.sandboxes:
            res = self.cni("DEL", name, ns)
            if res.rc != 0:
                self.problems.append(f"DEL of {name} {res.describe()}")
            harness.netns_del(ns)
        self.sandboxes = []
        gone = [d for d in self.vfs if not Path(f"/sys/class/net/{d}").exists()]
        if gone:
            self.problems.append(f"devices not back on the host: {gone}")
        self.problems += harness.describe_leftovers(harness.leftovers(
            self.daemon, bridges=[n.bridge for n in self.nets], netns_prefix=self.prefix))
        rss, code = self.finish_daemon()
        return Measured(
            params={"pods": self.pods, "node": NODE},
            parts={"veth": veth, "vf": vf, "rss_kib": {
                "before_devices": rss_before, "after_devices": rss_after,
                "grpc_client": rss_after - rss_before},
                "pod_resources_calls": self.kubelet.calls - calls_before},
            peak_rss_kib=rss, exit_code=code, problems=self.problems)

    def cleanup(self) -> list[str]:
        for _, ns in self.sandboxes:
            harness.netns_del(ns)
        problems = super().cleanup()
        self.kubelet.close()
        left = remove_device_veths(f"{self.prefix}v")
        if left:
            problems.append(f"host veths left: {left}")
        self.kube.close()
        return problems


def render_devices(report: dict[str, Any]) -> list[RenderableType]:
    p, veth, vf, rss = report["params"], report["veth"], report["vf"], report["rss_kib"]

    def row(label: str, key: str, stat: str) -> render.Row:
        a, b = vf[key][stat], veth[key][stat]
        return (label, render.num(a), render.num(b), render.num(render.ratio(a, b)))

    rows: Sequence[render.Row] = [
        row("ADD p50 (ms)", "add_ms", "p50"), row("ADD p99 (ms)", "add_ms", "p99"),
        row("the extra network's delegate p50 (ms)", "delegate_ms", "p50"),
        row("outside the slowest chain p50 (ms)", "outside_chains_ms", "p50"),
        row("outside the slowest chain p99 (ms)", "outside_chains_ms", "p99")]
    return [
        f"netctl bench devices: {p['pods']} pods with a device network, {p['pods']} with a "
        f"bridge (veth) network, one at a time, {p['cpus']} CPUs, prefix {report['prefix']}",
        render.load_line(p), "",
        render.table(("", "device network", "veth network", "ratio"), rows,
                     "devmove (a Python script moving a host veth) vs the bridge plugin; "
                     "outside the slowest chain: what netctl adds, the PodResources call and "
                     "the device-info copy included"),
        "",
        f"daemon RSS: {rss['before_devices'] / 1024:.1f} MiB before any device network, "
        f"{rss['after_devices'] / 1024:.1f} MiB after: the gRPC client "
        f"{rss['grpc_client'] / 1024:+.1f} MiB; PodResources calls: "
        f"{report['pod_resources_calls']}",
        "", *render.verdict(report["problems"], "every device back on the host, nothing "
                                                "left behind")]


def run_devices(args: argparse.Namespace) -> int:
    if args.pods < 1 or args.pods > 200:
        print("netctl bench devices: --pods must be 1 to 200", file=sys.stderr)
        return 2
    why = harness.preflight(("bridge", "static"))
    if why:
        print(f"netctl bench devices: {why}", file=sys.stderr)
        return 2
    if not (TEST_PLUGINS / "devmove").exists():
        print(f"netctl bench devices: no {TEST_PLUGINS / 'devmove'} (run it from a checkout)",
              file=sys.stderr)
        return 2
    bench = DevicesBench(args.pods)
    return drive(bench, "devices", bench.measure, render_devices, args.json)
