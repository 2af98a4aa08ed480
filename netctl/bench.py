"""``netctl bench``: benchmarks on real namespaces and real plugins.

``churn`` runs N pods (at most C at a time) through ADD and DEL twice on the
same K bridge networks, on a temporary state dir:

- **netctl**: the installed thin plugin is exec'd as kubelet's runtime would,
  with network 1 as the cluster network on ``eth0`` and networks 2..K selected
  in ``NETCTL_NETWORKS``; a real ``netctl daemon`` child process runs the chains.
- **direct**: what a runtime does without netctl, the libcni way: for ADD, every
  network in order and every plugin of its chain exec'd one after the other with
  the stdin :func:`netctl.cni.config.plugin_config` builds; DEL in reverse with
  the final result as ``prevResult``.

``--ipam host-local`` (the default) gives both sides host-local; with
``--ipam netctl-ipam`` the netctl side's networks use the daemon's central IPAM
(``{"type": "netctl-ipam", "range": …}``: allocated in-process, the bridge runs
with a ``static`` IPAM section) while the direct side keeps host-local, which is
all a runtime without netctl has.

Each pod is ``ip netns add`` (not timed), ADD (timed: exec start to exit), DEL
(timed), ``ip netns del`` (not timed). Every ADD and DEL must succeed, no
address may stay allocated and no port may stay on a bridge; any failure makes
the run exit 1. Everything it creates on the host starts with one prefix
(``ncb`` + random hex) and is removed at the end, also after a failure, Ctrl-C
or SIGTERM.

``ipam`` execs ``netctl-ipam`` the way a main plugin execs its IPAM plugin (its
``ipam`` section names the daemon's socket): N ADDs (distinct container ids,
``eth0``, at most C at a time), then their N DELs; and the same against
host-local on a pool of the same size (one subnet, the same gateway kept out),
in the same run. Every ADD must succeed with an address of the pool, no address
may be handed out twice, and after the DELs netctl's journal must hold no live
allocation and host-local's data dir no lease; any failure makes the run exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import math
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from netctl.cni.config import Chain, parse_chain, plugin_config
from netctl.install import install
from netctl.ipam.ranges import parse_config as parse_ipam

SYSTEM_CNI = "/usr/lib/cni"
BENCH_RANGE = ipaddress.IPv4Network("10.200.0.0/16")
DELEGATE_VERSION = "1.0.0"  # the newest the system plugins (v1.1.1) speak
NETNS_DIR = "/var/run/netns"
POD_NAMESPACE = "bench"
EXEC_TIMEOUT = 120.0
VERSION_RUNS = 50
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def _run(argv: Sequence[str], *, data: bytes = b"", env: dict[str, str] | None = None,
         timeout: float = EXEC_TIMEOUT) -> subprocess.CompletedProcess[bytes]:
    """Exec ``argv`` in its own session (a Ctrl-C on the terminal reaches only us)."""
    return subprocess.run(list(argv), input=data, env=env, capture_output=True,
                          timeout=timeout, start_new_session=True, check=False)


def _ip(*args: str, check: bool = True) -> str:
    proc = _run(["ip", *args], env={"PATH": _PATH}, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.decode().strip()}")
    return proc.stdout.decode()


def _links(*extra: str) -> list[str]:
    out = _ip("-o", "link", "show", *extra, check=False)
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
            if line.count(":") >= 2]


def _netns_names() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list", check=False).splitlines()
            if line.strip()]


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(own, waited-for children) CPU seconds of a process, from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / tick, (cutime + cstime) / tick


def _tail(data: bytes, limit: int = 300) -> str:
    text = data.decode(errors="replace").strip().replace("\n", " | ")
    return text[-limit:]


def _exited(proc: subprocess.CompletedProcess[bytes]) -> str:
    return f"exited {proc.returncode}: {_tail(proc.stdout)} {_tail(proc.stderr)}".strip()


def _some(items: Sequence[str], limit: int = 10) -> str:
    """The first ``limit`` items, comma-separated, and " …" when there are more."""
    return ", ".join(items[:limit]) + (" …" if len(items) > limit else "")


def _cni_env(command: str, container: str, netns: str, ifname: str,
             args: str) -> dict[str, str]:
    """The environment a runtime execs a CNI plugin with."""
    return {"PATH": _PATH, "CNI_COMMAND": command, "CNI_CONTAINERID": container,
            "CNI_NETNS": netns, "CNI_IFNAME": ifname, "CNI_PATH": SYSTEM_CNI, "CNI_ARGS": args}


def preflight() -> str | None:
    """Why churn cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, bridges)"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`)"
    for ptype in ("bridge", "host-local"):
        if not os.access(os.path.join(SYSTEM_CNI, ptype), os.X_OK):
            return f"needs the CNI plugins in {SYSTEM_CNI} ({ptype} is missing)"
    return None


