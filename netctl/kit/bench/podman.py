"""``netctl bench podman``: the wall time of ``podman run --rm`` (Debian's podman 4.3, CNI
backend) on a netctl network beside podman's own bridge network, the same image and command,
in the same run; and with ``--network none`` as the floor (podman without any CNI).

The podman is :class:`netctl_kit.harness_podman.Podman` (temporary config and storage, runc, the
vfs driver, a busybox image imported from a tar). The sides:

- ``podman``: a network made by ``podman network create --subnet``, podman's own conflist
  (bridge with host-local, portmap, firewall, tuning), each plugin exec'd by libcni;
- ``netctl``: a conflist of one ``netctl-cni`` entry; its cluster network has the same
  plugins as podman's conflist (bridge with ``ipMasq`` and ``hairpinMode``, portmap, firewall,
  tuning) on a bridge of its own, with netctl-ipam instead of host-local: the daemon journals
  and runs the chain, and allocates centrally;
- ``none``: ``--network none``.

Each run is ``podman run --rm --pull=never --network X IMAGE ip -4 -o addr show scope
global``; the address it prints must be in the side's subnet. One warm-up run per side, then
N rounds, the order of the sides rotated each round so that drift on a shared machine falls
on all of them. Reported per side: median, p95, min and max; netctl over podman; each
network side minus ``none`` (what the network costs podman run); and the daemon's own time
per ADD and DEL operation from the journal. Afterwards no container may be left, nothing
live in the journal, no host-local lease, no port on either bridge.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import statistics
import sys
import time
from typing import Any

from netctl_kit import harness
from netctl_kit.bench import render
from netctl_kit.bench.common import Bench, Measured, Side, drive, pick_subnets, summary_ms
from netctl_kit.bench.render import steps
from netctl_kit.harness import SYSTEM_CNI
from netctl_kit.harness_podman import CNI_STATE, IMAGE, Podman, netctl_conflist, preflight
from rich.console import RenderableType

SIDES = ("netctl", "podman", "none")
COMMAND = ("ip", "-4", "-o", "addr", "show", "scope", "global")
SETTINGS = {"reconcile-interval": 0}
# Not the other benches' range: podman refuses a subnet a route on the host already uses.
SUBNETS = ipaddress.IPv4Network("10.212.0.0/16")


def netctl_network(name: str, podmans: dict[str, Any], bridge: str,
                   subnet: ipaddress.IPv4Network) -> dict[str, Any]:
    """podman's generated conflist ``podmans`` as a netctl network ``name``: the same
    plugins, on ``bridge``, with netctl-ipam over ``subnet`` in place of host-local."""
    plugins = json.loads(json.dumps(podmans["plugins"]))
    for plugin in plugins:
        if plugin["type"] == "bridge":
            plugin["bridge"] = bridge
            plugin["ipam"] = {"type": "netctl-ipam", "range": str(subnet),
                              "gateway": str(subnet[1]), "routes": [{"dst": "0.0.0.0/0"}]}
    return {"cniVersion": podmans["cniVersion"], "name": name, "plugins": plugins}


class PodmanBench(Bench):
    def __init__(self, runs: int) -> None:
        super().__init__(1, SETTINGS)
        self.runs = runs
        self.podman: Podman | None = None
        self.networks: dict[str, str] = {"none": "none"}  # side → podman's network name
        self.subnets: dict[str, ipaddress.IPv4Network] = {}
        self.bridges: dict[str, str] = {}

    def set_up(self) -> Podman:
        """The daemon with the netctl network, podman with both networks, the image."""
        netctl_subnet, podman_subnet = pick_subnets(2, self.runs + 2, SUBNETS)
        self.daemon.install_plugin()
        pm = self.podman = Podman.create([str(self.root / "bin"), SYSTEM_CNI], self.prefix)
        why = pm.start_image()
        if why:
            raise RuntimeError(f"podman cannot run containers here: {why}")
        self.networks["podman"] = f"{self.prefix}-podman"
        podmans = pm.create_network(self.networks["podman"], str(podman_subnet))
        self.bridges["podman"] = next(p["bridge"] for p in podmans["plugins"]
                                      if p["type"] == "bridge")
        cluster = f"{self.prefix}-net"
        self.bridges["netctl"] = self.daemon.name("b")
        self.daemon.add_network(cluster, netctl_network(cluster, podmans, self.bridges["netctl"],
                                                        netctl_subnet))
        self.daemon.start()
        self.networks["netctl"] = f"{self.prefix}-netctl"
        pm.add_conflist(netctl_conflist(self.daemon.socket, cluster, self.networks["netctl"]))
        self.subnets = {"netctl": netctl_subnet, "podman": podman_subnet}
        return pm

    def run_once(self, pm: Podman, side: str, into: Side) -> float | None:
        """One ``podman run --rm`` on ``side``'s network: its wall time, or None when it
        failed (the failure noted on ``into``)."""
        t0 = time.perf_counter()
        proc = pm.run("run", "--rm", "--pull=never", "--network", self.networks[side], IMAGE,
                      *COMMAND, check=False)
        took = time.perf_counter() - t0
        if proc.returncode != 0:
            into.fail(f"{side}: podman run exited {proc.returncode}: {harness.tail(proc.stderr)}")
            return None
        addrs = [ipaddress.ip_interface(word) for line in proc.stdout.splitlines()
                 for word in line.split()[3:4]]
        subnet = self.subnets.get(side)
        if subnet is not None and not any(a.network == subnet for a in addrs):
            into.fail(f"{side}: no address in {subnet}: {harness.tail(proc.stdout)}")
            return None
        return took

    def measure(self) -> Measured:
        pm = self.set_up()
        warm_up = Side("warm-up")
        for side in SIDES:
            self.run_once(pm, side, warm_up)
        sides = {name: Side(name) for name in SIDES}
        times: dict[str, list[float]] = {name: [] for name in SIDES}
        with steps("rounds", self.runs) as step:
            for r in range(self.runs):
                for side in SIDES[r % len(SIDES):] + SIDES[:r % len(SIDES)]:
                    took = self.run_once(pm, side, sides[side])
                    if took is not None:
                        times[side].append(took)
                step(f"round {r + 1} of {self.runs} done")
        problems = [msg for s in sides.values() for msg in s.failures]
        left = harness.leftovers(self.daemon, bridges=self.bridges.values())
        podman_net = self.networks["podman"]
        left["host_local_leases"] = [
            lease for lease in harness.host_local_leases(CNI_STATE / "networks")
            if lease.startswith(podman_net + "/")]
        problems += [f"left: {line}" for line in harness.describe_leftovers(left)]
        problems += [f"left: container {c}" for c in pm.containers()]
        operations = self.daemon.journal()["operations"]
        peak_rss, exit_code = self.finish_daemon()
        parts: dict[str, Any] = {name: side_report(times[name], sides[name]) for name in SIDES}
        parts["ratio"] = {"median": render.ratio(parts["netctl"]["median_ms"],
                                                 parts["podman"]["median_ms"])}
        for name in ("netctl", "podman"):
            parts[name]["network_ms"] = round(parts[name]["median_ms"]
                                              - parts["none"]["median_ms"], 1)
        parts["ratio"]["network"] = render.ratio(parts["netctl"]["network_ms"],
                                                 parts["podman"]["network_ms"])
        parts["daemon_operations_ms"] = {
            verb: summary_ms([op["finished_at"] - op["started_at"] for op in operations
                              if op["verb"] == verb and op["origin"] == "runtime"
                              and op["state"] == "done" and op["finished_at"]])
            for verb in ("ADD", "DEL")}
        parts["networks"] = {side: {"name": self.networks[side], "bridge": self.bridges[side],
                                    "subnet": str(self.subnets[side])}
                             for side in ("netctl", "podman")}
        parts["podman_root"] = str(pm.root)
        version = pm.run("version", "--format", "{{.Client.Version}}", check=False)
        return Measured(
            params={"runs": self.runs, "image": IMAGE, "command": " ".join(COMMAND),
                    "podman": version.stdout.strip(), "runtime": "runc", "storage": "vfs"},
            parts=parts, peak_rss_kib=peak_rss, exit_code=exit_code, warm_up=warm_up,
            problems=problems)

    def cleanup(self) -> list[str]:
        """podman first (its containers' DELs still reach the daemon), then the rest."""
        problems = [f"podman: {msg}" for msg in self.podman.remove()] if self.podman else []
        return problems + super().cleanup()


def side_report(times: list[float], side: Side) -> dict[str, Any]:
    ms = [t * 1000 for t in times]
    return {"runs": len(ms), "failures": len(side.failures), "errors": side.failures[:20],
            "median_ms": round(statistics.median(ms), 1) if ms else 0.0,
            "p95_ms": summary_ms(times)["p95"], "min_ms": round(min(ms), 1) if ms else 0.0,
            "max_ms": round(max(ms), 1) if ms else 0.0,
            "all_ms": [round(x, 1) for x in ms]}


def render_podman(report: dict[str, Any]) -> list[RenderableType]:
    p, n, d, z = report["params"], report["netctl"], report["podman"], report["none"]
    nets, ops = report["networks"], report["daemon_operations_ms"]

    def row(label: str, key: str) -> tuple[str, str, str, str]:
        return (label, render.num(n[key], "{:.1f}"), render.num(d[key], "{:.1f}"),
                render.num(render.ratio(n[key], d[key])))

    return [
        f"netctl bench podman: {p['runs']} runs per side (sides rotated each round), podman "
        f"{p['podman']} (CNI backend, {p['runtime']}, {p['storage']} storage), {IMAGE}, "
        f"{p['cpus']} CPUs, prefix {report['prefix']}",
        f"each run: podman run --rm --network NET {IMAGE} {p['command']}",
        f"netctl: netctl-cni → the daemon → podman's plugins on {nets['netctl']['bridge']} "
        f"with netctl-ipam ({nets['netctl']['subnet']})",
        f"podman: podman network create ({nets['podman']['subnet']}, "
        f"{nets['podman']['bridge']}): bridge + host-local, portmap, firewall, tuning",
        render.load_line(p), "",
        render.table(("podman run --rm (ms)", "netctl", "podman", "ratio"), [
            row("median", "median_ms"), row("p95", "p95_ms"), row("min", "min_ms"),
            row("max", "max_ms"),
            row("median minus --network none", "network_ms"),
            ("failures", str(n["failures"]), str(d["failures"]), "")]),
        f"--network none (no CNI): median {z['median_ms']:.1f} ms, min {z['min_ms']:.1f} ms",
        f"the daemon's own time per operation (journal, p50/p95 ms): ADD "
        f"{ops['ADD']['p50']:.1f}/{ops['ADD']['p95']:.1f}, DEL "
        f"{ops['DEL']['p50']:.1f}/{ops['DEL']['p95']:.1f}; daemon peak RSS "
        f"{report['daemon']['peak_rss_kib'] / 1024:.1f} MiB",
        "", *render.verdict(report["problems"],
                            "every run succeeded with an address of its network; nothing left")]


def run_podman(args: argparse.Namespace) -> int:
    if args.runs < 1:
        print("netctl bench podman: --runs must be ≥ 1", file=sys.stderr)
        return 2
    why = preflight()
    if why:
        print(f"netctl bench podman: {why}", file=sys.stderr)
        return 2
    bench = PodmanBench(args.runs)
    return drive(bench, "podman", bench.measure, render_podman, args.json)
