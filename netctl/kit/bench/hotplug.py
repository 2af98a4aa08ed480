"""``netctl bench hotplug``: how fast a running pod's networks follow its
``k8s.v1.cni.cncf.io/networks`` annotation in Kubernetes mode, and what each change costs
in API requests and daemon CPU.

One Kubernetes-mode daemon against :class:`netctl.kit.kubefake.FakeKube`; the cluster
network (a bridge with netctl-ipam, its NAD in ``kube-system``) and one more bridge
network, ``hot`` (its NAD in the pods' namespace, ``bench``). One pod of the node, ADDed
by the thin plugin on the cluster network alone (its annotation names nothing yet). Then
``--changes`` changes of the annotation, written to the fake one after another, each when
the last one is done: the odd ones name ``hot`` (the daemon plugs ``net1``), the even ones
remove the annotation (it unplugs ``net1``). For each change, from the moment the fake has
stored it (the watch delivery is inside the figure):

- **interface**: until ``net1`` is up in the pod's netns (plug), or gone from it (unplug),
  seen by a thread that entered the netns and reads the link's flags every
  :data:`POLL` seconds;
- **network-status**: until the pod's network-status in the fake names ``hot`` on
  ``net1`` with an address of its subnet (plug), or no longer names it (unplug).

The fake's request counts around the changes (the bench's own writes to it are
in-process, not counted) give the requests per change; the daemon's CPU (``/proc``)
around them, the CPU per change. A change that does not land within :data:`TIMEOUT`
seconds is a failure and ends the run; so is anything left live afterwards.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import socket
import struct
import sys
import threading
import time
from collections import Counter
from typing import Any

from rich.console import RenderableType

from netctl.cni.config import parse_chain
from netctl.kit import harness
from netctl.kit.bench import render
from netctl.kit.bench.common import (
    DELEGATE_VERSION,
    POD_NAMESPACE,
    Bench,
    BenchNet,
    Measured,
    pick_subnets,
    proc_cpu,
    progress,
    summary_ms,
)
from netctl.kit.bench.kube import CLUSTER_NAMESPACE, NODE, made, requests_report
from netctl.kit.kubefake import FakeKube, nad, node, pod
from netctl.kube.objects import NETWORK_STATUS, NETWORKS

POD = "hot-0"
HOT = "hot"  # the network plugged and unplugged
IFNAME = "net1"
POLL = 0.0005  # seconds between two reads of the link's flags, or of the pod
TIMEOUT = 30.0  # seconds a change may take
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
CLONE_NEWNET = 0x40000000


def link_flags(sock: socket.socket, name: str) -> int | None:
    """The flags of link ``name`` in the netns ``sock`` was made in; None if it has none."""
    req = struct.pack("16sh22x", name.encode(), 0)
    try:
        res = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, req)
    except OSError:
        return None
    return int(struct.unpack("16sh22x", res)[1])


def hot_status(obj: dict[str, Any] | None, hot: BenchNet) -> str | None:
    """The address network-status names for ``hot`` on :data:`IFNAME`, else None."""
    try:
        entries = json.loads(((obj or {}).get("metadata") or {})
                             .get("annotations", {})[NETWORK_STATUS])
    except (KeyError, ValueError):
        return None
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict) and e.get("name") == f"{POD_NAMESPACE}/{hot.name}" \
                and e.get("interface") == IFNAME and e.get("ips"):
            return str(e["ips"][0])
    return None


class LinkWatch:
    """A thread inside a netns that waits for :data:`IFNAME` to be up, or gone."""

    def __init__(self, netns: str) -> None:
        self.netns = netns
        self.want: tuple[bool, threading.Event] | None = None
        self.lock = threading.Condition()
        self.stopped = False
        self.at: float | None = None
        self.thread = threading.Thread(target=self._run, name="link-watch", daemon=True)
        self.thread.start()

    def wait(self, present: bool, timeout: float) -> float | None:
        """Block until the link is (``present``) up or gone; the perf_counter then."""
        done = threading.Event()
        self.at = None
        with self.lock:
            self.want = (present, done)
            self.lock.notify()
        done.wait(timeout)
        with self.lock:
            self.want = None
        return self.at

    def close(self) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify()
        self.thread.join(5)

    def _run(self) -> None:
        with open(f"/run/netns/{self.netns}") as fh:  # this thread only enters it
            if ctypes.CDLL(None, use_errno=True).setns(fh.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {self.netns}")
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            while True:
                with self.lock:
                    while self.want is None and not self.stopped:
                        self.lock.wait()
                    if self.stopped:
                        return
                    present, done = self.want  # type: ignore[misc]
                flags = link_flags(sock, IFNAME)
                if (flags is not None and flags & IFF_UP) if present else flags is None:
                    self.at = time.perf_counter()
                    done.set()
                    with self.lock:
                        if self.want is not None and self.want[1] is done:
                            self.want = None
                    continue
                time.sleep(POLL)
        finally:
            sock.close()


class HotplugBench(Bench):
    def __init__(self, changes: int, api_latency_ms: float) -> None:
        super().__init__(1)
        self.changes, self.api_latency_ms = changes, api_latency_ms
        self.kube = FakeKube(latency_ms=api_latency_ms)
        self.problems: list[str] = []

    def networks(self) -> tuple[BenchNet, BenchNet]:
        for subnet in pick_subnets(2, 8):
            i = len(self.nets) + 1
            name, bridge = (f"{self.prefix}-1", f"{self.prefix}b1") if i == 1 else \
                (HOT, f"{self.prefix}b2")
            conf = harness.bridge_conf(name, bridge, {
                "type": "netctl-ipam", "range": str(subnet),
                "gateway": str(subnet.network_address + 1)}, DELEGATE_VERSION)
            self.nets.append(BenchNet(name, bridge, subnet, parse_chain(json.dumps(conf), name),
                                      conf))
        return self.nets[0], self.nets[1]

    def change(self, plug: bool, hot: BenchNet, watch: LinkWatch) -> tuple[float, float]:
        """One change of the annotation; seconds until the interface, the status."""
        value = hot.name if plug else None
        self.kube.patch("pods", POD_NAMESPACE, POD, {"metadata": {"annotations": {
            NETWORKS: value}}})
        t0 = time.perf_counter()
        status_at: float | None = None
        deadline = t0 + TIMEOUT
        link_at: list[float | None] = [None]
        waiter = threading.Thread(target=lambda: link_at.__setitem__(
            0, watch.wait(plug, TIMEOUT)))
        waiter.start()
        while time.perf_counter() < deadline:
            addr = hot_status(self.kube.get("pods", POD_NAMESPACE, POD), hot)
            if (addr is not None and addr.split("/")[0] in map(str, hot.subnet)) if plug \
                    else addr is None:
                status_at = time.perf_counter()
                break
            time.sleep(POLL)
        waiter.join()
        what = "plug" if plug else "unplug"
        if link_at[0] is None:
            raise RuntimeError(f"{what} of {hot.name}: {IFNAME} not "
                               f"{'up' if plug else 'gone'} in the netns within {TIMEOUT:g}s")
        if status_at is None:
            raise RuntimeError(f"{what} of {hot.name}: network-status not rewritten within "
                               f"{TIMEOUT:g}s")
        return link_at[0] - t0, status_at - t0

    def measure(self) -> Measured:
        self.kube.open()
        self.kube.create("nodes", node(NODE))
        cluster, hot = self.networks()
        self.kube.create("network-attachment-definitions",
                         nad(cluster.name, CLUSTER_NAMESPACE, cluster.conf))
        self.kube.create("network-attachment-definitions", nad(hot.name, POD_NAMESPACE,
                                                               hot.conf))
        uid = self.kube.create("pods", pod(POD, POD_NAMESPACE, node=NODE))["metadata"]["uid"]
        self.daemon.settings.update({
            "kubeconfig": str(self.kube.kubeconfig(self.root / "kubeconfig")),
            "node-name": NODE})
        self.daemon.install_plugin()
        self.daemon.start()
        netns, container = f"{self.prefix}-hot", f"{self.prefix}hot0"
        harness.netns_add(netns)
        conf = self.daemon.conf(cluster.name, DELEGATE_VERSION)
        res = self.daemon.cni("ADD", container, netns, conf, pod=f"{POD_NAMESPACE}/{POD}",
                              args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))
        if res.rc != 0:
            raise RuntimeError(f"the pod's ADD {res.describe()}")
        watch = LinkWatch(netns)
        link_s: dict[str, list[float]] = {"plug": [], "unplug": []}
        status_s: dict[str, list[float]] = {"plug": [], "unplug": []}
        progress(f"{self.changes} changes of the pod's networks annotation, one at a time")
        before = self.kube.request_counts
        cpu0 = sum(proc_cpu(self.daemon.pid))
        try:
            for i in range(self.changes):
                plug = i % 2 == 0
                link, status = self.change(plug, hot, watch)
                link_s["plug" if plug else "unplug"].append(link)
                status_s["plug" if plug else "unplug"].append(status)
        finally:
            watch.close()
        cpu_s = sum(proc_cpu(self.daemon.pid)) - cpu0
        requests: Counter[str] = made(before, self.kube.request_counts)
        res = self.daemon.cni("DEL", container, netns, conf, pod=f"{POD_NAMESPACE}/{POD}",
                              args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))
        harness.netns_del(netns)
        if res.rc != 0:
            self.problems.append(f"the pod's DEL {res.describe()}")
        left = harness.describe_leftovers(harness.leftovers(
            self.daemon, bridges=[n.bridge for n in self.nets], netns_prefix=self.prefix))
        self.problems += left
        self.problems += [f"fake API server: {e.splitlines()[-1]}"
                          for e in self.kube.server_errors]
        rss, code = self.finish_daemon()
        both = {k: link_s["plug"] + link_s["unplug"] if k == "interface" else
                status_s["plug"] + status_s["unplug"] for k in ("interface", "network_status")}
        return Measured(
            params={"changes": self.changes, "api_latency_ms": self.api_latency_ms,
                    "poll_ms": POLL * 1000, "node": NODE},
            parts={"subnets": [str(n.subnet) for n in self.nets],
                   "latency": {"interface": {k: summary_ms(v) for k, v in
                                             (*link_s.items(), ("all", both["interface"]))},
                               "network_status": {k: summary_ms(v) for k, v in
                                                  (*status_s.items(),
                                                   ("all", both["network_status"]))}},
                   "requests": requests_report(self.changes, requests),
                   "daemon_cpu_ms_per_change": round(cpu_s * 1000 / self.changes, 2)},
            peak_rss_kib=rss, exit_code=code, problems=self.problems)

    def cleanup(self) -> list[str]:
        problems = super().cleanup()
        self.kube.close()
        return problems


def render_hotplug(report: dict[str, Any]) -> list[RenderableType]:
    p, lat = report["params"], report["latency"]
    rows = []
    for what, key in (("interface up / gone", "interface"),
                      ("network-status written", "network_status")):
        for kind in ("plug", "unplug", "all"):
            s = lat[key][kind]
            rows.append((f"{what} ({kind})", str(s["n"]), f"{s['p50']:.1f}",
                         f"{s['p99']:.1f}", f"{s['max']:.1f}"))
    req = report["requests"]
    return [
        f"netctl bench hotplug: {p['changes']} changes of one pod's networks annotation, "
        f"one at a time; ms from the change stored in the fake API server "
        f"(api latency {p['api_latency_ms']:g} ms), {p['cpus']} CPUs, prefix {report['prefix']}",
        render.load_line(p), "",
        render.table(("", "n", "p50", "p99", "max"), rows),
        render.table(("per change", ""), [
            ("API requests", f"{sum(req['per_pod'].values()):.2f}: " + ", ".join(
                f"{k} {v:g}" for k, v in req["per_pod"].items())),
            ("daemon CPU (ms)", f"{report['daemon_cpu_ms_per_change']:.2f}")]),
        *render.verdict(report["problems"], "every change landed, nothing left"),
    ]


def run_hotplug(args: argparse.Namespace) -> int:
    from netctl.kit.bench.common import drive

    if args.changes < 2:
        print("netctl bench hotplug: --changes must be ≥ 2", file=sys.stderr)
        return 2
    why = harness.preflight(("bridge", "static"))
    if why:
        print(f"netctl bench hotplug: {why}", file=sys.stderr)
        return 2
    bench = HotplugBench(args.changes, args.api_latency)
    return drive(bench, "hotplug", bench.measure, render_hotplug, args.json)