def pick_subnets(count: int, pods: int) -> list[ipaddress.IPv4Network]:
    """``count`` subnets of 10.200.0.0/16 big enough for ``pods`` addresses (plus the
    network, gateway and broadcast addresses), none overlapping a route on this host."""
    size = max(256, 1 << math.ceil(math.log2(pods + 3)))
    prefix = 32 - int(math.log2(size))
    if prefix < BENCH_RANGE.prefixlen:
        raise ValueError(f"{pods} pods do not fit in {BENCH_RANGE}")
    taken: list[ipaddress.IPv4Network] = []
    try:
        routes = json.loads(_ip("-j", "-4", "route", "show", "table", "all", check=False)
                            or "[]")
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
    for net in BENCH_RANGE.subnets(new_prefix=prefix):
        if not any(net.overlaps(t) for t in taken):
            out.append(net)
            if len(out) == count:
                return out
    raise ValueError(f"no room for {count} free /{prefix} subnets in {BENCH_RANGE} "
                     "(routes on this host overlap it)")


# -- the set-up -------------------------------------------------------------------------


@dataclass
class BenchNet:
    name: str  # NAD name == the chain's CNI name
    bridge: str
    subnet: ipaddress.IPv4Network
    chain: Chain
    conf: dict[str, Any]  # the netctl side's (its NAD); chain: the direct side's


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

    def timed(self, verb: str, call: Callable[[], subprocess.CompletedProcess[bytes]],
              ) -> subprocess.CompletedProcess[bytes] | None:
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

    def exited_ok(self, what: str, proc: subprocess.CompletedProcess[bytes] | None) -> bool:
        """Whether ``proc`` (None: it timed out) exited 0; a failure of ``what`` if not."""
        if proc is None:
            self.fail(f"{what} did not exit within {EXEC_TIMEOUT:g}s")
        elif proc.returncode != 0:
            self.fail(f"{what} {_exited(proc)}")
        return proc is not None and proc.returncode == 0


class Interrupted(Exception):
    """SIGTERM, turned into an exception so the clean-up runs."""


@dataclass
class Measured:
    """What a bench's run measured: its own parts of the report, and what every bench
    reports (see :func:`bench_report`)."""

    params: dict[str, Any]  # the bench's own (the CPUs and load averages are added)
    parts: dict[str, Any]  # its own top-level keys: the sides, their ratio, …
    plugin_s: dict[str, list[float]]  # plugin exec timings (seconds) by report key
    peak_rss_kib: int
    exit_code: int | None  # the daemon's, on SIGTERM
    breakdown: dict[str, Any]
    warm_up: Side
    problems: list[str]  # its own (the warm-up's and the daemon's exit are added)


