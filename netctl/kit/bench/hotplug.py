"""``netctl bench hotplug``: how fast Kubernetes mode follows a running pod's networks
annotation, and what each hot-plug costs in API requests.

The cluster is :class:`netctl_kit.kubefake.FakeKube` (real HTTP; requests counted per verb and
resource; ``--api-latency`` added to each request) holding two bridge networks with
netctl-ipam as NADs — the cluster network (``kube-system``, the conf's ``clusterNetwork``)
and ``net2`` (the pod's namespace, ``bench``) — and one pod of this node. A Kubernetes-mode
``netctl daemon`` (every setting its default) runs against it; the pod's sandbox is ADDed
through the thin plugin in a netns of its own, as a runtime would.

Then ``--changes`` changes of the pod's ``k8s.v1.cni.cncf.io/networks`` annotation, one at a
time, alternately ``net2`` (the daemon attaches it: ``net1`` appears in the netns) and
empty (it detaches it: ``net1`` goes). For each, from the moment the fake has stored the
change (its merge patch answered) this process polls, in one loop, the link's flags in the
netns (an ioctl on a socket made inside the netns: a few µs) and the pod in the fake: the
time until ``net1`` is there and up (or gone), and until the pod's network-status names it
(or no longer does). The mean time of one read of the link is reported. The daemon's own
CPU (``/proc``) around the changes gives its CPU per hot-plug. The fake's
counts around the changes (and the last one's Event, posted after its network-status),
watches aside, give the API requests per hot-plug.

Every change must be applied within :data:`CHANGE_TIMEOUT` seconds, the journal must show
one ``hotplug`` operation done per change, and nothing may be left once the sandbox is
DELeted; any failure makes the run exit 1. Everything it makes on the host starts with one
prefix and is removed at the end, also after Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from netctl_kit import harness, journaldb
from netctl_kit.bench import render
from netctl_kit.bench.common import (
    POD_NAMESPACE,
    Bench,
    Measured,
    drive,
    pick_subnets,
    proc_cpu,
    progress,
    summary_ms,
)
from netctl_kit.bench.kube import CLUSTER_NAMESPACE, made
from netctl_kit.kubefake import FakeKube, nad, node, pod
from rich.console import RenderableType

from netctl.kubeapi.objects import NETWORK_STATUS, NETWORKS

NODE = "bench-node"
POD = "hotplug"
IFNAME = "net1"  # where the daemon plugs net2 (the first free netN)
CHANGE_TIMEOUT = 30.0  # seconds for one change to reach the netns and network-status
EVENT_WAIT = 5.0  # seconds the counts wait for the last change's Event
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
CLONE_NEWNET = 0x40000000


@dataclass
class Change:
    """One annotation change and when its effects were seen (seconds after the fake
    stored it; None: not within :data:`CHANGE_TIMEOUT`)."""

    add: bool  # net2 added (else removed)
    interface_s: float | None
    status_s: float | None
    link_polls: int = 0  # reads of the link's flags in the netns
    link_poll_s: float = 0.0  # their time


def summarize(changes: Sequence[Change], requests: Counter[str]) -> dict[str, Any]:
    """The report's numbers: latency to the interface and to network-status (all changes,
    and adds and removes apart; changes not seen left out and counted), API requests per
    hot-plug by verb and resource, and the mean time of one read of the netns's links (the
    interface latency's resolution). Pure."""
    def latencies(which: Sequence[Change], key: str) -> dict[str, float]:
        return summary_ms([v for c in which if (v := getattr(c, key)) is not None])

    adds = [c for c in changes if c.add]
    removes = [c for c in changes if not c.add]
    n = len(changes)
    polls = sum(c.link_polls for c in changes)
    return {
        "changes": n, "adds": len(adds), "removes": len(removes),
        "not_applied": sum(1 for c in changes if c.interface_s is None or c.status_s is None),
        "interface_ms": latencies(changes, "interface_s"),
        "status_ms": latencies(changes, "status_s"),
        "add": {"interface_ms": latencies(adds, "interface_s"),
                "status_ms": latencies(adds, "status_s")},
        "remove": {"interface_ms": latencies(removes, "interface_s"),
                   "status_ms": latencies(removes, "status_s")},
        "requests": dict(sorted(requests.items())),
        "requests_per_hotplug": {k: round(v / n, 3) for k, v in sorted(requests.items())}
        if n else {},
        "total_requests_per_hotplug": round(requests.total() / n, 3) if n else 0.0,
        "link_poll_ms": round(sum(c.link_poll_s for c in changes) * 1000 / polls, 4)
        if polls else 0.0}


