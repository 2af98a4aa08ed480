"""What every ``netctl bench`` shares: the :class:`Bench` base over :mod:`netctl_kit.harness`
(one prefix for everything a bench makes on the host, a temporary dir, the daemon and its
installed plugin, bridge networks, a pool of workers, the clean-up), the timings, readers
of the journal's timestamps, and the driver (:func:`drive`: SIGTERM and Ctrl-C become a
clean-up; then the report, JSON or the tables of :mod:`netctl_kit.bench.render`, and the exit
status, 1 when anything went wrong).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from netctl_kit import harness, journaldb
from netctl_kit.bench.render import ratio, say, show, steps
from netctl_kit.harness import EXEC_TIMEOUT, SYSTEM_CNI, CNIResult
from rich.console import RenderableType

from netctl.cni.config import Chain, parse_chain, plugin_config
from netctl.journal import query

BENCH_RANGE = ipaddress.IPv4Network("10.200.0.0/16")
DELEGATE_VERSION = "1.0.0"  # the newest the system plugins (v1.1.1) speak
POD_NAMESPACE = "bench"
VERSION_RUNS = 50


# -- small helpers ----------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` (0..100); 0.0 for no values."""
    data = sorted(values)
    if not data:
        return 0.0
    k = (len(data) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in seconds]
    return {"p50": round(percentile(ms, 50), 2), "p95": round(percentile(ms, 95), 2),
            "p99": round(percentile(ms, 99), 2),
            "mean": round(sum(ms) / len(ms), 2) if ms else 0.0,
            "max": round(max(ms), 2) if ms else 0.0, "n": len(ms)}