class Bench:
    """What every bench has: one prefix for what it makes on the host, a temporary dir,
    the installed plugin, a ``netctl daemon`` child process, a pool of workers, and the
    clean-up."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.prefix = "ncb" + secrets.token_hex(2)
        self.root = Path(tempfile.mkdtemp(prefix=f"netctl-bench-{self.prefix}-"))
        self.plugin = ""
        self.socket = str(self.root / "run" / "netctl.sock")
        self.state_dir = self.root / "state"
        self.networks_dir = self.root / "networks"
        self.ipam_dir = self.root / "ipam"
        self.daemon: subprocess.Popen[bytes] | None = None
        self.daemon_pid = 0
        self.stop = threading.Event()

    # -- host objects ------------------------------------------------------------

    def netns_add(self, name: str) -> str:
        _ip("netns", "add", name)
        return os.path.join(NETNS_DIR, name)

    def netns_del(self, name: str) -> None:
        _ip("netns", "del", name, check=False)

    # -- the daemon --------------------------------------------------------------

    def start_daemon(self) -> None:
        (self.root / "run").mkdir(parents=True, exist_ok=True)
        self.networks_dir.mkdir(parents=True, exist_ok=True)
        config = self.root / "daemon.json"
        config.write_text(json.dumps({
            "state-dir": str(self.state_dir), "socket": self.socket,
            "cni-bin-dir": SYSTEM_CNI, "networks-dir": str(self.networks_dir),
            "log-level": "info"}))
        log = open(self.root / "daemon.log", "ab")  # the child keeps it
        code = "import sys; from netctl.cli import main; sys.exit(main())"
        self.daemon = subprocess.Popen(
            [sys.executable, "-c", code, "daemon", "--config", str(config)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.daemon_pid = self.daemon.pid
        deadline = time.monotonic() + 30
        while True:
            if self.daemon.poll() is not None:
                raise RuntimeError(f"netctl daemon exited with {self.daemon.returncode}:\n"
                                   + self.daemon_log())
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                try:
                    sock.connect(self.socket)
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError("netctl daemon did not listen within 30s:\n"
                                   + self.daemon_log())
            time.sleep(0.02)

    def daemon_log(self) -> str:
        try:
            return (self.root / "daemon.log").read_text()[-4000:]
        except OSError:
            return ""

    def daemon_peak_rss_kib(self) -> int:
        try:
            with open(f"/proc/{self.daemon_pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def finish_daemon(self) -> tuple[int, int | None]:
        """The daemon's peak RSS (KiB), then its exit code on SIGTERM."""
        rss = self.daemon_peak_rss_kib()
        return rss, self.stop_daemon()

    def stop_daemon(self) -> int | None:
        proc, self.daemon = self.daemon, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    # -- a phase: N items, at most C at a time -----------------------------------

    def parallel(self, side: Side, count: int, work: Callable[[int], None],
                 what: str = "pod") -> tuple[float, dict[str, float]]:
        """``work(0..count-1)``, at most C at a time; stops early when asked. Returns the
        wall time and the CPU seconds used meanwhile (see :meth:`cpu_snapshot`)."""
        lock = threading.Lock()
        counter = iter(range(count))

        def worker() -> None:
            while not self.stop.is_set():
                with lock:
                    index = next(counter, None)
                if index is None:
                    return
                try:
                    work(index)
                except Exception as exc:  # a bench bug or a host failure: count it, go on
                    side.fail(f"{what} {index}: {exc!r}")

        threads = [threading.Thread(target=worker, name=f"{side.name}-{i}", daemon=True)
                   for i in range(self.concurrency)]
        cpu0 = self.cpu_snapshot()
        started = time.perf_counter()
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        finally:
            self.stop_workers_if_interrupted(threads)
        wall = time.perf_counter() - started
        cpu1 = self.cpu_snapshot()
        return wall, {k: round(cpu1[k] - cpu0[k], 3) for k in cpu0}

    def cpu_snapshot(self) -> dict[str, float]:
        """CPU seconds so far: this process (all its threads), the processes it waited for
        (the thin plugin or the delegates, and ``ip``), the daemon itself and the
        delegates the daemon waited for."""
        t = os.times()
        daemon_self, daemon_children = _proc_cpu(self.daemon_pid) if self.daemon else (0.0, 0.0)
        return {"bench": t.user + t.system, "execs": t.children_user + t.children_system,
                "daemon": daemon_self, "daemon_delegates": daemon_children}

    def stop_workers_if_interrupted(self, threads: list[threading.Thread]) -> None:
        if all(not t.is_alive() for t in threads):
            return
        # Interrupted: let every worker finish its item (DEL, netns del), start no more.
        self.stop.set()
        print("netctl bench: interrupted; finishing the work in flight", file=sys.stderr)
        with _signals_ignored():
            for t in threads:
                t.join(EXEC_TIMEOUT * 2)

    # -- timings outside the phases --------------------------------------------

    def time_plugin(self, command: str, stdin: bytes, runs: int = VERSION_RUNS,
                    plugin: str | None = None, check: bool = True) -> list[float]:
        path = plugin or self.plugin
        env = {"PATH": _PATH, "CNI_COMMAND": command, "CNI_PATH": SYSTEM_CNI}
        times = []
        for _ in range(runs):
            p0 = time.perf_counter()
            proc = _run([path], data=stdin, env=env)
            times.append(time.perf_counter() - p0)
            if check and proc.returncode != 0:
                raise RuntimeError(f"{os.path.basename(path)} {command} exited "
                                   f"{proc.returncode}: {_tail(proc.stdout)} "
                                   f"{_tail(proc.stderr)}")
        return times

    def time_version_and_status(self, conf: bytes,
                                plugin: str | None = None) -> dict[str, list[float]]:
        """The plugin's VERSION with ``conf`` and its STATUS (a 1.1.0 verb) with ``conf`` at
        cniVersion 1.1.0, by report key."""
        status_conf = json.dumps({**json.loads(conf), "cniVersion": "1.1.0"}).encode()
        return {"version_ms": self.time_plugin("VERSION", conf, plugin=plugin),
                "status_ms": self.time_plugin("STATUS", status_conf, plugin=plugin)}

    def time_delegate_version(self, ptype: str = "bridge",
                              runs: int = VERSION_RUNS) -> list[float]:
        stdin = json.dumps({"cniVersion": DELEGATE_VERSION}).encode()
        return self.time_plugin("VERSION", stdin, runs, os.path.join(SYSTEM_CNI, ptype),
                                check=False)

    # -- clean-up ----------------------------------------------------------------

    def remove_more(self) -> None:
        """What a bench made beyond netns and links with the prefix (a hook)."""

    def cleanup(self) -> list[str]:
        """Remove everything this run made; return what could not be removed."""
        problems: list[str] = []
        with _signals_ignored():
            self.stop.set()
            try:
                self.stop_daemon()
            except Exception as exc:
                problems.append(f"daemon: {exc!r}")
            for name in _netns_names():
                if name.startswith(self.prefix):
                    _ip("netns", "del", name, check=False)
            self.remove_more()
            for name in _links():
                if name.startswith(self.prefix):
                    _ip("link", "del", name, check=False)
            shutil.rmtree(self.root, ignore_errors=True)
            left = [n for n in _netns_names() if n.startswith(self.prefix)]
            left += [n for n in _links() if n.startswith(self.prefix)]
            if left:
                problems.append("could not remove: " + ", ".join(left))
            if self.root.exists():
                problems.append(f"could not remove {self.root}")
        return problems


