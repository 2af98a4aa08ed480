"""We test ``kubectl netctl`` (cluster-wide queries, issue 21 item 1) against four real
daemons as the nodes of one fake API server, each serving its query endpoint
(``query-addr``) on its own loopback port, found through a DaemonSet pod per node whose
``netctl.dev/query-addr`` annotation says where. These aspects:

- ``journal --ip ADDR --at T`` names who held the address at T from any node's history: a
  pod gone from its node (DELeted) is still named, by that node, and the address's holder
  now — on another node — is named at another time;
- ``--namespace`` and ``--pod`` select across nodes, each row naming its node;
- RBAC: a token the API server does not know is refused with 401, a known user without the
  ``nodes/netctl-journal`` permission with 403, before anything is read — and the CLI says
  so, per node; an allowed answer is kept a minute (one TokenReview per node, not per
  query);
- a node whose daemon is down is named in the output, the others still answer, exit 1;
- on a real kube-apiserver: real reviews by daemons under netctl's ServiceAccount (its
  ClusterRole), callers bound to the roles of deploy/kubernetes/journal-reader.yaml;
- HTTPS with a serving certificate; the reviews' cache;
- ``ipam pools`` and ``status`` merged across nodes.

Addresses come from the plain ``netctl-ipam`` plugin with the pod in CNI_ARGS (the node's
allocator and its journal, without a netns per pod), the cluster IPAM backend."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from netctl_kit import harness
from netctl_kit.harness import CNIResult
from netctl_kit.kubefake import IPAMBLOCKS, FakeKube, node, pod
from netctl_kit.kubefake.real import ApiFailure, RealKube, free_port

from netctl.commands.journalview import ALLOCATION_COLUMNS
from tests.conftest import SYSTEM_CNI, TEST_PLUGINS, TEST_SETTINGS, Daemon, wait_for

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.servers("fake")]

POOL = "10.186.0.0/16"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
READER, READER_TOKEN = "alice", "token-of-alice"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(crds=[IPAMBLOCKS], bookmark_interval=0.5) as server:
        server.add_token(READER_TOKEN, READER, ["platform"])
        server.add_token("token-of-bob", "bob", ["developers"])
        server.grant("group:platform", "get", "nodes/netctl-journal")
        yield server
        assert server.server_errors == []


@pytest.fixture
def nodes(tmp_path: Path, kube: FakeKube, installed_plugin: Path
          ) -> Iterator[Callable[..., list[Daemon]]]:
    """A factory of daemons, each a node of ``kube`` serving queries on a loopback port,
    with its DaemonSet pod in kube-system saying where; the daemons of one call start
    side by side."""
    made: list[Daemon] = []
    config = kube.kubeconfig(tmp_path / "daemon-kubeconfig")

    def make(*names: str, **settings: Any) -> list[Daemon]:
        new = []
        for name in names:
            made.append(launch_node(kube, tmp_path, f"ncq{len(made)}", name, config,
                                    installed_plugin, **settings))
            new.append(made[-1])
        for d in new:
            wait_node_ready(d)
        return new

    try:
        yield make
    finally:
        for d in made:
            d.shut_down()


def start_node(kube: FakeKube | RealKube, tmp_path: Path, prefix: str, name: str,
               config: Path, installed: Path, **settings: Any) -> Daemon:
    """A daemon as node ``name`` of ``kube``, serving queries on a loopback port, with its
    Node and its DaemonSet pod in kube-system saying where (started, IPAM ready)."""
    d = launch_node(kube, tmp_path, prefix, name, config, installed, **settings)
    wait_node_ready(d)
    return d


def launch_node(kube: FakeKube | RealKube, tmp_path: Path, prefix: str, name: str,
                config: Path, installed: Path, **settings: Any) -> Daemon:
    """:func:`start_node` up to the daemon's exec: its bin dir a copy of ``installed``
    (the plugin as ``netctl install-cni`` installs it)."""
    root = tmp_path / name
    root.mkdir()
    port = free_port()
    d = Daemon(root, prefix, [str(TEST_PLUGINS), SYSTEM_CNI], {
        **TEST_SETTINGS, "kubeconfig": str(config), "node-name": name,
        "ipam-backend": "kubernetes", "api-timeout": 3, "block-check": 0.2,
        "query-addr": f"127.0.0.1:{port}", **settings})
    shutil.copytree(installed, Path(d.plugin).parent)
    kube.create("nodes", node(name))
    kube.create("pods", pod(f"netctl-{name}", "kube-system", node=name,
                            labels={"app.kubernetes.io/name": "netctl"},
                            annotations={"netctl.dev/query-addr": f"127.0.0.1:{port}"}))
    kube.patch("pods", "kube-system", f"netctl-{name}", {"status": {
        "phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1"}},
        subresource="status")
    d.start(wait=False)
    return d


def wait_node_ready(d: Daemon) -> None:
    """Wait for a launched node's socket, then its cluster IPAM; stop it if that fails."""
    try:
        d.wait_ready()
        wait_for(lambda: (d.status().get("kubernetes") or {}).get("ipam", {}).get("ready"),
                 20, f"{d.settings['node-name']}'s cluster IPAM ready")
    except BaseException:
        d.shut_down()
        raise


