"""The harness the tests and ``netctl bench`` share: a real ``netctl daemon`` child
process, the installed plugin exec'd as a runtime execs it, network namespaces, and the
counts of what a run left behind.

How it works: everything goes through the same doors a user has. The daemon is started
as ``netctl daemon --config FILE`` (a JSON config: the temporary dirs, then the caller's
settings) and is ready when its socket accepts; the plugin is installed with ``netctl
install-cni --bin-dir`` and exec'd with the ``CNI_*`` environment and the config on
stdin; the journal is read through ``netctl journal|ipam|reconcile … --json`` or
:mod:`netctl.journal.query`, never with SQL of its own. The host is read with ``ip -j``
and ``/proc``. Every name a run makes on the host starts with one prefix, so
:func:`remove_host_objects` removes exactly what it made, also after a failure.
Synchronous on purpose: the tests and the benches drive it from plain threads.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from netctl_kit import journaldb

from netctl.commands.cli import HEALTH_UNREACHABLE, admin_request, down_health
from netctl.journal import query

T = TypeVar("T")

SYSTEM_CNI = "/usr/lib/cni"
NETNS_DIR = "/var/run/netns"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a runtime passes as CNI_PATH to the thin plugin: nothing netctl may use (the
# daemon execs delegates from its own bin dirs only).
CLIENT_CNI_PATH = "/nonexistent-client-path"
EXEC_TIMEOUT = 120.0
LEFTOVERS = {
    "operations_running": "operations still running",
    "attachments_live": "attachments not removed",
    "allocations_live": "live IPAM allocations",
    "host_local_leases": "host-local leases",
    "bridge_ports": "ports on the bridges",
    "host_veths": "host veths named in the journal",
    "delegates": "delegate processes (NETCTL_OWNER)",
    "netns": "netns left",
}


class HarnessError(RuntimeError):
    """A step of the harness failed: a command, the daemon's start, a wait."""


def preflight(plugins: Sequence[str] = ("bridge", "host-local")) -> str | None:
    """Why the harness cannot run here (root, ``ip``, the CNI plugins), or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, bridges)"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`)"
    for ptype in plugins:
        if not os.access(os.path.join(SYSTEM_CNI, ptype), os.X_OK):
            return f"needs the CNI plugins in {SYSTEM_CNI} ({ptype} is missing)"
    return None


def wait_for(cond: Callable[[], T], timeout: float = 10.0, what: str = "condition",
             interval: float = 0.01) -> T:
    """Poll ``cond`` every ``interval`` seconds until it returns something truthy, and
    return that; after ``timeout`` seconds raise :class:`HarnessError` naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def run(argv: Sequence[str], *, data: bytes = b"", env: dict[str, str] | None = None,
        timeout: float = EXEC_TIMEOUT) -> subprocess.CompletedProcess[bytes]:
    """Exec ``argv`` in its own session (a Ctrl-C on the terminal reaches only us)."""
    return subprocess.run(list(argv), input=data, env=env, capture_output=True,
                          timeout=timeout, start_new_session=True, check=False)


def tail(text: str | bytes, limit: int = 300) -> str:
    """The end of a command's output, on one line."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return text.strip().replace("\n", " | ")[-limit:]


# -- the host ---------------------------------------------------------------------------


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip ARGS…`` (its own session, as :func:`run`); raises :class:`HarnessError` when it
    fails, with ``check``."""
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False,
                          timeout=30, env={"PATH": PATH}, start_new_session=True)
    if check and proc.returncode != 0:
        raise HarnessError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def _link_names(*args: str) -> list[str]:
    """The interface names ``ip -j ARGS…`` lists (none when it fails)."""
    out = ip("-j", *args, check=False).stdout
    try:
        return [str(link["ifname"]) for link in json.loads(out or "[]")]
    except (ValueError, KeyError, TypeError):
        return []


def _in(netns: str | None) -> tuple[str, ...]:
    return ("-n", netns) if netns else ()


def host_links(prefix: str = "", netns: str | None = None) -> list[str]:
    """The host's links whose names start with ``prefix`` (``netns``: a named network
    namespace's instead: a real node's)."""
    return [n for n in _link_names(*_in(netns), "link", "show") if n.startswith(prefix)]