class Churn(Bench):
    def __init__(self, pods: int, concurrency: int, networks: int, ipam: str) -> None:
        super().__init__(concurrency)
        self.pods = pods
        self.k = networks
        self.ipam = ipam  # the netctl side's; the direct side always has host-local
        self.nets: list[BenchNet] = []
        self.netctl_conf = b""

    # -- host objects ------------------------------------------------------------

    def make_networks(self) -> None:
        subnets = pick_subnets(self.k, self.pods)
        self.networks_dir.mkdir(parents=True)
        self.ipam_dir.mkdir(parents=True)
        for i, subnet in enumerate(subnets, start=1):
            name = f"{self.prefix}-{i}"
            bridge = f"{self.prefix}b{i}"
            host_local = {"type": "host-local", "subnet": str(subnet),
                          "dataDir": str(self.ipam_dir)}
            # The bridge (isGateway) takes the subnet's first address, as host-local's
            # default gateway; netctl-ipam must keep it out of the range too.
            netctl_ipam = {"type": "netctl-ipam", "range": str(subnet),
                           "gateway": str(subnet.network_address + 1)}
            conf, direct = ({"cniVersion": DELEGATE_VERSION, "name": name, "plugins": [{
                "type": "bridge", "bridge": bridge, "isGateway": True, "ipam": ipam}]}
                for ipam in (netctl_ipam if self.ipam == "netctl-ipam" else host_local,
                             host_local))
            nad = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"config": json.dumps(conf)}}
            (self.networks_dir / f"default-{name}.json").write_text(json.dumps(nad))
            self.nets.append(BenchNet(name, bridge, subnet,
                                      parse_chain(json.dumps(direct), name), conf))
        self.netctl_conf = json.dumps({
            "cniVersion": DELEGATE_VERSION, "name": f"{self.prefix}-netctl",
            "type": "netctl-cni", "socket": self.socket,
            "clusterNetwork": self.nets[0].name}).encode()

    def cni_args(self, index: int, selection: bool) -> str:
        args = ["IgnoreUnknown=1", f"K8S_POD_NAMESPACE={POD_NAMESPACE}",
                f"K8S_POD_NAME=pod-{index}"]
        if selection and self.k > 1:
            args.append("NETCTL_NETWORKS=" + ",".join(n.name for n in self.nets[1:]))
        return ";".join(args)

    # -- one pod, each side ------------------------------------------------------

    def exec_netctl(self, command: str, container: str, netns: str, index: int,
                    stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        env = _cni_env(command, container, netns, "eth0", self.cni_args(index, selection=True))
        return _run([self.plugin], data=self.netctl_conf if stdin is None else stdin, env=env)

    @contextlib.contextmanager
    def pod_netns(self, tag: str, index: int) -> Iterator[tuple[PodRun, str]]:
        """A pod's record and its netns (the path), deleted on the way out."""
        run = PodRun(index, f"{self.prefix}-{tag}-{index}")
        ns_name = f"{self.prefix}-{tag}{index}"
        netns = self.netns_add(ns_name)
        try:
            yield run, netns
        finally:
            self.netns_del(ns_name)

    def pod_netctl(self, side: Side, index: int, tag: str = "n") -> PodRun:
        with self.pod_netns(tag, index) as (run, netns):
            add = run.timed("ADD", lambda: self.exec_netctl("ADD", run.container, netns, index))
            ok = side.exited_ok(f"pod {index}: ADD", add)
            if ok and add is not None:
                problem = self.check_result(add.stdout, self.nets[0])
                if problem:
                    ok = False
                    side.fail(f"pod {index}: ADD result: {problem}")
            rm = run.timed("DEL", lambda: self.exec_netctl("DEL", run.container, netns, index))
            run.ok = side.exited_ok(f"pod {index}: DEL", rm) and ok
        return run

    @staticmethod
    def check_result(stdout: bytes, net: BenchNet) -> str | None:
        try:
            result = json.loads(stdout)
        except ValueError:
            return f"not JSON: {_tail(stdout)}"
        ips = result.get("ips") if isinstance(result, dict) else None
        if not ips:
            return f"no ips: {_tail(stdout)}"
        addr = str(ips[0].get("address", "")).split("/")[0]
        try:
            if ipaddress.ip_address(addr) not in net.subnet:
                return f"address {addr} is not in {net.subnet} of network {net.name}"
        except ValueError:
            return f"bad address {addr!r}"
        return None

    def exec_delegate(self, side: Side, ptype: str, command: str, conf: bytes, container: str,
                      netns: str, ifname: str, index: int) -> subprocess.CompletedProcess[bytes]:
        env = _cni_env(command, container, netns, ifname, self.cni_args(index, selection=False))
        p0 = time.perf_counter()
        proc = _run([os.path.join(SYSTEM_CNI, ptype)], data=conf, env=env)
        took = time.perf_counter() - p0
        with side.lock:
            (side.exec_add_s if command == "ADD" else side.exec_del_s).append(took)
        return proc

    def pod_direct(self, side: Side, index: int, tag: str = "d") -> PodRun:
        ifnames = ["eth0"] + [f"net{j}" for j in range(1, self.k)]
        finals: list[dict[str, Any] | None] = [None] * self.k
        ok = True
        with self.pod_netns(tag, index) as (run, netns):
            with run.timing("ADD"):
                try:
                    for n, (net, ifname) in enumerate(zip(self.nets, ifnames, strict=True)):
                        prev: dict[str, Any] | None = None
                        for i, ptype in enumerate(net.chain.types):
                            conf = plugin_config(net.chain, i, prev, {})
                            proc = self.exec_delegate(side, ptype, "ADD", conf, run.container,
                                                      netns, ifname, index)
                            if proc.returncode != 0:
                                raise RuntimeError(f"{net.name} {ptype} exited "
                                                   f"{proc.returncode}: {_tail(proc.stdout)} "
                                                   f"{_tail(proc.stderr)}")
                            prev = json.loads(proc.stdout)
                        finals[n] = prev
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                    ok = False
                    side.fail(f"pod {index}: ADD: {exc}")
            if ok:
                for net, final in zip(self.nets, finals, strict=True):
                    problem = self.check_result(json.dumps(final).encode(), net)
                    if problem:
                        ok = False
                        side.fail(f"pod {index}: ADD result of {net.name}: {problem}")
            with run.timing("DEL"):
                for n in reversed(range(self.k)):
                    net = self.nets[n]
                    for i in reversed(range(len(net.chain.plugins))):
                        conf = plugin_config(net.chain, i, finals[n], {})
                        try:
                            proc = self.exec_delegate(side, net.chain.types[i], "DEL", conf,
                                                      run.container, netns, ifnames[n], index)
                        except subprocess.TimeoutExpired:
                            ok = False
                            side.fail(f"pod {index}: DEL {net.name} did not exit in time")
                            continue
                        if proc.returncode != 0:
                            ok = False
                            side.fail(f"pod {index}: DEL {net.name} {net.chain.types[i]} "
                                      f"exited {proc.returncode}: {_tail(proc.stdout)} "
                                      f"{_tail(proc.stderr)}")
            run.ok = ok
        return run

    # -- a churn phase -----------------------------------------------------------

    def churn(self, side: Side, pod: Callable[[Side, int], PodRun]) -> None:
        """N pods through ``pod``, at most C at a time; stops early when asked."""

        def one(index: int) -> None:
            run = pod(side, index)
            with side.lock:
                side.pods.append(run)

        side.wall_s, side.cpu_s = self.parallel(side, self.pods, one)

    # -- the whole run: the netctl side, then the direct side -------------------

    def measure(self) -> Measured:
        self.make_networks()
        self.plugin = install(str(self.root / "bin"))[0]
        _progress(f"{self.k} networks {', '.join(str(n.subnet) for n in self.nets)}; "
                  f"starting the daemon")
        self.start_daemon()
        # One pod per side first, not timed: warm caches, create the bridges.
        warm = Side("warm-up")
        self.pod_netctl(warm, 0, tag="nw")
        plugin_s = self.time_version_and_status(self.netctl_conf)
        netctl, direct = Side("netctl"), Side("direct")
        _progress(f"netctl: {self.pods} pods, concurrency {self.concurrency}")
        self.churn(netctl, self.pod_netctl)
        rss, code = self.finish_daemon()
        netctl_left = self.leftovers(journal=self.ipam == "netctl-ipam")
        breakdown = journal_breakdown(self.state_dir / "journal.db", netctl.pods)
        self.pod_direct(warm, 0, tag="dw")
        plugin_s["delegate_version_ms"] = self.time_delegate_version()
        _progress(f"direct: {self.pods} pods, concurrency {self.concurrency}")
        self.churn(direct, self.pod_direct)
        direct_left = self.leftovers()
        n_rep, d_rep = side_report(netctl, self.pods), side_report(direct, self.pods)
        n_rep["leftovers"], d_rep["leftovers"] = netctl_left, direct_left
        d_rep["delegate_exec_ms"] = {"ADD": summary_ms(direct.exec_add_s),
                                     "DEL": summary_ms(direct.exec_del_s)}
        problems = [f"netctl: {m}" for m in netctl.failures + netctl_left]
        problems += [f"netctl journal: {m}" for m in breakdown["operations_not_done"]]
        problems += [f"direct: {m}" for m in direct.failures + direct_left]
        return Measured(
            params={"pods": self.pods, "concurrency": self.concurrency, "networks": self.k,
                    "ipam": self.ipam,
                    "ipam_by_side": {"netctl": self.ipam, "direct": "host-local"}},
            parts={"subnets": [str(n.subnet) for n in self.nets], "netctl": n_rep,
                   "direct": d_rep, "ratio": ratios(n_rep, d_rep)},
            plugin_s=plugin_s, peak_rss_kib=rss, exit_code=code, breakdown=breakdown,
            warm_up=warm, problems=problems)

    # -- checks after a phase -------------------------------------------------

    def leftovers(self, journal: bool = False) -> list[str]:
        """Addresses still allocated (by host-local; with ``journal``, also in netctl's
        journal) and ports still on the bridges: a phase must leave none."""
        found: list[str] = []
        for net in self.nets:
            ports = _links("master", net.bridge)
            if ports:
                found.append(f"bridge {net.bridge} still has ports {', '.join(ports)}")
            held = host_local_leases(self.ipam_dir / net.name)
            if held:
                found.append(f"network {net.name}: host-local still holds {_some(held)}")
        if journal:
            found += journal_live_allocations(self.state_dir / "journal.db")
        stray = [n for n in _netns_names() if n.startswith(self.prefix)]
        if stray:
            found.append(f"netns left: {', '.join(stray)}")
        return found

    # -- clean-up ----------------------------------------------------------------

    def remove_more(self) -> None:
        for net in self.nets:
            for port in _links("master", net.bridge):
                _ip("link", "del", port, check=False)


def host_local_leases(directory: Path) -> list[str]:
    """The addresses host-local holds in one network's data dir (file per address)."""
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir()
                  if p.name != "lock" and not p.name.startswith("last_reserved_ip"))


