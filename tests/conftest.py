"""Shared fixtures: real network namespaces, a real daemon process, the installed plugin.

Every name a test creates on the host starts with ``nct`` plus a per-run tag, so
teardown can remove exactly what this run made, even after a failure, and the
suite can run twice in a row on one machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
NETCTL = str(VENV_BIN / "netctl")
TEST_PLUGINS = ROOT / "tests" / "plugins"
SYSTEM_CNI = "/usr/lib/cni"
RUN_TAG = secrets.token_hex(2)


def have_root_and_plugins() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not os.path.exists(f"{SYSTEM_CNI}/bridge"):
        return "needs containernetworking-plugins in /usr/lib/cni"
    if shutil.which("ip") is None:
        return "needs iproute2"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = have_root_and_plugins()
    if reason:
        for item in items:
            if "netns" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


def wait_for(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def host_links(prefix: str = "") -> list[str]:
    out = ip("-o", "link", "show").stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return [n for n in names if n.startswith(prefix)]


def netns_links(name: str) -> list[str]:
    out = ip("-n", name, "-o", "link", "show").stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def netns_addrs(name: str) -> dict[str, list[str]]:
    """Interface → its global addresses (CIDR form), read inside the netns."""
    data = json.loads(ip("-n", name, "-j", "addr", "show").stdout or "[]")
    return {d["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in d.get("addr_info", [])
                          if a.get("scope") == "global"] for d in data}


def bridge_ports(bridge: str) -> list[str]:
    out = ip("-o", "link", "show", "master", bridge, check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def bridge_conf(name: str, bridge: str, subnet: str, version: str = "1.0.0",
                ipam_dir: str = "/tmp") -> dict[str, Any]:
    return {"cniVersion": version, "name": name, "plugins": [{
        "type": "bridge", "bridge": bridge, "isGateway": True,
        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam_dir}}]}


def macvlan_conf(name: str, master: str, subnet: str, version: str = "1.0.0",
                 ipam_dir: str = "/tmp") -> dict[str, Any]:
    return {"cniVersion": version, "name": name, "plugins": [{
        "type": "macvlan", "master": master, "mode": "bridge",
        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam_dir}}]}


def ptp_conf(name: str, subnet: str, version: str = "1.0.0",
             ipam_dir: str = "/tmp") -> dict[str, Any]:
    return {"cniVersion": version, "name": name, "plugins": [{
        "type": "ptp", "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam_dir}}]}


@dataclass
class CNIResult:
    rc: int
    out: dict[str, Any] | None
    stdout: str
    stderr: str


@dataclass
class Daemon:
    """A real ``netctl daemon`` child process on a temporary state dir."""

    root: Path
    tag: str
    bin_dirs: list[str]
    settings: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def socket(self) -> str:
        return str(self.root / "run" / "netctl.sock")

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def networks_dir(self) -> Path:
        return self.root / "networks"

    @property
    def ipam_dir(self) -> str:
        return str(self.root / "ipam")

    @property
    def plugin(self) -> str:
        return str(self.root / "bin" / "netctl-cni")

    def name(self, what: str) -> str:
        """A host-unique link name for this test (≤15 characters)."""
        return f"nct{self.tag}{what}"[:15]

    def add_network(self, name: str, config: dict[str, Any], namespace: str = "default") -> None:
        self.networks_dir.mkdir(parents=True, exist_ok=True)
        nad = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"config": json.dumps(config)}}
        (self.networks_dir / f"{namespace}-{name}.json").write_text(json.dumps(nad))

    def start(self, wait: bool = True) -> None:
        self.root.joinpath("run").mkdir(parents=True, exist_ok=True)
        self.networks_dir.mkdir(parents=True, exist_ok=True)
        cfg = {"state-dir": str(self.state_dir), "socket": self.socket,
               "cni-bin-dir": ":".join(self.bin_dirs), "networks-dir": str(self.networks_dir),
               "log-level": "debug", "plugin-timeout": 5, "compensate-timeout": 20,
               "drain-timeout": 10, "reconcile-interval": 0, **self.settings}
        config = self.root / "daemon.json"
        config.write_text(json.dumps(cfg))
        self.log_path = self.root / "daemon.log"
        log = open(self.log_path, "ab")  # the child process keeps it open
        self.proc = subprocess.Popen([NETCTL, "daemon", "--config", str(config)],
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 20.0) -> None:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(self.socket)
                except OSError:
                    return False
            return True

        wait_for(ready, timeout, "the daemon's socket")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def conf(self, cluster: str, version: str = "1.1.0", **extra: Any) -> dict[str, Any]:
        return {"cniVersion": version, "name": "netctl", "type": "netctl-cni",
                "socket": self.socket, "clusterNetwork": cluster, **extra}

    def cni(self, command: str, container: str, netns: str | None, conf: dict[str, Any] | str
            | bytes, *, ifname: str = "eth0", networks: str = "", pod: str = "",
            env: dict[str, str] | None = None, timeout: float = 120) -> CNIResult:
        """Exec the installed plugin exactly as a runtime would."""
        args = []
        if pod:
            ns, _, name = pod.partition("/")
            args += [f"K8S_POD_NAMESPACE={ns}", f"K8S_POD_NAME={name}"]
        if networks:
            args.append(f"NETCTL_NETWORKS={networks}")
        e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": command,
             "CNI_CONTAINERID": container, "CNI_IFNAME": ifname, "CNI_ARGS": ";".join(args),
             "CNI_PATH": "/nonexistent-client-path"}
        if netns is not None:
            e["CNI_NETNS"] = netns if netns.startswith("/") else f"/var/run/netns/{netns}"
        e.update(env or {})
        e = {k: v for k, v in e.items() if v is not None}
        data = conf if isinstance(conf, bytes) else (
            conf.encode() if isinstance(conf, str) else json.dumps(conf).encode())
        proc = subprocess.run([self.plugin], input=data, env=e, capture_output=True,
                              timeout=timeout)
        stdout = proc.stdout.decode()
        try:
            out = json.loads(stdout) if stdout.strip() else None
        except ValueError:
            out = None
        return CNIResult(proc.returncode, out, stdout, proc.stderr.decode())

    def journal(self, *args: str) -> dict[str, Any]:
        out = subprocess.run([NETCTL, "journal", "--state-dir", str(self.state_dir), "--json",
                              *args], capture_output=True, text=True, check=True).stdout
        result: dict[str, Any] = json.loads(out)
        return result

    def db(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import sqlite3

        conn = sqlite3.connect(str(self.state_dir / "journal.db"))
        try:
            return list(conn.execute(sql, params))
        finally:
            conn.close()


def _cleanup_links(prefix: str) -> None:
    for name in host_links(prefix):
        ip("link", "del", name, check=False)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon with the test plugins and the real plugins; started by the test."""
    tag = secrets.token_hex(2)
    d = Daemon(tmp_path, tag, [str(TEST_PLUGINS), SYSTEM_CNI])
    subprocess.run([NETCTL, "install-cni", "--bin-dir", str(tmp_path / "bin")], check=True,
                   capture_output=True)
    try:
        yield d
    finally:
        if d.proc and d.proc.poll() is None:
            d.stop(15)
        _cleanup_links(f"nct{tag}")