def bridge_ports(bridge: str, netns: str | None = None) -> list[str]:
    return _link_names(*_in(netns), "link", "show", "master", bridge)


def netns_links(name: str) -> list[str]:
    """The links inside netns ``name``."""
    return _link_names("-n", name, "link", "show")


def netns_addrs(name: str) -> dict[str, list[str]]:
    """Interface → its global addresses (CIDR form), read inside netns ``name``."""
    data = json.loads(ip("-n", name, "-j", "addr", "show").stdout or "[]")
    return {d["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in d.get("addr_info", [])
                          if a.get("scope") == "global"] for d in data}


def netns_names(prefix: str = "") -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def netns_add(name: str) -> str:
    """A new named network namespace; its path."""
    ip("netns", "add", name)
    return os.path.join(NETNS_DIR, name)


def netns_del(name: str) -> None:
    ip("netns", "del", name, check=False)


def ping(ns: str, address: str) -> bool:
    """Whether one ping from netns ``ns`` to ``address`` is answered within a second."""
    proc = subprocess.run(["ip", "netns", "exec", ns, "ping", "-c1", "-W1", "-q", address],
                          capture_output=True, check=False, timeout=30, env={"PATH": PATH},
                          start_new_session=True)
    return proc.returncode == 0


def remove_host_objects(prefix: str, bridges: Iterable[str] = ()) -> list[str]:
    """Delete every netns and host link named ``prefix…`` and the ports still on
    ``bridges``; return the names that are still there."""
    for name in netns_names(prefix):
        netns_del(name)
    for bridge in bridges:
        for port in bridge_ports(bridge):
            ip("link", "del", port, check=False)
    for name in host_links(prefix):
        ip("link", "del", name, check=False)
    return netns_names(prefix) + host_links(prefix)


def host_local_leases(data_dir: str | Path) -> list[str]:
    """``network/address`` of every address host-local holds under ``data_dir`` (it keeps
    one file per address in a dir per network)."""
    held = []
    for path in Path(data_dir).glob("*/*"):
        try:
            ipaddress.ip_address(path.name)
        except ValueError:
            continue  # its lock and last_reserved_ip files
        held.append(f"{path.parent.name}/{path.name}")
    return sorted(held)