def netns_socket(netns: str) -> socket.socket:
    """A datagram socket made inside ``netns`` (by a thread that enters it, then ends): an
    ioctl on it asks that netns, from any thread."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            with open(f"{harness.NETNS_DIR}/{netns}") as fh:
                if ctypes.CDLL(None, use_errno=True).setns(fh.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {netns}")
            made.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        except BaseException as exc:  # handed to the caller
            made.append(exc)
    thread = threading.Thread(target=make, name="netns-socket")
    thread.start()
    thread.join()
    if not isinstance(made[0], socket.socket):
        raise made[0]
    return made[0]


def link_flags(sock: socket.socket, name: str) -> int | None:
    """The flags of link ``name`` in the netns ``sock`` was made in; None if it has none."""
    try:
        res = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, struct.pack("16sh22x", name.encode(), 0))
    except OSError:
        return None
    return int(struct.unpack("16sh22x", res)[1])


def status_names(annotation: str | None) -> set[str]:
    """The interfaces a network-status annotation names."""
    try:
        entries = json.loads(annotation or "[]")
    except ValueError:
        return set()
    return {e.get("interface", "") for e in entries if isinstance(e, dict)}


def events_written(before: Counter[tuple[str, str]], now: Counter[tuple[str, str]]) -> int:
    """Requests on Events (creates, patches) between two of the fake's counts."""
    return sum(n - before.get(key, 0) for key, n in now.items() if key[1] == "events")


