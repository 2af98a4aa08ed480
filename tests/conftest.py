"""Shared fixtures over :mod:`netctl_kit.harness`: real network namespaces, a real daemon
process, the installed plugin; and the journal reads the tests assert on.

Every name a test creates on the host starts with ``nct`` plus a per-run or per-test tag,
so teardown can remove exactly what it made, even after a failure, and the suite can run
twice in a row on one machine.
"""

from __future__ import annotations

import compileall
import contextlib
import json
import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import pytest
from netctl_kit import harness, journaldb, realnode
from netctl_kit.harness import (  # noqa: F401  (the helpers the test modules import from here)
    SYSTEM_CNI,
    CNIResult,
    bridge_ports,
    comm,
    host_links,
    ip,
    netns_addrs,
    netns_links,
    wait_for,
)
from netctl_kit.kubefake import FakeKube
from netctl_kit.kubefake import real as realkube
from netctl_kit.kubefake.real import RealKube, free_port  # noqa: F401  (for the test modules)

from netctl.journal import query

NETCTL = str(Path(sys.executable).parent / "netctl")
ROOT = Path(__file__).resolve().parent.parent
TEST_PLUGINS = ROOT / "tests" / "plugins"
# The plugin binary the tests exec and install: `make plugin`'s, or with
# NETCTL_PLUGIN_SANITIZED=1 (`make test-sanitized`) `make plugin-sanitized`'s, built with
# ASan and UBSan, whose reports (tests/sanitizer_options.c) fail the test that caused them.
SANITIZED = os.environ.get("NETCTL_PLUGIN_SANITIZED", "") not in ("", "0")
PLUGIN_BINARY = ROOT / "build" / ("plugin-asan" if SANITIZED else "plugin") / "netctl-cni"
SANITIZER_REPORTS = ROOT / "build" / "plugin-asan" / "reports"
RUN_TAG = secrets.token_hex(2)
TEST_SETTINGS = {"log-level": "debug", "plugin-timeout": 5, "compensate-timeout": 20,
                 "drain-timeout": 10, "reconcile-interval": 0}
