"""``netctl bench ipam``: execs ``netctl-ipam`` the way a main plugin execs its IPAM plugin (its
``ipam`` section names the daemon's socket): N ADDs (distinct container ids,
``eth0``, at most C at a time), then their N DELs; and the same against
host-local on a pool of the same size (one subnet, the same gateway kept out),
in the same run. Every ADD must succeed with an address of the pool, no address
may be handed out twice, and after the DELs netctl's journal must hold no live
allocation and host-local's data dir no lease; any failure makes the run exit 1.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netctl_kit import harness, journaldb
from netctl_kit.bench import allocator, render
from netctl_kit.bench.common import (
    DELEGATE_VERSION,
    POD_NAMESPACE,
    Bench,
    Measured,
    PodRun,
    Side,
    drive,
    from_journal,
    operations,
    pick_subnets,
    progress,
    ratios,
    summary_ms,
    timed_operations,
)
from netctl_kit.harness import SYSTEM_CNI, CNIResult, tail
from rich.console import RenderableType

from netctl.ipam.ranges import parse_config as parse_ipam

IPAM_SIDES = ("netctl", "host_local")
IPAM_LABELS = {"netctl": "netctl-ipam", "host_local": "host-local"}
IPAM_RATIO_KEYS = ("allocations_per_s", "releases_per_s", "cpu_ms_per_allocation")


class IpamBench(Bench):
    """N allocations, then their releases, through netctl-ipam exec'd as a plain IPAM
    plugin (it forwards to the daemon), then the same through host-local."""

    def __init__(self, allocations: int, concurrency: int) -> None:
        super().__init__(concurrency)
        self.n = allocations
        self.name = f"{self.prefix}-ipam"  # the network's CNI name, both sides
        self.netns = ""
        self.subnet = ipaddress.IPv4Network("0.0.0.0/32")
        self.gateway = ipaddress.IPv4Address(0)
        self.confs: dict[str, bytes] = {}
        self.pool_size: dict[str, int] = {}

    def setup(self) -> None:
        """One subnet for N (both pools the same size: network, broadcast and the gateway
        kept out), the two configs as a main plugin hands them to its IPAM plugin, the
        installed plugins, one netns for CNI_NETNS (IPAM plugins do not enter it)."""
        self.subnet = pick_subnets(1, self.n)[0]
        self.gateway = self.subnet.network_address + 1
        ipams: dict[str, dict[str, Any]] = {
            "netctl": {"type": "netctl-ipam", "socket": self.daemon.socket,
                       "range": str(self.subnet), "gateway": str(self.gateway)},
            "host_local": {**harness.host_local(str(self.subnet), self.daemon.ipam_dir),
                           "gateway": str(self.gateway)}}
        for key, ipam in ipams.items():
            self.confs[key] = json.dumps({
                "cniVersion": DELEGATE_VERSION, "name": self.name, "type": "bridge",
                "bridge": f"{self.prefix}b0", "ipam": ipam}).encode()
        self.pool_size = {"netctl": parse_ipam(ipams["netctl"])[1][0].size,
                          "host_local": self.subnet.num_addresses - 3}
        self.daemon.install_plugin()
        self.netns = harness.netns_add(self.name)

    def exec_ipam(self, key: str, command: str, container: str, index: int) -> CNIResult:
        path = self.daemon.ipam_plugin if key == "netctl" else os.path.join(SYSTEM_CNI,
                                                                             "host-local")
        return harness.exec_plugin(path, command, self.confs[key], container=container,
                                   netns=self.netns, args=harness.cni_args(
                                       f"{POD_NAMESPACE}/alloc-{index}", "", "IgnoreUnknown=1"))

    def check_address(self, res: CNIResult) -> tuple[str | None, str]:
        """(problem or None, the address) of an IPAM result: one address of the pool."""
        ips = res.out.get("ips") if res.out else None
        if not isinstance(ips, list) or len(ips) != 1 or not isinstance(ips[0], dict):
            return f"not one address: {tail(res.stdout)}", ""
        text = str(ips[0].get("address", ""))
        try:
            iface = ipaddress.ip_interface(text)
        except ValueError:
            return f"bad address {text!r}", ""
        addr = iface.ip
        if iface.network.prefixlen != self.subnet.prefixlen or addr not in self.subnet:
            return f"address {text} is not in {self.subnet}", ""
        if addr in (self.subnet.network_address, self.subnet.broadcast_address, self.gateway):
            return f"address {text} is the network, broadcast or gateway address", ""
        return None, str(addr)

    # -- one allocation, ADD then (later) DEL ------------------------------------

    def add(self, side: Side, key: str, run: PodRun) -> None:
        proc = run.timed("ADD", lambda: self.exec_ipam(key, "ADD", run.container, run.index))
        if side.exited_ok(f"allocation {run.index}: ADD", proc) and proc is not None:
            problem, run.address = self.check_address(proc)
            if problem:
                side.fail(f"allocation {run.index}: ADD result: {problem}")
            run.ok = not problem

    def delete(self, side: Side, key: str, run: PodRun) -> None:
        proc = run.timed("DEL", lambda: self.exec_ipam(key, "DEL", run.container, run.index))
        if not side.exited_ok(f"allocation {run.index}: DEL", proc):
            run.ok = False

    def warm_up(self, side: Side, key: str) -> None:
        """One ADD and DEL, not timed: page cache, the pool's first row, host-local's dir."""
        run = PodRun(0, f"{self.prefix}-{key[0]}w")
        self.add(side, key, run)
        self.delete(side, key, run)

    # -- a side: the ADD phase, then the DEL phase -------------------------------

    def run_side(self, side: Side, key: str) -> None:
        runs = [PodRun(i, f"{self.prefix}-{key[0]}-{i}") for i in range(self.n)]
        side.pods = runs
        for verb, step in (("ADD", self.add), ("DEL", self.delete)):
            def work(index: int, step: Callable[[Side, str, PodRun], None] = step) -> None:
                step(side, key, runs[index])

            wall, cpu = self.parallel(side, self.n, work, what="allocation")
            side.phase_s[verb] = wall
            side.wall_s += wall
            for k, v in cpu.items():
                side.cpu_s[k] = round(side.cpu_s.get(k, 0.0) + v, 3)

    # -- the whole run: netctl-ipam, then host-local ---------------------------

    def measure(self) -> Measured:
        self.setup()
        progress(f"pool {self.subnet} ({self.pool_size['netctl']} addresses); "
                  "starting the daemon")
        self.daemon.start()
        warm = Side("warm-up")
        self.warm_up(warm, "netctl")
        plugin_s = self.time_version_and_status(self.confs["netctl"], self.daemon.ipam_plugin)
        sides = {key: Side(key) for key in IPAM_SIDES}
        progress(f"netctl-ipam: {self.n} allocations, concurrency {self.concurrency}")
        self.run_side(sides["netctl"], "netctl")
        rss, code = self.finish_daemon()
        breakdown = ipam_breakdown(Path(self.daemon.journal_path), sides["netctl"].pods)
        self.warm_up(warm, "host_local")
        plugin_s["host_local_version_ms"] = self.time_delegate_version("host-local")
        progress(f"host-local: {self.n} allocations, concurrency {self.concurrency}")
        self.run_side(sides["host_local"], "host_local")
        reps = {key: ipam_side_report(sides[key], self.n, self.pool_size[key])
                for key in IPAM_SIDES}
        problems = []
        for key in IPAM_SIDES:
            rep, label = reps[key], IPAM_LABELS[key]
            rep["held_after"] = self.held_after(key)
            problems += [f"{label}: {m}" for m in sides[key].failures + rep["held_after"]]
            if rep["allocations"] != self.n:
                problems.append(f"{label}: {rep['allocations']} of {self.n} allocations "
                                "succeeded")
            if rep["duplicates"]:
                problems.append(f"{label}: addresses handed out twice: "
                                f"{', '.join(rep['duplicates'])}")
        problems += [f"netctl journal: {m}" for m in breakdown["operations_not_done"]]
        return Measured(
            params={"allocations": self.n, "concurrency": self.concurrency,
                    "subnet": str(self.subnet), "gateway": str(self.gateway)},
            parts={"netctl": reps["netctl"], "host_local": reps["host_local"],
                   "ratio": ratios(reps["netctl"], reps["host_local"], IPAM_RATIO_KEYS)},
            plugin_s=plugin_s, peak_rss_kib=rss, exit_code=code, breakdown=breakdown,
            warm_up=warm, problems=problems)

    def held_after(self, key: str) -> list[str]:
        """What the side's allocator still holds: netctl's journal (and daemon), or
        host-local's data dir."""
        found = harness.leftovers(self.daemon) if key == "netctl" else {
            "host_local_leases": harness.host_local_leases(self.daemon.ipam_dir)}
        return harness.describe_leftovers(found)