def journal_live_allocations(db_path: Path) -> list[str]:
    """netctl-ipam allocations the journal still holds (not released), described."""
    if not db_path.exists():
        return [f"journal {db_path} is missing"]
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT container_id, ifname, address FROM ipam_allocations"
                                " WHERE released_at IS NULL ORDER BY id").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return [f"journal {db_path}: {exc}"]
    if not rows:
        return []
    shown = _some([f"{a} ({c} {i})" for c, i, a in rows])
    return [f"netctl journal still holds {len(rows)} allocation(s): {shown}"]


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


# -- the journal's view of the netctl run -------------------------------------------------


def journal_breakdown(db_path: Path, runs: list[PodRun]) -> dict[str, Any]:
    """Where a netctl ADD/DEL spends its time, from the client's clock and the journal's
    timestamps (one host clock): before the operation starts (plugin start, socket, request,
    the journal read), inside it (delegates on the critical path, and the rest: journal
    writes and scheduling), and after it ends (last commit, reply, plugin exit)."""
    return _from_journal(db_path, lambda conn: _breakdown(conn, runs))


def _from_journal(db_path: Path,
                  read: Callable[[sqlite3.Connection], dict[str, Any]]) -> dict[str, Any]:
    """``read`` on a read-only connection to the journal (rows by column name); a journal
    that cannot be read is an error and an operation not done."""
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            return read(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return {"error": f"journal {db_path}: {exc}",
                "operations_not_done": [f"journal unreadable: {exc}"]}


Operations = dict[tuple[str, str], sqlite3.Row]


def _operations(conn: sqlite3.Connection,
                origin: str) -> tuple[Operations, list[str], dict[str, int]]:
    """The journal's operations of ``origin`` by (container, verb), those not done
    (described), and the count of every operation by verb."""
    ops = {(r["container_id"], r["verb"]): r for r in conn.execute(
        "SELECT id, verb, container_id, state, started_at, finished_at FROM operations"
        " WHERE origin=?", (origin,))}
    not_done = [f"{r['verb']} of {r['container_id']}: {r['state']}" for r in ops.values()
                if r["state"] != "done"]
    counts = dict(conn.execute("SELECT verb, count(*) FROM operations GROUP BY verb")
                  .fetchall())
    return ops, not_done, counts


@dataclass
class OpTimes:
    """One run's finished operation of one verb, and its exec split by the journal's
    timestamps (seconds)."""

    op: sqlite3.Row
    exec_s: float  # plugin exec, start to exit (client clock)
    before_s: float  # exec start → the operation's start
    op_s: float  # the operation's start → finish
    after_s: float  # the operation's finish → exec exit


def _timed_operations(ops: Operations, runs: list[PodRun], verb: str) -> list[OpTimes]:
    out = []
    for run in runs:
        op = ops.get((run.container, verb))
        if op is None or op["finished_at"] is None:
            continue
        t0, t1 = (run.add_t0, run.add_t1) if verb == "ADD" else (run.del_t0, run.del_t1)
        out.append(OpTimes(op, t1 - t0, op["started_at"] - t0,
                         op["finished_at"] - op["started_at"], t1 - op["finished_at"]))
    return out


def _breakdown(conn: sqlite3.Connection, runs: list[PodRun]) -> dict[str, Any]:
    ops, not_done, counts = _operations(conn, "runtime")
    steps: dict[int, list[sqlite3.Row]] = {}
    for r in conn.execute("SELECT operation_id, attachment_id, started_at, finished_at,"
                          " seconds, state FROM steps"):
        steps.setdefault(r["operation_id"], []).append(r)
    step_count = conn.execute("SELECT count(*) FROM steps").fetchone()[0]
    allocations = conn.execute("SELECT count(*) FROM ipam_allocations").fetchone()[0]
    out: dict[str, Any] = {"operations": counts, "steps": step_count,
                           "ipam_allocations": allocations, "operations_not_done": not_done}
    for verb in ("ADD", "DEL"):
        timed = _timed_operations(ops, runs, verb)
        delegates: list[float] = []
        per_step: list[float] = []
        for t in timed:
            chains: dict[int, float] = {}
            for s in steps.get(t.op["id"], []):
                chains[s["attachment_id"]] = chains.get(s["attachment_id"], 0.0) + \
                    float(s["seconds"] or 0.0)
                if s["finished_at"] is not None and s["seconds"] is not None:
                    per_step.append(s["finished_at"] - s["started_at"] - s["seconds"])
            delegates.append(max(chains.values(), default=0.0))
        out[verb] = {
            "pods": len(timed),
            "exec_ms": summary_ms([t.exec_s for t in timed]),
            "before_operation_ms": summary_ms([t.before_s for t in timed]),
            "operation_ms": summary_ms([t.op_s for t in timed]),
            "delegates_critical_path_ms": summary_ms(delegates),
            "journal_and_scheduling_ms": summary_ms(
                [t.op_s - critical for t, critical in zip(timed, delegates, strict=True)]),
            "after_operation_ms": summary_ms([t.after_s for t in timed]),
            "step_overhead_ms": summary_ms(per_step),
        }
    return out


# -- the report ---------------------------------------------------------------------------


def side_report(side: Side, pods_planned: int) -> dict[str, Any]:
    done = list(side.pods)
    return {
        "pods": len(done),
        "pods_planned": pods_planned,
        "wall_s": round(side.wall_s, 3),
        "pods_per_s": round(len(done) / side.wall_s, 3) if side.wall_s else 0.0,
        "add_ms": summary_ms([p.add_s for p in done]),
        "del_ms": summary_ms([p.del_s for p in done]),
        "failures": len(side.failures),
        "errors": side.failures[:100],
        "cpu_s": side.cpu_s,
        "cpu_ms_per_pod": round(sum(side.cpu_s.values()) * 1000 / len(done), 2) if done else 0.0,
    }


def ratios(netctl: dict[str, Any], other: dict[str, Any],
           keys: Sequence[str] = ("pods_per_s",)) -> dict[str, float | None]:
    """The netctl side's numbers over the other side's: ``keys``, then the ADD and DEL
    latency percentiles."""
    out: dict[str, float | None] = {key: _ratio(netctl[key], other[key]) for key in keys}
    for verb in ("add", "del"):
        for q in ("p50", "p95", "p99"):
            out[f"{verb}_{q}"] = _ratio(netctl[f"{verb}_ms"][q], other[f"{verb}_ms"][q])
    return out


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _grid(rows: Sequence[Sequence[str]]) -> list[str]:
    """First column left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join([row[0].ljust(widths[0])]
                      + [v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)]).rstrip()
            for row in rows]


Row = tuple[str, str, str, str]


def _compare(label: str, netctl: dict[str, Any], other: dict[str, Any], key: str) -> Row:
    """A row: ``key`` of both sides and their ratio."""
    return (label, _num(netctl[key]), _num(other[key]), _num(_ratio(netctl[key], other[key])))


def _load_line(params: dict[str, Any]) -> str:
    return (f"load average (1, 5, 15 min) at start {params['loadavg_start']}, "
            f"at end {params['loadavg_end']}")


def _latency_rows(netctl: dict[str, Any], other: dict[str, Any],
                  ratio: dict[str, Any]) -> list[Row]:
    rows = []
    for verb in ("ADD", "DEL"):
        for q in ("p50", "p95", "p99"):
            key = f"{verb.lower()}_ms"
            rows.append((f"{verb} {q} (ms)", _num(netctl[key][q]), _num(other[key][q]),
                         _num(ratio[f"{verb.lower()}_{q}"])))
    return rows


def _daemon_rows(report: dict[str, Any], other_version: str, note: str = "") -> list[Row]:
    """The daemon's peak RSS; the plugin's VERSION against the other side's plugin's."""
    rss = report["daemon"]["peak_rss_kib"]
    rows: list[Row] = [("daemon peak RSS (MiB)", _num(rss / 1024 if rss else None), "-", "")]
    pv, ov = report["plugin"]["version_ms"], report["plugin"][other_version]
    for q in ("p50", "p95"):
        rows.append((f"plugin VERSION {q} (ms{note})", _num(pv[q]), _num(ov[q]),
                     _num(_ratio(pv[q], ov[q]))))
    return rows


def _status_line(report: dict[str, Any], what: str) -> str:
    st = report["plugin"]["status_ms"]
    return f"  {what}: p50 {st['p50']:.2f} ms, p95 {st['p95']:.2f} ms"


def _breakdown_lines(b: dict[str, Any], heading: str,
                     rows: Sequence[tuple[str, str]]) -> list[str]:
    """``heading`` and the median ADD and DEL of each (label, key) of the breakdown."""
    grid = [("", "ADD", "DEL")] + [(label, _num(b["ADD"][key]["p50"]),
                                    _num(b["DEL"][key]["p50"])) for label, key in rows]
    return ["", heading, *_grid(grid)]


def _operations_text(b: dict[str, Any]) -> str:
    return ", ".join(f"{count} {verb}" for verb, count in sorted(b["operations"].items()))


def render(report: dict[str, Any]) -> str:
    p = report["params"]
    n, d, r = report["netctl"], report["direct"], report["ratio"]
    sides = p["ipam_by_side"]
    how = {"netctl-ipam": "central, allocated in the daemon; bridge gets a static IPAM section",
           "host-local": "exec'd by bridge"}
    lines = [f"netctl bench churn: {p['pods']} pods, concurrency {p['concurrency']}, "
             f"{p['networks']} network(s) of bridge, {p['cpus']} CPUs, "
             f"prefix {report['prefix']}",
             f"IPAM: netctl side {sides['netctl']} ({how[sides['netctl']]}); direct side "
             f"{sides['direct']} ({how[sides['direct']]})",
             _load_line(p), ""]

    rows: list[Row] = [
        ("", "netctl", "direct", "ratio"),
        _compare("pods/s", n, d, "pods_per_s"),
        _compare("churn wall time (s)", n, d, "wall_s"),
        *_latency_rows(n, d, r),
        _compare("CPU per pod (ms, all processes)", n, d, "cpu_ms_per_pod"),
        ("failures", str(n["failures"]), str(d["failures"]), ""),
        ("leftovers after the run", str(len(n["leftovers"])), str(len(d["leftovers"])), ""),
        *_daemon_rows(report, "delegate_version_ms"),
    ]
    lines += _grid(rows)
    lines.append("  (direct VERSION: /usr/lib/cni/bridge; netctl VERSION: the installed "
                 "netctl-cni, no daemon involved)")
    cpu = n["cpu_s"]
    pods = max(n["pods"], 1)
    lines.append("  netctl CPU per pod (ms): daemon {:.1f}, its delegates {:.1f}, thin plugin "
                 "+ ip {:.1f}, bench {:.1f}; direct: delegates + ip {:.1f}, bench {:.1f}".format(
                     *(cpu.get(k, 0.0) * 1000 / pods
                       for k in ("daemon", "daemon_delegates", "execs", "bench")),
                     *(d["cpu_s"].get(k, 0.0) * 1000 / max(d["pods"], 1)
                       for k in ("execs", "bench"))))
    lines.append(_status_line(report, "plugin STATUS round trip (start, socket, daemon, "
                                      "no journal)"))
    lines.append(f"  direct: one delegate exec p50 ADD "
                 f"{report['direct']['delegate_exec_ms']['ADD']['p50']:.2f} ms, DEL "
                 f"{report['direct']['delegate_exec_ms']['DEL']['p50']:.2f} ms")
    b = report.get("breakdown")
    if b and "ADD" in b:
        lines += _breakdown_lines(
            b, "netctl: where a pod's time goes (medians, ms; client clock and journal "
            "timestamps)",
            (("plugin exec, start to exit", "exec_ms"),
             ("  before the operation starts", "before_operation_ms"),
             ("  the operation in the daemon", "operation_ms"),
             ("    delegates (critical path)", "delegates_critical_path_ms"),
             ("    journal writes + scheduling", "journal_and_scheduling_ms"),
             ("  after the operation ends", "after_operation_ms"),
             ("journal overhead per step", "step_overhead_ms")))
        lines.append("  (before: plugin start, socket, request decode, journal read, the "
                     "operation's first commit;")
        lines.append("   after: the last commit, the reply, plugin exit; per step: step row "
                     "span minus the plugin's own run)")
        lines.append(f"  journal: operations {_operations_text(b)}; {b['steps']} steps; "
                     f"{b['ipam_allocations']} netctl-ipam allocations; "
                     f"{len(b['operations_not_done'])} operations not done")
    lines += _verdict(report["problems"], "every ADD and DEL succeeded; nothing left behind")
    return "\n".join(lines)


# -- bench ipam -----------------------------------------------------------------------------


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


def _verdict(problems: list[str], ok: str) -> list[str]:
    if not problems:
        return ["", f"ok: {ok}"]
    lines = ["", f"FAILED: {len(problems)} problem(s):"]
    lines += [f"  {msg}" for msg in problems[:50]]
    if len(problems) > 50:
        lines.append(f"  … and {len(problems) - 50} more")
    return lines


# -- entry points -------------------------------------------------------------------------


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _progress(msg: str) -> None:
    print(f"netctl bench: {msg}", file=sys.stderr, flush=True)


def run_churn(args: argparse.Namespace) -> int:
    if args.pods < 1 or args.concurrency < 1 or args.networks < 1:
        print("netctl bench churn: --pods, --concurrency and --networks must be ≥ 1",
              file=sys.stderr)
        return 2
    if args.networks > 64:
        print("netctl bench churn: at most 64 networks", file=sys.stderr)
        return 2
    why = preflight()
    if why:
        print(f"netctl bench churn: {why}", file=sys.stderr)
        return 2
    bench = Churn(args.pods, args.concurrency, args.networks, args.ipam)
    return drive(bench, "churn", bench.measure, render, args.json)


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


def drive(bench: Bench, name: str, body: Callable[[], Measured],
          render_fn: Callable[[dict[str, Any]], str], as_json: bool) -> int:
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
        if bench.daemon is not None:
            print(bench.daemon_log(), file=sys.stderr)
    finally:
        cleanup_problems = bench.cleanup()
        signal.signal(signal.SIGTERM, old_term)
    return _finish(report, cleanup_problems, interrupted, as_json, render_fn)


def bench_report(bench: Bench, name: str, load_start: tuple[float, float, float],
                 m: Measured) -> dict[str, Any]:
    """The report: what every bench has around the bench's own parameters and parts."""
    problems = [f"warm-up: {msg}" for msg in m.warm_up.failures] + m.problems
    if m.exit_code not in (0, None):
        problems.append(f"netctl daemon exited with {m.exit_code} on SIGTERM")
    return {
        "bench": name,
        "params": {**m.params, "cpus": os.cpu_count(),
                   "loadavg_start": [round(x, 2) for x in load_start],
                   "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "prefix": bench.prefix,
        "root": str(bench.root),
        **m.parts,
        "daemon": {"pid": bench.daemon_pid, "peak_rss_kib": m.peak_rss_kib,
                   "exit_code": m.exit_code},
        "plugin": {"runs": VERSION_RUNS, **{k: summary_ms(v) for k, v in m.plugin_s.items()}},
        "breakdown": m.breakdown,
        "problems": problems,
    }


def _finish(report: dict[str, Any], cleanup_problems: list[str], interrupted: bool,
            as_json: bool, render_fn: Callable[[dict[str, Any]], str]) -> int:
    """Print the report (JSON or text) and the problems; the exit status."""
    for msg in cleanup_problems:
        print(f"netctl bench: clean-up: {msg}", file=sys.stderr)
    if not report:
        return 130 if interrupted else 1
    report["problems"] += [f"clean-up: {m}" for m in cleanup_problems]
    report["ok"] = not report["problems"]
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(render_fn(report))
    for msg in report["problems"][:50]:
        print(f"netctl bench: {msg}", file=sys.stderr)
    return 0 if report["ok"] else 1


def main(args: argparse.Namespace) -> int:
    if args.bench == "churn":
        return run_churn(args)
    if args.bench == "ipam":
        return run_ipam(args)
    print(f"netctl bench {args.bench}: not implemented yet", file=sys.stderr)
    return 2
