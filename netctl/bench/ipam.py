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
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netctl.bench.common import (
    DELEGATE_VERSION,
    POD_NAMESPACE,
    SYSTEM_CNI,
    Bench,
    Measured,
    PodRun,
    Row,
    Side,
    _breakdown_lines,
    _cni_env,
    _compare,
    _daemon_rows,
    _from_journal,
    _grid,
    _latency_rows,
    _load_line,
    _operations,
    _operations_text,
    _progress,
    _run,
    _some,
    _status_line,
    _tail,
    _timed_operations,
    _verdict,
    drive,
    host_local_leases,
    journal_live_allocations,
    pick_subnets,
    preflight,
    ratios,
    summary_ms,
)
from netctl.install import install
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
        self.ipam_plugin = ""
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
        self.ipam_dir.mkdir(parents=True)
        ipams: dict[str, dict[str, Any]] = {
            "netctl": {"type": "netctl-ipam", "socket": self.socket,
                       "range": str(self.subnet), "gateway": str(self.gateway)},
            "host_local": {"type": "host-local", "subnet": str(self.subnet),
                           "gateway": str(self.gateway), "dataDir": str(self.ipam_dir)}}
        for key, ipam in ipams.items():
            self.confs[key] = json.dumps({
                "cniVersion": DELEGATE_VERSION, "name": self.name, "type": "bridge",
                "bridge": f"{self.prefix}b0", "ipam": ipam}).encode()
        self.pool_size = {"netctl": parse_ipam(ipams["netctl"])[1][0].size,
                          "host_local": self.subnet.num_addresses - 3}
        written = install(str(self.root / "bin"))
        self.plugin = next(p for p in written if p.endswith("/netctl-cni"))
        self.ipam_plugin = next(p for p in written if p.endswith("/netctl-ipam"))
        self.netns = self.netns_add(self.name)

    def plugin_path(self, key: str) -> str:
        return self.ipam_plugin if key == "netctl" else os.path.join(SYSTEM_CNI, "host-local")

    def exec_ipam(self, key: str, command: str, container: str,
                  index: int) -> subprocess.CompletedProcess[bytes]:
        env = _cni_env(command, container, self.netns, "eth0",
                       f"IgnoreUnknown=1;K8S_POD_NAMESPACE={POD_NAMESPACE};"
                       f"K8S_POD_NAME=alloc-{index}")
        return _run([self.plugin_path(key)], data=self.confs[key], env=env)

    def check_address(self, stdout: bytes) -> tuple[str | None, str]:
        """(problem or None, the address) of an IPAM result: one address of the pool."""
        try:
            result = json.loads(stdout)
        except ValueError:
            return f"not JSON: {_tail(stdout)}", ""
        ips = result.get("ips") if isinstance(result, dict) else None
        if not isinstance(ips, list) or len(ips) != 1 or not isinstance(ips[0], dict):
            return f"not one address: {_tail(stdout)}", ""
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
            problem, run.address = self.check_address(proc.stdout)
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
        _progress(f"pool {self.subnet} ({self.pool_size['netctl']} addresses); "
                  "starting the daemon")
        self.start_daemon()
        warm = Side("warm-up")
        self.warm_up(warm, "netctl")
        plugin_s = self.time_version_and_status(self.confs["netctl"], plugin=self.ipam_plugin)
        sides = {key: Side(key) for key in IPAM_SIDES}
        _progress(f"netctl-ipam: {self.n} allocations, concurrency {self.concurrency}")
        self.run_side(sides["netctl"], "netctl")
        rss, code = self.finish_daemon()
        breakdown = ipam_breakdown(self.state_dir / "journal.db", sides["netctl"].pods)
        self.warm_up(warm, "host_local")
        plugin_s["host_local_version_ms"] = self.time_delegate_version("host-local")
        _progress(f"host-local: {self.n} allocations, concurrency {self.concurrency}")
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
        if key == "netctl":
            return journal_live_allocations(self.state_dir / "journal.db")
        held = host_local_leases(self.ipam_dir / self.name)
        return [f"host-local still holds {len(held)} lease(s): {_some(held)}"] if held else []


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
    return _from_journal(db_path, lambda conn: _ipam_breakdown(conn, runs))


def _ipam_breakdown(conn: sqlite3.Connection, runs: list[PodRun]) -> dict[str, Any]:
    ops, not_done, counts = _operations(conn, "ipam")
    allocations = conn.execute("SELECT count(*) FROM ipam_allocations").fetchone()[0]
    out: dict[str, Any] = {"operations": counts, "allocation_rows": allocations,
                           "operations_not_done": not_done}
    for verb in ("ADD", "DEL"):
        timed = _timed_operations(ops, runs, verb)
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