@pytest.fixture
def netns() -> Iterator[Callable[[], str]]:
    """A factory of real network namespaces, all removed at teardown."""
    made: list[str] = []

    def make() -> str:
        name = f"nct{RUN_TAG}-{secrets.token_hex(4)}"
        ip("netns", "add", name)
        made.append(name)
        return name

    try:
        yield make
    finally:
        for name in made:
            ip("netns", "del", name, check=False)


@pytest.fixture
def veth_parent(daemon: Daemon) -> Iterator[str]:
    """A host veth (up) to hang macvlan networks on; removed at teardown."""
    parent, peer = daemon.name("p"), daemon.name("q")
    ip("link", "add", parent, "type", "veth", "peer", "name", peer)
    ip("link", "set", parent, "up")
    ip("link", "set", peer, "up")
    try:
        yield parent
    finally:
        ip("link", "del", parent, check=False)


def journal_results(daemon: Daemon, container: str) -> list[dict[str, Any]]:
    """Every delegate result the journal holds for ``container`` (live or removed)."""
    rows = daemon.db("SELECT result FROM attachments WHERE container_id=? AND result IS NOT NULL"
                     " ORDER BY id", (container,))
    return [json.loads(row[0]) for row in rows]


def host_veths(results: list[dict[str, Any]]) -> list[str]:
    """The host-side veths (interfaces with no sandbox) named in these results."""
    return [i["name"] for r in results for i in r.get("interfaces") or []
            if not i.get("sandbox") and i.get("name", "").startswith("veth")]