def ipam_side_report(side: Side, planned: int, pool_size: int) -> dict[str, Any]:
    runs = side.pods
    addresses = [r.address for r in runs if r.address]
    counts = Counter(addresses)
    released = [r for r in runs if r.ok]  # ADD gave a good address and DEL succeeded
    add_s, del_s = side.phase_s.get("ADD", 0.0), side.phase_s.get("DEL", 0.0)
    cpu_ms = sum(side.cpu_s.values()) * 1000
    return {
        "allocations": len(addresses),
        "allocations_planned": planned,
        "pool_size": pool_size,
        "add_wall_s": round(add_s, 3),
        "del_wall_s": round(del_s, 3),
        "allocations_per_s": round(len(addresses) / add_s, 3) if add_s else 0.0,
        "releases_per_s": round(len(released) / del_s, 3) if del_s else 0.0,
        "add_ms": summary_ms([r.add_s for r in runs if r.add_t1]),
        "del_ms": summary_ms([r.del_s for r in runs if r.del_t1]),
        "distinct_addresses": len(counts),
        "duplicates": sorted(a for a, c in counts.items() if c > 1)[:20],
        "failures": len(side.failures),
        "errors": side.failures[:100],
        "cpu_s": side.cpu_s,
        "cpu_ms_per_allocation": round(cpu_ms / len(runs), 2) if runs else 0.0,
    }