def ipam(daemon: Daemon, command: str, container: str, who: str, args: str = ""
         ) -> CNIResult:
    conf = {"cniVersion": "1.0.0", "name": "shared", "type": "bridge", "ipam": {
        "type": "netctl-ipam", "socket": daemon.socket, "range": POOL}}
    return harness.exec_plugin(daemon.ipam_plugin, command, conf, container=container,
                               args=harness.cni_args(who, "", *([args] if args else [])),
                               timeout=60)


def address(res: CNIResult) -> str:
    assert res.rc == 0 and res.out is not None, res.describe()
    return str(res.out["ips"][0]["address"]).split("/")[0]


def kubectl_netctl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl netctl ARGS…`` as kubectl runs the plugin: the console script's code."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from netctl.commands.cli import kubectl_main; "
         "sys.exit(kubectl_main())", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, timeout=60)


def as_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict), proc.stdout
    return doc


def test_who_held_an_address_at_a_time_from_any_node(
        nodes: Callable[..., list[Daemon]], kube: FakeKube, tmp_path: Path) -> None:
    daemons = nodes(*(f"node-{i}" for i in range(4)))
    pods = ["team-a/web-a", "team-a/web-b", "team-b/db", "team-b/cache"]
    addrs = [address(ipam(d, "ADD", f"c{i}", who)) for i, (d, who) in
             enumerate(zip(daemons, pods, strict=True))]
    held_then = time.time()
    # the two holders apart in time (--at is exact to the row): the clock past the first
    wait_for(lambda: time.time() > held_then, 5, "the clock to move past the first holder")
    # web-a is gone from node-0 (its DEL), its pod object too; node-1 takes its address
    assert ipam(daemons[0], "DEL", "c0", pods[0]).rc == 0
    address_now = address(ipam(daemons[1], "ADD", "c4", "team-a/web-c", f"IP={addrs[0]}"))
    assert address_now == addrs[0]
    me = kube.kubeconfig(tmp_path / "alice", token=READER_TOKEN)

    then = kubectl_netctl(me, "journal", "--ip", addrs[0], "--at", f"{held_then}", "--json")
    assert then.returncode == 0, then.stderr
    doc = as_json(then)
    assert doc["nodes"] == [f"node-{i}" for i in range(4)] and doc["unanswered"] == []
    assert [(a["node"], a["pod"], a["container"]) for a in doc["allocations"]] == [
        ("node-0", "team-a/web-a", "c0")]
    now = as_json(kubectl_netctl(me, "journal", "--ip", addrs[0], "--at", "0s", "--json"))
    assert [(a["node"], a["pod"]) for a in now["allocations"]] == [("node-1", "team-a/web-c")]
    history = as_json(kubectl_netctl(me, "journal", "--ip", addrs[0], "--json"))
    assert [(a["node"], a["pod"], a["until"] is None) for a in history["allocations"]] == [
        ("node-0", "team-a/web-a", False), ("node-1", "team-a/web-c", True)]
    # the block that holds it, and its node, from the IPAMBlocks
    assert {(o["node"], o["answered"]) for o in history["block_owners"]} >= {("node-0", True)}

    table = kubectl_netctl(me, "journal", "--ip", addrs[0], "--at",
                           time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(held_then))
                           + f".{int(held_then % 1 * 1000):03d}Z")
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert ["NODE", *(c.upper() for c in ALLOCATION_COLUMNS)] in rows  # NODE first
    assert any(r[:1] == ["node-0"] and "team-a/web-a" in r for r in rows)

    team_a = as_json(kubectl_netctl(me, "journal", "--namespace", "team-a", "--json"))
    assert {(op["node"], op["pod"]) for op in team_a["operations"]} == {
        ("node-0", "team-a/web-a"), ("node-1", "team-a/web-b"), ("node-1", "team-a/web-c")}
    one = as_json(kubectl_netctl(me, "journal", "--pod", "team-b/cache", "--json"))
    assert {(op["node"], op["verb"]) for op in one["operations"]} == {("node-3", "ADD")}

    pools = as_json(kubectl_netctl(me, "ipam", "pools", "--json"))
    assert sorted((p["node"], p["in_use"]) for p in pools["pools"]) == [
        ("node-0", 0), ("node-1", 2), ("node-2", 1), ("node-3", 1)]
    status = kubectl_netctl(me, "status", "--json")
    assert [s["node"] for s in as_json(status)["statuses"]] == [f"node-{i}" for i in range(4)]

    # the answer outlives a restart of the node that holds it: the journal is on disk
    assert daemons[0].stop() == 0
    daemons[0].start()
    again = as_json(kubectl_netctl(me, "journal", "--ip", addrs[0], "--at", f"{held_then}",
                                   "--json"))
    assert [(a["node"], a["pod"]) for a in again["allocations"]] == [("node-0", "team-a/web-a")]