class HotplugBench(Bench):
    def __init__(self, changes: int, api_latency_ms: float) -> None:
        super().__init__(1)
        self.changes, self.api_latency_ms = changes, api_latency_ms
        self.kube = FakeKube(latency_ms=api_latency_ms)
        self.problems: list[str] = []
        self.netns = f"{self.prefix}-pod"

    def setup(self) -> str:
        """The fake, its NADs and pod, the daemon, the pod's sandbox ADDed; the pod's UID."""
        self.kube.open()
        self.kube.create("nodes", node(NODE))
        for subnet in pick_subnets(2, 8):
            self.add_network(subnet, netctl_ipam=True)
        cluster, net2 = self.nets
        self.kube.create("network-attachment-definitions",
                         nad(cluster.name, CLUSTER_NAMESPACE, cluster.conf))
        self.kube.create("network-attachment-definitions", nad(net2.name, POD_NAMESPACE,
                                                               net2.conf))
        uid = str(self.kube.create("pods", pod(POD, POD_NAMESPACE, node=NODE))
                  ["metadata"]["uid"])
        self.daemon.settings.update({
            "kubeconfig": str(self.kube.kubeconfig(self.root / "kubeconfig")),
            "node-name": NODE})
        self.daemon.install_plugin()
        self.daemon.start()
        self.kube.wait_watches(3)  # its Node, its pods, the NADs

        def cached() -> bool:
            k = self.daemon.status()["kubernetes"]
            return bool(k["pods"]["objects"] == 1 and k["nads"]["objects"] == 2)
        harness.wait_for(cached, 60, "the daemon's caches")
        harness.netns_add(self.netns)
        res = self.cni("ADD", uid)
        if res.rc != 0:
            raise RuntimeError(f"the sandbox's ADD {res.describe()}")
        return uid

    def cni(self, verb: str, uid: str) -> harness.CNIResult:
        return self.daemon.cni(verb, "hotplug-sandbox", self.netns,
                               json.loads(self.netctl_conf()), pod=f"{POD_NAMESPACE}/{POD}",
                               args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))

    def change(self, add: bool, sock: socket.socket) -> Change:
        """One change of the annotation, and when the netns and network-status show it."""
        value = self.nets[1].name if add else ""
        self.kube.patch("pods", POD_NAMESPACE, POD, {"metadata": {"annotations": {
            NETWORKS: value}}})
        t0 = time.perf_counter()
        seen = Change(add, None, None)
        while time.perf_counter() - t0 < CHANGE_TIMEOUT and (seen.interface_s is None or
                                                            seen.status_s is None):
            if seen.interface_s is None:
                p0 = time.perf_counter()
                flags = link_flags(sock, IFNAME)
                there = flags is not None and bool(flags & IFF_UP)
                p1 = time.perf_counter()
                seen.link_polls += 1
                seen.link_poll_s += p1 - p0
                if there == add:
                    seen.interface_s = p1 - t0
            if seen.status_s is None:
                found = self.kube.get("pods", POD_NAMESPACE, POD) or {}
                notes = (found.get("metadata") or {}).get("annotations") or {}
                if (IFNAME in status_names(notes.get(NETWORK_STATUS))) == add:
                    seen.status_s = time.perf_counter() - t0
        return seen

    def measure(self) -> Measured:
        uid = self.setup()
        progress(f"{self.changes} changes of the pod's annotation, alternately adding and "
                 "removing one network")
        changes: list[Change] = []
        before = self.kube.request_counts.copy()
        started, cpu0 = time.perf_counter(), proc_cpu(self.daemon.pid)
        with render.steps("changes", self.changes) as step, \
                contextlib.closing(netns_socket(self.netns)) as sock:
            for i in range(self.changes):
                if self.stop.is_set():
                    break
                changes.append(self.change(i % 2 == 0, sock))
                step("")
        wall = time.perf_counter() - started
        # the Event of a change is posted after its network-status: the last one's too
        with contextlib.suppress(harness.HarnessError):
            harness.wait_for(lambda: events_written(before, self.kube.request_counts)
                             >= len(changes), EVENT_WAIT, "the last change's Event")
        after = self.kube.request_counts.copy()
        cpu1 = proc_cpu(self.daemon.pid)
        requests = Counter({k: n for k, n in made(before, after).items()
                            if not k.startswith("watch ")})
        summary = summarize(changes, requests)
        for key, i in (("daemon_cpu_ms_per_hotplug", 0), ("delegates_cpu_ms_per_hotplug", 1)):
            summary[key] = round((cpu1[i] - cpu0[i]) * 1000 / len(changes), 2) \
                if changes else 0.0
        if summary["not_applied"]:
            self.problems.append(f"{summary['not_applied']} changes not seen within "
                                 f"{CHANGE_TIMEOUT:g} s")
        with self.daemon.read_only() as conn:
            ops = dict(Counter(f"{verb} {state}" for verb, origin, state
                               in journaldb.operation_states(conn)
                               if origin == "hotplug" and verb in ("ADD", "DEL")))
        if ops != {k: v for k, v in (("ADD done", len(changes) - len(changes) // 2),
                                     ("DEL done", len(changes) // 2)) if v}:
            self.problems.append(f"the journal's hot-plug operations: {ops}")
        res = self.cni("DEL", uid)
        if res.rc != 0:
            self.problems.append(f"the sandbox's DEL {res.describe()}")
        harness.netns_del(self.netns)
        left = harness.describe_leftovers(harness.leftovers(
            self.daemon, bridges=[n.bridge for n in self.nets], netns_prefix=self.prefix))
        self.problems += left
        self.problems += [f"fake API server: {e.splitlines()[-1]}"
                          for e in self.kube.server_errors]
        rss, code = self.finish_daemon()
        return Measured(
            params={"changes": self.changes, "api_latency_ms": self.api_latency_ms,
                    "node": NODE},
            parts={"subnets": [str(n.subnet) for n in self.nets], "hotplug": summary,
                   "operations": ops, "wall_s": round(wall, 3)},
            peak_rss_kib=rss, exit_code=code, problems=self.problems)

    def cleanup(self) -> list[str]:
        problems = super().cleanup()
        self.kube.close()
        return problems


def render_hotplug(report: dict[str, Any]) -> list[RenderableType]:
    p, h = report["params"], report["hotplug"]

    def row(label: str, part: dict[str, Any]) -> render.Row:
        return (label, render.num(part["interface_ms"]["p50"]),
                render.num(part["interface_ms"]["p99"]), render.num(part["status_ms"]["p50"]),
                render.num(part["status_ms"]["p99"]))

    per = ", ".join(f"{k} {v:g}" for k, v in h["requests_per_hotplug"].items()) or "none"
    return [
        f"netctl bench hotplug: {h['changes']} changes of a running pod's networks annotation "
        f"(+{p['api_latency_ms']:g} ms per API request), {p['cpus']} CPUs, prefix "
        f"{report['prefix']}",
        render.load_line(p), "",
        render.table(("", "interface p50 (ms)", "p99", "network-status p50 (ms)", "p99"), [
            row("all changes", h), row(f"adds ({h['adds']})", h["add"]),
            row(f"removes ({h['removes']})", h["remove"])],
            "from the change stored in the fake to the interface there and up (gone) in the "
            "netns, and to network-status naming it (not); one read of the link takes "
            f"{h['link_poll_ms']:.3f} ms"),
        "",
        f"API requests per hot-plug: {h['total_requests_per_hotplug']:g} ({per}; watches "
        "aside)",
        f"CPU per hot-plug: the daemon's own {h.get('daemon_cpu_ms_per_hotplug', 0):.1f} ms, "
        f"its delegates' {h.get('delegates_cpu_ms_per_hotplug', 0):.1f} ms",
        "", *render.verdict(report["problems"], "every change applied, journaled, nothing "
                                                "left behind")]


def run_hotplug(args: argparse.Namespace) -> int:
    if args.changes < 1 or args.api_latency < 0:
        print("netctl bench hotplug: --changes must be ≥ 1, --api-latency ≥ 0",
              file=sys.stderr)
        return 2
    why = harness.preflight(("bridge",))
    if why:
        print(f"netctl bench hotplug: {why}", file=sys.stderr)
        return 2
    bench = HotplugBench(args.changes, args.api_latency)
    return drive(bench, "hotplug", bench.measure, render_hotplug, args.json)