def render_ipam(report: dict[str, Any]) -> str:
    p = report["params"]
    n, h, r = report["netctl"], report["host_local"], report["ratio"]
    lines = [f"netctl bench ipam: {p['allocations']} allocations, concurrency "
             f"{p['concurrency']}, pool {p['subnet']} ({n['pool_size']} addresses netctl-ipam, "
             f"{h['pool_size']} host-local; gateway {p['gateway']} kept out), {p['cpus']} CPUs, "
             f"prefix {report['prefix']}",
             "both exec'd as a main plugin execs its IPAM plugin: netctl-ipam (the thin plugin, "
             "forwarding to the daemon) vs /usr/lib/cni/host-local",
             _load_line(p), ""]
    rows: list[Row] = [
        ("", "netctl-ipam", "host-local", "ratio"),
        _compare("allocations/s (ADD phase)", n, h, "allocations_per_s"),
        _compare("releases/s (DEL phase)", n, h, "releases_per_s"),
        _compare("ADD phase wall time (s)", n, h, "add_wall_s"),
        _compare("DEL phase wall time (s)", n, h, "del_wall_s"),
        *_latency_rows(n, h, r),
        _compare("CPU per ADD+DEL (ms, all processes)", n, h, "cpu_ms_per_allocation"),
        ("failures", str(n["failures"]), str(h["failures"]), ""),
        ("distinct addresses handed out", str(n["distinct_addresses"]),
         str(h["distinct_addresses"]), ""),
        ("addresses handed out twice", str(len(n["duplicates"])), str(len(h["duplicates"])), ""),
        ("still held after the DELs", str(len(n["held_after"])), str(len(h["held_after"])), ""),
        *_daemon_rows(report, "host_local_version_ms", ", no daemon"),
    ]
    lines += _grid(rows)
    lines.append(_status_line(report, "netctl-ipam STATUS round trip (plugin start, socket, the "
                                      "daemon parses the config; no journal)"))
    per = max(n["allocations"], 1)
    lines.append("  CPU per ADD+DEL (ms): netctl: daemon {:.2f}, thin plugin {:.2f}, bench {:.2f};"
                 " host-local: plugin {:.2f}, bench {:.2f}".format(
                     *(n["cpu_s"].get(k, 0.0) * 1000 / per for k in ("daemon", "execs", "bench")),
                     *(h["cpu_s"].get(k, 0.0) * 1000 / max(h["allocations"], 1)
                       for k in ("execs", "bench"))))
    b = report.get("breakdown")
    if b and "ADD" in b:
        lines += _breakdown_lines(
            b, "netctl-ipam: where an ADD/DEL's time goes (medians, ms; client clock and "
            "journal timestamps)",
            (("plugin exec, start to exit", "exec_ms"),
             ("  before the operation starts", "before_operation_ms"),
             ("  the operation's transaction (allocate/release)", "operation_ms"),
             ("  after the operation ends", "after_operation_ms")))
        lines.append("  (before: plugin start, socket, request decode, config parse, the wait "
                     "for the journal writer; after: its commit, the reply, plugin exit)")
        a, d = b["ADD"], b["DEL"]
        lines.append("  the operation, first vs last tenth of the phase (p50 ms): ADD {:.2f} → "
                     "{:.2f}, DEL {:.2f} → {:.2f} (pool filling up, then emptying)".format(
                         a["operation_first_tenth_ms"]["p50"], a["operation_last_tenth_ms"]["p50"],
                         d["operation_first_tenth_ms"]["p50"],
                         d["operation_last_tenth_ms"]["p50"]))
        lines.append(f"  journal: operations {_operations_text(b)}; {b['allocation_rows']} "
                     f"allocation rows; {len(b['operations_not_done'])} operations not done; "
                     "each ADD or DEL is one journal transaction (operation and allocation "
                     "together)")
    lines += _verdict(report["problems"], "every ADD and DEL succeeded; every address distinct "
                      "and in the pool; nothing held after the DELs")
    return "\n".join(lines)


# -- entry point ---------------------------------------------------------------------------


def run_ipam(args: argparse.Namespace) -> int:
    if args.allocations < 1 or args.concurrency < 1:
        print("netctl bench ipam: --allocations and --concurrency must be ≥ 1", file=sys.stderr)
        return 2
    why = preflight()
    if why:
        print(f"netctl bench ipam: {why}", file=sys.stderr)
        return 2
    bench = IpamBench(args.allocations, args.concurrency)
    return drive(bench, "ipam", bench.measure, render_ipam, args.json)