def test_rbac_refusals_and_a_node_down(nodes: Callable[..., list[Daemon]], kube: FakeKube,
                                       tmp_path: Path) -> None:
    daemons = nodes(*(f"node-{i}" for i in range(4)))
    held = address(ipam(daemons[2], "ADD", "c1", "team-a/api"))

    stranger = kubectl_netctl(kube.kubeconfig(tmp_path / "x", token="not-a-token"),
                              "journal", "--ip", held, "--json")
    assert stranger.returncode == 1
    doc = as_json(stranger)
    assert doc["nodes"] == [] and {u["status"] for u in doc["unanswered"]} == {401}
    assert "node node-0 refused the query (401): the API server did not accept the token" \
        in stranger.stderr

    bob = kubectl_netctl(kube.kubeconfig(tmp_path / "bob", token="token-of-bob"),
                         "journal", "--ip", held)
    assert bob.returncode == 1 and bob.stdout.splitlines()[1:] == []  # headers, no rows
    assert bob.stderr.count("refused the query (403): bob may not get nodes/netctl-journal") \
        == 4, bob.stderr

    me = kube.kubeconfig(tmp_path / "alice", token=READER_TOKEN)
    kube.reset_counts()
    for _ in range(3):
        assert kubectl_netctl(me, "journal", "--ip", held, "--json").returncode == 0
    # one review per node, then the answer is kept
    assert kube.count("create", "tokenreviews") == kube.count(
        "create", "subjectaccessreviews") == 4

    daemons[3].kill()
    partial = kubectl_netctl(me, "journal", "--ip", held, "--json")
    assert partial.returncode == 1
    doc = as_json(partial)
    assert doc["nodes"] == ["node-0", "node-1", "node-2"]
    assert [u["node"] for u in doc["unanswered"]] == ["node-3"]
    assert [(a["node"], a["pod"]) for a in doc["allocations"]] == [("node-2", "team-a/api")]
    assert "node node-3 did not answer" in partial.stderr