def comm(pid: int) -> str:
    """The process's command name, or "" once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def proc_status_kib(pid: int, key: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def kill_processes(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# -- netctl's commands --------------------------------------------------------------------


def netctl_argv(*args: str) -> list[str]:
    """``netctl ARGS…`` run by this interpreter (the venv's, whatever PATH says)."""
    return [sys.executable, "-c",
            "import sys; from netctl.commands.cli import main; sys.exit(main())", *args]


def netctl_json(*args: str, timeout: float = 300) -> dict[str, Any]:
    """The JSON document ``netctl ARGS… --json`` prints (also when it exits 1 with one, as
    ``reconcile`` does when it reports errors)."""
    proc = run(netctl_argv(*args, "--json"), timeout=timeout)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise HarnessError(f"netctl {' '.join(args)} --json exited {proc.returncode}: "
                           f"{tail(proc.stdout)} {tail(proc.stderr)}")
    return out


def live_allocations(state_dir: str | Path) -> list[dict[str, Any]]:
    """The central IPAM's live allocations: what ``netctl ipam pools``, then ``ipam show``
    of each pool in use list, read here by those commands' own queries (no process per
    read: the benches look after every step)."""
    with contextlib.closing(query.connect(state_dir)) as conn:
        return [a for pool in query.pools(conn) if pool["in_use"]
                for a in query.pool_allocations(conn, pool["key"])]


# -- the plugin, exec'd as a runtime execs it ------------------------------------------------


@dataclass
class CNIResult:
    rc: int
    out: dict[str, Any] | None  # stdout as JSON, when it is
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"exited {self.rc}: {tail(self.stdout)} {tail(self.stderr)}".strip()


def cni_args(pod: str = "", networks: str = "", *extra: str) -> str:
    """``CNI_ARGS``: ``extra``, the pod (``ns/name``) as kubelet passes it, then
    ``NETCTL_NETWORKS``."""
    args = list(extra)
    if pod:
        ns, _, name = pod.partition("/")
        args += [f"K8S_POD_NAMESPACE={ns}", f"K8S_POD_NAME={name}"]
    if networks:
        args.append(f"NETCTL_NETWORKS={networks}")
    return ";".join(args)


def exec_plugin(path: str, command: str, stdin: bytes | str | dict[str, Any], *,
                container: str = "", netns: str | None = None, ifname: str = "eth0",
                args: str = "", cni_path: str = SYSTEM_CNI, env: dict[str, str | None]
                | None = None, timeout: float = EXEC_TIMEOUT) -> CNIResult:
    """Exec the plugin at ``path`` as a runtime would: ``netns`` a name (under
    /var/run/netns) or a path, ``env`` on top of the CNI environment (None removes a
    variable). Raises :class:`subprocess.TimeoutExpired` when it does not exit in time."""
    e: dict[str, str | None] = {
        "PATH": PATH, "CNI_COMMAND": command, "CNI_CONTAINERID": container,
        "CNI_IFNAME": ifname, "CNI_ARGS": args, "CNI_PATH": cni_path}
    if netns is not None:
        e["CNI_NETNS"] = netns if netns.startswith("/") else os.path.join(NETNS_DIR, netns)
    e.update(env or {})
    data = stdin if isinstance(stdin, bytes) else (
        stdin.encode() if isinstance(stdin, str) else json.dumps(stdin).encode())
    proc = run([path], data=data, env={k: v for k, v in e.items() if v is not None},
               timeout=timeout)
    stdout = proc.stdout.decode(errors="replace")
    try:
        out = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        out = None
    return CNIResult(proc.returncode, out if isinstance(out, dict) else None, stdout,
                     proc.stderr.decode(errors="replace"))


# -- configs ----------------------------------------------------------------------------------


def host_local(subnet: str, data_dir: str) -> dict[str, Any]:
    return {"type": "host-local", "subnet": subnet, "dataDir": data_dir}


def bridge_conf(name: str, bridge: str, ipam: dict[str, Any], version: str = "1.0.0",
                gateway: bool = True) -> dict[str, Any]:
    """A conflist of one ``bridge`` plugin (``isGateway`` unless not ``gateway``)."""
    plugin: dict[str, Any] = {"type": "bridge", "bridge": bridge, "ipam": ipam}
    if gateway:
        plugin["isGateway"] = True
    return {"cniVersion": version, "name": name, "plugins": [plugin]}


# -- the daemon --------------------------------------------------------------------------------


@dataclass
class Daemon:
    """A real ``netctl daemon`` child process on the dirs under ``root``; its plugin
    installed in ``root/bin``. Host names it is given come from :meth:`name` (``prefix``)."""

    root: Path
    prefix: str
    bin_dirs: list[str] = field(default_factory=lambda: [SYSTEM_CNI])
    settings: dict[str, Any] = field(default_factory=dict)  # more daemon config keys
    # a command the daemon is exec'd through (it must exec it in the same process, as
    # ``env`` and ``unshare`` without --fork do): another environment, a mount namespace
    launcher: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    pid: int = 0  # of the last one started

    @property
    def socket(self) -> str:
        return str(self.root / "run" / "netctl.sock")

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def journal_path(self) -> str:
        """The journal's path: also the ``NETCTL_OWNER`` marker of this daemon's delegates."""
        return str(query.journal_path(self.state_dir))

    @property
    def networks_dir(self) -> Path:
        return self.root / "networks"

    @property
    def ipam_dir(self) -> str:
        """A dataDir for host-local."""
        return str(self.root / "ipam")

    @property
    def plugin(self) -> str:
        return str(self.root / "bin" / "netctl-cni")

    @property
    def ipam_plugin(self) -> str:
        return str(self.root / "bin" / "netctl-ipam")

    @property
    def log_path(self) -> Path:
        return self.root / "daemon.log"

    def name(self, what: str) -> str:
        """A host-unique link or netns name (≤15 characters)."""
        return f"{self.prefix}{what}"[:15]

    def install_plugin(self, binary: str | None = None) -> None:
        """``netctl install-cni --bin-dir root/bin`` (``--plugin-binary binary``: the
        build's when None)."""
        extra = ["--plugin-binary", binary] if binary else []
        proc = run(netctl_argv("install-cni", "--bin-dir", str(self.root / "bin"), *extra))
        if proc.returncode != 0:
            raise HarnessError(f"netctl install-cni exited {proc.returncode}: "
                               f"{tail(proc.stderr)}")

    def add_network(self, name: str, config: dict[str, Any], namespace: str = "default") -> None:
        """A NetworkAttachmentDefinition file in the networks dir."""
        self.networks_dir.mkdir(parents=True, exist_ok=True)
        nad = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"config": json.dumps(config)}}
        (self.networks_dir / f"{namespace}-{name}.json").write_text(json.dumps(nad))

    def start(self, wait: bool = True) -> float:
        """Start ``netctl daemon --config`` (the dirs, then :attr:`settings`); with
        ``wait``, return the seconds from its exec to its socket accepting."""
        (self.root / "run").mkdir(parents=True, exist_ok=True)
        self.networks_dir.mkdir(parents=True, exist_ok=True)
        config = self.root / "daemon.json"
        config.write_text(json.dumps({
            "state-dir": str(self.state_dir), "socket": self.socket,
            "cni-bin-dir": ":".join(self.bin_dirs), "networks-dir": str(self.networks_dir),
            # never the host's: a DEL of an unknown container reads these (engine/foreign.py)
            "multus-cache-dir": str(self.root / "multus"),
            "cni-results-dir": str(self.root / "cni-results"), **self.settings}))
        with open(self.log_path, "ab") as log:  # the child keeps its own copy
            started = time.perf_counter()
            self.proc = subprocess.Popen([*self.launcher,
                                          *netctl_argv("daemon", "--config", str(config))],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.pid = self.proc.pid
        if not wait:
            return 0.0
        self.wait_ready()
        return time.perf_counter() - started

    def wait_ready(self, timeout: float = 30.0) -> None:
        def accepts() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise HarnessError(f"netctl daemon exited with {self.proc.returncode}:\n"
                                   + self.log()[-4000:])
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                try:
                    sock.connect(self.socket)
                except OSError:
                    return False
            return True

        wait_for(accepts, timeout, "the daemon's socket")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text()
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL, as a crash: the delegates it runs go on (their own sessions)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; its exit status (None: never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def delegates(self) -> list[int]:
        """Live processes carrying this daemon's delegate marker (``NETCTL_OWNER``)."""
        from netctl.cni.invoke import owned_processes  # here: that module loads trio

        return owned_processes(self.journal_path)

    def shut_down(self) -> None:
        """Stop it (bounded), then kill the delegates a killed one left running."""
        self.stop(15)
        kill_processes(self.delegates())

    def peak_rss_kib(self) -> int:
        """Its peak RSS (KiB) since it started or since :meth:`reset_peak_rss`."""
        return proc_status_kib(self.pid, "VmHWM")

    def rss_kib(self) -> int:
        """Its RSS (KiB) now."""
        return proc_status_kib(self.pid, "VmRSS")

    def reset_peak_rss(self) -> None:
        """Start :meth:`peak_rss_kib` again from the RSS now (``clear_refs`` 5)."""
        with open(f"/proc/{self.pid}/clear_refs", "w") as fh:
            fh.write("5")

    def conf(self, cluster: str, version: str = "1.1.0", **extra: Any) -> dict[str, Any]:
        """The runtime's network config for the thin plugin, ``cluster`` its cluster network."""
        return {"cniVersion": version, "name": "netctl", "type": "netctl-cni",
                "socket": self.socket, "clusterNetwork": cluster, **extra}

    def cni(self, command: str, container: str, netns: str | None,
            conf: dict[str, Any] | str | bytes, *, ifname: str = "eth0", networks: str = "",
            pod: str = "", args: Sequence[str] = (), env: dict[str, str | None] | None = None,
            timeout: float = EXEC_TIMEOUT) -> CNIResult:
        """Exec the installed thin plugin exactly as a runtime would."""
        return exec_plugin(self.plugin, command, conf, container=container, netns=netns,
                           ifname=ifname, args=cni_args(pod, networks, *args),
                           cni_path=CLIENT_CNI_PATH, env=env, timeout=timeout)

    def read_only(self) -> contextlib.closing[sqlite3.Connection]:
        """A read-only connection to the journal, closed when its ``with`` block ends."""
        return contextlib.closing(query.open_read_only(self.journal_path, timeout=10))

    def live_attachments_of(self, containers: Iterable[str]) -> int:
        """How many attachments of ``containers`` the journal has not removed (a read-only
        look at the database, cheap enough to wait on)."""
        wanted = list(containers)
        if not wanted:
            return 0
        with self.read_only() as conn:
            return journaldb.live_attachment_count(conn, wanted)

    def live_counts(self) -> tuple[int, int]:
        """(attachments not removed, live allocations) in the journal (read-only, cheap)."""
        with self.read_only() as conn:
            return journaldb.live_counts(conn)

    def integrity(self) -> list[str]:
        """``PRAGMA integrity_check`` of the journal: ``["ok"]`` when it is sound."""
        with self.read_only() as conn:
            return journaldb.integrity(conn)

    def journal(self, *args: str) -> dict[str, Any]:
        """``netctl journal --state-dir … --limit 0 ARGS… --json`` (every attachment)."""
        return netctl_json("journal", "--state-dir", str(self.state_dir), "--limit", "0",
                           *args)

    def read_journal(self, running: bool = False) -> dict[str, Any]:
        """What ``netctl journal --limit 0 [--running] --json`` prints, read here by the
        command's own query (:func:`netctl.journal.query.journal`; no process per read)."""
        with self.read_only() as conn:
            return query.journal(conn, query.Filters(running=running, limit=0))

    def status(self) -> dict[str, Any]:
        """What ``netctl status --json`` prints but the doctor's ``warnings``: the daemon's
        health over its socket, read here by the command's own request (no process per
        read: the tests and benches poll it), or the command's ``down`` document."""
        try:
            return admin_request(self.socket)
        except HEALTH_UNREACHABLE as exc:
            return down_health(self.socket, exc)

    def reconcile(self, dry_run: bool = False) -> dict[str, Any]:
        """``netctl reconcile [--dry-run] --json`` (offline from the journal when it is down)."""
        return netctl_json("reconcile", "--socket", self.socket, "--state-dir",
                           str(self.state_dir), *(["--dry-run"] if dry_run else []))


# -- what a run left behind ---------------------------------------------------------------------


def leftovers(daemon: Daemon, *, bridges: Iterable[str] = (), netns_prefix: str | None = None,
              ipam_dir: str | Path | None = None) -> dict[str, list[str]]:
    """What is left of a run, by :data:`LEFTOVERS` key: the journal's operations still
    running, attachments not removed and live allocations, the host veths the reconciler
    would still delete (named in the journal's results), the daemon's delegate processes;
    the ports on ``bridges``, host-local's leases under ``ipam_dir`` and (with
    ``netns_prefix``) the netns of that prefix. Every list empty: nothing is left."""
    found = {
        "operations_running": [f"operation {o['id']} {o['verb']} of {o['container_id']}"
                               for o in daemon.read_journal(running=True)["operations"]],
        "attachments_live": [f"attachment {a['attachment']} of {a['container']} on "
                             f"{a['network']} {a['ifname']} ({a['state']})"
                             for a in daemon.read_journal()["attachments"]
                             if a["state"] != "removed"],
        "allocations_live": [f"allocation {a['address']} of {a['container']} {a['ifname']}"
                             for a in live_allocations(daemon.state_dir)],
        "host_local_leases": host_local_leases(ipam_dir) if ipam_dir else [],
        "bridge_ports": [f"{b}: {p}" for b in bridges for p in bridge_ports(b)],
        "host_veths": [f"{link['link']} ({link['reason']})"
                       for link in daemon.reconcile(dry_run=True)["plan"]["links"]],
        "delegates": [f"pid {pid} {comm(pid)}" for pid in daemon.delegates()],
    }
    if netns_prefix is not None:
        found["netns"] = netns_names(netns_prefix)
    return found


def some(items: Sequence[str], limit: int = 10) -> str:
    """The first ``limit`` items, comma-separated, and " …" when there are more."""
    return ", ".join(items[:limit]) + (" …" if len(items) > limit else "")


def describe_leftovers(found: dict[str, list[str]]) -> list[str]:
    """One line per kind of leftover found."""
    return [f"{LEFTOVERS[key]}: {len(items)}: {some(items)}"
            for key, items in found.items() if items]