def ipam_breakdown(db_path: Path, runs: list[PodRun]) -> dict[str, Any]:
    """Where a netctl-ipam ADD/DEL spends its time, from the client's clock and the
    journal's timestamps: before the operation (plugin start, socket, request, config
    parse, waiting for the journal writer), the operation's one transaction (started_at →
    finished_at: the allocation or release), and after (its commit, the reply, plugin
    exit)."""
    return from_journal(db_path, lambda conn: _ipam_breakdown(conn, runs))


def _ipam_breakdown(conn: sqlite3.Connection, runs: list[PodRun]) -> dict[str, Any]:
    ops, not_done, counts = operations(conn, "ipam")
    allocations = journaldb.row_counts(conn, ("ipam_allocations",))["ipam_allocations"]
    out: dict[str, Any] = {"operations": counts, "allocation_rows": allocations,
                           "operations_not_done": not_done}
    for verb in ("ADD", "DEL"):
        timed = timed_operations(ops, runs, verb)
        inside = [t.op_s for t in timed]  # in index order: allocations in order
        tenth = max(len(inside) // 10, 1)
        out[verb] = {
            "allocations": len(timed),
            "operation_first_tenth_ms": summary_ms(inside[:tenth]),
            "operation_last_tenth_ms": summary_ms(inside[-tenth:]),
            "exec_ms": summary_ms([t.exec_s for t in timed]),
            "before_operation_ms": summary_ms([t.before_s for t in timed]),
            "operation_ms": summary_ms(inside),
            "after_operation_ms": summary_ms([t.after_s for t in timed]),
        }
    return out


def render_ipam(report: dict[str, Any]) -> list[RenderableType]:
    p = report["params"]
    n, h = report["netctl"], report["host_local"]
    out: list[RenderableType] = [
        f"netctl bench ipam: {p['allocations']} allocations, concurrency {p['concurrency']}, "
        f"pool {p['subnet']} ({n['pool_size']} addresses netctl-ipam, {h['pool_size']} "
        f"host-local; gateway {p['gateway']} kept out), {p['cpus']} CPUs, "
        f"prefix {report['prefix']}",
        "both exec'd as a main plugin execs its IPAM plugin: netctl-ipam (the thin plugin, "
        "forwarding to the daemon) vs /usr/lib/cni/host-local",
        render.load_line(p), "",
        render.table(("", "netctl-ipam", "host-local", "ratio"), [
            render.compare("allocations/s (ADD phase)", n, h, "allocations_per_s"),
            render.compare("releases/s (DEL phase)", n, h, "releases_per_s"),
            render.compare("ADD phase wall time (s)", n, h, "add_wall_s"),
            render.compare("DEL phase wall time (s)", n, h, "del_wall_s"),
            *render.latency_rows(n, h, report["ratio"]),
            render.compare("CPU per ADD+DEL (ms, all processes)", n, h, "cpu_ms_per_allocation"),
            ("failures", str(n["failures"]), str(h["failures"]), ""),
            ("distinct addresses handed out", str(n["distinct_addresses"]),
             str(h["distinct_addresses"]), ""),
            ("addresses handed out twice", str(len(n["duplicates"])),
             str(len(h["duplicates"])), ""),
            ("still held after the DELs", str(len(n["held_after"])), str(len(h["held_after"])),
             ""),
            *render.daemon_rows(report, "host_local_version_ms", ", no daemon"),
        ]),
        render.status_line(report, "netctl-ipam STATUS round trip (plugin start, socket, the "
                                   "daemon parses the config; no journal)")]
    a = report.get("allocator")
    if a:
        out += ["", render.table(("", "first tenth", "last tenth", "last/first"), [
            ("wall per allocation (ms)", render.num(a["first_tenth_ms"], "{:.3f}"),
             render.num(a["last_tenth_ms"], "{:.3f}"), render.num(a["last_over_first"])),
            ("CPU per allocation (ms)", render.num(a["first_tenth_cpu_ms"], "{:.3f}"),
             render.num(a["last_tenth_cpu_ms"], "{:.3f}"),
             render.num(a["cpu_last_over_first"]))],
            title=f"the engine's allocator path (no exec: plan, reserve, record in a journal "
                  f"transaction): {a['allocations']} allocations filling {a['pool']} "
                  f"({a['pool_size']} addresses), {a['allocations_per_s']} allocations/s, "
                  f"{a['distinct']} distinct")]
    per = max(n["allocations"], 1)
    out.append("CPU per ADD+DEL (ms): netctl: daemon {:.2f}, thin plugin {:.2f}, bench {:.2f}; "
               "host-local: plugin {:.2f}, bench {:.2f}".format(
                   *(n["cpu_s"].get(k, 0.0) * 1000 / per for k in ("daemon", "execs", "bench")),
                   *(h["cpu_s"].get(k, 0.0) * 1000 / max(h["allocations"], 1)
                     for k in ("execs", "bench"))))
    b = report.get("breakdown")
    if b and "ADD" in b:
        a, d = b["ADD"], b["DEL"]
        out += ["", render.breakdown_table(
            b, "netctl-ipam: where an ADD/DEL's time goes (medians, ms; client clock and "
            "journal timestamps)",
            (("plugin exec, start to exit", "exec_ms"),
             ("  before the operation starts", "before_operation_ms"),
             ("  the operation's transaction (allocate/release)", "operation_ms"),
             ("  after the operation ends", "after_operation_ms"))),
            "(before: plugin start, socket, request decode, config parse, the wait for the "
            "journal writer; after: its commit, the reply, plugin exit)",
            "the operation, first vs last tenth of the phase (p50 ms): ADD {:.2f} → {:.2f}, "
            "DEL {:.2f} → {:.2f} (pool filling up, then emptying)".format(
                a["operation_first_tenth_ms"]["p50"], a["operation_last_tenth_ms"]["p50"],
                d["operation_first_tenth_ms"]["p50"], d["operation_last_tenth_ms"]["p50"]),
            f"journal: operations {render.operations_text(b)}; {b['allocation_rows']} allocation "
            f"rows; {len(b['operations_not_done'])} operations not done; each ADD or DEL is "
            "one journal transaction (operation and allocation together)"]
    return [*out, "", *render.verdict(
        report["problems"], "every ADD and DEL succeeded; every address distinct and in the "
        "pool; nothing held after the DELs")]


# -- entry point ---------------------------------------------------------------------------


def run_ipam(args: argparse.Namespace) -> int:
    if args.allocations < 1 or args.concurrency < 1:
        print("netctl bench ipam: --allocations and --concurrency must be ≥ 1", file=sys.stderr)
        return 2
    why = harness.preflight()
    if why:
        print(f"netctl bench ipam: {why}", file=sys.stderr)
        return 2
    bench = IpamBench(args.allocations, args.concurrency)

    def measure() -> Measured:
        measured = bench.measure()
        if args.fill:  # the engine's own path, no exec: its cost as a pool fills
            progress(f"allocator path: filling a pool with {args.fill} allocations")
            measured.parts["allocator"] = allocator.measure(args.fill)
        return measured

    return drive(bench, "ipam", measure, render_ipam, args.json)