def test_https_with_a_serving_certificate(nodes: Callable[..., list[Daemon]], kube: FakeKube,
                                          tmp_path: Path) -> None:
    """With query-tls-cert and query-tls-key the endpoint speaks HTTPS: kubectl netctl
    --ca-file verifies it and is answered; plain HTTP to it gets no answer."""
    certs = tmp_path / "certs"
    certs.mkdir()
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
               "-subj", "/CN=netctl-query", "-addext", "subjectAltName=IP:127.0.0.1",
               "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt")]
    subprocess.run(openssl, check=True, capture_output=True)
    (d,) = nodes("node-0", **{"query-tls-cert": str(certs / "tls.crt"),
                           "query-tls-key": str(certs / "tls.key")})
    held = address(ipam(d, "ADD", "c1", "team-a/secure"))
    me = kube.kubeconfig(tmp_path / "alice", token=READER_TOKEN)
    secure = kubectl_netctl(me, "journal", "--ip", held, "--ca-file", str(certs / "tls.crt"),
                            "--json")
    assert secure.returncode == 0, secure.stderr
    assert [a["pod"] for a in as_json(secure)["allocations"]] == ["team-a/secure"]
    plain = kubectl_netctl(me, "journal", "--ip", held, "--json", "--timeout", "3")
    assert plain.returncode == 1 and as_json(plain)["nodes"] == []
    assert "node node-0 did not answer" in plain.stderr


def test_query_addr_needs_kubernetes_mode(tmp_path: Path) -> None:
    d = Daemon(tmp_path, "ncqs", [SYSTEM_CNI], {**TEST_SETTINGS,
                                                "query-addr": f"127.0.0.1:{free_port()}"})
    try:
        with pytest.raises(harness.HarnessError, match="query-addr serves Kubernetes mode "
                           "only"):
            d.start()
    finally:
        d.shut_down()


def test_reviews_keep_allowed_answers_a_while_and_refusals_never(
        kube: FakeKube, tmp_path: Path) -> None:
    """Reviews against the fake: an allowed answer is kept per token until it expires
    (then reviewed again); a refusal is not kept, so a binding made after it works at
    once; no token is 401 without a review; the API server gone is 503, fail closed."""
    import trio
    import trio_asyncio

    from netctl.kubeapi.api import Api, KubeSettings
    from netctl.kubeapi.review import Reviews

    now = [0.0]
    kube.add_token("token-of-carol", "carol")

    async def go() -> list[int]:
        async with trio_asyncio.open_loop():
            api = await Api.connect(KubeSettings(str(kube.kubeconfig(tmp_path / "k")),
                                                 api_timeout=2))
            try:
                r = Reviews(api, "node-0", allowed_for=60, clock=lambda: now[0])
                seen = [(await r.check(READER_TOKEN)).status,
                        (await r.check(READER_TOKEN)).status,  # kept
                        (await r.check("token-of-carol")).status]
                kube.grant("carol", "get", "nodes/netctl-journal", names=["node-0"])
                seen.append((await r.check("token-of-carol")).status)  # not kept: allowed
                now[0] = 61.0
                seen.append((await r.check(READER_TOKEN)).status)  # expired: reviewed
                seen.append((await r.check("")).status)
                kube.stop()
                now[0] = 200.0
                seen.append((await r.check(READER_TOKEN)).status)
                kube.start()
                return [*seen, r.reviews]
            finally:
                await api.close()

    assert trio.run(go) == [200, 200, 403, 200, 200, 401, 503, 5]