P = ParamSpec("P")
T = TypeVar("T")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Every test runs the plugin binary built from the sources as they are: ``make
    plugin`` rebuilds it when a source is newer (and does nothing otherwise). netctl's
    modules are compiled once here: the daemons and commands the tests start (hundreds)
    then load its bytecode, also where ``PYTHONDONTWRITEBYTECODE`` keeps Python from
    writing it on import (each would compile the modules it imports again: 0.1 to 0.3 s).
    For the same reason this process writes bytecode whatever that variable says: pytest
    then keeps each test module's assertion-rewritten code beside it and reuses it while the
    module is unchanged (the collection took 8 to 22 s here, 2 to 6 s with that kept).
    With :data:`SANITIZED`, ``make plugin-sanitized`` too, and its old reports are
    removed."""
    sys.dont_write_bytecode = False
    targets = ["plugin", "plugin-sanitized"] if SANITIZED else ["plugin"]
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), *targets], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.exit(f"make {' '.join(targets)} failed (the tests run the plugin binary it "
                    f"builds):\n{proc.stdout}{proc.stderr}", returncode=1)
    if SANITIZED:
        for report in SANITIZER_REPORTS.iterdir():
            report.unlink()
    for package in ("netctl", "migrations"):
        compileall.compile_dir(ROOT / package, quiet=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = harness.preflight(("bridge",))
    if reason:
        for item in items:
            if "netns" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


# -- the Kubernetes API: the fake, and a real kube-apiserver ---------------------------------

Kube = FakeKube | RealKube


SERVERS = os.environ.get("NETCTL_TEST_SERVERS", "auto")  # auto | both | fake | real
REAL_MISSING = realkube.unavailable()


def servers_for(marked: tuple[str, ...]) -> tuple[str, ...]:
    """The API servers a test marked ``servers(*marked)`` runs against. ``auto`` (the
    default): a test either server can serve runs once, on the real one when it is here
    (the fake otherwise); ``both``: on each (to hold the fake to the real server's
    behaviour); ``fake`` or ``real``: on that one where marked for it."""
    if SERVERS == "both" or len(marked) == 1:
        return marked
    if SERVERS in marked:
        return (SERVERS,)
    return ("fake",) if REAL_MISSING else ("real",)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``kube`` and is marked ``servers(…)`` (on itself or its module)
    runs against the servers :func:`servers_for` picks; its module's ``kube`` fixture
    builds each with :func:`kube_server`."""
    marker = metafunc.definition.get_closest_marker("servers")
    if marker is not None and "kube" in metafunc.fixturenames:
        metafunc.parametrize("kube", servers_for(marker.args), indirect=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if REAL_MISSING:
        terminalreporter.write_line(
            f"real kube-apiserver: not run ({REAL_MISSING}); the tests either server can "
            "serve ran on the fake, those for the real one only were skipped")


@pytest.fixture(scope="session")
def real_kube() -> Iterator[RealKube]:
    """One real etcd and kube-apiserver for the session (:mod:`tests.realkube`), or the
    test skipped with what is missing and how to provide it."""
    reason = realkube.unavailable()
    if reason:
        pytest.skip(f"real kube-apiserver: {reason}")
    with RealKube() as kube:
        yield kube


class RealNodes:
    """Real clusters (:class:`netctl_kit.realnode.RealCluster`) shared by the real-node
    modules of the session that can share one: one per Kubernetes version, opened by the
    first module that asks for that version, with netctl installed as docs/kubernetes.md
    says. A module of one node (``test_realnode.py``, ``test_realnode_dra.py``) gets the
    first node, the others cordoned; a module of several (``test_realnode_multinode.py``)
    grows the cluster to what it asks and gets every node schedulable. A module that
    needs a cluster of its own (Multus installed first, a bench) calls :meth:`release`
    first: one real cluster runs on a machine at a time
    (:data:`netctl_kit.realnode.LOCK`). The modules that share are named so that they run
    one after the other, the single-node ones first; each takes back what it made."""

    def __init__(self) -> None:
        self.clusters: dict[str, realnode.RealCluster] = {}

    def __call__(self, kube: realnode.KubeVersion | None) -> realnode.RealNode:
        """The first node of ``kube``'s cluster (the others cordoned), opened if need be;
        the test skipped, with one line, when no node can run here."""
        c = self.cluster(kube, 1)
        for n in c.nodes[1:]:
            c.kubectl("cordon", n.name)
        return c.nodes[0]

    def cluster(self, kube: realnode.KubeVersion | None, nodes: int) -> realnode.RealCluster:
        """``kube``'s cluster with at least ``nodes`` nodes, every one schedulable."""
        reason = realnode.unavailable(kube=kube)
        if reason or kube is None:
            pytest.skip(f"real node: {reason}")
        if kube.version not in self.clusters:
            self.release()
            try:
                realnode.build_image()  # this checkout's netctl, once a session
            except realnode.NodeError as exc:
                missing = realnode.unavailable(image=realnode.netctl_image())
                if missing:  # no image at all (mmdebstrap and apt-get out of reach, …)
                    pytest.skip(f"real node: {missing}; {str(exc).splitlines()[-1]}")
                raise
            c = realnode.RealCluster(1, kube=kube)
            c.open()
            try:
                c.install_netctl(build=False)
            except BaseException:
                c.close()
                raise
            self.clusters[kube.version] = c
        c = self.clusters[kube.version]
        while len(c.nodes) < nodes:
            c.add_node()
        for n in c.nodes[1:]:
            c.kubectl("uncordon", n.name)
        if nodes > 1:
            c.wait_ready("daemonset", "netctl", "kube-system", timeout=180)
        return c

    def release(self) -> None:
        """Every shared cluster closed (everything it made removed)."""
        errors = []
        while self.clusters:
            _, c = self.clusters.popitem()
            try:
                c.close()
            except realnode.NodeError as exc:
                errors.append(str(exc))
        assert not errors, errors


@pytest.fixture(scope="session")
def real_nodes() -> Iterator[RealNodes]:
    """The session's shared real clusters (:class:`RealNodes`), closed when it ends."""
    nodes = RealNodes()
    yield nodes
    nodes.release()


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> Iterator[Kube]:
    """The API server of a test marked ``servers(…)``: a fake one by default (a module
    serving more kinds has its own fixture, built with :func:`kube_server` too)."""
    with kube_server(request, bookmark_interval=0.5) as server:
        yield server
        assert server.server_errors == []


@contextlib.contextmanager
def kube_server(request: pytest.FixtureRequest, **fake: Any) -> Iterator[Kube]:
    """The server the test is parametrized with: a new :class:`FakeKube` (``fake`` are
    its arguments), or the session's real API server, emptied of what the test made
    afterwards (and started again if the test left it stopped); there, none of netctl's
    requests may have been refused (403: a verb its ClusterRole lacks; 422)."""
    if getattr(request, "param", "fake") == "fake":
        with FakeKube(**fake) as kube:
            yield kube
        return
    real: RealKube = request.getfixturevalue("real_kube")
    real.reset_counts()
    try:
        yield real
        assert real.refused == [], "netctl's requests refused by RBAC or validation"
    finally:
        if not real.serving:
            real.start()
        real.clean()


class Daemon(harness.Daemon):
    """The harness's daemon, and its journal read for assertions."""

    def read(self, reader: Callable[Concatenate[sqlite3.Connection, P], T],
             *args: P.args, **kwargs: P.kwargs) -> T:
        """What ``reader`` — a function of :mod:`netctl_kit.journaldb` or of
        :mod:`netctl.journal.query` — reads on a read-only connection to the journal."""
        with self.read_only() as conn:
            return reader(conn, *args, **kwargs)


@pytest.fixture(scope="session")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bin dir with the plugin (:data:`PLUGIN_BINARY`) installed by ``netctl
    install-cni`` (once a session: the command is tested on its own; each daemon's bin dir
    gets a copy of these files)."""
    d = Daemon(tmp_path_factory.mktemp("installed"), "nct")
    d.install_plugin(str(PLUGIN_BINARY))
    return Path(d.plugin).parent


@pytest.fixture(autouse=SANITIZED)
def no_sanitizer_report() -> Iterator[None]:
    """With the sanitized plugin, a test fails on any report its execs left (an abort ends
    the plugin at the first; its exit alone may look like a failure the test expected)."""
    yield
    reports = sorted(SANITIZER_REPORTS.iterdir())
    texts = [f"{r}:\n{r.read_text(errors='replace')}" for r in reports]
    for report in reports:
        report.unlink()
    if texts:
        pytest.fail("the sanitized plugin reported:\n" + "\n".join(texts), pytrace=False)


@pytest.fixture
def daemon(tmp_path: Path, installed_plugin: Path) -> Iterator[Daemon]:
    """A daemon with the test plugins and the real plugins; started by the test. Its
    bin dir holds the plugin as ``netctl install-cni`` installs it."""
    d = Daemon(tmp_path, f"nct{secrets.token_hex(2)}", [str(TEST_PLUGINS), SYSTEM_CNI],
               dict(TEST_SETTINGS))
    shutil.copytree(installed_plugin, Path(d.plugin).parent)
    try:
        yield d
    finally:
        try:
            d.shut_down()
        finally:  # also when the daemon would not stop
            harness.remove_host_objects(d.prefix)


@pytest.fixture
def netns() -> Iterator[Callable[[], str]]:
    """A factory of real network namespaces, all removed at teardown."""
    made: list[str] = []

    def make() -> str:
        made.append(f"nct{RUN_TAG}-{secrets.token_hex(4)}")
        harness.netns_add(made[-1])
        return made[-1]

    try:
        yield make
    finally:
        for name in made:
            harness.netns_del(name)


@pytest.fixture
def veth_parent(daemon: Daemon) -> str:
    """A host veth (up) to hang macvlan networks on; removed with the daemon's links."""
    parent, peer = daemon.name("p"), daemon.name("q")
    ip("link", "add", parent, "type", "veth", "peer", "name", peer)
    ip("link", "set", parent, "up")
    ip("link", "set", peer, "up")
    return parent


# -- network configs ------------------------------------------------------------------------


def bridge_conf(name: str, bridge: str, subnet: str, version: str = "1.0.0",
                ipam_dir: str = "/tmp") -> dict[str, Any]:
    return harness.bridge_conf(name, bridge, harness.host_local(subnet, ipam_dir), version)


def macvlan_conf(name: str, master: str, subnet: str, version: str = "1.0.0",
                 ipam_dir: str = "/tmp") -> dict[str, Any]:
    return {"cniVersion": version, "name": name, "plugins": [{
        "type": "macvlan", "master": master, "mode": "bridge",
        "ipam": harness.host_local(subnet, ipam_dir)}]}


def ptp_conf(name: str, subnet: str, version: str = "1.0.0",
             ipam_dir: str = "/tmp") -> dict[str, Any]:
    return {"cniVersion": version, "name": name, "plugins": [{
        "type": "ptp", "ipam": harness.host_local(subnet, ipam_dir)}]}


def ipam_bridge(name: str, bridge: str, ipam: dict[str, Any]) -> dict[str, Any]:
    """A bridge network whose IPAM section is ``ipam``."""
    return harness.bridge_conf(name, bridge, ipam, gateway=False)


def exec_direct(daemon: Daemon, path: str, command: str, conf: dict[str, Any], *,
                container: str = "", ns: str | None = None, args: str = "") -> CNIResult:
    """The plugin at ``path`` exec'd directly (no netctl-cni) as a runtime would, with the
    installed netctl-ipam and the real plugins on CNI_PATH."""
    return harness.exec_plugin(path, command, conf, container=container, netns=ns, args=args,
                               cni_path=f"{Path(daemon.plugin).parent}:{SYSTEM_CNI}", timeout=60)


# -- the host's ports (portmap) ------------------------------------------------------------


def http_get(port: int) -> bytes | None:
    """A plain GET to 127.0.0.1:port (no proxy, loopback only); None when refused."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)
    except ConnectionRefusedError:
        return None


# -- log lines (test_logs) -------------------------------------------------------------------


def parse_logfmt(line: str) -> dict[str, str]:
    """One logfmt line → its pairs: ``key=value`` or ``key="quoted value"`` (``\\``,
    ``\\"``, ``\\n``, ``\\r``, ``\\t`` escapes), separated by spaces; anything else
    raises ValueError."""
    out: dict[str, str] = {}
    i, n = 0, len(line)
    unescape = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
    while i < n:
        if line[i] == " ":
            i += 1
            continue
        eq = line.find("=", i)
        if eq <= i or " " in line[i:eq] or '"' in line[i:eq]:
            raise ValueError(f"no key=value at {i}: {line[i:i + 30]!r}")
        key, i = line[i:eq], eq + 1
        if i < n and line[i] == '"':
            chars: list[str] = []
            i += 1
            while True:
                if i >= n:
                    raise ValueError(f"unterminated quote for {key!r}")
                c = line[i]
                if c == "\\":
                    if i + 1 >= n or line[i + 1] not in unescape:
                        raise ValueError(f"bad escape in {key!r}")
                    chars.append(unescape[line[i + 1]])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    chars.append(c)
                    i += 1
            if i < n and line[i] != " ":
                raise ValueError(f"text after the quoted value of {key!r}")
            out[key] = "".join(chars)
        else:
            end = line.find(" ", i)
            end = n if end < 0 else end
            value = line[i:end]
            if '"' in value or "=" in value:
                raise ValueError(f"unquoted value of {key!r} holds a quote or '='")
            out[key], i = value, end
    return out


# -- what is left ----------------------------------------------------------------------------


def ipam_held(ipam_dir: str) -> list[str]:
    """Addresses host-local still holds under ``ipam_dir``."""
    return harness.host_local_leases(ipam_dir)


def owned_processes(daemon: Daemon) -> list[int]:
    """Live processes carrying this daemon's delegate marker (NETCTL_OWNER=<journal>)."""
    return daemon.delegates()


def journal_results(daemon: Daemon, container: str | None = None) -> list[dict[str, Any]]:
    """Every delegate result the journal holds (for ``container``), live or removed."""
    return [json.loads(a["result"]) for a in daemon.read(
        journaldb.attachment_rows, container=container) if a["result"] is not None]


def attachment_states(daemon: Daemon) -> dict[str, str]:
    """container → the state of its attachment (its newest, when it has several)."""
    return {a["container"]: a["state"] for a in daemon.read(query.attachments)}


def host_veths(results: list[dict[str, Any]]) -> list[str]:
    """The host-side veths (interfaces with no sandbox) named in these results."""
    return [i["name"] for r in results for i in r.get("interfaces") or []
            if not i.get("sandbox") and i.get("name", "").startswith("veth")]


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


# -- daemons dying mid-ADD (test_crash, test_ipam_config_and_recovery) ---------------------

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
        harness.kill_processes(daemon.delegates())
        pool.shutdown(wait=True)


def step_states(daemon: Daemon, container: str) -> dict[str, str]:
    """plugin type → state of its ADD step, for the container's ADD operation."""
    adds = {o["id"] for o in daemon.read(journaldb.operation_rows, container=container,
                                         verb="ADD")}
    return {s["plugin_type"]: s["state"] for s in daemon.read(
        journaldb.step_rows, container=container, verb="ADD") if s["operation_id"] in adds}


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
    return wait_for(lambda: [p for p in daemon.delegates() if comm(p) == "sleep"], 10,
                    "the hang plugin's sleep")


# -- the central IPAM (test_ipam, test_ipam_config_and_recovery) ---------------------------


def live(daemon: Daemon) -> list[tuple[str, str, str]]:
    """(container, ifname, address) of every allocation the journal has not released."""
    return [(a["container_id"], a["ifname"], a["address"])
            for a in daemon.read(query.live_allocations)]


def eth0_addr(ns: str) -> str:
    return netns_addrs(ns)["eth0"][0]