def proc_cpu(pid: int) -> tuple[float, float]:
    """(own, waited-for children) CPU seconds of a process, from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / tick, (cutime + cstime) / tick


def progress(msg: str) -> None:
    say(msg)


def pick_subnets(count: int, pods: int,
                 within: ipaddress.IPv4Network = BENCH_RANGE) -> list[ipaddress.IPv4Network]:
    """``count`` subnets of ``within`` (10.200.0.0/16) big enough for ``pods`` addresses
    (plus the network, gateway and broadcast addresses), none overlapping a route on this
    host."""
    size = max(256, 1 << math.ceil(math.log2(pods + 3)))
    prefix = 32 - int(math.log2(size))
    if prefix < within.prefixlen:
        raise ValueError(f"{pods} pods do not fit in {within}")
    taken: list[ipaddress.IPv4Network] = []
    try:
        routes = json.loads(harness.ip("-j", "-4", "route", "show", "table", "all",
                                       check=False).stdout or "[]")
    except ValueError:
        routes = []
    for route in routes:
        dst = route.get("dst", "")
        if not dst or dst == "default":
            continue
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(dst, strict=False)
            if isinstance(net, ipaddress.IPv4Network):
                taken.append(net)
    out: list[ipaddress.IPv4Network] = []
    for net in within.subnets(new_prefix=prefix):
        if not any(net.overlaps(t) for t in taken):
            out.append(net)
            if len(out) == count:
                return out
    raise ValueError(f"no room for {count} free /{prefix} subnets in {within} "
                     "(routes on this host overlap it)")


def check_result(out: dict[str, Any] | None, net: BenchNet) -> str | None:
    """What is wrong with an ADD result for ``net`` (its first address in the subnet)."""
    ips = out.get("ips") if out else None
    if not ips:
        return f"no ips: {json.dumps(out)[:300]}"
    addr = str(ips[0].get("address", "")).split("/")[0]
    try:
        if ipaddress.ip_address(addr) not in net.subnet:
            return f"address {addr} is not in {net.subnet} of network {net.name}"
    except ValueError:
        return f"bad address {addr!r}"
    return None


# -- the set-up -------------------------------------------------------------------------


@dataclass
class BenchNet:
    name: str  # NAD name == the chain's CNI name
    bridge: str
    subnet: ipaddress.IPv4Network
    chain: Chain  # the direct side's: bridge with host-local
    conf: dict[str, Any]  # the netctl side's (its NAD)

    @property
    def ipam(self) -> str:
        return str(self.conf["plugins"][0]["ipam"]["type"])


@dataclass
class PodRun:
    """One pod of one side: wall clock and monotonic times of its ADD and DEL."""

    index: int
    container: str
    add_s: float = 0.0
    del_s: float = 0.0
    add_t0: float = 0.0
    add_t1: float = 0.0
    del_t0: float = 0.0
    del_t1: float = 0.0
    ok: bool = False
    address: str = ""  # ipam: the address the ADD handed out

    @contextlib.contextmanager
    def timing(self, verb: str) -> Iterator[None]:
        """Time the block into the ADD or DEL fields (not when it raises)."""
        t0, p0 = time.time(), time.perf_counter()
        yield
        took, t1 = time.perf_counter() - p0, time.time()
        if verb == "ADD":
            self.add_t0, self.add_s, self.add_t1 = t0, took, t1
        else:
            self.del_t0, self.del_s, self.del_t1 = t0, took, t1

    def timed(self, verb: str, call: Callable[[], CNIResult]) -> CNIResult | None:
        """``call()`` (one plugin exec) timed into the ADD or DEL fields; None when it did
        not exit within EXEC_TIMEOUT."""
        with self.timing(verb):
            try:
                return call()
            except subprocess.TimeoutExpired:
                return None


@dataclass
class Side:
    name: str
    pods: list[PodRun] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    exec_add_s: list[float] = field(default_factory=list)  # direct: each delegate exec
    exec_del_s: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds used in the phase
    phase_s: dict[str, float] = field(default_factory=dict)  # ipam: wall time of ADD, DEL
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, msg: str) -> None:
        with self.lock:
            self.failures.append(msg)

    def exited_ok(self, what: str, res: CNIResult | None) -> bool:
        """Whether ``res`` (None: it timed out) exited 0; a failure of ``what`` if not."""
        if res is None:
            self.fail(f"{what} did not exit within {EXEC_TIMEOUT:g}s")
        elif res.rc != 0:
            self.fail(f"{what} {res.describe()}")
        return res is not None and res.rc == 0


class Interrupted(Exception):
    """SIGTERM, turned into an exception so the clean-up runs."""


@dataclass
class Measured:
    """What a bench's run measured: its own parts of the report, and what every bench
    reports (see :func:`bench_report`)."""

    params: dict[str, Any]  # the bench's own (the CPUs and load averages are added)
    parts: dict[str, Any]  # its own top-level keys: the sides, their ratio, …
    plugin_s: dict[str, list[float]] = field(default_factory=dict)  # exec timings by key
    peak_rss_kib: int = 0
    exit_code: int | None = None  # the daemon's, on SIGTERM
    breakdown: dict[str, Any] = field(default_factory=dict)
    warm_up: Side = field(default_factory=lambda: Side("warm-up"))
    problems: list[str] = field(default_factory=list)  # its own (warm-up's, daemon's added)


class Bench:
    """What every bench has: one prefix for what it makes on the host, a temporary dir,
    a :class:`netctl_kit.harness.Daemon` there (not started) with ``settings``, bridge
    networks, a pool of workers, and the clean-up."""

    def __init__(self, concurrency: int, settings: dict[str, Any] | None = None) -> None:
        self.concurrency = concurrency
        self.prefix = "ncb" + secrets.token_hex(2)
        self.root = Path(tempfile.mkdtemp(prefix=f"netctl-bench-{self.prefix}-"))
        self.daemon = harness.Daemon(self.root, self.prefix,
                                     settings={"log-level": "info", **(settings or {})})
        self.nets: list[BenchNet] = []
        self.stop = threading.Event()

    def add_network(self, subnet: ipaddress.IPv4Network, netctl_ipam: bool) -> BenchNet:
        """Bridge network ``prefix-N`` on ``subnet`` for the daemon: host-local, or with
        ``netctl_ipam`` the central IPAM (the bridge, a gateway, takes the first address:
        host-local's default, which netctl-ipam must keep out too); the direct side's
        chain always has host-local."""
        i = len(self.nets) + 1
        name, bridge = f"{self.prefix}-{i}", f"{self.prefix}b{i}"
        host_local = harness.host_local(str(subnet), self.daemon.ipam_dir)
        ipam = {"type": "netctl-ipam", "range": str(subnet),
                "gateway": str(subnet.network_address + 1)} if netctl_ipam else host_local
        conf = harness.bridge_conf(name, bridge, ipam, DELEGATE_VERSION)
        self.daemon.add_network(name, conf)
        direct = json.dumps(harness.bridge_conf(name, bridge, host_local, DELEGATE_VERSION))
        self.nets.append(BenchNet(name, bridge, subnet, parse_chain(direct, name), conf))
        return self.nets[-1]

    def netctl_conf(self) -> bytes:
        """The runtime's config for the thin plugin: the first network is the cluster's."""
        return json.dumps(self.daemon.conf(self.nets[0].name, DELEGATE_VERSION)).encode()

    def finish_daemon(self) -> tuple[int, int | None]:
        """The daemon's peak RSS (KiB), then its exit code on SIGTERM."""
        rss = self.daemon.peak_rss_kib()
        return rss, self.daemon.stop()

    # -- one pod exec'd directly: the floor ---------------------------------------

    @staticmethod
    def pod(index: int) -> str:
        return f"{POD_NAMESPACE}/pod-{index}"

    @contextlib.contextmanager
    def pod_netns(self, tag: str, index: int) -> Iterator[tuple[PodRun, str]]:
        """A pod's record and its netns (the path), deleted on the way out."""
        run = PodRun(index, f"{self.prefix}-{tag}-{index}")
        ns_name = f"{self.prefix}-{tag}{index}"
        netns = harness.netns_add(ns_name)
        try:
            yield run, netns
        finally:
            harness.netns_del(ns_name)

    def exec_delegate(self, side: Side, ptype: str, command: str, conf: bytes, container: str,
                      netns: str, ifname: str, index: int) -> CNIResult:
        p0 = time.perf_counter()
        res = harness.exec_plugin(os.path.join(SYSTEM_CNI, ptype), command, conf,
                                  container=container, netns=netns, ifname=ifname,
                                  args=harness.cni_args(self.pod(index), "", "IgnoreUnknown=1"))
        took = time.perf_counter() - p0
        with side.lock:
            (side.exec_add_s if command == "ADD" else side.exec_del_s).append(took)
        return res

    def pod_direct(self, side: Side, index: int, tag: str = "d") -> PodRun:
        """The pod's networks the libcni way, without netctl: every network in order, each
        chain's plugins one after the other; DEL in reverse with the final result."""
        ifnames = ["eth0"] + [f"net{j}" for j in range(1, len(self.nets))]
        finals: list[dict[str, Any] | None] = [None] * len(self.nets)
        ok = True
        with self.pod_netns(tag, index) as (run, netns):
            with run.timing("ADD"):
                try:
                    for n, (net, ifname) in enumerate(zip(self.nets, ifnames, strict=True)):
                        prev: dict[str, Any] | None = None
                        for i, ptype in enumerate(net.chain.types):
                            conf = plugin_config(net.chain, i, prev, {})
                            res = self.exec_delegate(side, ptype, "ADD", conf, run.container,
                                                     netns, ifname, index)
                            if res.rc != 0 or res.out is None:
                                raise RuntimeError(f"{net.name} {ptype} {res.describe()}")
                            prev = res.out
                        finals[n] = prev
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    ok = False
                    side.fail(f"pod {index}: ADD: {exc}")
            if ok:
                for net, final in zip(self.nets, finals, strict=True):
                    problem = check_result(final, net)
                    if problem:
                        ok = False
                        side.fail(f"pod {index}: ADD result of {net.name}: {problem}")
            with run.timing("DEL"):
                for n in reversed(range(len(self.nets))):
                    net = self.nets[n]
                    for i in reversed(range(len(net.chain.plugins))):
                        conf = plugin_config(net.chain, i, finals[n], {})
                        try:
                            res = self.exec_delegate(side, net.chain.types[i], "DEL", conf,
                                                     run.container, netns, ifnames[n], index)
                        except subprocess.TimeoutExpired:
                            ok = False
                            side.fail(f"pod {index}: DEL {net.name} did not exit in time")
                            continue
                        if res.rc != 0:
                            ok = False
                            side.fail(f"pod {index}: DEL {net.name} {net.chain.types[i]} "
                                      f"{res.describe()}")
            run.ok = ok
        return run

    # -- a phase: N items, at most C at a time -----------------------------------

    def parallel(self, side: Side, count: int, work: Callable[[int], None],
                 what: str = "pod") -> tuple[float, dict[str, float]]:
        """``work(0..count-1)``, at most C at a time; stops early when asked. Returns the
        wall time and the CPU seconds used meanwhile (see :meth:`cpu_snapshot`)."""
        lock = threading.Lock()
        counter = iter(range(count))

        def worker(step: Callable[[str], None]) -> None:
            while not self.stop.is_set():
                with lock:
                    index = next(counter, None)
                if index is None:
                    return
                try:
                    work(index)
                except Exception as exc:  # a bench bug or a host failure: count it, go on
                    side.fail(f"{what} {index}: {exc!r}")
                step("")

        with steps(f"{side.name}: {what}s", count) as step:
            threads = [threading.Thread(target=worker, args=(step,), name=f"{side.name}-{i}",
                                        daemon=True) for i in range(self.concurrency)]
            cpu0 = self.cpu_snapshot()
            wall = self.run_threads(threads)
            cpu1 = self.cpu_snapshot()
        return wall, {k: round(cpu1[k] - cpu0[k], 3) for k in cpu0}

    def run_threads(self, threads: list[threading.Thread]) -> float:
        """Start ``threads``, wait for them all (stopping them on an interrupt); the wall
        time."""
        started = time.perf_counter()
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        finally:
            self.stop_workers_if_interrupted(threads)
        return time.perf_counter() - started

    def cpu_snapshot(self) -> dict[str, float]:
        """CPU seconds so far: this process (all its threads), the processes it waited for
        (the thin plugin or the delegates, and ``ip``), the daemon itself and the
        delegates the daemon waited for."""
        t = os.times()
        own, children = proc_cpu(self.daemon.pid) if self.daemon.running else (0.0, 0.0)
        return {"bench": t.user + t.system, "execs": t.children_user + t.children_system,
                "daemon": own, "daemon_delegates": children}

    def stop_workers_if_interrupted(self, threads: list[threading.Thread]) -> None:
        if all(not t.is_alive() for t in threads):
            return
        # Interrupted: let every worker finish its item (DEL, netns del), start no more.
        self.stop.set()
        say("interrupted; finishing the work in flight")
        with _signals_ignored():
            for t in threads:
                t.join(EXEC_TIMEOUT * 2)

    # -- timings outside the phases --------------------------------------------

    def time_plugin(self, command: str, stdin: bytes, path: str, runs: int = VERSION_RUNS,
                    check: bool = True) -> list[float]:
        times = []
        for _ in range(runs):
            p0 = time.perf_counter()
            res = harness.exec_plugin(path, command, stdin)
            times.append(time.perf_counter() - p0)
            if check and res.rc != 0:
                raise RuntimeError(f"{os.path.basename(path)} {command} {res.describe()}")
        return times

    def time_version_and_status(self, conf: bytes, path: str) -> dict[str, list[float]]:
        """The plugin's VERSION with ``conf`` and its STATUS (a 1.1.0 verb) with ``conf`` at
        cniVersion 1.1.0, by report key."""
        status_conf = json.dumps({**json.loads(conf), "cniVersion": "1.1.0"}).encode()
        return {"version_ms": self.time_plugin("VERSION", conf, path),
                "status_ms": self.time_plugin("STATUS", status_conf, path)}

    def time_delegate_version(self, ptype: str = "bridge") -> list[float]:
        stdin = json.dumps({"cniVersion": DELEGATE_VERSION}).encode()
        return self.time_plugin("VERSION", stdin, os.path.join(SYSTEM_CNI, ptype), check=False)

    # -- clean-up ----------------------------------------------------------------

    def cleanup(self) -> list[str]:
        """Remove everything this run made; return what could not be removed."""
        problems: list[str] = []
        with _signals_ignored():
            self.stop.set()
            try:
                self.daemon.shut_down()
            except Exception as exc:
                problems.append(f"daemon: {exc!r}")
            left = harness.remove_host_objects(self.prefix, [n.bridge for n in self.nets])
            if left:
                problems.append("could not remove: " + ", ".join(left))
            shutil.rmtree(self.root, ignore_errors=True)
            if self.root.exists():
                problems.append(f"could not remove {self.root}")
        return problems


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """No Ctrl-C or SIGTERM while cleaning up (only possible on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


# -- the journal's timestamps ----------------------------------------------------------------


def from_journal(db_path: Path,
                 read: Callable[[sqlite3.Connection], dict[str, Any]]) -> dict[str, Any]:
    """``read`` on a read-only connection to the journal (rows by column name); a journal
    that cannot be read is an error and an operation not done."""
    try:
        conn = query.open_read_only(db_path)
        try:
            return read(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return {"error": f"journal {db_path}: {exc}",
                "operations_not_done": [f"journal unreadable: {exc}"]}


Operations = dict[tuple[str, str], sqlite3.Row]


def operations(conn: sqlite3.Connection,
               origin: str) -> tuple[Operations, list[str], dict[str, int]]:
    """The journal's operations of ``origin`` by (container, verb), those not done
    (described), and the count of every operation by verb."""
    ops = {(r["container_id"], r["verb"]): r for r in journaldb.operations_of_origin(conn, origin)}
    not_done = [f"{r['verb']} of {r['container_id']}: {r['state']}" for r in ops.values()
                if r["state"] != "done"]
    return ops, not_done, journaldb.operation_counts(conn)


@dataclass
class OpTimes:
    """One run's finished operation of one verb, and its exec split by the journal's
    timestamps (seconds)."""

    op: sqlite3.Row
    exec_s: float  # plugin exec, start to exit (client clock)
    before_s: float  # exec start → the operation's start
    op_s: float  # the operation's start → finish
    after_s: float  # the operation's finish → exec exit


def timed_operations(ops: Operations, runs: list[PodRun], verb: str) -> list[OpTimes]:
    out = []
    for run in runs:
        op = ops.get((run.container, verb))
        if op is None or op["finished_at"] is None:
            continue
        t0, t1 = (run.add_t0, run.add_t1) if verb == "ADD" else (run.del_t0, run.del_t1)
        out.append(OpTimes(op, t1 - t0, op["started_at"] - t0,
                           op["finished_at"] - op["started_at"], t1 - op["finished_at"]))
    return out


def steps_by_operation(conn: sqlite3.Connection) -> dict[int, list[sqlite3.Row]]:
    """Every step's times (:func:`netctl_kit.journaldb.step_times`) by its operation."""
    steps: dict[int, list[sqlite3.Row]] = {}
    for r in journaldb.step_times(conn):
        steps.setdefault(r["operation_id"], []).append(r)
    return steps


def critical_path(steps: Sequence[sqlite3.Row]) -> float:
    """An operation's time in its delegates (seconds): its chains run side by side, each
    one plugin after the other, so the longest chain's plugin runs added up."""
    chains: dict[int, float] = {}
    for s in steps:
        att = s["attachment_id"]
        chains[att] = chains.get(att, 0.0) + float(s["seconds"] or 0.0)
    return max(chains.values(), default=0.0)


def outside_delegates(conn: sqlite3.Connection, runs: list[PodRun], verb: str) -> list[float]:
    """Each timed ``verb``'s exec (start to exit, the client's clock) less its delegates'
    critical path (the journal's): what netctl adds to it (seconds)."""
    ops, _, _ = operations(conn, "runtime")
    steps = steps_by_operation(conn)
    return [t.exec_s - critical_path(steps.get(t.op["id"], []))
            for t in timed_operations(ops, runs, verb)]


# -- the report ---------------------------------------------------------------------------


def ratios(netctl: dict[str, Any], other: dict[str, Any],
           keys: Sequence[str] = ("pods_per_s",)) -> dict[str, float | None]:
    """The netctl side's numbers over the other side's: ``keys``, then the ADD and DEL
    latency percentiles."""
    out: dict[str, float | None] = {key: ratio(netctl[key], other[key]) for key in keys}
    for verb in ("add", "del"):
        for q in ("p50", "p95", "p99"):
            out[f"{verb}_{q}"] = ratio(netctl[f"{verb}_ms"][q], other[f"{verb}_ms"][q])
    return out


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


Render = Callable[[dict[str, Any]], list[RenderableType]]


def drive(bench: Bench, name: str, body: Callable[[], Measured], render: Render,
          as_json: bool) -> int:
    """Run ``body`` with SIGTERM turned into :class:`Interrupted`; on a failure say so
    with the daemon's log; clean up whatever happened; then print the report (see
    :func:`_finish`) and return the exit status."""
    load_start = os.getloadavg()
    old_term = signal.signal(signal.SIGTERM, _raise_interrupted)
    report: dict[str, Any] = {}
    interrupted = False
    try:
        report = bench_report(bench, name, load_start, body())
    except (KeyboardInterrupt, Interrupted):
        interrupted = True
        print("netctl bench: interrupted; cleaning up", file=sys.stderr)
    except Exception as exc:
        print(f"netctl bench {name} failed: {exc}", file=sys.stderr)
        if bench.daemon.pid:
            print(bench.daemon.log()[-4000:], file=sys.stderr)
    finally:
        cleanup_problems = bench.cleanup()
        signal.signal(signal.SIGTERM, old_term)
    return _finish(report, cleanup_problems, interrupted, as_json, render)


def bench_report(bench: Bench, name: str, load_start: tuple[float, float, float],
                 m: Measured) -> dict[str, Any]:
    """The report: what every bench has around the bench's own parameters and parts (the
    daemon's, the plugin's and the breakdown only from a bench that has them)."""
    problems = [f"warm-up: {msg}" for msg in m.warm_up.failures] + m.problems
    if m.exit_code not in (0, None):
        problems.append(f"netctl daemon exited with {m.exit_code} on SIGTERM")
    report: dict[str, Any] = {
        "bench": name,
        "params": {**m.params, "cpus": os.cpu_count(),
                   "loadavg_start": [round(x, 2) for x in load_start],
                   "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "prefix": bench.prefix,
        "root": str(bench.root),
        **m.parts,
    }
    if bench.daemon.pid:
        report["daemon"] = {"pid": bench.daemon.pid, "peak_rss_kib": m.peak_rss_kib,
                            "exit_code": m.exit_code}
    if m.plugin_s:
        report["plugin"] = {"runs": VERSION_RUNS,
                            **{k: summary_ms(v) for k, v in m.plugin_s.items()}}
    if m.breakdown:
        report["breakdown"] = m.breakdown
    report["problems"] = problems
    return report


def _finish(report: dict[str, Any], cleanup_problems: list[str], interrupted: bool,
            as_json: bool, render: Render) -> int:
    """Print the report (JSON or tables) and the problems; the exit status."""
    for msg in cleanup_problems:
        print(f"netctl bench: clean-up: {msg}", file=sys.stderr)
    if not report:
        return 130 if interrupted else 1
    report["problems"] += [f"clean-up: {m}" for m in cleanup_problems]
    report["ok"] = not report["problems"]
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        show(render(report))
    for msg in report["problems"][:50]:
        print(f"netctl bench: {msg}", file=sys.stderr)
    return 0 if report["ok"] else 1