@pytest.mark.servers("real")
def test_on_a_real_api_server_with_the_manifests_roles(real_kube: RealKube,
                                                        tmp_path: Path,
                                                        installed_plugin: Path) -> None:
    """On a real kube-apiserver: real TokenReviews and SubjectAccessReviews, made by
    daemons running under netctl's ServiceAccount (deploy/kubernetes/rbac.yaml), callers
    bound to the roles of deploy/kubernetes/journal-reader.yaml. A ServiceAccount bound to
    them is answered by both nodes; one bound to nothing is refused with 403; a token the
    server never issued with 401."""
    kube = real_kube
    for doc in yaml.safe_load_all((DEPLOY / "journal-reader.yaml").read_text()):
        kind = doc["kind"]
        prefix = "/apis/rbac.authorization.k8s.io/v1"
        plural = {"ClusterRole": "clusterroles", "Role": "roles",
                  "ClusterRoleBinding": "clusterrolebindings",
                  "RoleBinding": "rolebindings"}[kind]
        ns = doc["metadata"].get("namespace")
        for attempt in (doc, {**doc, "subjects": [{
                "kind": "ServiceAccount", "name": "netctl-reader", "namespace": "default"}],
                "metadata": {**doc["metadata"], "name": "netctl-test-reader"}}):
            if "Binding" not in kind and attempt is not doc:
                continue
            try:
                kube.request("POST", f"{prefix}/namespaces/{ns}/{plural}" if ns
                             else f"{prefix}/{plural}", attempt)
            except ApiFailure as exc:
                if exc.status != 409:  # made by an earlier test of this session
                    raise
    for account in ("netctl-reader", "netctl-stranger"):
        try:
            kube.request("POST", "/api/v1/namespaces/default/serviceaccounts", {
                "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
        except ApiFailure as exc:
            if exc.status != 409:
                raise
    config = kube.kubeconfig(tmp_path / "daemons")
    daemons: list[Daemon] = []
    kube.reset_counts()
    try:
        for i in range(2):
            daemons.append(start_node(kube, tmp_path, f"ncr{i}", f"node-{i}", config,
                                      installed_plugin))
        held = address(ipam(daemons[1], "ADD", "c1", "team-a/real"))
        reader = kube.kubeconfig(tmp_path / "reader",
                                 token=kube.token_for("default", "netctl-reader"))

        def answered() -> bool:  # RBAC reads new bindings within a moment
            return kubectl_netctl(reader, "journal", "--ip", held).returncode == 0
        wait_for(answered, 20, "the reader's bindings in effect")
        doc = as_json(kubectl_netctl(reader, "journal", "--ip", held, "--json"))
        assert doc["nodes"] == ["node-0", "node-1"] and doc["unanswered"] == []
        assert [(a["node"], a["pod"]) for a in doc["allocations"]] == [("node-1", "team-a/real")]
        assert [o["node"] for o in doc["block_owners"]] == ["node-1"]

        stranger = kubectl_netctl(kube.kubeconfig(
            tmp_path / "stranger", token=kube.token_for("default", "netctl-stranger")),
            "ipam", "pools", "--json")
        # it cannot even list the daemons' pods: the API server refuses it first
        assert stranger.returncode == 1 and "403" in stranger.stderr, stranger.stderr
        as_stranger = kubectl_netctl(reader, "status", "--json", "--token",
                                     kube.token_for("default", "netctl-stranger"))
        assert {u["status"] for u in as_json(as_stranger)["unanswered"]} == {403}
        forged = kubectl_netctl(reader, "status", "--json", "--token", "forged-token")
        assert {u["status"] for u in as_json(forged)["unanswered"]} == {401}
        # the daemons' reviews were granted by netctl's own ClusterRole
        assert kube.count("create", "tokenreviews") >= 2
        assert kube.refused == [], "netctl's requests refused by RBAC"
    finally:
        for d in daemons:
            d.shut_down()
        kube.clean()


def test_whereabouts_takeover_needs_the_cluster_ipam(tmp_path: Path) -> None:
    """In Kubernetes mode a node's own pools would hand out again what whereabouts gave
    pods across the cluster (seen on the real node when the switch was made with the
    default backend): the daemon refuses to start, naming both settings."""
    with FakeKube() as server:
        d = Daemon(tmp_path, "ncwt", [SYSTEM_CNI], {
            **TEST_SETTINGS, "kubeconfig": str(server.kubeconfig(tmp_path / "kubeconfig")),
            "node-name": "n1", "ipam-takeover": ["whereabouts"]})
        try:
            with pytest.raises(harness.HarnessError, match=r"ipam-takeover: \[whereabouts\] "
                               "in Kubernetes mode needs ipam-backend: kubernetes"):
                d.start()
        finally:
            d.shut_down()
