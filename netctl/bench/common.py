"""What every ``netctl bench`` shares: host helpers (``ip``, netns, links), the
:class:`Bench` base (one prefix for everything a bench makes on the host, a temporary
dir, the installed plugin, a ``netctl daemon`` child process, a pool of workers, the
clean-up), readers of the journal, the parts of the reports, and the driver
(:func:`drive`: SIGTERM and Ctrl-C become a clean-up; then the report, JSON or text,
and the exit status, 1 when anything went wrong).
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
import socket
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

from netctl.cni.config import Chain

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


def netctl_argv(*args: str) -> list[str]:
    """``netctl ARGS…`` run by this interpreter (the venv's, whatever PATH says)."""
    return [sys.executable, "-c", "import sys; from netctl.cli import main; sys.exit(main())",
            *args]


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
        self.daemon_settings: dict[str, Any] = {}  # more daemon config keys
        self.stop = threading.Event()

    # -- host objects ------------------------------------------------------------

    def netns_add(self, name: str) -> str:
        _ip("netns", "add", name)
        return os.path.join(NETNS_DIR, name)

    def netns_del(self, name: str) -> None:
        _ip("netns", "del", name, check=False)

    # -- the daemon --------------------------------------------------------------

    def start_daemon(self) -> float:
        """Start ``netctl daemon`` (its config: the bench's dirs, then
        ``daemon_settings``); return the seconds from its exec to its socket accepting."""
        (self.root / "run").mkdir(parents=True, exist_ok=True)
        self.networks_dir.mkdir(parents=True, exist_ok=True)
        config = self.root / "daemon.json"
        config.write_text(json.dumps({
            "state-dir": str(self.state_dir), "socket": self.socket,
            "cni-bin-dir": SYSTEM_CNI, "networks-dir": str(self.networks_dir),
            "log-level": "info", **self.daemon_settings}))
        log = open(self.root / "daemon.log", "ab")  # the child keeps it
        started = time.perf_counter()
        self.daemon = subprocess.Popen(netctl_argv("daemon", "--config", str(config)),
                                       stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
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
                    return time.perf_counter() - started
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


# -- the journal ----------------------------------------------------------------------------


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


# -- the report ---------------------------------------------------------------------------


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
    if bench.daemon_pid:
        report["daemon"] = {"pid": bench.daemon_pid, "peak_rss_kib": m.peak_rss_kib,
                            "exit_code": m.exit_code}
    if m.plugin_s:
        report["plugin"] = {"runs": VERSION_RUNS,
                            **{k: summary_ms(v) for k, v in m.plugin_s.items()}}
    if m.breakdown:
        report["breakdown"] = m.breakdown
    report["problems"] = problems
    return report


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