def ipam_held(ipam_dir: str) -> list[str]:
    """Addresses host-local still holds under ``ipam_dir`` (it keeps one file per address)."""
    import ipaddress

    held = []
    for path in Path(ipam_dir).glob("*/*"):
        try:
            ipaddress.ip_address(path.name)
        except ValueError:
            continue
        held.append(f"{path.parent.name}/{path.name}")
    return sorted(held)


def owned_processes(daemon: Daemon) -> list[int]:
    """Live processes carrying this daemon's delegate marker (NETCTL_OWNER=<journal>)."""
    marker = f"NETCTL_OWNER={daemon.state_dir / 'journal.db'}".encode() + b"\0"
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read() + b"\0"
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in environ and state not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def assert_still_serves(daemon: Daemon, ns: str, cluster: str, bridge: str) -> None:
    """A good ADD and DEL on ``cluster`` (a bridge network) work, and leave nothing."""
    conf = daemon.conf(cluster)
    res = daemon.cni("ADD", "after1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert len(bridge_ports(bridge)) == 1
    assert len(ipam_held(daemon.ipam_dir)) == 1
    res = daemon.cni("DEL", "after1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert bridge_ports(bridge) == []
    assert netns_links(ns) == ["lo"]


# -- daemons dying mid-ADD (test_crash, test_ipam_more) ------------------------------------

Background = Callable[..., Future[CNIResult]]


@pytest.fixture
def background(daemon: Daemon) -> Iterator[Background]:
    """Run ``daemon.cni`` in a thread; on the way out, kill whatever delegate a test
    left running (a SIGKILLed daemon leaves its children) so no thread waits forever."""
    pool = ThreadPoolExecutor(2)
    calls: list[Future[CNIResult]] = []

    def submit(*args: Any, **kw: Any) -> Future[CNIResult]:
        calls.append(pool.submit(daemon.cni, *args, **kw))
        return calls[-1]

    try:
        yield submit
    finally:
        if not all(c.done() for c in calls):
            daemon.kill()
        for pid in owned_processes(daemon):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        pool.shutdown(wait=True)


def step_states(daemon: Daemon, container: str) -> dict[str, str]:
    """plugin type → state of its ADD step, for the container's ADD operation."""
    rows = daemon.db("SELECT s.plugin_type, s.state FROM steps s JOIN operations o"
                     " ON o.id = s.operation_id WHERE o.verb='ADD' AND o.container_id=?"
                     " AND s.verb='ADD'", (container,))
    return dict(rows)


def comm(pid: int) -> str:
    """The process's command name, or "" once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def add_hanging(daemon: Daemon, netns: Callable[[], str], background: Background,
                cluster: str, container: str, pod: str = "",
                settings: dict[str, Any] | None = None) -> tuple[Future[CNIResult], str]:
    """Start the daemon (plugin-timeout 300, then ``settings``) with a network ``hung``
    (the ``hang`` test plugin) beside ``cluster``, and in the background an ADD of
    ``container`` in a new netns on both; return once the bridge step is done and the hang
    step runs: the call and the netns."""
    daemon.add_network("hung", {"cniVersion": "1.0.0", "name": "hung",
                                "plugins": [{"type": "hang"}]})
    daemon.settings["plugin-timeout"] = 300
    daemon.settings.update(settings or {})
    daemon.start()
    ns = netns()
    call = background("ADD", container, ns, daemon.conf(cluster), networks="hung", pod=pod)
    wait_for(lambda: step_states(daemon, container) == {"bridge": "ok", "hang": "running"},
             20, "the bridge step done and the hang step running")
    return call, ns


def hang_sleeps(daemon: Daemon) -> list[int]:
    """Wait for the hang plugin's ``sleep`` (a delegate of this daemon); its pids."""
    pids: list[int] = wait_for(
        lambda: [p for p in owned_processes(daemon) if comm(p) == "sleep"], 10,
        "the hang plugin's sleep")
    return pids


# -- the central IPAM (test_ipam, test_ipam_more) -----------------------------------------


def ipam_bridge(name: str, bridge: str, ipam: dict[str, Any]) -> dict[str, Any]:
    """A bridge network whose IPAM section is ``ipam``."""
    return {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "bridge", "bridge": bridge, "ipam": ipam}]}


def live(daemon: Daemon) -> list[tuple[str, str, str]]:
    """(container, ifname, address) of every allocation the journal has not released."""
    return daemon.db("SELECT container_id, ifname, address FROM ipam_allocations"
                     " WHERE released_at IS NULL ORDER BY id")


def eth0_addr(ns: str) -> str:
    return netns_addrs(ns)["eth0"][0]
